"""Compare two RunResults (A/B arms): refuse what is not comparable, and say "not
significant" rather than print a ratio that is noise. Pure.

Matching, as in the seed records' A/B classes:

* ``matched`` — the arms' measured prompts have identical actual token counts;
* ``matched_with_tokenizer_delta`` — they differ by at most 1 % (the delta is reported);
* otherwise the arms did not run the same workload: :class:`IncomparableError` unless forced.

The scenario (minus its name) and the model must also be equal unless forced (pyperf's
``_CHECKED_METADATA`` idea). A difference counts as significant only when the arms'
per-repetition values do not overlap at all (their min–max bands are disjoint): with three
repetitions a side that is the honest test.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Literal

from workloads import stats
from workloads.aggregate import BandSummary
from workloads.errors import IncomparableError
from workloads.results import RunResult

__all__ = ["Comparison", "MetricComparison", "compare"]

MatchClass = Literal["matched", "matched_with_tokenizer_delta", "unmatched"]
TOKENIZER_DELTA_LIMIT = 0.01


@dataclass(frozen=True)
class MetricComparison:
    """One figure of arm A against arm B."""

    name: str
    unit: str
    a: BandSummary | None
    b: BandSummary | None
    higher_is_better: bool

    @property
    def ratio(self) -> float | None:
        if self.a is None or self.b is None or self.a.median == 0:
            return None
        return self.b.median / self.a.median

    @property
    def significant(self) -> bool:
        if self.a is None or self.b is None:
            return False
        return self.a.high < self.b.low or self.b.high < self.a.low

    @property
    def verdict(self) -> str:
        ratio = self.ratio
        if ratio is None:
            return "not reported"
        if not self.significant:
            return "not significant"
        better = (ratio > 1) == self.higher_is_better
        return f"{ratio:.2f}x ({(ratio - 1):+.1%}) {'better' if better else 'worse'}"


@dataclass(frozen=True)
class Comparison:
    """The outcome of :func:`compare`: match class, problems overridden, per-metric rows."""

    match: MatchClass
    prompt_delta_tokens: float  # mean actual prompt tokens per measured turn, B − A
    prompt_tokens_a: float
    prompt_delta_fraction: float
    forced_over: list[str]
    metrics: list[MetricComparison]


def _prompt_mean(result: RunResult) -> float:
    """Mean actual prompt tokens of a measured valid turn (the count of repetitions may
    differ between arms; the shape of each request may not)."""
    values = [r.prompt_tokens for r in result.records if not r.warmup and r.valid]
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else 0.0


def _scenario_differences(a: RunResult, b: RunResult) -> list[str]:
    # Repetition counts may differ between arms: more repetitions is more evidence, not a
    # different workload.
    skip = {"name", "description", "repetitions"}
    da = a.scenario.model_dump(exclude=skip)
    db = b.scenario.model_dump(exclude=skip)
    return [f"scenario field {k!r}: {da[k]!r} vs {db[k]!r}" for k in da if da[k] != db.get(k)]


def _run_bands(result: RunResult) -> dict[str, BandSummary | None]:
    """Run-level figures computed per measured repetition, then banded over repetitions."""
    rates: dict[int, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    ttft: dict[int, list[float]] = defaultdict(list)
    for r in result.records:
        if r.warmup or not r.valid:
            continue
        if r.decode_tokens_per_s is not None:
            rates[r.repetition][r.turn].append(r.decode_tokens_per_s)
        if r.ttft_ns is not None:
            ttft[r.repetition].append(r.ttft_ns / 1e9)
    return {
        # Σ per-stream rates in each turn, median over the turns: one value per repetition.
        "aggregate rate": BandSummary.of(
            stats.median(sum(v) for v in turns.values()) for turns in rates.values()
        ),
        "per-user rate": BandSummary.of(
            stats.median(x for v in turns.values() for x in v) for turns in rates.values()
        ),
        "TTFT": BandSummary.of(stats.median(v) for v in ttft.values()),
    }


def compare(a: RunResult, b: RunResult, *, force: bool = False) -> Comparison:
    """Compare arm ``a`` (baseline) with arm ``b``. Raises IncomparableError unless forced."""
    problems = _scenario_differences(a, b)
    if a.target.model != b.target.model:
        problems.append(f"model: {a.target.model!r} vs {b.target.model!r}")
    pa, pb = _prompt_mean(a), _prompt_mean(b)
    delta = pb - pa
    fraction = abs(delta) / pa if pa else (0.0 if pb == 0 else 1.0)
    match: MatchClass
    if pa and delta == 0:
        match = "matched"
    elif pa and fraction <= TOKENIZER_DELTA_LIMIT:
        match = "matched_with_tokenizer_delta"
    else:
        match = "unmatched"
        problems.append(
            f"mean prompt tokens differ by {delta:+,.1f} ({fraction:.3%}; limit "
            f"{TOKENIZER_DELTA_LIMIT:.0%}): the arms did not send the same workload"
        )
    if problems and not force:
        raise IncomparableError(
            "results are not comparable: " + "; ".join(problems) + " (use --force to compare "
            "anyway; the output will say so)"
        )
    ra, rb = _run_bands(a), _run_bands(b)
    metrics = [
        MetricComparison(
            "aggregate rate", "tok/s", ra["aggregate rate"], rb["aggregate rate"], True
        ),
        MetricComparison("per-user rate", "tok/s", ra["per-user rate"], rb["per-user rate"], True),
        MetricComparison("TTFT", "s", ra["TTFT"], rb["TTFT"], higher_is_better=False),
    ]
    for ta, tb in zip(a.summary.turns, b.summary.turns, strict=False):
        metrics.append(
            MetricComparison(
                f"turn {ta.turn} aggregate", "tok/s", ta.aggregate_rate, tb.aggregate_rate, True
            )
        )
    return Comparison(
        match=match,
        prompt_delta_tokens=delta,
        prompt_tokens_a=pa,
        prompt_delta_fraction=fraction,
        forced_over=problems,
        metrics=metrics,
    )
