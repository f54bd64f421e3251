"""sleep_until_or: a wait on an absolute deadline that a stop cuts short."""

from __future__ import annotations

import asyncio
import time

from workloads.core.clock import sleep_until_or


def test_a_deadline_already_past_returns_how_late_without_waiting():
    async def go() -> float | None:
        return await sleep_until_or(time.perf_counter() - 1.0, asyncio.Event())

    late = asyncio.run(go())
    assert late is not None and late >= 1.0


def test_an_event_already_set_means_no_turn_is_started():
    async def go() -> float | None:
        stop = asyncio.Event()
        stop.set()
        return await sleep_until_or(time.perf_counter() - 1.0, stop)

    assert asyncio.run(go()) is None


def test_an_event_set_during_the_wait_ends_it_long_before_the_deadline():
    async def go() -> tuple[float | None, bool]:
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(0.01, stop.set)
        waiting = asyncio.create_task(sleep_until_or(time.perf_counter() + 3600, stop))
        done, _ = await asyncio.wait({waiting}, timeout=600)  # bounded; ends at the set
        return waiting.result(), waiting in done

    late, ended = asyncio.run(go())
    assert ended and late is None
