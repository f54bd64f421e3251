"""The send slice: sends that fall due together go out over several event-loop iterations.

A send's synchronous work (the history committed, the body built, its JSON encoded: ~20–80
µs; on a new connection the socket opened and connected: ~0.1–0.25 ms; the request written)
is short, but when many sessions' turns fall due in one loop iteration (a repetition's first
turns: every session's timer fires at once, and each opens its connection) it ran back to
back: 5.4–20 ms at C256 (benchmarks/RESULTS.md, "Loop stalls with streams open"), while the
first streams were already open and their chunks waited in the sockets to be stamped.
:func:`send_slice`, awaited just before that work (runner/session.py before the body,
wire/stream.py before a connection is opened), lets the sends of one loop iteration run for
:data:`SEND_SLICE_S` at most; a send that finds the slice spent waits for a later iteration,
which reads the sockets first.

The rule, per event loop: a slice begins with the first send of a loop iteration (while sends
wait, with the iteration itself: the connections opened and requests written for the sends
that went in the last one count too); the sends go in the order they came; the first send of
a slice always goes, so every iteration sends at least one; the next go while the slice is
younger than the budget; the rest wait for a later iteration (``asyncio.sleep(0)``: the loop
reads its sockets first). A loop iteration therefore runs at most the budget plus one send of
send work, whatever the number of sessions. One send can itself be long: a loopback connect
took 0.2 ms on an idle lent host and up to ~17 ms there while other requests were on the wire,
which no slice bounds: so a repetition's connections are opened when it opens, before its
first sends, while nothing streams (runner/players.py; benchmarks/RESULTS.md, "Connections
opened before the first sends"). Only the first :data:`LOOKING` waiting sends look
again each iteration (~1 µs each); the others are woken as those go.
"""

from __future__ import annotations

import asyncio
import collections
import time

from workloads.core.clock import of_this_loop

__all__ = ["SEND_SLICE_S", "send_slice"]

# Send work run in one loop iteration, at most (plus one send).
SEND_SLICE_S = 0.001
# Waiting sends that look again each loop iteration; the rest wait to be woken (256 sessions
# due at once would otherwise cost ~0.3 ms an iteration to look). A 1 ms slice holds ~25 sends.
LOOKING = 64
# Loop iterations a send looks, at most; past this it goes (every wait ends): 10,000 sessions
# due at once at 40 µs a send take ~400.
MAX_WAITS = 100_000


class _Waiting:
    """A send waiting for a slice: woken by ``parked`` while it is not among the first
    :data:`LOOKING` in line."""

    __slots__ = ("parked",)

    def __init__(self) -> None:
        self.parked: asyncio.Future[None] | None = None


class _Slice:
    """One event loop's slice of send work: since when, whether its first send went, and the
    sends waiting for a later one, in the order they came."""

    __slots__ = ("armed", "fresh", "line", "loop", "since")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.since = 0.0  # this slice began (perf_counter)
        self.fresh = False  # no send went in this slice yet
        self.armed = False  # the next slice is scheduled: this one is the current iteration's
        self.line: collections.deque[_Waiting] = collections.deque()

    def begin(self) -> None:
        """A new slice from now. Scheduled with ``call_soon`` by the slice before, it runs at
        the head of the next iteration's callbacks: before the sends that wait and the writes
        of those that went."""
        self.since = time.perf_counter()
        self.fresh = True
        self.armed = bool(self.line)
        if self.armed:
            self.loop.call_soon(self.begin)

    def leave(self, waiting: _Waiting) -> None:
        """``waiting`` goes (or was cancelled): the send that comes within :data:`LOOKING` of
        the head of the line starts looking."""
        self.line.remove(waiting)  # the head, but for a cancelled send
        if len(self.line) >= LOOKING:
            parked = self.line[LOOKING - 1].parked
            if parked is not None and not parked.done():
                parked.set_result(None)


_slices: dict[asyncio.AbstractEventLoop, _Slice] = {}


async def send_slice(budget_s: float | None = None) -> None:
    """Wait until this loop iteration's send work leaves room for one more send.

    Await it just before a send's synchronous work (``budget_s``: :data:`SEND_SLICE_S`
    unless given). It returns at once when the loop is not busy sending; when many sends
    fall due together each iteration sends what fits the budget (at least one), first come
    first served, and the loop reads its sockets between slices, so stamps of chunks already
    arriving are never held back by more than the budget plus one send. The wait is the
    send's: its pacing lag, before ``started_ns``."""
    budget = SEND_SLICE_S if budget_s is None else budget_s
    loop, state = of_this_loop(_slices, _Slice)
    if not state.armed:  # the loop is not busy sending: a slice of its own
        state.since = time.perf_counter()
        state.armed = True
        state.fresh = False
        loop.call_soon(state.begin)
        return
    if not state.line and (state.fresh or time.perf_counter() - state.since < budget):
        state.fresh = False
        return
    waiting = _Waiting()
    state.line.append(waiting)
    try:
        if len(state.line) > LOOKING:
            waiting.parked = loop.create_future()
            await waiting.parked
            waiting.parked = None
        for _ in range(MAX_WAITS):
            await asyncio.sleep(0)  # the next iteration: the loop reads its sockets first
            if state.line[0] is waiting and (
                state.fresh or time.perf_counter() - state.since < budget
            ):
                state.fresh = False
                return
    finally:
        state.leave(waiting)
