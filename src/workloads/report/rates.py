"""The per-turn throughput figures and their names, in one place for every export: the
console's columns (and so ``show --format md`` and the HTML tables), the CSV's columns, the
axes of ``rates.png`` and the HTML caption under it. One name, one definition:

* lock-step (a barrier per turn): a turn's streams run together, so the Σ of their post-first
  rates is the server's throughput over the turn: the **aggregate** (``aggregate tok/s``;
  CSV ``aggregate_tok_s_*``), then the wall throughput and the per-user median;
* free or arrivals pacing: the streams need not overlap, so the **wall throughput** leads
  (``wall tok/s``; CSV ``wall_tok_s_*``) and the Σ keeps its † name (``Σ streams tok/s †``;
  CSV ``streams_sum_tok_s_*``), never "aggregate".

In lock-step the aggregate presumes that the streams decoded together; where they did not (a
server that queued some: the decode overlap under ``LOW_DECODE_OVERLAP``) it carries the mark
‡ (:data:`OVERSTATES`) with :func:`overstates_note` saying why, and the headline and
``compare`` lead with the wall throughput.

CSV and JSON names carry no †: they are identifiers, with no footnote to point to (and a
spreadsheet that opens the CSV as Latin-1 garbles the mark); their words say what it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from workloads.core.concurrency import LOW_DECODE_OVERLAP
from workloads.model.results import RunResult
from workloads.model.summary import BandSummary, TurnSummary

__all__ = [
    "AGGREGATE",
    "OVERSTATES",
    "PER_USER",
    "STREAMS_SUM",
    "WALL",
    "Rate",
    "dagger_note",
    "free_pacing",
    "low_overlap",
    "overstates_note",
    "turn_rates",
]


@dataclass(frozen=True)
class Rate:
    """One per-turn throughput figure: its console column (also the plot's axis), its CSV
    column stem, what it is in a few words, and where the summary keeps it."""

    label: str  # "wall tok/s"
    key: str  # "wall_tok_s": CSV columns key_median, key_low, key_high
    meaning: str  # "Σ tokens / the turn's span"
    read: Callable[[TurnSummary], BandSummary | None]
    summed: bool = False  # a Σ over every stream: left out (*) when fewer were valid


AGGREGATE = Rate(
    "aggregate tok/s",
    "aggregate_tok_s",
    "Σ of the streams' post-first rates",
    lambda t: t.aggregate_rate,
    summed=True,
)
STREAMS_SUM = Rate(
    "Σ streams tok/s †",
    "streams_sum_tok_s",
    "Σ of the streams' post-first rates; overstates throughput",
    lambda t: t.streams_sum_rate,
    summed=True,
)
WALL = Rate(
    "wall tok/s", "wall_tok_s", "Σ tokens / the turn's span", lambda t: t.wall_aggregate_rate
)
PER_USER = Rate(
    "per-user tok/s", "per_user_tok_s", "median over sessions", lambda t: t.per_user_rate
)


def free_pacing(result: RunResult) -> bool:
    """True with free or arrivals pacing: a turn's streams need not overlap in time."""
    return result.scenario.pacing.mode != "lockstep"


def turn_rates(result: RunResult) -> list[Rate]:
    """The per-turn throughput figures of ``result`` in report order: the aggregate first in
    lock-step, the wall throughput first (and the Σ under its † name) otherwise; a fleet's
    per-user rate alone (its turn N is every session's N-th step, whenever it came: a Σ or a
    span over them measures nothing; its wall throughput is the windows', in the headline)."""
    if result.scenario.fleet is not None:
        return [PER_USER]
    if free_pacing(result):
        return [WALL, STREAMS_SUM, PER_USER]
    return [AGGREGATE, WALL, PER_USER]


def dagger_note(result: RunResult) -> str | None:
    """The footnote of the † figure; None in lock-step and in a fleet, which have none."""
    if not free_pacing(result) or result.scenario.fleet is not None:
        return None
    return (
        f"† {result.scenario.pacing.mode} pacing: a turn's streams need not overlap in "
        "time, so their Σ overstates throughput; wall tok/s = Σ tokens / the turn's span"
    )


OVERSTATES = "‡"  # an aggregate over streams that did not decode together


def low_overlap(overlap: float | None) -> bool:
    """Whether a decode overlap is low enough that the aggregate overstates (None: not
    known, or one stream: never)."""
    return overlap is not None and overlap < LOW_DECODE_OVERLAP


def overstates_note(overlap: float, decoding: float | None, users: int, *, where: str = "") -> str:
    """Why an aggregate carries :data:`OVERSTATES`, with the figures that say so; ``where``
    names the turns it stands for ("turn 2: ")."""
    at_once = f", {decoding:.1f} of {users} decoding at a time" if decoding is not None else ""
    return (
        f"{OVERSTATES} {where}the streams decoded together {overlap:.0%} of their decode "
        f"time{at_once} (under {LOW_DECODE_OVERLAP:.0%} marks it): the server did not run "
        "them at once, and a stream decodes faster alone, so the Σ of their rates "
        "overstates what it delivered; read the wall throughput (Σ tokens / span)"
    )
