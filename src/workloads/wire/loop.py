"""The event loop the library starts: uvloop's when it is installed (the ``fast`` extra),
else the standard one.

uvloop hands each read to the connection's ``data_received`` from C, so the per-read cost
of the streaming path (:mod:`workloads.wire.stream`) roughly halves: measured in
benchmarks/RESULTS.md. Only loops the library starts itself use it (``workloads.run``, the
CLI, worker processes); a caller's own loop is left as it is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["loop_factory", "loop_name", "run_loop"]

T = TypeVar("T")


def loop_factory(*, fast: bool = True) -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes the library's event loop: uvloop's ``new_event_loop`` when installed and
    ``fast``, else asyncio's."""
    if fast:
        try:
            import uvloop
        except ImportError:  # the fast extra is optional: the standard loop does everything
            pass
        else:
            factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
            return factory
    return asyncio.new_event_loop


def loop_name(*, fast: bool = True) -> str:
    """"uvloop" or "asyncio": which loop :func:`run_loop` would start (for provenance)."""
    return "asyncio" if loop_factory(fast=fast) is asyncio.new_event_loop else "uvloop"


def run_loop(main: Coroutine[Any, Any, T], *, fast: bool = True) -> T:
    """``asyncio.run(main)`` on the library's loop (see :func:`loop_factory`).

        result = run_loop(run_async(scenario))
    """
    with asyncio.Runner(loop_factory=loop_factory(fast=fast)) as runner:
        return runner.run(main)
