"""Waiting on absolute deadlines (``perf_counter`` seconds): a chain of relative sleeps drifts,
so every pause in a run is computed from a start time and waited for with :func:`sleep_until`
(trio's ``sleep_until`` is the model).

And :func:`pace`, which keeps turn-end work (records, transcripts, the next turn's sizing)
from holding the event loop: a chunk is stamped when the loop reads its socket, so every
millisecond of work run between two reads is a millisecond added to the stamps of whatever
arrived meanwhile.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["SLICE_S", "of_this_loop", "pace", "sleep_until", "sleep_until_or"]

S = TypeVar("S")

# Turn-end work run between two looks at the sockets, at most (plus one piece of work: the
# pieces between two pace() calls are each well under a millisecond at C256).
SLICE_S = 0.0005
# Rounds of sleeping the rest of a wait, at most: uvloop rounds a sleep under 1 ms to none, so
# the last millisecond can take many (each yields to the loop); past this the wait ends.
MAX_ROUNDS = 10_000


async def sleep_until(deadline: float) -> float:
    """Sleep until ``perf_counter() >= deadline``; returns how late we woke (seconds).

    Never early: uvloop's timers run on libuv's millisecond clock, cached at the start of a
    loop iteration, and fire up to ~1.2 ms before ``perf_counter`` reaches the deadline (71
    of 200 timeouts of 0.5-6.4 ms did on this project's machines; asyncio's own loop: none),
    so the rest is slept again: bounded by the deadline, and by :data:`MAX_ROUNDS` rounds.
    """
    for _ in range(MAX_ROUNDS):
        if (delay := deadline - time.perf_counter()) <= 0:
            break
        await asyncio.sleep(delay)
    return max(0.0, time.perf_counter() - deadline)


async def sleep_until_or(deadline: float, event: asyncio.Event) -> float | None:
    """:func:`sleep_until`, cut short by ``event``: how late we woke (seconds), or None when
    ``event`` was set first (or already). A stopped run starts no turn it was waiting on.
    Never early, as :func:`sleep_until`."""
    for _ in range(MAX_ROUNDS):
        if event.is_set():
            return None
        delay = deadline - time.perf_counter()
        if delay <= 0:
            break
        try:
            async with asyncio.timeout(delay):
                await event.wait()
        except TimeoutError:
            continue
    return None if event.is_set() else max(0.0, time.perf_counter() - deadline)


def of_this_loop(
    states: dict[asyncio.AbstractEventLoop, S], make: Callable[[asyncio.AbstractEventLoop], S]
) -> tuple[asyncio.AbstractEventLoop, S]:
    """The running loop and its entry in ``states`` (made by ``make`` on first use; closed
    loops' entries are dropped then, so a process that runs many loops keeps none of theirs):
    the per-loop state of :func:`pace` and of the send slice (core/send_slice.py)."""
    loop = asyncio.get_running_loop()
    state = states.get(loop)
    if state is None:
        for old in [other for other in states if other.is_closed()]:
            del states[old]
        state = states[loop] = make(loop)
    return loop, state


class _Slices:
    """One event loop's budget of turn-end work: who is working now (since when) and who
    waits for a later loop iteration, first come first served."""

    __slots__ = ("armed", "loop", "since", "waiters")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.since = 0.0  # the current slice began (perf_counter); 0: none yet
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self.armed = False  # a _release is scheduled

    def release(self) -> None:
        """Wake the first waiter; it runs in the next loop iteration, after the loop has read
        its sockets. One waiter per iteration: a slice each."""
        self.armed = False
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():  # a cancelled task's waiter is skipped
                waiter.set_result(None)
                break
        if self.waiters:
            self.armed = True
            self.loop.call_soon(self.release)


_slices: dict[asyncio.AbstractEventLoop, _Slices] = {}


async def pace(budget_s: float = SLICE_S) -> None:
    """Yield to the event loop when the work run since the last yield has used ``budget_s``.

    Call it between pieces of turn-end work. Within the budget it returns at once; past it
    the caller waits its turn (first come, first served) for a later loop iteration, so many
    sessions ending a turn together run one slice per iteration, and the loop reads its
    sockets (and stamps what arrived) between slices: without it, 256 sessions ending a
    turn in one read ran ~1 ms of records and sizing each, back to back, and first tokens
    waited 170 ms to be stamped (benchmarks/RESULTS.md, "Turn ends")."""
    loop, slices = of_this_loop(_slices, _Slices)
    if time.perf_counter() - slices.since < budget_s:
        return
    waiter: asyncio.Future[None] = loop.create_future()
    slices.waiters.append(waiter)
    if not slices.armed:  # each loop iteration wakes one waiter: every wait ends
        slices.armed = True
        loop.call_soon(slices.release)
    await waiter
    slices.since = time.perf_counter()
