"""The client watches itself (runner/monitor.py): a loop blocked on purpose is reported."""

from __future__ import annotations

import asyncio
import time

import workloads
from fakes import FakeChatClient
from workloads.model.results import ClientHealth
from workloads.runner.monitor import ClientMonitor, health_warnings


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

    client = FakeChatClient(handler, delay=lambda body: 0.05)
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


def test_lag_counts_while_a_request_is_in_flight():
    def handler(body):
        time.sleep(0.02)  # the loop blocked while this request is in flight
        return 5, "ok"

    async def main() -> ClientHealth:
        monitor = ClientMonitor(interval_s=0.001)
        client = monitor.counting(FakeChatClient(handler, delay=lambda body: 0.01))
        async with monitor:
            with monitor.watching():
                await client.stream_chat({"messages": [], "max_tokens": 4})
        return monitor.health([])

    health = asyncio.run(main())
    assert health.loop_lag_samples > 0


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
        "; the embedded simulated server shares this process, and its engine delays the "
        "client's stamps: --workers 2 sends from processes of their own"
    ) in embedded
    sharded = lagging.model_copy(update={"processes": 2})  # the server is not in theirs
    assert health_warnings(sharded, embedded=True) == health_warnings(sharded)
