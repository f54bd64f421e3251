"""The loop the library starts: uvloop's when installed (the fast extra), else asyncio's."""

from __future__ import annotations

import asyncio
import importlib.util

from workloads.wire.loop import loop_name, run_loop


async def _which() -> str:
    return type(asyncio.get_running_loop()).__module__.split(".")[0]


def test_run_loop_uses_uvloop_exactly_when_it_is_installed():
    installed = importlib.util.find_spec("uvloop") is not None
    assert loop_name() == ("uvloop" if installed else "asyncio")
    assert run_loop(_which()) == ("uvloop" if installed else "asyncio")


def test_fast_false_is_the_standard_loop():
    assert loop_name(fast=False) == "asyncio"
    assert run_loop(_which(), fast=False) == "asyncio"


async def test_inside_a_running_loop_run_loop_runs_main_on_its_own_loop_with_our_context():
    import contextvars
    import threading

    where: contextvars.ContextVar[str] = contextvars.ContextVar("where")
    where.set("caller")

    async def inside() -> tuple[str, str, bool]:
        loop = asyncio.get_running_loop()
        return threading.current_thread().name, where.get(), loop is not caller

    caller = asyncio.get_running_loop()
    assert run_loop(inside()) == ("workloads-loop", "caller", True)
