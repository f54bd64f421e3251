"""The client watches itself (runner/monitor.py): a loop blocked on purpose is reported."""

from __future__ import annotations

import asyncio
import threading
import time

import workloads
from fakes import FakeChatClient
from workloads.model.records import TurnRecord
from workloads.model.results import ClientHealth
from workloads.runner.monitor import ClientMonitor, health_warnings, merged_warning


class _WrittenAtOnce(FakeChatClient):
    """FakeChatClient whose request is written as the call begins, so what the handler does
    (blocking the loop on purpose) happens while its stream is open, as a stall between two
    chunks would."""

    async def stream_chat(self, body):
        written = time.perf_counter_ns()
        response = await super().stream_chat(body)
        response.started_ns = response.sent_ns = written
        return response


def _scenario() -> workloads.Scenario:
    return workloads.Scenario.model_validate(
        {
            "name": "blocked",
            "users": 2,
            "turns": 3,
            "opening_tokens": 0,
            "turn_tokens": 40,
            "output_tokens": 8,
            "repetitions": {"warmup": 0, "measured": 1},
        }
    )


def test_a_loop_blocked_on_purpose_is_reported_as_a_client_bottleneck():
    def handler(body):
        time.sleep(0.08)  # blocks the event loop: no chunk could be stamped meanwhile
        return 50, "ok " * 8

    client = _WrittenAtOnce(handler, delay=lambda body: 0.05)
    result = workloads.run(_scenario(), client=client)
    health = result.client
    assert health is not None and health.loop_lag_samples > 0
    assert health.loop_lag_max_ms is not None and health.loop_lag_max_ms >= 60
    assert any(
        w.startswith("the client may be the bottleneck: event-loop lag")
        or w.startswith("the client stalled")
        for w in result.warnings
    ), result.warnings
    assert result.model_dump()["client"]["loop_lag_max_ms"] == health.loop_lag_max_ms
    # a caller's own client: who stamped its reads is not known, so not said
    assert "arrival_stamps" not in result.environment
    assert any("chunks waited that long to be stamped" in w for w in result.warnings) or any(
        w.startswith("the client stalled") for w in result.warnings
    )


def test_a_healthy_client_gets_no_warning_and_unknown_is_not_zero():
    calm = ClientHealth(
        loop_lag_samples=1000,
        loop_lag_p50_ms=0.1,
        loop_lag_p99_ms=0.9,
        loop_lag_max_ms=3.0,
        cpu_share=0.2,
        send_delay_p50_ms=0.2,
        send_delay_p99_ms=0.5,
    )
    assert health_warnings(calm) == []
    assert health_warnings(None) == []
    busy = calm.model_copy(update={"cpu_share": 0.97})
    assert health_warnings(busy) == [
        "the client may be the bottleneck: its event loop used 97% of a core while playing "
        "(the loop runs on one); spread the sessions over more processes (--workers N, or "
        "--workers auto)"
    ]
    stalled = calm.model_copy(update={"loop_lag_max_ms": 120.0})
    assert health_warnings(stalled)[0].startswith("the client stalled once for 120 ms")


def test_a_stall_with_nothing_in_flight_is_not_counted():
    async def main() -> ClientHealth:
        monitor = ClientMonitor(interval_s=0.001)
        async with monitor:
            with monitor.watching():
                for _ in range(3):  # sizing between lock-step turns: no request in flight
                    time.sleep(0.02)
                    await asyncio.sleep(0.005)
        return monitor.health([])

    health = asyncio.run(main())
    assert health.loop_lag_samples == 0
    assert health.loop_lag_max_ms is None  # not measured: not zero


def test_the_cpu_share_leaves_out_other_threads():
    """Another thread of the process (the embedded simulated server's, a writer's) burns CPU
    while the loop waits for it: the process's CPU grows, the loop's share does not."""

    def burn(loop: asyncio.AbstractEventLoop, done: asyncio.Event) -> None:
        sum(i * i for i in range(2_000_000))  # a fixed amount of work, however fast the core
        loop.call_soon_threadsafe(done.set)

    async def main() -> tuple[ClientHealth, float, float]:
        monitor = ClientMonitor()
        done = asyncio.Event()
        async with monitor:
            wall, process = time.perf_counter(), time.process_time()
            with monitor.watching():
                thread = threading.Thread(target=burn, args=(asyncio.get_running_loop(), done))
                thread.start()
                await done.wait()
                thread.join()
            wall, process = time.perf_counter() - wall, time.process_time() - process
        return monitor.health([]), wall, process

    health, wall, process_cpu = asyncio.run(main())
    assert health.cpu_share is not None and process_cpu > 0
    # the share × a wall time at least the watched one: at least the CPU the share counted
    assert health.cpu_share * wall < process_cpu / 2


def _lags_around_a_blocked_loop(client_kind):
    def handler(body):
        time.sleep(0.03)  # the loop blocked during the call
        return 5, "ok"

    async def main() -> ClientHealth:
        monitor = ClientMonitor(interval_s=0.001)
        client = monitor.counting(client_kind(handler, delay=lambda body: 0.01))
        async with monitor:
            with monitor.watching():
                await client.stream_chat({"messages": [], "max_tokens": 4})
                await asyncio.sleep(0.01)  # the sampler wakes: it sees how late it is
        return monitor.health([])

    return asyncio.run(main())


def test_lag_counts_while_a_stream_is_open():
    health = _lags_around_a_blocked_loop(_WrittenAtOnce)
    assert health.loop_lag_max_ms is not None and health.loop_lag_max_ms >= 20


def test_a_stall_before_the_request_is_written_is_not_counted():
    """The call began (the request waits to be written: a C256 run opening its sessions) but
    no stream is open: the stall delays the send, which the send delay shows, not a stamp."""
    health = _lags_around_a_blocked_loop(FakeChatClient)  # written after the handler
    assert health.loop_lag_max_ms is None or health.loop_lag_max_ms < 20


def test_stamps_that_waited_over_a_millisecond_at_p99_are_reported_with_the_figure():
    calm = ClientHealth(
        loop_lag_samples=1000,
        loop_lag_p50_ms=0.1,
        loop_lag_p99_ms=2.4,
        loop_lag_max_ms=3.0,
        cpu_share=0.2,
        send_delay_p50_ms=0.2,
        send_delay_p99_ms=0.5,
    )
    (warning,) = health_warnings(calm)
    assert warning.startswith("stamps waited up to 2.4 ms (event-loop lag p99")
    assert "--workers" in warning
    workers = calm.model_copy(update={"processes": 4})
    assert "more worker processes" in health_warnings(workers)[0]
    # read through wire/arrival.py: the loop delayed reading, not stamping
    (read,) = health_warnings(calm, kernel_stamps=True)
    assert read.startswith("reads waited up to 2.4 ms (event-loop lag p99")
    assert "kernel's arrival stamp" in read and "--workers" in read
    lagging = calm.model_copy(update={"loop_lag_p99_ms": 9.0})
    (late,) = health_warnings(lagging, kernel_stamps=True)
    assert "chunks waited that long to be read" in late
    assert "to be stamped" in health_warnings(lagging)[0]


def test_with_the_embedded_simulator_the_lag_warning_names_it_and_worker_processes():
    lagging = ClientHealth(
        loop_lag_samples=1000,
        loop_lag_p50_ms=0.1,
        loop_lag_p99_ms=100.0,
        loop_lag_max_ms=500.0,
        cpu_share=0.4,
        send_delay_p50_ms=1.0,
        send_delay_p99_ms=9.0,
    )
    (alone,) = health_warnings(lagging)
    assert "--workers N, or --workers auto" in alone
    (embedded,) = health_warnings(lagging, embedded=True)
    assert (
        "; the embedded simulated server shares this process and may hold its "
        "interpreter: --workers 2 sends from processes of their own"
    ) in embedded
    sharded = lagging.model_copy(update={"processes": 2})  # the server is not in theirs
    assert health_warnings(sharded, embedded=True) == health_warnings(sharded)


def test_requests_with_merged_chunks_are_counted_in_one_warning():
    def record(merged: int, rate: float | None, **fields: object) -> TurnRecord:
        base = dict(repetition=0, warmup=False, session=0, turn=1, status="ok", valid=True)
        return TurnRecord(
            **{**base, **fields},  # type: ignore[arg-type]
            configured_prior_tokens=0,
            started_ns=0,
            merged_chunks=merged,
            decode_tokens_per_s=rate,
        )

    clean = [record(0, 50.0) for _ in range(5)]
    assert merged_warning(clean) is None
    marked = [*clean, record(38, None), record(4, 51.0), record(9, None, warmup=True)]
    assert merged_warning(marked) == (
        "2 of 7 requests had chunks read together after the client's event loop stalled "
        "(42 chunks, each stamped when the last of its read arrived): their gaps are left out "
        "of ITL, a decode rate starts at the last chunk of such a read, and where the first "
        "chunk was one, TTFT reads high by up to the stall, and 1 of these requests have no "
        "decode rate (the whole reply came in the read after the stall)"
    )
