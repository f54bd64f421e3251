"""Who plays a cell's sessions: this process (:class:`LocalPlayers`), or worker processes
(:class:`workloads.runner.workers.pool.WorkerPlayers`). The run (:mod:`workloads.runner.cells`)
drives either the same way, repetition by repetition:

    nonces = await players.open(repetition)   # sized, turn 1 prepared, connections opened
    ...                                       # the window opens here, before the first send
    finished = await players.play(repetition) # every turn sent; stop and grace applied
    await players.learn(repetition)           # a warm-up teaches estimate sizing
    traces = await players.traces(cell)       # after the window: the what-if oracle's input
    workers = await players.finish()          # after the last cell: worker processes' health
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, Protocol

from workloads.core.corpus import Corpus
from workloads.model.results import ClientHealth, RepetitionNonces
from workloads.model.scenario import Cell, Scenario
from workloads.runner.fleet import FleetPlay
from workloads.runner.monitor import ClientMonitor
from workloads.runner.options import SessionIO, Stopping
from workloads.runner.order import OpeningOrder
from workloads.runner.repetition import Barrier, Repetition, open_sessions, play
from workloads.runner.replay import Recording, replay_sessions
from workloads.runner.session import Session
from workloads.runner.sizing import CellSizing
from workloads.runner.turn import TokenTrace
from workloads.wire.client import Preopening

__all__ = ["LocalPlayers", "Players", "Shard"]

Observation = tuple[int, int, int, int]  # (session, turn, actual added, estimated added)


class Players(Protocol):
    """Plays the sessions of every repetition of a run (see the module docstring)."""

    async def open(self, repetition: Repetition) -> RepetitionNonces: ...

    async def play(self, repetition: Repetition) -> bool: ...

    async def learn(self, repetition: Repetition) -> None: ...

    async def traces(self, cell: Cell) -> list[TokenTrace]: ...

    async def finish(self) -> list[ClientHealth]: ...

    def event_loop(self) -> str: ...


class Shard:
    """Which of a cell's sessions one of ``count`` processes plays: a contiguous block, so
    turn 1's shareable prefix needs only one session beyond it."""

    def __init__(self, index: int = 0, count: int = 1) -> None:
        self.index, self.count = index, count

    def sessions(self, users: int) -> range:
        return range(self.index * users // self.count, (self.index + 1) * users // self.count)


_NEVER = 2**30  # young collections before an older one: none while a repetition plays


@contextlib.contextmanager
def _still_heap() -> Iterator[None]:
    """No long garbage-collector pause while streams are read: a full collection walks
    every object the sessions hold (histories, tokenizer memos) and stalled the loop for
    45–80 ms at C256 on 2 cores (benchmarks/RESULTS-workers.md), delaying every chunk that
    arrived meanwhile. So collect before the repetition's first send, then freeze what exists:
    the collector walks only what the repetition makes; thawed when it ends. That collection
    is of the young generations, which hold everything the last repetition made (its own
    collections never promoted past them): a full one walked every object of the process,
    60–80 ms each repetition even in a small one (much more in a test process), to free only
    what the older generations held before, which waits for the next full collection after
    the repetition as it would have waited without the freeze. While it plays,
    only the young generation is collected: a generation-1 collection walks every object the
    young collections left alive (turns in flight, their records) and held the loop for
    8–21 ms at C256 on a quiet core, freeing nothing that would not be freed at the end
    (benchmarks/RESULTS.md, "Loop stalls with streams open"). The older generations wait for
    the repetition's end (on 3.14's incremental collector the same threshold makes the old
    generation's scan as slow as it goes); the thresholds are process-wide, so the caller's
    are put back then (the library is embeddable)."""
    gc.collect(1)
    gc.freeze()
    young, *older = gc.get_threshold()
    gc.set_threshold(young, _NEVER, _NEVER)
    try:
        yield
    finally:
        gc.set_threshold(young, *older)
        gc.unfreeze()


class LocalPlayers:
    """Plays the sessions of this process's shard (all of them by default) on its loop."""

    def __init__(
        self,
        *,
        sizings: dict[int, CellSizing],
        corpus: Corpus,
        entropy: bytes,
        io: SessionIO,
        stopping: Stopping,
        replay: Recording | None = None,
        shard: Shard | None = None,
        order: Callable[[], OpeningOrder | None] = lambda: None,  # one per repetition
        barrier: Callable[[Repetition], Barrier] | None = None,
        start: Callable[[Repetition], float | None] = lambda rep: None,
        monitor: ClientMonitor | None = None,  # watches this process's loop while playing
    ) -> None:
        self.sizings = sizings
        self.corpus = corpus
        self.entropy = entropy
        # counted by the monitor: its lag counts only while a request is in flight
        self.io = io.through(monitor.counting(io.client)) if monitor is not None else io
        self.stop = stopping.event  # once set, no new turn; in-flight turns get grace_s
        self.grace_s = stopping.grace_s
        self.replay = replay
        self.shard = shard or Shard()
        self.order = order
        self.barrier = barrier
        self.start = start
        self.monitor = monitor
        self.sessions: list[Session] = []  # the repetition being played
        self.fleet: FleetPlay | None = None  # a fleet's cell (scenario fleet): one continuous play
        # A fleet's: called when its warm-up windows end (the run opens its measured window).
        self.on_measured: Callable[[], Awaitable[None]] | None = None
        self.traced: dict[int, list[Session]] = {}  # measured sessions, per cell

    async def open(self, repetition: Repetition) -> RepetitionNonces:
        sizing = self.sizings[repetition.cell.index]
        self.fleet = None
        if sizing.scenario.fleet is not None:
            self.fleet = FleetPlay(
                repetition, sizing=sizing, corpus=self.corpus, entropy=self.entropy, io=self.io
            )
            self.fleet.on_measured = self.on_measured
            self.sessions = await self.fleet.open()
            nonces = self.fleet.nonce_record()
        elif self.replay is not None:
            self.sessions, nonces = replay_sessions(
                repetition,
                self.replay,
                sizing=sizing,
                corpus=self.corpus,
                io=self.io,
            )
            async with asyncio.TaskGroup() as tg:  # turn 1 sized before anything is sent
                for session in self.sessions:
                    tg.create_task(session.prepare(1))
        else:
            self.sessions, nonces = await open_sessions(
                repetition,
                sizing=sizing,
                corpus=self.corpus,
                entropy=self.entropy,
                io=self.io,
                shard=self.shard.sessions(sizing.scenario.users),
                order=self.order(),
            )
        # A connection per session, opened now, while nothing streams: turn 1 then goes on
        # an open connection as later turns go on kept-alive ones, and no connect holds the
        # loop while the first streams are read. Within the connect timeout; one that does
        # not open is no error (that turn opens its own).
        client = self.io.client
        if isinstance(client, Preopening):
            await client.open_connections(len(self.sessions))
        return nonces

    async def play(self, repetition: Repetition) -> bool:
        """Play the opened repetition; False when stop left turns out or cut them short.

        Once stop is set, the sessions start no new turn and the turns in flight get
        ``grace_s``; those still running then are cancelled (each records itself).
        """
        sessions = self.sessions
        scenario = self.sizings[repetition.cell.index].scenario
        barrier = None if self.barrier is None else self.barrier(repetition)
        with _still_heap(), self.monitor.watching() if self.monitor else contextlib.nullcontext():
            return await self._play(repetition, sessions, scenario, barrier)

    async def _play(
        self,
        repetition: Repetition,
        sessions: list[Session],
        scenario: Scenario,
        barrier: Barrier | None,
    ) -> bool:
        playing = asyncio.ensure_future(self._sends(repetition, sessions, scenario, barrier))
        try:
            stopping = asyncio.ensure_future(self.stop.wait())
            try:
                await asyncio.wait({playing, stopping}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopping.cancel()
            if not playing.done():  # stop was set: the turns in flight get their grace
                await asyncio.wait({playing}, timeout=self.grace_s)
            if not playing.done():
                playing.cancel()
            try:
                finished = await playing
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # we are cancelled ourselves, not only the turns
                finished = False
        finally:
            if not playing.done():  # we were cancelled: the turns go too, and record so
                playing.cancel()
                await asyncio.wait({playing})
        if self.fleet is not None:  # every session the fleet started, windows mixed
            sessions = self.fleet.sessions
        if not repetition.warmup or self.fleet is not None:  # with their sub-agents
            self.traced.setdefault(repetition.cell.index, []).extend(
                s for session in sessions for s in session.family()
            )
        return finished

    def _sends(
        self,
        repetition: Repetition,
        sessions: list[Session],
        scenario: Scenario,
        barrier: Barrier | None,  # None: this process alone
    ) -> Coroutine[Any, Any, bool]:
        """What plays the repetition (the scenario's pacing; a trace replay overrides it)."""
        if self.fleet is not None:
            return self.fleet.play(sessions, self.stop)
        return play(
            sessions,
            repetition,
            scenario,
            self.corpus,
            stop=self.stop,
            start=self.start(repetition),
            barrier=barrier,
        )

    def observations(self) -> list[Observation]:
        """What the repetition just played taught about estimate sizing."""
        if self.fleet is not None:
            return self.fleet.observations()
        return [o for session in self.sessions for s in session.family() for o in s.observations]

    async def learn(self, repetition: Repetition) -> None:
        sizing = self.sizings[repetition.cell.index]
        if repetition.warmup and not sizing.exact:
            sizing.learn(self.observations())

    async def traces(self, cell: Cell) -> list[TokenTrace]:
        """The measured turns' token traces, each with its reply's ids (tokenizer calls:
        call after the window)."""
        sessions = self.traced.pop(cell.index, [])
        for session in sessions:
            await session.finish_trace()
        return [t for session in sessions for t in session.token_log]

    async def finish(self) -> list[ClientHealth]:
        """Nothing to end: this process's own health is the run's monitor's."""
        return []

    def event_loop(self) -> str:
        """The loop that stamps the chunks (for the result's environment): this one's."""
        kind = type(asyncio.get_running_loop()).__module__.split(".")[0]
        return "uvloop" if kind == "uvloop" else "asyncio"
