"""send_slice: sends that fall due together go out a slice per loop iteration, in the order
they came; a send alone, or within the budget, goes at once. On both loops."""

from __future__ import annotations

import asyncio

import pytest

from fakes import LoopTicks
from workloads.core import send_slice as send_slice_module
from workloads.core.send_slice import send_slice
from workloads.wire.loop import run_loop

LOOPS = pytest.mark.parametrize("fast", [True, False], ids=["uvloop", "asyncio"])


def on_loop(main, fast: bool):
    if fast:
        pytest.importorskip("uvloop")
    return run_loop(main, fast=fast)


async def due_together(names: str, budget_s: float) -> list[tuple[str, int]]:
    """Each name's send falls due in the same loop iteration; when each went, in loop
    iterations counted by a ticker (one sleep(0) a tick)."""
    went: list[tuple[str, int]] = []
    async with LoopTicks() as loop:

        async def send(name: str) -> None:
            await send_slice(budget_s)
            went.append((name, loop.ticks))

        async with asyncio.TaskGroup() as tg:
            for name in names:
                tg.create_task(send(name))
    return went


@LOOPS
def test_with_no_budget_each_loop_iteration_sends_one_in_the_order_they_came(fast):
    went = on_loop(due_together("abcdefgh", 0.0), fast)
    assert [name for name, _ in went] == list("abcdefgh")  # every one went, first come first
    iterations = [tick for _, tick in went]
    assert len(set(iterations)) == len(iterations)  # never two in one loop iteration


@LOOPS
def test_sends_past_the_looking_ones_are_woken_in_turn_and_still_go_in_order(fast, monkeypatch):
    monkeypatch.setattr(send_slice_module, "LOOKING", 2)  # two look, the rest are woken later
    names = "abcdefghijkl"
    went = on_loop(due_together(names, 0.0), fast)
    assert [name for name, _ in went] == list(names)
    iterations = [tick for _, tick in went]
    assert len(set(iterations)) == len(iterations)


@LOOPS
def test_within_the_budget_they_all_go_in_the_iteration_they_fell_due(fast):
    went = on_loop(due_together("abcdefgh", 3600.0), fast)  # an hour: never used up here
    assert [name for name, _ in went] == list("abcdefgh")
    assert len({tick for _, tick in went}) == 1


@LOOPS
def test_a_send_on_a_loop_not_busy_sending_goes_at_once(fast):
    async def main() -> list[str]:
        order: list[str] = []

        async def other() -> None:
            order.append("other")

        task = asyncio.create_task(other())
        await send_slice(0.0)  # no budget at all, but no other send: its own slice
        order.append("mine")
        await task
        return order

    assert on_loop(main(), fast) == ["mine", "other"]


@LOOPS
def test_a_send_cancelled_while_it_waits_holds_up_no_other(fast):
    async def main() -> tuple[list[str], list[str]]:
        went: list[str] = []

        async def send(name: str) -> None:
            await send_slice(0.0)
            went.append(name)

        tasks = {name: asyncio.create_task(send(name)) for name in "abcd"}
        await asyncio.sleep(0)  # a went; b, c and d wait
        tasks["c"].cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        for _ in range(3):  # the slices after the last send: the loop is no longer busy
            await asyncio.sleep(0)
        later: list[str] = []

        async def other() -> None:
            later.append("other")

        task = asyncio.create_task(other())
        await send_slice(0.0)
        later.append("mine")  # alone again, so at once
        await task
        return went, later

    went, later = on_loop(main(), fast)
    assert went == ["a", "b", "d"]
    assert later == ["mine", "other"]
