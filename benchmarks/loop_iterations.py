"""What one event-loop iteration ran, for every iteration that held the loop over 4 ms.

One process runs ``workloads.run_async`` (pinned to CPU 1) on the standard asyncio loop
against benchmarks/stream_server.py (pinned to CPU 0; TTFT 100 ms, 10 ms between tokens, one
token per chunk), USERS sessions of TURNS turns, free pacing, 512-token streams: the shape
of loop_stalls.py. The loop is a ``SelectorEventLoop`` whose ready queue notes when each
callback starts, so each callback's time is the gap to the next one's start; the selector's
wait is timed apart. For every iteration whose own work (its wall time less the wait) was
over 4 ms it prints that work, and what ran: each callback named by what it is (a task by its
coroutine chain's last three frames, as it was left after the step; else the callback's
name), with its count and time. uvloop runs its callbacks in C, so this is asyncio only.

    python benchmarks/loop_iterations.py 256 2        # C256, 2 turns: ~20 s

Loopback only; Linux only (sched_setaffinity).
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

from client_overhead import (
    PLAIN,
    SCENARIO,
    stream_server,
)  # the benchmark's scenario: one shape for all

BUSY_S = 0.004  # an iteration whose own work is longer is printed


def describe(handle: asyncio.Handle) -> str:
    """What a ready callback is: a task by where its coroutines stand, else its name. Reads
    attributes only (a repr of some callbacks' objects touches aiohttp's state)."""
    callback = handle._callback  # type: ignore[attr-defined]
    task = getattr(callback, "__self__", None)
    if isinstance(task, asyncio.Task):
        frames = []
        coro: Any = task.get_coro()
        while type(coro) is types.CoroutineType:
            if coro.cr_frame is not None:
                frames.append(f"{coro.cr_code.co_name}:{coro.cr_frame.f_lineno}")
            coro = coro.cr_await
        return "task " + ">".join(frames[-3:])
    return getattr(callback, "__qualname__", None) or type(callback).__name__


class Ready(collections.deque):  # type: ignore[type-arg]
    """The loop's ready queue: each popleft ends the callback popped before it."""

    loop: TracedLoop

    def popleft(self) -> Any:
        self.loop.ended(time.perf_counter())
        handle = super().popleft()
        self.loop.running = (time.perf_counter(), handle)
        return handle


class TracedLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        super().__init__()
        ready = Ready()
        ready.loop = self
        self._ready = ready  # type: ignore[assignment]
        self.running: tuple[float, Any] | None = None
        self.counts: collections.Counter[str] = collections.Counter()
        self.times: collections.Counter[str] = collections.Counter()
        self.waited = 0.0
        self.busy: list[tuple[float, float, float, list[tuple[str, int, float]]]] = []
        select = self._selector.select  # type: ignore[attr-defined]

        def timed(timeout: float | None = None) -> Any:
            began = time.perf_counter()
            try:
                return select(timeout)
            finally:
                self.waited += time.perf_counter() - began

        self._selector.select = timed  # type: ignore[attr-defined]

    def ended(self, now: float) -> None:
        if self.running is not None:
            began, handle = self.running
            name = describe(handle)
            self.counts[name] += 1
            self.times[name] += now - began
            self.running = None

    def _run_once(self) -> None:
        began = time.perf_counter()
        self.counts.clear()
        self.times.clear()
        self.waited = 0.0
        super()._run_once()  # type: ignore[misc]
        now = time.perf_counter()
        self.ended(now)
        work = now - began - self.waited
        if work > BUSY_S:
            top = [(name, self.counts[name], s) for name, s in self.times.most_common(6)]
            self.busy.append((began, work, sum(self.times.values()), top))


def main() -> None:
    users, turns = int(sys.argv[1]), int(sys.argv[2])
    tmp = Path(tempfile.mkdtemp())
    with stream_server(
        *("--ttft-ms", "100", "--itl-ms", "10", "--truth", str(tmp / "truth.jsonl"))
    ) as url:
        scenario = SCENARIO.format(
            users=users, turns=turns, tokens=512, reps=1, pacing="free", **PLAIN
        )
        (tmp / "s.toml").write_text(scenario)
        os.sched_setaffinity(0, {1})
        import workloads

        start = time.perf_counter()
        with asyncio.Runner(loop_factory=TracedLoop) as runner:
            loop = runner.get_loop()
            assert isinstance(loop, TracedLoop)
            result = runner.run(
                workloads.run_async(
                    workloads.load_scenario(tmp / "s.toml"),
                    target=workloads.Target(url, "bench-model"),
                    out_dir=tmp / "out",
                )
            )
    records = [json.loads(line) for line in (tmp / "out" / "records.jsonl").open()]
    sent = sorted(r["sent_ns"] / 1e9 - start for r in records if r.get("sent_ns"))
    print(f"first sent +{sent[0]:.3f} s, turn 1's last +{sent[users - 1]:.3f} s")
    print(f"client health {result.client}")
    for began, work, callbacks, top in loop.busy:
        what = "; ".join(f"{name} ×{n} {s * 1e3:.2f} ms" for name, n, s in top)
        print(
            f"+{began - start:.3f} s: {work * 1e3:.1f} ms "
            f"({callbacks * 1e3:.1f} in callbacks): {what}"
        )


if __name__ == "__main__":
    main()
