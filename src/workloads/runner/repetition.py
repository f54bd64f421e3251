"""One repetition of a cell: fresh nonces, every session's opening sized, then the turns sent
on the scenario's pacing (lock-step barriers, or free-running sessions).

Split in two so the caller decides what happens in between: :func:`open_sessions` does all
the sizing (tokenizer calls, untimed), :func:`play` sends. The run opens a cell's measured
window between the two, so no ``/tokenize`` call of the first measured repetition is inside it.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from workloads.core import tokens
from workloads.core.clock import sleep_until_or
from workloads.core.conversation import Conversation, make_nonces, probe_nonce
from workloads.core.corpus import Corpus
from workloads.model.records import TurnRecord
from workloads.model.results import RepetitionNonces
from workloads.model.scenario import Cell, Scenario
from workloads.runner.pacing import arrival_times, turn_deadline
from workloads.runner.session import Exchange, Session
from workloads.runner.sizing import CellSizing
from workloads.wire.client import ChatClient

__all__ = ["Repetition", "open_sessions", "play"]


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
    client: ChatClient,
    model: str,
    on_record: Callable[[TurnRecord], None],
    on_exchange: Exchange | None = None,
) -> tuple[list[Session], RepetitionNonces]:
    """The repetition's sessions, each with its opening sized and turn 1 prepared; nothing
    sent yet. Also the nonces drawn for it (the result records them)."""
    s = sizing.scenario
    cell = repetition.cell.index
    nonces = make_nonces(entropy, cell=cell, repetition=repetition.index, users=s.users,
                         mode=s.nonce)
    record = RepetitionNonces(
        cell=cell, repetition=repetition.index, warmup=repetition.warmup,
        run_nonce=nonces.run, sessions=nonces.sessions,
    )
    conversations = [
        Conversation(
            corpus=corpus, style=s.content.style, seed=s.content.seed, session=i,
            nonce=nonces.sessions[i], run_nonce=nonces.run,
        )
        for i in range(s.users)
    ]
    n_system = 0
    if s.opening_tokens > 0:
        n_system = await sizing.fit_shared(conversations[0], probe_nonce(nonces))
    sessions = [
        Session(
            client=client, scenario=s, model=model, conversation=conversation, sizing=sizing,
            repetition=repetition.index, warmup=repetition.warmup, on_record=on_record,
            cell=cell, on_exchange=on_exchange,
        )
        for conversation in conversations
    ]
    async with asyncio.TaskGroup() as tg:
        for session in sessions:
            tg.create_task(session.open(n_system))
    _share_openings(sessions, sizing)
    async with asyncio.TaskGroup() as tg:  # turn 1 sized before anything is sent
        for session in sessions:
            tg.create_task(session.prepare(1))
    return sessions, record


async def play(
    sessions: list[Session],
    repetition: Repetition,
    scenario: Scenario,
    corpus: Corpus,
    *,
    stop: asyncio.Event | None = None,  # once set, no turn starts (in-flight ones go on)
) -> bool:
    """Send every turn of ``sessions`` on the scenario's pacing; False when ``stop`` left
    turns unsent."""
    s = scenario
    stop = stop if stop is not None else asyncio.Event()
    rngs = [
        corpus.rng(s.content.seed, "pacing", repetition.cell.index, repetition.index, i)
        for i in range(s.users)
    ]
    if s.pacing.mode == "lockstep":
        for turn in range(1, s.turns + 1):
            if stop.is_set():
                return False
            if turn > 1:
                async with asyncio.TaskGroup() as tg:  # every session sized before any sends
                    for session in sessions:
                        tg.create_task(session.prepare(turn))
            barrier = time.perf_counter()
            async with asyncio.TaskGroup() as tg:  # the barrier: all of turn k, then k+1
                sends = []
                for session, rng in zip(sessions, rngs, strict=True):
                    due = turn_deadline(barrier, s.pacing, turn, rng)
                    sends.append(tg.create_task(_send_at(session, turn, due, stop)))
            if not all(task.result() for task in sends):
                return False
        return True
    start = time.perf_counter()
    starts = [start] * len(sessions)
    if s.pacing.arrivals is not None:  # an open-loop fleet: each session has its arrival
        times = arrival_times(
            s.pacing.arrivals, len(sessions),
            corpus.rng(s.content.seed, "arrivals", repetition.cell.index, repetition.index),
        )
        starts = [start + at for at in times]  # sessions past the last arrival never start
    async with asyncio.TaskGroup() as tg:
        runs = [
            tg.create_task(_free_running(session, s, at, rng, stop))
            for session, rng, at in zip(sessions, rngs, starts, strict=False)
        ]
    return all(task.result() for task in runs)


def _share_openings(sessions: list[Session], sizing: CellSizing) -> None:
    """Turn 1's shareable prefix: with nonce = "run", the part of its opening this session
    has in common with another session of the repetition (0 alone, or with nonce = "session").
    """
    if sizing.scenario.nonce != "run" or len(sessions) < 2:
        return
    scale = 1.0 if sizing.exact else sizing.scale.get(1, 1.0)
    arrivals: list[int] = []  # who has sent turn 1, shared: the first has nothing seen
    for i, session in enumerate(sessions):
        session.arrivals = arrivals
        other = sessions[(i + 1) % len(sessions)]
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


async def _free_running(
    session: Session, scenario: Scenario, start: float, rng: random.Random,
    stop: asyncio.Event,
) -> bool:
    """Every turn of one session on its own clock; False when stop left turns unsent."""
    since = start
    for turn in range(1, scenario.turns + 1):
        due = turn_deadline(since, scenario.pacing, turn, rng)
        if turn > 1:  # turn 1 was sized before the repetition started
            await session.prepare(turn)  # sizing happens inside the think/tool time
        late = await sleep_until_or(due, stop)
        if late is None:
            return False
        await session.send(turn, lag_ns=round(late * 1e9))
        since = time.perf_counter()
    return True
