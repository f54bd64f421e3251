"""The send slice: sends that fall due together go out over several event-loop iterations.

A send's synchronous part (the history committed, the body built, its JSON encoded, the
request written) takes ~20–80 µs. When many sessions' turns fall due in one loop iteration
(a repetition's first turns: every session's timer fires at once) they ran back to back:
5.4–20 ms at C256 (benchmarks/RESULTS.md, "Loop stalls with streams open"), while the first
streams were already open and their chunks waited in the sockets to be stamped.
:func:`send_slice`, awaited just before that work, lets the sends of one loop iteration run
for :data:`SEND_SLICE_S` at most; a send that finds the slice spent waits for the next
iteration, which reads the sockets first.

The rule, per event loop: a slice begins with the first send of a loop iteration (while sends
wait, with the iteration itself: the writes of the sends that went in the last one count too);
that send always goes, so every iteration sends at least one; the next go while the slice is
younger than the budget; the rest wait one iteration (``asyncio.sleep(0)``) and look again,
in the order they came. A loop iteration therefore runs at most the budget plus one send of
send work (and ~1–2 µs per waiting send, to look), whatever the number of sessions.
"""

from __future__ import annotations

import asyncio
import time

__all__ = ["SEND_SLICE_S", "send_slice"]

# Send work run in one loop iteration, at most (plus one send).
SEND_SLICE_S = 0.001
# Loop iterations a send waits, at most; past this it goes (every wait ends): 10,000 sessions
# due at once at 40 µs a send take ~400.
MAX_WAITS = 100_000


class _Slice:
    """One event loop's slice of send work: since when, whether its first send went, and how
    many sends wait for a later one."""

    __slots__ = ("armed", "fresh", "loop", "since", "waiting")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.since = 0.0  # this slice began (perf_counter)
        self.fresh = False  # no send went in this slice yet
        self.armed = False  # the next slice is scheduled: this one is the current iteration's
        self.waiting = 0  # sends waiting for a later slice

    def begin(self) -> None:
        """A new slice from now. Scheduled with ``call_soon`` by the slice before, it runs at
        the head of the next iteration's callbacks: before the sends that wait and the writes
        of those that went."""
        self.since = time.perf_counter()
        self.fresh = True
        self.armed = self.waiting > 0
        if self.armed:
            self.loop.call_soon(self.begin)


_slices: dict[asyncio.AbstractEventLoop, _Slice] = {}


async def send_slice(budget_s: float | None = None) -> None:
    """Wait until this loop iteration's send work leaves room for one more send.

    Await it just before a send's synchronous work (``budget_s``: :data:`SEND_SLICE_S`
    unless given). It returns at once when the loop is not busy sending; when many sends
    fall due together each iteration sends what fits the budget (at least one) and the
    loop reads its sockets between slices, so stamps of chunks already arriving are never
    held back by more than the budget plus one send. The wait is the send's: its pacing
    lag, before ``started_ns``."""
    budget = SEND_SLICE_S if budget_s is None else budget_s
    loop = asyncio.get_running_loop()
    state = _slices.get(loop)
    if state is None:
        for old in [other for other in _slices if other.is_closed()]:
            del _slices[old]
        state = _slices[loop] = _Slice(loop)
    waited = False
    try:
        for _ in range(MAX_WAITS):
            if not state.armed:  # the loop was not busy sending: a slice of its own
                state.since = time.perf_counter()
                state.armed = True
                loop.call_soon(state.begin)
                state.fresh = False
                return
            if state.fresh or time.perf_counter() - state.since < budget:
                state.fresh = False
                return
            if not waited:
                waited = True
                state.waiting += 1
            await asyncio.sleep(0)  # the next iteration: the loop reads its sockets first
    finally:
        if waited:
            state.waiting -= 1
