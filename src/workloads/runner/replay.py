"""Replay: re-send a recorded run's exact message histories, turn by turn, so two arms see
byte-identical prompts and ``compare`` can call them ``matched``.

Each turn sends the messages the recorded run sent for the same (cell, repetition, session,
turn), read from its transcripts: the *recorded* assistant replies stay in the history, not
the new server's. So the prompts are identical whatever the new server answers; what differs
is only what it generates and how fast.

Every replayed prompt is one the recorded run sent, so a target that served the recorded run
may hold all of it: a replayed turn's shareable prefix is its whole prompt (docs/
architecture.md, "Shareable prefix"), and cached tokens never exceed it. Whether the target
did still hold the prompts shows in turn 1, which the result states
(:class:`workloads.model.replay.Replay`, "warm" or "cold").
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from workloads.core.conversation import Conversation
from workloads.core.corpus import Corpus
from workloads.core.replay import turn1_cache
from workloads.core.tokens import Message
from workloads.model.errors import OptionsError, ScenarioError
from workloads.model.replay import Replay
from workloads.model.results import RepetitionNonces, RunResult, read_result
from workloads.model.scenario import Scenario
from workloads.model.transcripts import TRANSCRIPTS_FILE, Transcript, read_transcripts
from workloads.runner.options import SessionIO
from workloads.runner.repetition import Repetition
from workloads.runner.session import Session
from workloads.runner.sizing import CellSizing

__all__ = ["Recording", "load_recording", "replay_sessions"]

TurnKey = tuple[int, int, int, int]  # (cell, repetition, session, turn)


class Recording:
    """A recorded run to replay: its result (scenario, nonces) and its transcripts."""

    def __init__(
        self, result: RunResult, transcripts: dict[TurnKey, Transcript], where: Path
    ) -> None:
        self.result = result
        self.transcripts = transcripts
        self.where = where

    def check(self, scenario: Scenario) -> None:
        """Raise ScenarioError unless ``scenario`` runs the recorded workload and every turn
        it will send is in the transcripts."""
        skip = {"name", "description", "gate"}
        mine = scenario.model_dump(exclude=skip)
        theirs = self.result.scenario.model_dump(exclude=skip)
        differ = [k for k in mine if mine[k] != theirs.get(k)]
        if differ:
            raise ScenarioError(
                f"replay={str(self.where)!r}: the scenario differs from the recorded one in "
                f"{', '.join(differ)}; a replay runs the recorded scenario "
                "(workloads.load_result(DIR).scenario)"
            )
        s = scenario.repetitions
        recorded: dict[tuple[int, int, int], int] = {}  # turns per (cell, rep, session)
        for c, r, u, _ in self.transcripts:
            recorded[(c, r, u)] = recorded.get((c, r, u), 0) + 1
        # An agent's session may play fewer steps than turns (agent.steps_per_session): its
        # turns must run from 1 without a gap; the replay draws the same plan.
        missing = [
            (cell.index, rep, session, turn)
            for cell in scenario.cells()
            for rep in range(s.warmup + s.measured)
            for session in range(cell.concurrency)
            for turn in range(
                1,
                (
                    scenario.turns
                    if scenario.agent is None
                    else max(1, recorded.get((cell.index, rep, session), 0))
                )
                + 1,
            )
            if (cell.index, rep, session, turn) not in self.transcripts
        ]
        if missing:
            c, r, u, t = missing[0]
            raise ScenarioError(
                f"replay={str(self.where)!r}: its transcripts lack {len(missing)} turns "
                f"(first: cell {c}, repetition {r}, session {u}, turn {t}); a replay needs a "
                "complete run made with transcripts"
            )

    def replay(self) -> Replay:
        """What the replay's result says of the recorded run: which it was and its turn 1's
        cache (the replay's own is judged from its records at the end)."""
        return Replay(
            recorded=str(self.where),
            recorded_label=self.result.label,
            recorded_created_unix=self.result.created_unix,
            recorded_turn1=turn1_cache(self.result.records),
        )

    def nonces(self, cell: int, repetition: int) -> RepetitionNonces | None:
        """The recorded repetition's nonces (the prompts carry them)."""
        for n in self.result.nonces:
            if n.cell == cell and n.repetition == repetition:
                return n
        return None


def load_recording(directory: str | Path) -> Recording:
    """The run in ``directory`` (its result.json and transcripts.jsonl), ready to replay."""
    where = Path(directory)
    if not where.exists():
        raise OptionsError(f"replay={str(directory)!r}: no such run directory", option="replay")
    if not where.is_dir():
        where = where.parent
    return Recording(read_result(where), read_transcripts(where / TRANSCRIPTS_FILE), where)


def replay_sessions(
    repetition: Repetition,
    recording: Recording,
    *,
    sizing: CellSizing,
    corpus: Corpus,
    io: SessionIO,
) -> tuple[list[Session], RepetitionNonces]:
    """The repetition's sessions, each scripted with the recorded messages of its turns."""
    s = sizing.scenario
    cell = repetition.cell.index
    recorded = recording.nonces(cell, repetition.index)
    nonces = recorded or RepetitionNonces(
        cell=cell,
        repetition=repetition.index,
        warmup=repetition.warmup,
        run_nonce=None,
        sessions=[""] * s.users,
    )
    sessions = []
    kids: dict[int, dict[int, Sequence[Message]]] = {}  # sub-agents' turns, by session
    for (c, r, session, turn), transcript in recording.transcripts.items():
        if c == cell and r == repetition.index and session >= s.users:
            kids.setdefault(session, {})[turn] = transcript.messages
    for i in range(s.users):
        script: dict[int, Sequence[Message]] = {
            turn: recording.transcripts[(cell, repetition.index, i, turn)].messages
            for turn in range(1, s.turns + 1)
            if (cell, repetition.index, i, turn) in recording.transcripts
        }
        conversation = Conversation(
            corpus=corpus,
            style=s.content.style,
            seed=s.content.seed,
            session=i,
            nonce=nonces.sessions[i] if i < len(nonces.sessions) else "",
            run_nonce=nonces.run_nonce,
        )
        sessions.append(
            Session(
                io=io,
                scenario=s,
                conversation=conversation,
                sizing=sizing,
                repetition=repetition.index,
                warmup=repetition.warmup,
                cell=cell,
                script=script,
                kid_scripts=kids,
            )
        )
    return sessions, nonces
