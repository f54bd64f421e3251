"""What one session carries from turn to turn, as values, and the pure rules on them.

* :class:`Seen` — what the *server* has computed KV for, of this session: the last prompt
  that reached it (HTTP 200 and prefill done) and its reply. A turn rejected with 429/500 or
  never connected leaves it unchanged: it adds nothing the next turn could reuse.
* :class:`LastTurn` — what this session *sent* last: its record, its prompt's length (in the
  units of the tokenizer used) and the reply text that went into the history.
* :class:`TurnPlan` — a turn ready to send: its sized messages and its shareable prefix.

:func:`turn_base` and :func:`observation` are the sizing rules that need only these values;
the tokenizer calls live in :mod:`workloads.runner.sizing` and the session.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from workloads.core import tokens
from workloads.model.records import TurnRecord
from workloads.runner.sizing import PreparedTurn

__all__ = ["LastTurn", "Seen", "TurnPlan", "estimated_shareable", "observation", "turn_base"]


@dataclass(frozen=True)
class Seen:
    """The last prompt of this session that reached the server, and its reply."""

    ids: array[int] = field(default_factory=lambda: array("i"))  # when exact (PreparedTurn)
    exact: bool = False  # ids are the target's own
    reply: str = ""
    tokens: int = 0  # the prompt's length (0: nothing of this session reached the server)


@dataclass(frozen=True)
class LastTurn:
    """This session's previous turn as sent (None record: no turn yet)."""

    record: TurnRecord | None = None
    tokens: int = 0  # the prompt's length, in the units of the tokenizer used
    exact: bool = False
    reply: str = ""


@dataclass(frozen=True)
class TurnPlan:
    """A sized turn and what of its prompt the server has already seen."""

    prepared: PreparedTurn
    shareable: int | None  # None: not known
    shareable_exact: bool


def turn_base(
    turn: int, last: LastTurn, *, opening: int, opening_exact: bool, sizing_exact: bool
) -> tuple[int | None, bool]:
    """What the server has seen before turn ``turn`` in the units sizing will count in, and
    whether to count exactly (the target's tokenizer). ``opening``: the opening's length.
    Base None: the units changed (a /tokenize call failed on the last turn), so sizing must
    measure the history. Pure."""
    if turn == 1:
        return opening, opening_exact
    exact = sizing_exact and last.exact
    record = last.record
    if exact and record is not None and record.completion_tokens is not None:
        return last.tokens + record.completion_tokens, True
    if not exact and not last.exact:
        return last.tokens + tokens.count(last.reply), False
    return None, exact


def estimated_shareable(last: LastTurn) -> int | None:
    """Without exact ids: the previous turn's usage prompt + completion tokens. Pure."""
    record = last.record
    if record is None or record.prompt_tokens is None or record.completion_tokens is None:
        return None
    return record.prompt_tokens + record.completion_tokens


def observation(
    turn: int, session: int, prepared: PreparedTurn, record: TurnRecord, last: LastTurn
) -> tuple[int, int, int, int] | None:
    """``(session, turn, actual added tokens, estimated added)`` for the warm-up correction
    of estimate sizing; None when the turn was sized exactly or its count is unknown. Pure."""
    if prepared.exact or record.prompt_tokens is None:
        return None
    estimated = prepared.tokens - (0 if turn == 1 else prepared.base)
    seen = 0
    if turn > 1:
        before = estimated_shareable(last)
        if before is None:
            return None
        seen = before
    return (session, turn, record.prompt_tokens - seen, estimated)
