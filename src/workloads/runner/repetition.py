"""One repetition of a cell: fresh nonces, every session's opening sized, then the turns sent
on the scenario's pacing (lock-step barriers, or free-running sessions).

Split in two so the caller decides what happens in between: :func:`open_sessions` does all
the sizing (tokenizer calls, untimed), :func:`play` sends. The run opens a cell's measured
window between the two, so no ``/tokenize`` call of the first measured repetition is inside it.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from workloads.core import tokens
from workloads.core.agent import Step, scaled
from workloads.core.agent_traces import PublishedTrace, any_format, load_published
from workloads.core.clock import sleep_until_or
from workloads.core.conversation import Conversation, make_nonces, probe_nonce
from workloads.core.corpus import Corpus
from workloads.core.traces import load_agent_trace
from workloads.model.results import RepetitionNonces
from workloads.model.scenario import Cell, Scenario, nominal
from workloads.runner.options import SessionIO
from workloads.runner.order import LocalOpeningOrder, OpeningOrder
from workloads.runner.pacing import arrival_times
from workloads.runner.session import Session
from workloads.runner.sizing import CellSizing
from workloads.runner.subagents import spawn

__all__ = [
    "Barrier",
    "Repetition",
    "open_sessions",
    "play",
    "share_opening",
    "share_openings",
    "traced_plans",
]

# Lock-step's barrier: called with the turn once this process's sessions have it sized; returns
# the barrier's time (perf_counter), or None when the run stopped first. Across worker
# processes it waits for every process (one host: perf_counter is the host's monotonic clock).
Barrier = Callable[[int], Awaitable[float | None]]


async def _here(turn: int) -> float:
    return time.perf_counter()


@dataclass(frozen=True)
class Repetition:
    """Which pass this is: cell, index within the cell (warm-ups first), warm-up or not."""

    cell: Cell
    index: int
    warmup: bool


async def open_sessions(
    repetition: Repetition,
    *,
    sizing: CellSizing,
    corpus: Corpus,
    entropy: bytes,
    io: SessionIO,
    shard: range | None = None,
    order: OpeningOrder | None = None,
) -> tuple[list[Session], RepetitionNonces]:
    """The repetition's sessions, each with its opening sized and turn 1 prepared; nothing
    sent yet. Also the nonces drawn for it (the result records them).

    ``shard``: only these sessions (a worker process's share); the others are opened only
    as far as turn 1's shareable prefix needs (the next session's opening ids).
    ``order``: who sent turn 1 first, shared by every process of the run.
    """
    s = sizing.scenario
    cell = repetition.cell.index
    nonces = make_nonces(
        entropy, cell=cell, repetition=repetition.index, users=s.users, mode=s.nonce
    )
    record = RepetitionNonces(
        cell=cell,
        repetition=repetition.index,
        warmup=repetition.warmup,
        run_nonce=nonces.run,
        sessions=nonces.sessions,
    )
    conversations = [
        Conversation(
            corpus=corpus,
            style=s.content.style,
            seed=s.content.seed,
            session=i,
            nonce=nonces.sessions[i],
            run_nonce=nonces.run,
        )
        for i in range(s.users)
    ]
    n_system = 0
    if nominal(s.opening_tokens) > 0:
        n_system = await sizing.fit_shared(conversations[0], probe_nonce(nonces))
    shard = shard if shard is not None else range(s.users)
    mine = [i for i in shard if i < s.users]
    # With nonce = "run", turn 1's shareable prefix needs the next session's opening too
    neighbour = (mine[-1] + 1) % s.users if mine and s.nonce == "run" and s.users > 1 else None
    if neighbour in mine:
        neighbour = None
    plans = traced_plans(s)
    opened = {
        i: Session(
            io=io,
            scenario=s,
            conversation=conversations[i],
            sizing=sizing,
            repetition=repetition.index,
            warmup=repetition.warmup,
            cell=cell,
            plan=plans[i] if plans is not None and i < len(plans) else None,
        )
        for i in [*mine, *([neighbour] if neighbour is not None else [])]
    }
    async with asyncio.TaskGroup() as tg:
        for session in opened.values():
            tg.create_task(session.open(n_system))  # each at its plan's (drawn) opening
    share_openings(opened, sizing, order if order is not None else LocalOpeningOrder())
    sessions = [opened[i] for i in mine]
    async with asyncio.TaskGroup() as tg:  # turn 1 sized before anything is sent
        for session in sessions:
            tg.create_task(session.prepare(1))
    return sessions, record


def traced_plans(scenario: Scenario) -> list[tuple[Step, ...]] | None:
    """The plans of an agent trace's sessions in session-id order, pauses times
    ``time_scale`` (``agent.trace``); None without one (plans are drawn)."""
    if scenario.agent is None or scenario.agent.trace is None:
        return None
    scale = scenario.pacing.time_scale
    if any_format(scenario.agent.trace) not in ("agent", "mooncake"):  # a published corpus
        return [scaled(s.plan, scale) for s in _published(scenario.agent.trace).sessions]
    system = scenario.shared_prefix_tokens or 0  # what a compaction keeps, as draw_plan's
    plans = _agent_trace(scenario.agent.trace, nominal(scenario.opening_tokens), system)
    return [scaled(plans[sid], scale) for sid in sorted(plans)]


@functools.lru_cache(maxsize=4)
def _agent_trace(path: str, opening: int, system: int) -> dict[int, tuple[Step, ...]]:
    return load_agent_trace(path, opening, system_tokens=system)  # checked by the CLI


@functools.lru_cache(maxsize=4)
def _published(path: str) -> PublishedTrace:
    return load_published(path)  # checked by the CLI before the run started


async def play(
    sessions: list[Session],
    repetition: Repetition,
    scenario: Scenario,
    corpus: Corpus,
    *,
    stop: asyncio.Event | None = None,  # once set, no turn starts (in-flight ones go on)
    barrier: Barrier | None = None,  # None: this process alone (no other shares)
    start: float | None = None,  # free pacing's common start (perf_counter); default now
) -> bool:
    """Send every turn of ``sessions`` on the scenario's pacing; False when ``stop`` left
    turns unsent. ``sessions`` may be a share of the repetition's (a worker process's): each
    keeps its own pacing draws, and ``barrier`` and ``start`` are common to every share."""
    s = scenario
    stop = stop if stop is not None else asyncio.Event()
    barrier = barrier if barrier is not None else _here
    if s.pacing.mode == "lockstep":
        for turn in range(1, s.turns + 1):
            if stop.is_set():
                return False
            playing = [session for session in sessions if turn <= len(session.plan)]
            if turn > 1:
                async with asyncio.TaskGroup() as tg:  # every session sized before any sends
                    for session in playing:
                        tg.create_task(_spawn_and_prepare(session, turn, stop))
            at = await barrier(turn)
            if at is None:  # stopped while the other processes sized their sessions
                return False
            async with asyncio.TaskGroup() as tg:  # the barrier: all of turn k, then k+1
                sends = []
                for session in playing:
                    due = at + session.step(turn).pause_s
                    sends.append(tg.create_task(_send_at(session, turn, due, stop)))
            if not all(task.result() for task in sends):
                return False
        return True
    start = start if start is not None else time.perf_counter()
    starts = [start] * len(sessions)
    if s.pacing.arrivals is not None:  # an open-loop fleet: each session has its arrival
        times = arrival_times(
            s.pacing.arrivals,
            s.users,
            corpus.rng(s.content.seed, "arrivals", repetition.cell.index, repetition.index),
        )
        # sessions past the last arrival never start
        starts = [
            start + times[session.conversation.session]
            for session in sessions
            if session.conversation.session < len(times)
        ]
    async with asyncio.TaskGroup() as tg:
        runs = [
            tg.create_task(_free_running(session, at, stop))
            for session, at in zip(sessions, starts, strict=False)
        ]
    return all(task.result() for task in runs)


async def _spawn_and_prepare(session: Session, turn: int, stop: asyncio.Event) -> None:
    """Run the sub-agents turn ``turn`` spawns (if any), then size the turn."""
    await spawn(session, turn, stop)
    await session.prepare(turn)


def share_openings(sessions: dict[int, Session], sizing: CellSizing, order: OpeningOrder) -> None:
    """Turn 1's shareable prefix: with nonce = "run", the part of its opening this session
    has in common with another session of the repetition (0 alone, or with nonce = "session").
    ``sessions``: by index, each with the next one (wrapping round) among them.
    """
    users = sizing.scenario.users
    if sizing.scenario.nonce != "run" or users < 2:
        return
    for i, session in sessions.items():
        session.order = order  # who has sent turn 1: the first finds nothing of the others
        other = sessions.get((i + 1) % users)
        if other is not None:  # else the neighbour opened only for its ids
            share_opening(session, other, sizing)


def share_opening(session: Session, other: Session, sizing: CellSizing) -> None:
    """Set ``session``'s turn-1 shareable prefix: the part of its opening ``other``'s has
    too (both opened; in estimated tokens, corrected as the warm-up taught)."""
    scale = 1.0 if sizing.exact else sizing.scale.get(1, 1.0)
    common = tokens.common_prefix_length(session.opening_ids, other.opening_ids)
    session.peer_shared = round(common * scale)
    session.peer_shared_exact = session.opening_exact and other.opening_exact


async def _send_at(session: Session, turn: int, due: float, stop: asyncio.Event) -> bool:
    """Send ``turn`` at ``due``; False when stop came first (nothing sent)."""
    late = await sleep_until_or(due, stop)
    if late is None:
        return False
    await session.send(turn, lag_ns=round(late * 1e9))
    return True


async def _free_running(session: Session, start: float, stop: asyncio.Event) -> bool:
    """Every step of one session's plan on its own clock; False when stop left turns unsent.
    A step that spawns sub-agents waits for them instead of a tool time."""
    since = start
    for step in session.plan:
        turn = step.turn
        due = since + step.pause_s
        if turn > 1:  # turn 1 was sized before the repetition started
            if step.children:
                await spawn(session, turn, stop)
                due = time.perf_counter()
            await session.prepare(turn)  # sizing happens inside the think/tool time
        late = await sleep_until_or(due, stop)
        if late is None:
            return False
        await session.send(turn, lag_ns=round(late * 1e9))
        since = time.perf_counter()
    return True
