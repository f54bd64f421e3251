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
