"""The failures of a run, by turn and kind, with the first message of each kind: what the
console prints under the report when measured turns failed, and what decides the CLI's exit
code (:func:`failure_rate`).

A failed turn is a measured TurnRecord that is not valid: an error (its ``error_kind``) or a
turn that finished but is not of the requested length or finish reason (``invalid``). A turn
cut off in flight by the end of the run (``cancelled``) did not fail: the summaries count it
apart (``cancelled``), and it is neither listed here nor in the rate.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.table import Table

from workloads.model.records import TurnRecord

__all__ = ["Failure", "failure_rate", "failures", "render_failures"]

# error_message is free text from the server; the table shows its start.
_MESSAGE_CHARS = 100


@dataclass(frozen=True)
class Failure:
    """The failed turns of one turn number and one kind."""

    turn: int
    kind: str  # an error_kind, or "invalid" (finished, but wrong length or finish reason)
    count: int
    first_message: str  # the message of the earliest of them (by the time it was sent)


def _cancelled(record: TurnRecord) -> bool:
    return record.error_kind == "cancelled"


def _kind(record: TurnRecord) -> str:
    return record.error_kind or ("invalid" if record.status == "ok" else record.status)


def _message(record: TurnRecord, output_tokens: int) -> str:
    if record.error_message:
        return record.error_message
    if record.status == "ok":
        asked = record.output_tokens or output_tokens  # a trace's request has its own
        return (
            f"finish_reason {record.finish_reason!r}, {record.completion_tokens} of {asked} tokens"
        )
    return record.status


def failures(records: list[TurnRecord], *, output_tokens: int) -> list[Failure]:
    """The measured records that failed, grouped by (turn, kind), in turn order."""
    groups: dict[tuple[int, str], list[TurnRecord]] = {}
    for record in records:
        if not record.warmup and not record.valid and not _cancelled(record):
            groups.setdefault((record.turn, _kind(record)), []).append(record)
    out = []
    for (turn, kind), members in sorted(groups.items()):
        first = min(members, key=lambda r: r.sent_ns if r.sent_ns is not None else r.started_ns)
        out.append(Failure(turn, kind, len(members), _message(first, output_tokens)))
    return out


def failure_rate(records: list[TurnRecord]) -> float | None:
    """Failed measured turns, as a fraction of the measured turns that were not cancelled
    (None: none)."""
    measured = [r for r in records if not r.warmup and not _cancelled(r)]
    if not measured:
        return None
    return sum(not r.valid for r in measured) / len(measured)


def render_failures(rows: list[Failure], measured: int) -> Table:
    """The failure table: turn, kind, count, first message."""
    failed = sum(row.count for row in rows)
    table = Table(
        "turn",
        "kind",
        "turns",
        "first message",
        title=f"Failed measured turns: {failed} of {measured}",
    )
    for row in rows:
        message = row.first_message.replace("\n", " ")
        if len(message) > _MESSAGE_CHARS:
            message = message[: _MESSAGE_CHARS - 1] + "…"
        table.add_row(str(row.turn), row.kind, str(row.count), message)
    return table
