"""sleep_until_or: a wait on an absolute deadline that a stop cuts short; pace: turn-end work
in slices, one per loop iteration."""

from __future__ import annotations

import asyncio
import time

import pytest

from workloads.core import clock
from workloads.core.clock import pace, sleep_until_or
from workloads.wire.loop import run_loop


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


def test_pace_gives_each_slice_a_loop_iteration_of_its_own_first_come_first_served():
    async def main() -> tuple[list[tuple[str, int]], int]:
        ticks = 0
        seen: list[tuple[str, int]] = []
        done = asyncio.Event()

        async def ticker() -> None:  # counts loop iterations: one sleep(0) each
            nonlocal ticks
            while not done.is_set():
                await asyncio.sleep(0)
                ticks += 1

        async def session(name: str) -> None:
            for piece in range(3):
                await pace(0.0)  # a budget of nothing: every call waits its turn
                seen.append((f"{name}{piece}", ticks))

        counting = asyncio.create_task(ticker())
        async with asyncio.TaskGroup() as tg:
            for name in "abc":
                tg.create_task(session(name))
        done.set()
        await counting
        return seen, ticks

    seen, _ = asyncio.run(main())
    assert [name for name, _ in seen] == ["a0", "b0", "c0", "a1", "b1", "c1", "a2", "b2", "c2"]
    iterations = [tick for _, tick in seen]
    assert len(set(iterations)) == len(iterations)  # no two slices in one loop iteration


def test_pace_within_its_budget_does_not_yield():
    async def main() -> int:
        await pace(0.0)  # start a slice
        order: list[str] = []

        async def other() -> None:
            order.append("other")

        task = asyncio.create_task(other())
        for _ in range(5):
            await pace(3600.0)  # an hour's budget: never used up here
        order.append("mine")
        await task
        return order.index("mine")

    assert asyncio.run(main()) == 0


@pytest.mark.parametrize("fast", [True, False], ids=["uvloop", "asyncio"])
def test_no_wait_ends_before_its_deadline_on_either_loop(fast):
    """uvloop's timers fire up to ~1 ms early on libuv's millisecond clock: a pause must not."""
    if fast:
        pytest.importorskip("uvloop")
    stop = asyncio.Event()

    async def waits() -> list[float]:
        early = []
        for i in range(40):
            deadline = time.perf_counter() + 0.0005 + (i % 7) * 0.00037
            if i % 2:
                await clock.sleep_until(deadline)
            else:
                assert await clock.sleep_until_or(deadline, stop) is not None
            early.append(deadline - time.perf_counter())
        return early

    assert max(run_loop(waits(), fast=fast)) <= 0
