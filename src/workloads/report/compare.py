"""Compare two RunResults (A/B arms): refuse what is not comparable, and say "not
significant" rather than print a ratio that is noise. Pure.

Matching, as in the seed records' A/B classes, judged per (cell, turn) on the median of the
server's prompt-token count over every measured record that has usage (valid or not: a
failure pattern is not a different workload):

* ``matched`` — every (cell, turn) median is identical;
* ``matched_with_tokenizer_delta`` — they differ by at most 1 % (the largest delta is
  reported);
* otherwise the arms did not run the same workload: :class:`IncomparableError` unless forced.

The scenario (minus its name) and the model must also be equal unless forced (pyperf's
``_CHECKED_METADATA`` idea). A sweep is compared cell by cell, cells matched by (concurrency,
prior tokens); arms with different cells are refused unless forced (then the common cells are
compared).

The figures are the report's (:mod:`workloads.core.aggregate`): per repetition, the run figures of
:func:`aggregate.repetitions`, banded over repetitions; per turn, the turn's aggregate band. A
difference counts as significant only when each arm has at least two repetitions and the
arms' per-repetition values do not overlap at all (their min–max bands are disjoint): with
three repetitions a side that is the honest test, and with one a single point never overlaps.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from workloads.core import aggregate, stats
from workloads.core.aggregate import RepetitionFigures
from workloads.model.errors import IncomparableError
from workloads.model.records import TurnRecord
from workloads.model.results import RunResult
from workloads.model.summary import BandSummary
from workloads.report.table import ReportTable
from workloads.report.text import format_band

__all__ = ["Comparison", "MetricComparison", "compare", "comparison_table"]

MatchClass = Literal["matched", "matched_with_tokenizer_delta", "unmatched"]
TOKENIZER_DELTA_LIMIT = 0.01
MIN_REPETITIONS = 2  # per arm, for a difference to be called significant

Coordinate = tuple[int, int]  # (concurrency, prior tokens)


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
    def enough(self) -> bool:
        """Both arms have at least MIN_REPETITIONS values."""
        return (
            self.a is not None and self.b is not None
            and min(self.a.n, self.b.n) >= MIN_REPETITIONS
        )

    @property
    def significant(self) -> bool:
        if self.a is None or self.b is None or not self.enough:
            return False
        return self.a.high < self.b.low or self.b.high < self.a.low

    @property
    def verdict(self) -> str:
        ratio = self.ratio
        if ratio is None or self.a is None or self.b is None:
            return "not reported"
        if round(ratio, 2) == 1.0:
            return "no difference"
        if not self.enough:
            return f"too few repetitions (n={min(self.a.n, self.b.n)})"
        if not self.significant:
            return "not significant"
        better = (ratio > 1) == self.higher_is_better
        return f"{ratio:.2f}x ({(ratio - 1):+.1%}) {'better' if better else 'worse'}"


@dataclass(frozen=True)
class Comparison:
    """The outcome of :func:`compare`: match class, problems overridden, per-metric rows."""

    match: MatchClass
    prompt_delta_tokens: float  # the largest per-(cell, turn) median prompt difference, B − A
    prompt_tokens_a: float  # A's median prompt tokens where that difference is
    prompt_delta_fraction: float  # |delta| / prompt_tokens_a
    forced_over: list[str]
    metrics: list[MetricComparison]
    prompt_delta_at: str = ""  # where the largest difference is, e.g. "turn 2"


@dataclass(frozen=True)
class _Cell:
    index: int
    users: int
    records: list[TurnRecord]


def _cells(result: RunResult) -> dict[Coordinate, _Cell]:
    """The result's cells by (concurrency, prior tokens), each with its measured records."""
    by_cell: dict[int, list[TurnRecord]] = defaultdict(list)
    for r in result.records:
        if not r.warmup:
            by_cell[r.cell].append(r)
    return {
        (c.concurrency, c.prior_tokens): _Cell(c.index, c.concurrency, by_cell.get(c.index, []))
        for c in result.scenario.cells()
    }


def _where(coordinate: Coordinate, swept: bool) -> str:
    return f"C{coordinate[0]} · prior {coordinate[1]:,} · " if swept else ""


def _prompt_medians(records: list[TurnRecord]) -> dict[int, float]:
    """Per turn: the median server prompt-token count over every record that has one."""
    by_turn: dict[int, list[float | None]] = defaultdict(list)
    for r in records:
        if r.prompt_tokens is not None:
            by_turn[r.turn].append(r.prompt_tokens)
    out = {}
    for turn, values in by_turn.items():
        m = stats.median(values)
        if m is not None:
            out[turn] = m
    return out


def _scenario_differences(a: RunResult, b: RunResult) -> list[str]:
    # Repetition counts may differ between arms: more repetitions is more evidence, not a
    # different workload.
    skip = {"name", "description", "repetitions"}
    da = a.scenario.model_dump(exclude=skip)
    db = b.scenario.model_dump(exclude=skip)
    return [f"scenario field {k!r}: {da[k]!r} vs {db[k]!r}" for k in da if da[k] != db.get(k)]


def _run_metrics(prefix: str, a: _Cell, b: _Cell) -> list[MetricComparison]:
    ra = aggregate.repetitions(a.records, users=a.users)
    rb = aggregate.repetitions(b.records, users=b.users)

    def row(name: str, unit: str, get: Callable[[RepetitionFigures], float | None],
            higher: bool) -> MetricComparison:
        return MetricComparison(
            prefix + name, unit, stats.band(map(get, ra)), stats.band(map(get, rb)),
            higher,
        )

    metrics = [
        row("aggregate", "tok/s", lambda f: f.aggregate_rate, True),
        row("per-user median", "tok/s", lambda f: f.per_user_rate, True),
        row("wall aggregate", "tok/s", lambda f: f.wall_aggregate_rate, True),
        row("TTFT median", "s", lambda f: f.ttft_s, False),
    ]
    ta = {t.turn: t for t in aggregate.summarize(a.records, users=a.users).turns}
    tb = {t.turn: t for t in aggregate.summarize(b.records, users=b.users).turns}
    for turn in sorted(ta.keys() | tb.keys()):
        x, y = ta.get(turn), tb.get(turn)
        metrics.append(
            MetricComparison(
                f"{prefix}turn {turn} aggregate", "tok/s",
                x.aggregate_rate if x else None, y.aggregate_rate if y else None, True,
            )
        )
    return metrics


def compare(a: RunResult, b: RunResult, *, force: bool = False) -> Comparison:
    """Compare arm ``a`` (baseline) with arm ``b``. Raises IncomparableError unless forced."""
    problems = _scenario_differences(a, b)
    if a.target.model != b.target.model:
        problems.append(f"model: {a.target.model!r} vs {b.target.model!r}")
    cells_a, cells_b = _cells(a), _cells(b)
    swept = a.scenario.swept or b.scenario.swept
    common = [c for c in cells_a if c in cells_b]
    only = [f"{name} only: {', '.join(_where(c, True).rstrip(' ·') for c in cells)}"
            for name, cells in (("A", [c for c in cells_a if c not in cells_b]),
                                ("B", [c for c in cells_b if c not in cells_a])) if cells]
    if only:
        problems.append("the arms have different cells (" + "; ".join(only) + ")")

    # Matching: per (cell, turn) median prompt tokens.
    largest = (0.0, 0.0, -1.0, "")  # delta, A's tokens, fraction, where
    missing: list[str] = []
    for coordinate in common:
        pa = _prompt_medians(cells_a[coordinate].records)
        pb = _prompt_medians(cells_b[coordinate].records)
        for turn in sorted(pa.keys() | pb.keys()):
            where = f"{_where(coordinate, swept)}turn {turn}"
            if turn not in pa or turn not in pb:
                missing.append(f"{where} ({'A' if turn not in pa else 'B'})")
                continue
            delta = pb[turn] - pa[turn]
            fraction = abs(delta) / pa[turn] if pa[turn] else (0.0 if delta == 0 else 1.0)
            if fraction > largest[2]:
                largest = (delta, pa[turn], fraction, where)
    delta, tokens_a, fraction, where = largest
    fraction = max(fraction, 0.0)
    match: MatchClass
    if missing or not where:
        match = "unmatched"
        problems.append(
            "no prompt-token counts to match for "
            + (", ".join(missing) if missing else "any measured turn")
        )
    elif delta == 0 and fraction == 0:
        match = "matched"
    elif fraction <= TOKENIZER_DELTA_LIMIT:
        match = "matched_with_tokenizer_delta"
    else:
        match = "unmatched"
    if match == "unmatched" and where:
        problems.append(
            f"median prompt tokens differ by up to {delta:+,.1f} at {where} ({fraction:.3%}; "
            f"limit {TOKENIZER_DELTA_LIMIT:.0%}): the arms did not send the same workload"
        )
    if problems and not force:
        raise IncomparableError(
            "results are not comparable: " + "; ".join(problems) + " (use --force to compare "
            "anyway; the output will say so)"
        )
    metrics: list[MetricComparison] = []
    for coordinate in common:
        metrics += _run_metrics(
            _where(coordinate, swept), cells_a[coordinate], cells_b[coordinate]
        )
    return Comparison(
        match=match,
        prompt_delta_tokens=delta,
        prompt_tokens_a=tokens_a,
        prompt_delta_fraction=fraction,
        forced_over=problems,
        metrics=metrics,
        prompt_delta_at=where,
    )


def comparison_table(result: Comparison) -> ReportTable:
    """The figures of a comparison as a report table (the console reflows it to any width;
    the verdict column wraps at spaces)."""
    table = ReportTable(
        "median over measured repetitions (min–max); significant only with ≥ 2 repetitions a "
        "side whose ranges do not overlap",
        ["figure", "A", "B", "B vs A"], name="compare", left=(3,),
    )
    for m in result.metrics:
        table.add_row(f"{m.name} ({m.unit})", format_band(m.a), format_band(m.b), m.verdict)
    return table
