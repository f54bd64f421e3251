"""The saved goodput of a run against its SLO (:mod:`workloads.core.goodput` computes it):
which requests and sessions met the SLO, per repetition, turn and step kind, and the
run-level checks of each limit at the SLO's percentile."""

from __future__ import annotations

from typing import Literal

from workloads.model.base import Frozen
from workloads.model.records import StepKind
from workloads.model.slo import Limit, Slo
from workloads.model.summary import BandSummary

__all__ = ["Goodput", "KindGoodput", "RepetitionGoodput", "SloCheck", "TurnGoodput"]


class RepetitionGoodput(Frozen):
    """One measured (cell, repetition): its requests and sessions, and those that met."""

    cell: int
    repetition: int
    requests: int
    met: int
    sessions: int  # the users' sessions (a sub-agent's steps count toward its user's)
    good_sessions: int  # every step met the SLO
    met_tokens: int  # completion tokens of the requests that met
    span_s: float | None  # first send → last stream end; None: unknown (several clocks)


class TurnGoodput(Frozen):
    """One turn number of the users' own sessions, over the measured repetitions."""

    turn: int
    requests: int
    met: int
    # Sessions that played this turn, and those whose every step up to and including it
    # met the SLO (sub-agents' steps are not on the users' turn axis: the run figures
    # count them).
    sessions: int
    good_through: int


class KindGoodput(Frozen):
    """One step kind: its measured requests and those that met its limits."""

    kind: StepKind
    requests: int
    met: int


class SloCheck(Frozen):
    """A run-level check of one limit, judged as MLPerf LoadGen judges a latency
    percentile: is the ``percentile``-th percentile of ``figure`` over the measured requests
    (of one step kind, or all: ``kind`` None) within ``limit``? A failed request counts as
    over every limit. ``low`` and ``high`` are one-sided 95% bounds of that percentile from
    order statistics (None: no bound: too few requests, or a failed request there);
    ``verdict`` "holds" when ``high`` is within the limit, "fails" when ``low`` is past it,
    else "cannot tell"."""

    figure: Limit
    kind: StepKind | None
    limit: float
    percentile: float
    n: int  # requests judged
    over: int  # of them over the limit (failed ones included)
    low: float | None
    high: float | None
    verdict: Literal["holds", "fails", "cannot tell"]


class Goodput(Frozen):
    """The run against its SLO. A request **meets** the SLO when it is valid and every limit
    for its step kind holds; a **good session** is one whose every step (its sub-agents'
    included) met. Rates are per measured repetition (met requests, and their completion
    tokens, over the repetition's span), banded."""

    slo: Slo
    requests: int
    met: int
    sessions: int
    good_sessions: int
    request_rate: BandSummary | None  # requests that met / s
    token_rate: BandSummary | None  # completion tokens of the requests that met / s
    repetitions: list[RepetitionGoodput]
    turns: list[TurnGoodput]
    kinds: list[KindGoodput] | None  # None: the records carry no step kinds
    checks: list[SloCheck]

    @property
    def share(self) -> float | None:
        """Share of measured requests that met the SLO (None: no request)."""
        return self.met / self.requests if self.requests else None

    @property
    def session_share(self) -> float | None:
        """Session goodput: the share of sessions whose every step met (None: none)."""
        return self.good_sessions / self.sessions if self.sessions else None
