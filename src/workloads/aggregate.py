"""From TurnRecords to the figures people read: per turn and per run. Pure.

Definitions (see docs/architecture.md; the seed records use the same):

* per-turn aggregate rate — Σ over sessions of their post-first rates in that turn, taken per
  repetition; the summary is the median over measured repetitions with the min–max band;
* wall aggregate rate — Σ completion tokens / (last content − first send) of the turn;
* per-user rate — median over sessions (per repetition, then banded over repetitions);
* prefill rate — prompt_tokens / TTFT; uncached prefill — (prompt − cached) / TTFT;
* cache effectiveness — Σ cached_tokens / Σ shareable_tokens.

Only valid turns enter the rates; invalid and failed turns are counted and shown. Warm-up
turns never enter any figure here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict

from workloads import stats
from workloads.records import TurnRecord

__all__ = ["BandSummary", "RunSummary", "Summary", "TurnSummary", "summarize"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class BandSummary(_Model):
    """Median with min–max, over ``n`` values."""

    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float | None]) -> BandSummary | None:
        b = stats.band(list(values))
        return None if b is None else cls(median=b.median, low=b.low, high=b.high, n=b.n)


class TurnSummary(_Model):
    """The figures of one turn number over all measured repetitions and sessions."""

    turn: int
    configured_prior_tokens: int
    configured_prompt_tokens: int | None = None  # prior + turn_tokens; None in old results
    records: int
    valid: int
    invalid: int  # finished but not valid (wrong length or finish reason)
    errors: int  # status error or incomplete
    aggregate_rate: BandSummary | None  # tok/s, Σ per-stream post-first rates, over reps
    wall_aggregate_rate: BandSummary | None
    per_user_rate: BandSummary | None  # tok/s, median over sessions, banded over reps
    ttft_s: BandSummary | None  # over every valid record of the turn
    prefill_rate: BandSummary | None  # prompt tokens / TTFT
    uncached_prefill_rate: BandSummary | None  # (prompt - cached) / TTFT
    prompt_tokens: BandSummary | None
    completion_tokens: BandSummary | None
    cached_tokens: BandSummary | None  # None: not reported by the server
    shareable_tokens: BandSummary | None
    shareable_exact: bool
    cache_effectiveness: float | None  # Σ cached / Σ shareable; None if either unknown
    resends: int


class RunSummary(_Model):
    """The run's headline: per-user median rate over every valid measured turn, and
    users × that median (the seed records' "5 × 25.5 = 127.5 aggregate")."""

    users: int
    measured_repetitions: int
    records: int
    valid: int
    invalid: int
    errors: int
    warmup_records: int
    per_user_rate: float | None  # median over every valid measured record
    aggregate_rate: float | None  # users × per-user median (the seed's headline figure)
    turn_aggregate_rate: BandSummary | None  # the per-turn aggregate medians, banded
    ttft_s: BandSummary | None
    completion_tokens: int  # Σ over measured records


class Summary(_Model):
    """Per-turn summaries and the run summary; recomputed from records by ``show``."""

    turns: list[TurnSummary]
    run: RunSummary


def _ttft_s(r: TurnRecord) -> float | None:
    return None if r.ttft_ns is None or r.ttft_ns <= 0 else r.ttft_ns / 1e9


def _per_rep(records: Sequence[TurnRecord]) -> dict[int, list[TurnRecord]]:
    groups: dict[int, list[TurnRecord]] = defaultdict(list)
    for r in records:
        groups[r.repetition].append(r)
    return groups


def _wall_rate(records: Sequence[TurnRecord]) -> float | None:
    ends = [r.last_content_ns for r in records if r.last_content_ns is not None]
    starts = [r.sent_ns for r in records if r.sent_ns is not None]
    tokens = sum(r.completion_tokens or 0 for r in records)
    if not ends or not starts or max(ends) <= min(starts):
        return None
    return tokens / ((max(ends) - min(starts)) / 1e9)


def _turn_summary(turn: int, records: Sequence[TurnRecord]) -> TurnSummary:
    valid = [r for r in records if r.valid]
    finished = [r for r in records if r.status == "ok"]
    by_rep = _per_rep(valid)
    aggregate = [
        sum(r.decode_tokens_per_s for r in reps if r.decode_tokens_per_s is not None)
        for reps in by_rep.values()
    ]
    per_user = [stats.median(r.decode_tokens_per_s for r in reps) for reps in by_rep.values()]
    prefill = [
        r.prompt_tokens / t for r in valid if (t := _ttft_s(r)) and r.prompt_tokens is not None
    ]
    uncached = [
        (r.prompt_tokens - r.cached_tokens) / t
        for r in valid
        if (t := _ttft_s(r)) and r.prompt_tokens is not None and r.cached_tokens is not None
    ]
    cached_known = [r for r in valid if r.cached_tokens is not None]
    shareable_sum = sum(r.shareable_tokens or 0 for r in valid)
    effectiveness = None
    if valid and len(cached_known) == len(valid) and shareable_sum > 0:
        effectiveness = sum(r.cached_tokens or 0 for r in valid) / shareable_sum
    return TurnSummary(
        turn=turn,
        configured_prior_tokens=records[0].configured_prior_tokens,
        configured_prompt_tokens=records[0].configured_prompt_tokens,
        records=len(records),
        valid=len(valid),
        invalid=len(finished) - len(valid),
        errors=len(records) - len(finished),
        aggregate_rate=BandSummary.of(aggregate),
        wall_aggregate_rate=BandSummary.of(_wall_rate(reps) for reps in by_rep.values()),
        per_user_rate=BandSummary.of(per_user),
        ttft_s=BandSummary.of(_ttft_s(r) for r in valid),
        prefill_rate=BandSummary.of(prefill),
        uncached_prefill_rate=BandSummary.of(uncached),
        prompt_tokens=BandSummary.of(r.prompt_tokens for r in valid),
        completion_tokens=BandSummary.of(r.completion_tokens for r in valid),
        cached_tokens=BandSummary.of(r.cached_tokens for r in cached_known),
        shareable_tokens=BandSummary.of(r.shareable_tokens for r in valid),
        shareable_exact=bool(valid) and all(r.shareable_exact for r in valid),
        cache_effectiveness=effectiveness,
        resends=sum(r.resends for r in records),
    )


def summarize(records: Iterable[TurnRecord], *, users: int) -> Summary:
    """Summaries of the measured (non-warm-up) records."""
    everything = list(records)
    measured = [r for r in everything if not r.warmup]
    by_turn: dict[int, list[TurnRecord]] = defaultdict(list)
    for r in measured:
        by_turn[r.turn].append(r)
    turns = [_turn_summary(t, by_turn[t]) for t in sorted(by_turn)]
    valid = [r for r in measured if r.valid]
    finished = [r for r in measured if r.status == "ok"]
    per_user = stats.median(r.decode_tokens_per_s for r in valid)
    run = RunSummary(
        users=users,
        measured_repetitions=len({r.repetition for r in measured}),
        records=len(measured),
        valid=len(valid),
        invalid=len(finished) - len(valid),
        errors=len(measured) - len(finished),
        warmup_records=len(everything) - len(measured),
        per_user_rate=per_user,
        aggregate_rate=None if per_user is None else users * per_user,
        turn_aggregate_rate=BandSummary.of(
            t.aggregate_rate.median if t.aggregate_rate else None for t in turns
        ),
        ttft_s=BandSummary.of(_ttft_s(r) for r in valid),
        completion_tokens=sum(r.completion_tokens or 0 for r in measured),
    )
    return Summary(turns=turns, run=run)
