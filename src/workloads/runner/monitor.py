"""The client watches itself: a load generator that falls behind reports wrong numbers
without a word (at saturation TTFT reads hundreds of milliseconds high), so every run samples
its own event-loop lag and CPU share, and the report says when the client, not the server,
may be the bottleneck.

* event-loop lag — a task wakes every ``interval_s`` on absolute deadlines; how late each wake
  is (past the timers' own millisecond, :data:`TIMER_SLACK_S`), is time every chunk arriving
  then waited before it was stamped. A wake counts only when a stream was open as the stall
  began (a request of this process written, its response not yet ended): a stall with none
  open delays no stamp and is not a bottleneck — a lock-step turn's prompts sized between
  barriers, or a C256 run opening its sessions while the first requests wait to be written
  (benchmarks/RESULTS.md: 45.7 ms counted before, ~10 ms the worst with a stream open);
  such a stall delays a send, which the send delay shows;
* CPU share — the event loop thread's CPU seconds over wall seconds: near 1.0 means its core
  is saturated. Other threads are left out: the embedded simulated server's (it runs on its
  own loop in a thread of this process, and its work is the server's, not the client's), the
  records writer's, the tokenizer's encodes;
* send delay — per record, request started → written (pool wait, connect, write), from the
  records themselves.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import time
from array import array
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Any

from workloads.core import stats
from workloads.model.records import TurnRecord
from workloads.model.results import ClientHealth
from workloads.wire.client import ChatClient, ChatResponse, Preopening

__all__ = [
    "LOOP_LAG_P99_LIMIT_MS",
    "STAMP_WAIT_LIMIT_MS",
    "ClientMonitor",
    "health_warnings",
    "merged_health",
    "merged_warning",
]

LOOP_LAG_P99_LIMIT_MS = 5.0  # a chunk may wait this long to be stamped: 1% of wakes
STAMP_WAIT_LIMIT_MS = 1.0  # past this at p99, the report says how long stamps waited
LOOP_LAG_MAX_LIMIT_MS = 50.0  # one stall this long shifts a TTFT by as much
CPU_SHARE_LIMIT = 0.9  # of one core
# The loops' timers count whole milliseconds (libuv's clock; asyncio rounds its poll timeout
# up to one): a wake up to 1 ms late is the timer's, on an idle loop too, and a chunk (woken
# by its socket, not a timer) does not wait it. Lag is counted past it.
TIMER_SLACK_S = 0.001
MAX_SAMPLES = 1_000_000  # at 10 ms: 2.7 hours of samples, 16 MB; later wakes are not kept


class ClientMonitor:
    """Samples the event loop's lag and the process's CPU while the ``async with`` block runs.

    async with ClientMonitor() as monitor:
        ...                       # set-up and sizing: not watched
        with monitor.watching():
            ...                   # requests in flight: lag and CPU share count here
    health = monitor.health(records)
    """

    def __init__(self, interval_s: float = 0.01) -> None:
        self.interval_s = interval_s
        self._lags_ms: array[float] = array("d")
        self._dues: array[float] = array("d")  # when each of those wakes was due
        self._written: array[float] = array("d")  # each request's first byte written,
        self._ended: array[float] = array("d")  # and its end (16 bytes a request)
        self._task: asyncio.Task[None] | None = None
        self._watching = 0  # nested watching() blocks open now
        self._since = (0.0, 0.0)  # (wall, CPU) when the outermost watching() opened
        self._wall = 0.0  # wall and CPU seconds inside watching() blocks, summed
        self._cpu = 0.0

    def counting(self, client: ChatClient) -> ChatClient:
        """``client``, with its streams noted: lag counts only while one is open."""
        return _Counted(client, self)

    async def __aenter__(self) -> ClientMonitor:
        self._task = asyncio.create_task(self._sample())
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """The figures cover the time inside these blocks: while requests are sent and
        streamed (a repetition's play), not the sizing before it, when no chunk is in
        flight to be stamped late."""
        if self._watching == 0:  # the loop's own thread: not the simulator's, not the writers'
            self._since = (time.perf_counter(), time.thread_time())
        self._watching += 1
        try:
            yield
        finally:
            self._watching -= 1
            if self._watching == 0:
                self._wall += time.perf_counter() - self._since[0]
                self._cpu += time.thread_time() - self._since[1]

    async def _sample(self) -> None:
        due = time.perf_counter() + self.interval_s
        while len(self._lags_ms) < MAX_SAMPLES:
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            now = time.perf_counter()
            if now < due:  # uvloop's timers count whole milliseconds: a wake can be early,
                # and a shorter sleep rounds to none (a spin): one more, within the slack
                await asyncio.sleep(TIMER_SLACK_S)
                now = time.perf_counter()
            # a stall begun before: not ours (one with no stream open: dropped by health())
            if self._watching and due >= self._since[0]:
                self._lags_ms.append(max(0.0, now - due - TIMER_SLACK_S) * 1000)
                self._dues.append(due)
            # The next wake is on the grid, skipping wakes a stall swallowed: a 200 ms stall
            # is one sample of 200 ms, not twenty that each look late.
            due += self.interval_s * (1 + int((now - due) // self.interval_s))

    def _stream(self, written: float, ended: float) -> None:
        if len(self._written) < MAX_SAMPLES:  # bounded as the lags are (16 MB)
            self._written.append(written)
            self._ended.append(ended)

    def _stream_lags(self) -> list[float]:
        """The lags of the wakes whose stall began with a stream open (a request written and
        not yet ended): the others delayed no stamp. A request written during the stall (its
        stamp taken as the loop ran again) does not count it: its chunks did not wait."""
        starts: list[float] = []  # the union of the streams' spans, in order
        ends: list[float] = []
        for written, ended in sorted(zip(self._written, self._ended, strict=True)):
            if ends and written <= ends[-1]:
                ends[-1] = max(ends[-1], ended)
            else:
                starts.append(written)
                ends.append(ended)
        lags = []
        for due, lag_ms in zip(self._dues, self._lags_ms, strict=True):
            i = bisect.bisect_right(starts, due) - 1  # the last span begun by then
            if i >= 0 and ends[i] >= due:
                lags.append(lag_ms)
        return lags

    def health(self, records: Sequence[TurnRecord]) -> ClientHealth:
        """What the monitor saw, with the send delays of ``records``."""
        lags = self._stream_lags()
        delays = [
            (r.sent_ns - r.started_ns) / 1e6
            for r in records
            if r.sent_ns is not None and not r.warmup
        ]
        return ClientHealth(
            loop_lag_samples=len(lags),
            loop_lag_p50_ms=stats.percentile(lags, 50),
            loop_lag_p99_ms=stats.percentile(lags, 99),
            loop_lag_max_ms=max(lags, default=None),
            cpu_share=self._cpu / self._wall if self._wall > 0 else None,
            send_delay_p50_ms=stats.percentile(delays, 50),
            send_delay_p99_ms=stats.percentile(delays, 99),
        )


class _Counted:
    """A chat client whose streams (request written → response ended) the monitor notes."""

    def __init__(self, client: ChatClient, monitor: ClientMonitor) -> None:
        self.client = client
        self.monitor = monitor

    async def open_connections(self, count: int) -> int:
        """The client's, when it has it (no stream is open while connections are opened)."""
        client = self.client
        return await client.open_connections(count) if isinstance(client, Preopening) else 0

    async def stream_chat(self, body: dict[str, Any]) -> ChatResponse:
        monitor = self.monitor
        began = time.perf_counter()
        response: ChatResponse | None = None
        try:
            response = await self.client.stream_chat(body)
            return response
        finally:
            ended = time.perf_counter()
            if response is None:  # raised (cancelled): counted from the call, as when it
                monitor._stream(began, ended)  # was written is not known (a little more)
            else:
                for attempt in response.attempts:  # earlier attempts' streams (retries)
                    if attempt.sent_ns is not None:
                        monitor._stream(attempt.sent_ns / 1e9, attempt.error_ns / 1e9)
                if response.sent_ns is not None:  # never written: no stream was open
                    monitor._stream(response.sent_ns / 1e9, ended)


def merged_health(here: ClientHealth, workers: Sequence[ClientHealth]) -> ClientHealth:
    """The run's client health when worker processes sent its requests: the worst worker's
    event-loop lag and CPU share (a chunk's stamp waits on its own process's loop; this
    process only collected records), and ``here``'s send delays (from every record)."""
    if not workers:
        return here

    def worst(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return max(known) if known else None

    return here.model_copy(
        update={
            "loop_lag_samples": sum(w.loop_lag_samples for w in workers),
            "loop_lag_p50_ms": worst([w.loop_lag_p50_ms for w in workers]),
            "loop_lag_p99_ms": worst([w.loop_lag_p99_ms for w in workers]),
            "loop_lag_max_ms": worst([w.loop_lag_max_ms for w in workers]),
            "cpu_share": worst([w.cpu_share for w in workers]),
            "processes": len(workers),
        }
    )


def health_warnings(
    h: ClientHealth | None, *, embedded: bool = False, kernel_stamps: bool = False
) -> list[str]:
    """What the report should say when the client itself may be the bottleneck. Pure.
    ``embedded``: the target is the embedded simulated server, which runs in a thread of the
    run's own process: with no worker processes its engine competes with the client's event
    loop for the interpreter, which the lag counts (agent-fleet on a busy 2-core machine:
    lag p99 104 ms in one process, 16 ms with --workers 2; --workers auto keeps one process
    up to 64 sessions; the default five-user-coding run on a quiet 16-core machine: lag p99
    0.35 ms, no warning), so the warning names that possible cause and --workers 2.
    ``kernel_stamps``: the reads carried the kernel's arrival stamps (the environment's
    ``arrival_stamps``, wire/arrival.py), so a late loop delayed reading, not stamping, but
    chunks read together share the stamp of the last one's arrival."""
    if h is None:
        return []
    out = []
    workers = (
        "; spread the sessions over more processes (--workers N, or --workers auto)"
        if h.processes == 1
        else "; run more worker processes (--workers N)"
    )
    lag_workers = workers
    if embedded and h.processes == 1:
        lag_workers = (
            "; the embedded simulated server shares this process and may hold its "
            "interpreter: --workers 2 sends from processes of their own"
        )
    waited = (
        "chunks waited that long to be read (each read keeps the kernel's arrival stamp, "
        "but chunks read together share the last one's)"
        if kernel_stamps
        else "chunks waited that long to be stamped"
    )
    if h.loop_lag_p99_ms is not None and h.loop_lag_p99_ms > LOOP_LAG_P99_LIMIT_MS:
        out.append(
            f"the client may be the bottleneck: event-loop lag p99 {h.loop_lag_p99_ms:.1f} ms "
            f"(max {h.loop_lag_max_ms or 0:.0f} ms; over {LOOP_LAG_P99_LIMIT_MS:g} ms) while "
            f"requests were in flight: {waited}, so TTFT and "
            f"rates may read high/low{lag_workers}, or run on a less busy machine"
        )
    elif (
        h.loop_lag_p99_ms is not None and h.loop_lag_p99_ms > STAMP_WAIT_LIMIT_MS and kernel_stamps
    ):
        out.append(
            f"reads waited up to {h.loop_lag_p99_ms:.1f} ms (event-loop lag p99, while "
            f"requests were in flight; over {STAMP_WAIT_LIMIT_MS:g} ms): each read keeps the "
            "kernel's arrival stamp, but chunks read together share the last one's, so TTFT "
            f"and inter-token figures may carry up to that much of the client's own "
            f"delay{lag_workers}"
        )
    elif h.loop_lag_p99_ms is not None and h.loop_lag_p99_ms > STAMP_WAIT_LIMIT_MS:
        out.append(
            f"stamps waited up to {h.loop_lag_p99_ms:.1f} ms (event-loop lag p99, while "
            f"requests were in flight; over {STAMP_WAIT_LIMIT_MS:g} ms): TTFT and inter-token "
            f"figures carry up to that much of the client's own delay{lag_workers}"
        )
    elif h.loop_lag_max_ms is not None and h.loop_lag_max_ms > LOOP_LAG_MAX_LIMIT_MS:
        out.append(
            f"the client stalled once for {h.loop_lag_max_ms:.0f} ms (event-loop lag max; p99 "
            f"{h.loop_lag_p99_ms or 0:.1f} ms): a request in flight then has that much added "
            "to its TTFT or inter-token gaps"
        )
    if h.cpu_share is not None and h.cpu_share > CPU_SHARE_LIMIT:
        out.append(
            f"the client may be the bottleneck: its event loop used {h.cpu_share:.0%} of a core "
            f"while playing (the loop runs on one){workers}"
        )
    return out


def merged_warning(records: Sequence[TurnRecord]) -> str | None:
    """The report's count of the valid measured requests with merged chunks (read together
    with later ones while the client's loop stalled, wire/arrival.py), and what was left
    out for them; None when there are none. Pure."""
    valid = [r for r in records if r.valid and not r.warmup]
    marked = [r for r in valid if r.merged_chunks]
    if not marked:
        return None
    chunks = sum(r.merged_chunks for r in marked)
    no_rate = sum(1 for r in marked if r.decode_tokens_per_s is None)
    rate = (
        f", and {no_rate:,} of these requests have no decode rate (the whole reply came in "
        "the read after the stall)"
        if no_rate
        else ""
    )
    return (
        f"{len(marked):,} of {len(valid):,} requests had chunks read together after the "
        f"client's event loop stalled ({chunks:,} chunks, each stamped when the last of its "
        f"read arrived): their gaps are left out of ITL, a decode rate starts at the last "
        f"chunk of such a read, and where the first chunk was one, TTFT reads high by up to "
        f"the stall{rate}"
    )
