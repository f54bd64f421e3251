"""The event loop the library starts: uvloop's when it is installed (the ``fast`` extra),
else the standard one.

uvloop hands each read to the connection's ``data_received`` from C, so the per-read cost
of the streaming path (:mod:`workloads.wire.stream`) roughly halves: measured in
benchmarks/RESULTS.md. Only loops the library starts itself use it (``workloads.run``, the
CLI, worker processes); a caller's own loop is left as it is.

A synchronous entry (``workloads.run``, ``workloads.probe_target``) called where a loop is
already running in this thread (Jupyter, an async test harness) cannot start another loop
here: :func:`run_loop` then runs its loop in a thread of its own and waits for it.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["loop_factory", "loop_name", "run_loop"]

T = TypeVar("T")

# How often a caller's blocked thread looks whether its own task was cancelled. asyncio.run's
# SIGINT handler only cancels the caller's task (it cannot interrupt the wait): this is how
# the first Ctrl-C reaches the run rather than the second.
_CANCEL_CHECK_S = 0.1


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
    """ "uvloop" or "asyncio": which loop :func:`run_loop` would start (for provenance)."""
    return "asyncio" if loop_factory(fast=fast) is asyncio.new_event_loop else "uvloop"


def run_loop(main: Coroutine[Any, Any, T], *, fast: bool = True) -> T:
    """``asyncio.run(main)`` on the library's loop (see :func:`loop_factory`).

        result = run_loop(run_async(scenario))

    Inside a running loop (this thread's), ``main`` runs on a new loop in a thread named
    ``workloads-loop``, with this thread's context variables, while this thread waits: the
    caller's loop is blocked meanwhile, as by any synchronous call. A KeyboardInterrupt here,
    or a cancellation of the caller's task (asyncio.run's Ctrl-C), cancels ``main`` and waits
    for it to clean up before it propagates.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        with asyncio.Runner(loop_factory=loop_factory(fast=fast)) as runner:
            return runner.run(main)
    return _run_in_thread(main, fast=fast)


class _Handoff:
    """What the waiting thread and the loop's thread share: the loop and task to cancel
    (known once the loop runs), whether to cancel, and the outcome."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task[Any] | None = None
        self.cancel = False
        self.result: Any = None
        self.error: BaseException | None = None
        # Set when the loop has closed. Waited on, not Thread.join: on Python 3.11 a join
        # interrupted by KeyboardInterrupt marks a thread that still runs as stopped, and
        # every later join returns at once.
        self.done = threading.Event()

    def request_cancel(self) -> None:
        with self.lock:
            self.cancel = True
            if self.loop is not None and self.task is not None:
                self.loop.call_soon_threadsafe(self.task.cancel)


def _run_in_thread(main: Coroutine[Any, Any, T], *, fast: bool) -> T:
    handoff = _Handoff()
    context = contextvars.copy_context()

    async def tracked() -> T:
        with handoff.lock:
            handoff.loop, handoff.task = asyncio.get_running_loop(), asyncio.current_task()
            cancelled = handoff.cancel
        if cancelled:  # interrupted before the loop started: never begin
            main.close()
            raise asyncio.CancelledError
        return await main

    def thread_main() -> None:
        try:
            with asyncio.Runner(loop_factory=loop_factory(fast=fast)) as runner:
                handoff.result = runner.run(tracked(), context=context)
        except BaseException as err:  # handed to the waiting thread, which raises it
            handoff.error = err
        finally:
            handoff.done.set()

    thread = threading.Thread(target=thread_main, name="workloads-loop", daemon=True)
    caller = asyncio.current_task()
    thread.start()
    try:
        while not handoff.done.wait(_CANCEL_CHECK_S):
            if caller is not None and caller.cancelling() and not handoff.cancel:
                handoff.request_cancel()
    except BaseException:  # KeyboardInterrupt: stop the run, let it save, then propagate
        handoff.request_cancel()
        handoff.done.wait()
        thread.join()
        raise
    thread.join()  # the loop has closed: only the thread's own exit is left
    if handoff.error is not None:
        if (
            caller is not None
            and caller.cancelling()
            and isinstance(handoff.error, asyncio.CancelledError)
        ):
            raise asyncio.CancelledError  # the caller's own cancellation, handed back
        raise handoff.error
    result: T = handoff.result
    return result
