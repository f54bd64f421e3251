"""A fleet in steady state (scenario ``fleet``): ``users`` slots, each playing one agent
session after another for the run's whole time, so sessions keep their real lengths (median
15 steps, p90 135) and the server sees sessions start, run and end at once. With
``fleet.start = "steady"`` (the default) each slot's first session is caught in mid-life
(:func:`workloads.core.agent.fleet_plan`): the server meets deep histories and long loops in
progress from the first window, as at any moment of a fleet that has run for long; a
session's played steps are numbered from 1.

One continuous fleet plays a cell: its repetitions are **fleet windows** of
``fleet.window_s`` seconds (the warm-up's first, then the measured ones). A step belongs to
the window it is sent in (its record's ``repetition`` and ``warmup``); at the end of the last
window no step starts, and steps in flight finish. A session that ends is replaced at once by
a fresh one (its own nonce and drawn plan; its first step waits its think time), up to
``fleet.max_sessions`` sessions a cell. The run opens the measured window when the warm-up's
windows end (:attr:`FleetPlay.on_measured`), and the warm-up's exactly sized steps teach quiet
sizing then.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from workloads.core.agent import fleet_plan
from workloads.core.clock import sleep_until_or
from workloads.core.conversation import Conversation, make_nonces, probe_nonce
from workloads.core.corpus import Corpus
from workloads.model.results import RepetitionNonces
from workloads.model.scenario import nominal
from workloads.runner.options import SessionIO
from workloads.runner.order import LocalOpeningOrder
from workloads.runner.repetition import Repetition, share_opening, share_openings
from workloads.runner.session import Session
from workloads.runner.sizing import CellSizing
from workloads.runner.subagents import spawn

__all__ = ["FleetPlay"]


class FleetPlay:
    """One cell's fleet: :meth:`open` sizes the slots' first sessions (nothing sent),
    :meth:`play` runs every window."""

    def __init__(
        self,
        repetition: Repetition,
        *,
        sizing: CellSizing,
        corpus: Corpus,
        entropy: bytes,
        io: SessionIO,
    ) -> None:
        s = sizing.scenario
        assert s.fleet is not None
        self.repetition = repetition
        self.scenario = s
        self.sizing = sizing
        self.corpus = corpus
        self.io = io
        self.fleet = s.fleet
        self.nonces = make_nonces(
            entropy,
            cell=repetition.cell.index,
            repetition=0,
            users=s.fleet.max_sessions,
            mode=s.nonce,
        )
        self.n_system = 0
        self.sessions: list[Session] = []  # every session started, in start order
        # Called once, when the warm-up's windows end (the run opens its measured window).
        self.on_measured: Callable[[], Awaitable[None]] | None = None
        self.start: float | None = None

    def nonce_record(self) -> RepetitionNonces:
        return RepetitionNonces(
            cell=self.repetition.cell.index,
            repetition=0,
            warmup=self.repetition.warmup,
            run_nonce=self.nonces.run,
            sessions=self.nonces.sessions,
        )

    def _session(self, number: int) -> Session:
        s = self.scenario
        conversation = Conversation(
            corpus=self.corpus,
            style=s.content.style,
            seed=s.content.seed,
            session=number,
            nonce=self.nonces.sessions[number],
            run_nonce=self.nonces.run,
        )
        session = Session(
            io=self.io,
            scenario=s,
            conversation=conversation,
            sizing=self.sizing,
            repetition=self.repetition.index,
            warmup=self.repetition.warmup,
            cell=self.repetition.cell.index,
            plan=fleet_plan(s, self.repetition.cell.index, number),
        )
        session.window = self.window
        self.sessions.append(session)
        return session

    async def open(self) -> list[Session]:
        """The slots' first sessions, each opened and its turn 1 prepared; nothing sent.
        With nonce = "run" each shares the others' system prompt (as a repetition's
        sessions do); the first of them to send finds nothing the server has seen."""
        s = self.scenario
        first = [self._session(i) for i in range(s.users)]
        if nominal(s.opening_tokens) > 0:
            self.n_system = await self.sizing.fit_shared(
                first[0].conversation, probe_nonce(self.nonces)
            )
        async with asyncio.TaskGroup() as tg:
            for session in first:
                tg.create_task(session.open(self.n_system))
        share_openings(dict(enumerate(first)), self.sizing, LocalOpeningOrder())
        async with asyncio.TaskGroup() as tg:
            for session in first:
                tg.create_task(session.prepare(1))
        return first

    async def _replacement(self) -> Session:
        """A fresh session for a slot, opened and its turn 1 prepared: with nonce = "run"
        it shares the system prompt every earlier session sent."""
        session = self._session(len(self.sessions))
        await session.open(self.n_system)
        if self.scenario.nonce == "run":
            share_opening(session, self.sessions[0], self.sizing)
        await session.prepare(1)
        return session

    def window(self, now: float) -> tuple[int, bool]:
        """The fleet window (repetition index) a step sent at ``now`` belongs to, and
        whether it is a warm-up window (before the fleet starts: its first window)."""
        if self.start is None:
            return 0, self.repetition.warmup
        reps = self.scenario.repetitions
        last = reps.warmup + reps.measured - 1
        index = min(max(0, int((now - self.start) // self.fleet.window_s)), last)
        return index, index < reps.warmup

    def observations(self) -> list[tuple[int, int, int, int]]:
        return [o for session in self.sessions for s in session.family() for o in s.observations]

    async def play(self, first: list[Session], stop: asyncio.Event) -> bool:
        """Every window of the fleet; False when ``stop`` cut it short."""
        reps = self.scenario.repetitions
        self.start = start = time.perf_counter()
        end = start + (reps.warmup + reps.measured) * self.fleet.window_s
        measured_at = start + reps.warmup * self.fleet.window_s
        stopped = False

        async def boundary() -> None:
            if reps.warmup == 0 or await sleep_until_or(measured_at, stop) is None:
                return
            # as a warm-up repetition's end does (players.learn): estimate sizing learns
            if not self.sizing.exact:
                self.sizing.learn(self.observations())
            if self.on_measured is not None:
                await self.on_measured()

        async def slot(session: Session | None) -> None:
            nonlocal stopped
            for _ in range(self.fleet.max_sessions):  # bounded: a slot's sessions
                if session is None:
                    if len(self.sessions) >= self.fleet.max_sessions:
                        return
                    session = await self._replacement()
                if not await self._run(session, end, stop):
                    stopped = stopped or stop.is_set()
                    return
                session = None

        async with asyncio.TaskGroup() as tg:
            tg.create_task(boundary())
            for session in first:
                tg.create_task(slot(session))
        return not stopped

    async def _run(self, session: Session, end: float, stop: asyncio.Event) -> bool:
        """Every step of ``session``'s plan on its own clock until ``end``: True when the
        plan ended (the slot starts another session), False when time or stop ended it."""
        since = time.perf_counter()
        for step in session.plan:
            turn = step.turn
            due = since + step.pause_s
            if due >= end:
                return False
            if turn > 1:  # turn 1 was prepared when the session opened
                if step.children:
                    await spawn(session, turn, stop, end)
                    due = time.perf_counter()
                await session.prepare(turn)
            late = await sleep_until_or(due, stop)
            if late is None:
                return False
            if time.perf_counter() >= end:
                return False
            await session.send(turn, lag_ns=round(late * 1e9))  # in the window it is sent
            since = time.perf_counter()
        return time.perf_counter() < end
