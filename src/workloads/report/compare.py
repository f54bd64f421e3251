"""Compare two RunResults (A/B arms): refuse what is not comparable, give no verdict for an
arm that is invalid or incomplete, and say "not significant" rather than call a ratio that
is noise. Pure.

Size: past 400 lines: comparability (matching, the variable under test, cell pairing) and
the significance rows read the same two results and are judged together; the arms' own
lines live in :mod:`workloads.report.arms`, the outputs' in :mod:`workloads.report.identity`.

Matching, as in the seed records' A/B classes, judged per (cell, turn):

* ``matched`` — byte-identical prompts: every (repetition, session, turn) both arms measured
  has the same prompt hash (``TurnRecord.prompt_sha256``; ``run --replay`` makes such arms),
  nothing looser;
* ``matched_with_tokenizer_delta`` — the median of the server's prompt-token count (over
  every measured record with usage, valid or not: a failure pattern is not a different
  workload) differs by at most 1 % per (cell, turn) (the largest delta is reported), but the
  prompts are not known to be byte-identical;
* otherwise the arms did not run the same workload: :class:`IncomparableError` unless forced,
  or unless the declared variable under test is what makes the prompts differ.

The scenario (minus its name) and the model must also be equal unless forced (pyperf's
``_CHECKED_METADATA`` idea), except the declared *variable under test* (``variable``): any
scenario field (dotted for a sub-field, ``sampling.temperature``), ``model``, ``cache`` (the
target's prefix cache: a replay on a warm cache against a cold arm), or any other name, e.g.
a server flag, which is then only printed. A field or the model that differs between the
arms also excuses the prompt differences it makes (``opening_tokens``, or a different
tokenizer's counts): they are printed, not refused. Without a variable a sweep is compared
cell by cell, cells matched by (concurrency, prior tokens); with one, cells are paired by
their position in the sweep (``--variable users`` pairs A's 2 users with B's 3). Unpaired
cells are refused unless forced (then the paired cells are compared).

The arms themselves (:mod:`workloads.report.arms`): an arm whose required gate failed
(``invalid_reason``) or that was interrupted (``complete`` false) is named on the first line
and no row gets a verdict unless forced (and then the output says so). A replay on a warm
cache marks the pair "matched prompts, warm cache" unless the variable is ``cache``.
Differing server identities and simulator profiles are listed.

Significance (:func:`workloads.core.stats.ratio_test`): Welch's t on the logarithms of the
per-repetition values, at least 3 repetitions a side ("too few repetitions" otherwise).
Every row prints the ratio of geometric means B/A with its interval and the number of
values per arm, significant or not — "1.03x [0.97-1.10], not significant, n = 3/3" — so
that no effect and too little data do not read the same. Alpha 0.05 is family-wise over the
rows of one comparison (Bonferroni: each of the m tested rows at 0.05 / m, and its interval
at 1 − 0.05 / m): a compare tests a dozen rows or more, and at 0.05 each, two identical arms
would get a chance verdict on some row about half the time (1 − 0.95^12 = 46 %). Bonferroni
rather than Holm so that every printed interval is the test it stands for. A difference
smaller than ``min_effect`` (2 % by default) is "not significant" whatever the test says:
same-host re-runs of one configuration drift by about that much (seed 001 calls a ≤ 1.5 %
effect "inert"), and repetitions inside one run do not see that drift, so the test alone
would call it.

The figures are the report's (:mod:`workloads.core.aggregate`): per repetition, the run
figures of :func:`aggregate.repetitions`; per turn, each repetition's turn figures of
:func:`aggregate.turn_repetitions` (aggregate, TTFT, prefill rate, cache effectiveness).
With free or arrivals pacing a turn's streams need not overlap, so their Σ overstates
throughput: such arms lead with wall throughput, and their Σ rows are "Σ streams †". In
lock-step the same holds where an arm's streams did not decode together (its decode overlap
under ``LOW_DECODE_OVERLAP``: a server that queued some): wall throughput leads and the
aggregate rows carry ‡ with both arms' overlap. Whatever the overlap, a per-stream rate row
(tok/s: aggregate, per-user, prefill) is never called better or worse against a wall
throughput that is significantly the other way: such a row reads "arms disagree", with the
wall throughput and why (a stream decodes faster alone, so per-stream rates rise while the
server delivers less). A figure that is 0 in an arm (a cache that stopped hitting) has no
logarithm: it is tested on its values (:func:`workloads.core.stats.mean_test`), "0.999 →
0.000 … worse", never "too few repetitions".
"""

from __future__ import annotations

import dataclasses
import functools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from workloads.core import aggregate, stats
from workloads.core.aggregate import RepetitionFigures, TurnRepetitionFigures
from workloads.core.concurrency import LOW_DECODE_OVERLAP
from workloads.core.goodput import judge, missing_figure
from workloads.model.errors import IncomparableError
from workloads.model.goodput import Goodput
from workloads.model.records import TurnRecord
from workloads.model.results import RunResult, Window
from workloads.model.summary import BandSummary
from workloads.report.arms import (
    CACHE_VARIABLE,
    arm_problems,
    cache_notes,
    cache_value,
    prediction_line,
    target_differences,
)
from workloads.report.identity import Completions, Identity, correctness, identities, likelihood
from workloads.report.rates import OVERSTATES, low_overlap
from workloads.report.table import Line, ReportTable
from workloads.report.text import format_band

__all__ = [
    "Comparison",
    "MetricComparison",
    "compare",
    "comparison_lines",
    "comparison_table",
    "familywise",
]

MatchClass = Literal["matched", "matched_with_tokenizer_delta", "unmatched"]
Outcome = Literal[
    "better",
    "worse",
    "arms disagree",
    "not significant",
    "too few repetitions",
    "not reported",
    "no verdict",
]
TOKENIZER_DELTA_LIMIT = 0.01
MIN_EFFECT = 0.02  # smaller differences are not called significant (same-host drift)
SUMMED = "Σ streams †"  # the aggregate's name where streams need not overlap (free pacing)

Coordinate = tuple[int, int]  # (concurrency, prior tokens)


@dataclass(frozen=True)
class MetricComparison:
    """One figure of arm A against arm B: bands over repetitions, and the per-repetition
    values the significance test runs on."""

    name: str
    unit: str
    a: BandSummary | None
    b: BandSummary | None
    higher_is_better: bool
    a_values: tuple[float, ...] = ()
    b_values: tuple[float, ...] = ()
    min_effect: float = MIN_EFFECT
    alpha: float = stats.ALPHA  # this row's share of the comparison's family-wise alpha
    withheld: str | None = None  # why no verdict is given ("B invalid"); None: one is
    cell: str = ""  # the row's cell prefix ("" without a sweep): its wall throughput's
    rate: bool = False  # a per-stream rate (tok/s, not the wall throughput)
    # Set when this rate row goes against a significant wall throughput: what the wall
    # throughput says and why they differ. The row then reads "arms disagree".
    disagrees: str | None = None

    @functools.cached_property
    def test(self) -> stats.RatioTest | stats.MeanTest | None:
        """Welch's t on log values, or on the values where an arm has a 0 (no logarithm);
        None with fewer than 3 repetitions a side."""
        if any(v <= 0 for v in (*self.a_values, *self.b_values)):
            return stats.mean_test(self.a_values, self.b_values, alpha=self.alpha)
        return stats.ratio_test(self.a_values, self.b_values, alpha=self.alpha)

    @property
    def ratio(self) -> float | None:
        """B/A: of geometric means when tested, else of medians."""
        if (t := self.test) is not None:
            return t.ratio if t.ratio != float("inf") else None
        if self.a is None or self.b is None or self.a.median == 0:
            return None
        return self.b.median / self.a.median

    @property
    def verdict_figure(self) -> str:
        """The ratio alone, as another row's verdict quotes it: "0.48x"."""
        return "no ratio" if (ratio := self.ratio) is None else f"{ratio:.2f}x"

    @property
    def enough(self) -> bool:
        """Both arms have at least :data:`stats.MIN_REPETITIONS` values."""
        return self.test is not None

    @property
    def significant(self) -> bool:
        t = self.test
        return t is not None and t.significant and abs(t.ratio - 1) >= self.min_effect

    @property
    def n(self) -> tuple[int, int]:
        """Values per arm: the measured repetitions that have this figure (A, B)."""
        return len(self.a_values), len(self.b_values)

    @property
    def direction(self) -> Literal["better", "worse"] | None:
        """The way a significant difference goes, whatever else the row says."""
        t = self.test
        if t is None or not self.significant:
            return None
        return "better" if (t.ratio > 1) == self.higher_is_better else "worse"

    @property
    def outcome(self) -> Outcome:
        """The verdict alone: "better", "worse", "arms disagree" (a per-stream rate against a
        wall throughput that is significantly the other way), "not significant", "too few
        repetitions", "not reported" (an arm has no value) or "no verdict" (an invalid or
        incomplete arm, not forced)."""
        if self.a is None or self.b is None:
            return "not reported"
        if self.withheld:
            return "no verdict"
        if self.test is None:
            return "too few repetitions"
        if (direction := self.direction) is None:
            return "not significant"
        return "arms disagree" if self.disagrees else direction

    @property
    def verdict(self) -> str:
        """The row's last column: ratio, interval, verdict and n per arm, e.g.
        "1.40x [1.31-1.49] (+40.0%) better, n = 3/3" or "1.03x [0.97-1.10], not
        significant, n = 3/3" (a ratio of medians, without interval, under 3 a side)."""
        n = "n = {}/{}".format(*self.n)
        outcome = self.outcome
        if outcome == "not reported":  # no valid turn, nothing shareable, no counter
            where = "A" if self.a is None else "B"
            if self.a is None and self.b is None:
                where = "either arm"
            return f"no value from {where}, {n}"
        t = self.test
        ratio = self.ratio
        if isinstance(t, stats.MeanTest):  # an arm at 0: the values, and B − A's interval
            digits = 3 if self.unit in ("", "s") else 0
            figure = (
                f"{t.mean_a:,.{digits}f} → {t.mean_b:,.{digits}f} "
                f"[B − A {t.low:+,.{digits}f} to {t.high:+,.{digits}f}]"
            )
        else:
            figure = (
                f"{t.ratio:.2f}x [{t.low:.2f}-{t.high:.2f}]"
                if t is not None
                else f"{ratio:.2f}x"
                if ratio is not None
                else "no ratio (A is 0)"
            )
        change = f" ({ratio - 1:+.1%})" if ratio is not None else ""
        if t is not None and outcome == "arms disagree":
            return (
                f"{figure}{change} would read {self.direction}, but {self.disagrees}: "
                f"the arms disagree, {n}"
            )
        if t is not None and outcome in ("better", "worse"):
            return f"{figure}{change} {outcome}, {n}"
        if outcome == "no verdict":
            return f"{figure}, no verdict ({self.withheld}), {n}"
        if t is not None and outcome == "not significant" and t.significant:
            return f"{figure}, not significant (under {self.min_effect:.0%} apart), {n}"
        return f"{figure}, {outcome}, {n}"


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
    variable: str | None = None  # the declared variable under test
    variable_values: tuple[str, str] | None = None  # A's and B's, when it is a field
    hashed_prompts: int = 0  # prompts paired by hash (matched: all equal)
    hash_note: str = ""  # why the arms are not matched by hash, when they are not
    identity: list[Identity] = field(default_factory=list)  # greedy byte-identity
    correctness: str | None = None  # the gates, B against A's own pass set
    likelihood: str | None = None  # the likelihood probes side by side
    arms: list[str] = field(default_factory=list)  # "B is INVALID (…)": no verdicts
    arm_tags: str = ""  # the same in short, "B invalid", for the rows
    forced: bool = False  # --force: verdicts given anyway (forced_over says over what)
    cache: list[str] = field(default_factory=list)  # a replay on a warm cache, per arm
    predicted: str | None = None  # which arm is a prediction (workloads predict), if one is
    targets: list[str] = field(default_factory=list)  # server identity, simulator profile
    free: bool = False  # an arm's streams need not overlap: wall throughput leads
    # Per cell pair whose streams did not decode together in an arm: why its aggregate
    # rows carry ‡ (wall throughput leads there); and where rate rows disagree, why.
    overlap: list[str] = field(default_factory=list)
    prompts_excused: bool = False  # the prompts differ by the variable under test

    @property
    def withheld(self) -> bool:
        """No row has a verdict: an arm is invalid or incomplete and it was not forced."""
        return bool(self.arms) and not self.forced

    @property
    def headline(self) -> str:
        """The match class, with "warm cache" when a replay arm found one."""
        if not self.cache:
            return self.match
        return (
            "matched prompts, warm cache"
            if self.match == "matched"
            else f"{self.match}, warm cache"
        )


@dataclass(frozen=True)
class _Cell:
    index: int
    coordinate: Coordinate
    records: list[TurnRecord]
    window: Window | None = None  # the cell's measured window (one per arm: not tested)

    @property
    def users(self) -> int:
        return self.coordinate[0]


def _cells(result: RunResult) -> list[_Cell]:
    """The result's cells in sweep order, each with its measured records."""
    by_cell: dict[int, list[TurnRecord]] = defaultdict(list)
    for r in result.records:
        if not r.warmup:
            by_cell[r.cell].append(r)
    windows = {c.cell: c.window for c in result.cells or []}
    if result.cells is None:
        windows[0] = result.window
    return [
        _Cell(
            c.index, (c.concurrency, c.prior_tokens), by_cell.get(c.index, []), windows.get(c.index)
        )
        for c in result.scenario.cells()
    ]


def _coordinate(c: Coordinate) -> str:
    return f"C{c[0]} · prior {c[1]:,}"


def _pairs(
    cells_a: list[_Cell], cells_b: list[_Cell], by_position: bool
) -> tuple[list[tuple[_Cell, _Cell]], list[str]]:
    """The cells to compare, paired by coordinate, or by position in the sweep (a variable
    under test may move the coordinates); and what is left unpaired, per arm."""
    if by_position:
        pairs = list(zip(cells_a, cells_b, strict=False))
        only_a, only_b = cells_a[len(pairs) :], cells_b[len(pairs) :]
    else:
        in_b = {c.coordinate: c for c in cells_b}
        in_a = {c.coordinate for c in cells_a}
        pairs = [(c, in_b[c.coordinate]) for c in cells_a if c.coordinate in in_b]
        only_a = [c for c in cells_a if c.coordinate not in in_b]
        only_b = [c for c in cells_b if c.coordinate not in in_a]
    only = [
        f"{name} only: {', '.join(_coordinate(c.coordinate) for c in cells)}"
        for name, cells in (("A", only_a), ("B", only_b))
        if cells
    ]
    return pairs, only


def _where(a: _Cell, b: _Cell, swept: bool) -> str:
    """A row's cell prefix: "C2 · prior 300 · ", or "C2 vs C3 · prior 300 · " where the
    paired cells differ; nothing when neither arm swept."""
    if not swept:
        return ""
    parts = []
    for form, x, y in (
        ("C{:,}", a.coordinate[0], b.coordinate[0]),
        ("prior {:,}", a.coordinate[1], b.coordinate[1]),
    ):
        parts.append(form.format(x) if x == y else f"{form.format(x)} vs {form.format(y)}")
    return " · ".join(parts) + " · "


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


def _scenario_differences(a: RunResult, b: RunResult, variable: str | None) -> list[str]:
    # Repetition counts may differ between arms: more repetitions is more evidence, not a
    # different workload. The variable under test is what the arms are meant to differ in.
    # The SLO is how a run is judged, not what it ran: arms that differ in it get goodput
    # rows, each judged by its own (_goodput_rows).
    skip = {"name", "description", "repetitions", "gate", "slo"}
    da = a.scenario.model_dump(exclude=skip)
    db = b.scenario.model_dump(exclude=skip)
    out = []
    for k in da:
        x, y = da[k], db.get(k)
        if variable is not None and variable.split(".")[0] == k and "." in variable:
            # A dotted variable (sampling.temperature) excuses only that sub-field.
            sub = variable.split(".", 1)[1]
            if isinstance(x, dict) and isinstance(y, dict):
                x = {kk: vv for kk, vv in x.items() if kk != sub}
                y = {kk: vv for kk, vv in y.items() if kk != sub}
        elif variable == k:
            continue
        if x != y:
            out.append(f"scenario field {k!r}: {x!r} vs {y!r}")
    return out


def _variable_values(a: RunResult, b: RunResult, variable: str) -> tuple[str, str] | None:
    """A's and B's value of the variable when it names a scenario field, the model or the
    cache."""
    if variable == "model":
        return a.target.model, b.target.model
    if variable == CACHE_VARIABLE:
        return cache_value(a), cache_value(b)

    def get(result: RunResult) -> object:
        node: object = result.scenario.model_dump()
        for part in variable.split("."):
            if not isinstance(node, dict) or part not in node:
                raise KeyError(part)
            node = node[part]
        return node

    try:
        return str(get(a)), str(get(b))
    except KeyError:
        return None


def _values(figures: list[float | None]) -> tuple[float, ...]:
    return tuple(v for v in figures if v is not None)


WALL = "wall throughput"


def _row(
    prefix: str,
    name: str,
    unit: str,
    higher: bool,
    xs: list[float | None],
    ys: list[float | None],
    min_effect: float,
) -> MetricComparison:
    return MetricComparison(
        prefix + name,
        unit,
        stats.band(xs),
        stats.band(ys),
        higher,
        _values(xs),
        _values(ys),
        min_effect,
        cell=prefix,
        rate=unit == "tok/s" and name != WALL,
    )


@dataclass(frozen=True)
class _Overlap:
    """Did each arm's streams decode together in a cell pair: the medians over the
    (repetition, turn)s its aggregate takes (None: not known, or one stream)."""

    a: float | None
    b: float | None
    users: tuple[int, int]

    @property
    def low(self) -> bool:
        return low_overlap(self.a) or low_overlap(self.b)

    def overstated(self, arm: str) -> bool:
        """Whether ``arm``'s ("A" or "B") streams decoded together less than the other's,
        and too little for its Σ to be a throughput."""
        mine, other = (self.a, self.b) if arm == "A" else (self.b, self.a)
        return low_overlap(mine) and (other is None or mine is None or mine < other)

    def why(self) -> str:
        """Why per-stream rates and the wall throughput may part, in the arms' figures."""
        if self.a is None or self.b is None:
            return (
                "per-stream rates leave out the time a stream waited to decode; wall "
                "throughput counts it"
            )
        low, high = ("A", "B") if self.a < self.b else ("B", "A")
        return (
            f"{low}'s streams decoded together {min(self.a, self.b):.0%} of their decode "
            f"time, {high}'s {max(self.a, self.b):.0%}: a stream decodes faster alone, so "
            "per-stream rates rise while the server delivers less"
        )

    def note(self, where: str) -> str:
        shares = ", ".join(
            f"{arm} {'—' if o is None else format(o, '.0%')}"
            for arm, o in (("A", self.a), ("B", self.b))
        )
        return (
            f"{OVERSTATES} {where}share of their decode time the streams decoded together "
            f"(median over turns): {shares}; under {LOW_DECODE_OVERLAP:.0%} the Σ of their "
            "rates overstates what the server delivered (a stream decodes faster alone), so "
            "wall throughput leads"
        )


def _overlap(a: _Cell, b: _Cell) -> _Overlap:
    def median(cell: _Cell) -> float | None:
        turns = aggregate.turn_repetitions(cell.records, users=cell.users)
        return stats.median(t.decode_overlap for t in turns if t.aggregate_rate is not None)

    return _Overlap(median(a), median(b), (a.users, b.users))


def _disagreements(
    metrics: list[MetricComparison], overlaps: dict[str, _Overlap]
) -> list[MetricComparison]:
    """Each per-stream rate row whose verdict the cell's wall throughput does not bear out,
    marked with what the wall throughput says: one that goes against a wall throughput
    significantly the other way; and one in favour of an arm whose streams did not decode
    together (its Σ overstates) unless the wall throughput, significantly, agrees."""
    walls = {m.cell: m for m in metrics if m.name == m.cell + WALL}
    out = []
    for m in metrics:
        wall = walls.get(m.cell)
        if m.rate and wall is not None and m.direction is not None and m.withheld is None:
            favoured = "B" if (m.direction == "better") else "A"
            if wall.direction is not None and wall.direction != m.direction:
                said = f"wall throughput {wall.verdict_figure} {wall.direction}"
                m = dataclasses.replace(m, disagrees=said)
            elif wall.direction is None and overlaps[m.cell].overstated(favoured):
                said = f"wall throughput {wall.verdict_figure}, {wall.outcome}"
                m = dataclasses.replace(m, disagrees=said)
        out.append(m)
    return out


def _run_metrics(
    prefix: str, a: _Cell, b: _Cell, min_effect: float, free: bool, overlap: _Overlap
) -> list[MetricComparison]:
    ra = aggregate.repetitions(a.records, users=a.users)
    rb = aggregate.repetitions(b.records, users=b.users)

    def row(
        name: str, unit: str, get: Callable[[RepetitionFigures], float | None], higher: bool
    ) -> MetricComparison:
        return _row(
            prefix, name, unit, higher, [get(f) for f in ra], [get(f) for f in rb], min_effect
        )

    # Where the streams need not (free) or did not (low overlap) decode together, the Σ
    # overstates throughput: the wall throughput leads, and the Σ rows say so in their name.
    summed_name = SUMMED if free else f"aggregate {OVERSTATES}" if overlap.low else "aggregate"
    summed = row(summed_name, "tok/s", lambda f: f.aggregate_rate, True)
    per_user = row("per-user median", "tok/s", lambda f: f.per_user_rate, True)
    wall = row(WALL, "tok/s", lambda f: f.wall_aggregate_rate, True)
    metrics = [wall, per_user, summed] if free or overlap.low else [summed, per_user, wall]
    metrics.append(row("TTFT median", "s", lambda f: f.ttft_s, False))
    # Window figures: one value per arm (the whole measured window), so shown, never tested.
    window_rows: list[tuple[str, str, bool, Callable[[Window], float | None]]] = [
        (
            "spec acceptance (window)",
            "",
            True,
            lambda w: w.server.spec_acceptance_rate if w.server else None,
        ),
        (
            "J per token (window)",
            "J",
            False,
            lambda w: w.energy.joules_per_token if w.energy else None,
        ),
    ]
    for label, what, up, read in window_rows:
        wa = [read(a.window)] if a.window is not None else []
        wb = [read(b.window)] if b.window is not None else []
        if _values(wa) or _values(wb):
            metrics.append(_row(prefix, label, what, up, wa, wb, min_effect))
    ta = aggregate.turn_repetitions(a.records, users=a.users)
    tb = aggregate.turn_repetitions(b.records, users=b.users)
    per_turn: list[tuple[str, str, bool, Callable[[TurnRepetitionFigures], float | None]]] = [
        (summed_name, "tok/s", True, lambda f: f.aggregate_rate),
        ("TTFT median", "s", False, lambda f: f.ttft_s),
        ("prefill rate", "tok/s", True, lambda f: f.prefill_rate),
        ("cache effectiveness", "", True, lambda f: f.cache_effectiveness),
        ("spec acceptance", "", True, lambda f: f.spec_acceptance),
    ]
    for turn in sorted({f.turn for f in ta} | {f.turn for f in tb}):
        xa = [f for f in ta if f.turn == turn]
        xb = [f for f in tb if f.turn == turn]
        for index, (name, unit, higher, get) in enumerate(per_turn):
            row_a = [get(f) for f in xa]
            row_b = [get(f) for f in xb]
            if index and not _values(row_a) and not _values(row_b):
                continue  # e.g. cache effectiveness where the server reports no cached tokens
            metrics.append(
                _row(prefix, f"turn {turn} {name}", unit, higher, row_a, row_b, min_effect)
            )
    return metrics


def familywise(metrics: list[MetricComparison]) -> list[MetricComparison]:
    """The rows with the family-wise alpha shared out: each of the m tested rows at
    alpha / m (Bonferroni). Pure."""
    tested = sum(m.test is not None for m in metrics)
    if tested <= 1:
        return metrics
    return [dataclasses.replace(m, alpha=stats.ALPHA / tested) for m in metrics]


def _hash_match(a: _Cell, b: _Cell) -> tuple[int, int, int]:
    """(pairs compared by prompt hash, pairs that differ, records without a hash)."""

    def keyed(cell: _Cell) -> tuple[dict[tuple[int, int, int], str], int]:
        reps = sorted({r.repetition for r in cell.records})
        ordinal = {rep: i for i, rep in enumerate(reps)}  # measured repetitions, from 0
        out: dict[tuple[int, int, int], str] = {}
        missing = 0
        for r in cell.records:
            if r.prompt_sha256 is None:
                missing += 1
            else:
                out[(ordinal[r.repetition], r.session, r.turn)] = r.prompt_sha256
        return out, missing

    ha, ma = keyed(a)
    hb, mb = keyed(b)
    common = ha.keys() & hb.keys()
    return len(common), sum(ha[k] != hb[k] for k in common), ma + mb


def compare(
    a: RunResult,
    b: RunResult,
    *,
    force: bool = False,
    variable: str | None = None,  # the one thing the arms are meant to differ in
    min_effect: float = MIN_EFFECT,  # smaller differences are never called significant
    completions_a: Completions | None = None,  # transcripts' texts, for where outputs differ
    completions_b: Completions | None = None,
) -> Comparison:
    """Compare arm ``a`` (baseline) with arm ``b``. Raises IncomparableError unless forced.

    comparison = compare(load_result("runs/a"), load_result("runs/b"), variable="sampling")
    for m in comparison.metrics:
        print(m.name, m.verdict)
    """
    problems = _scenario_differences(a, b, variable)
    if a.target.model != b.target.model and variable != "model":
        problems.append(f"model: {a.target.model!r} vs {b.target.model!r}")
    values = None if variable is None else _variable_values(a, b, variable)
    # A field (or the model) that differs is meant to: the prompts may differ with it.
    excuses = (
        variable not in (None, CACHE_VARIABLE) and values is not None and values[0] != values[1]
    )
    swept = a.scenario.swept or b.scenario.swept
    pairs, only = _pairs(_cells(a), _cells(b), by_position=variable is not None)
    if only:
        problems.append("the arms have different cells (" + "; ".join(only) + ")")

    # Matching: per (cell, turn) median prompt tokens.
    largest = (0.0, 0.0, -1.0, "")  # delta, A's tokens, fraction, where
    missing: list[str] = []
    for ca, cb in pairs:
        pa, pb = _prompt_medians(ca.records), _prompt_medians(cb.records)
        for turn in sorted(pa.keys() | pb.keys()):
            where = f"{_where(ca, cb, swept)}turn {turn}"
            if turn not in pa or turn not in pb:
                missing.append(f"{where} ({'A' if turn not in pa else 'B'})")
                continue
            delta = pb[turn] - pa[turn]
            fraction = abs(delta) / pa[turn] if pa[turn] else (0.0 if delta == 0 else 1.0)
            if fraction > largest[2]:
                largest = (delta, pa[turn], fraction, where)
    hashed = differing = unhashed = 0
    for ca, cb in pairs:
        n_pairs, differ, without = _hash_match(ca, cb)
        hashed, differing, unhashed = hashed + n_pairs, differing + differ, unhashed + without
    if unhashed:
        hash_note = f"{unhashed} measured records carry no prompt hash " + (
            "(a prediction sends token counts, no text)"
            if a.predicted is not None or b.predicted is not None
            else "(an older result)"
        )
    elif not hashed:
        hash_note = "no (repetition, session, turn) measured by both arms"
    elif differing:
        hash_note = f"{differing} of {hashed} prompts differ byte for byte"
    else:
        hash_note = ""
    delta, tokens_a, fraction, where = largest
    fraction = max(fraction, 0.0)
    match: MatchClass
    prompt_problems = []
    if missing or not where:
        match = "unmatched"
        prompt_problems.append(
            "no prompt-token counts to match for "
            + (", ".join(missing) if missing else "any measured turn")
        )
    elif hashed and not differing and not unhashed:
        match = "matched"
    elif fraction <= TOKENIZER_DELTA_LIMIT:
        match = "matched_with_tokenizer_delta"
    else:
        match = "unmatched"
    if match == "unmatched" and where:
        prompt_problems.append(
            f"median prompt tokens differ by up to {delta:+,.1f} at {where} ({fraction:.3%}; "
            f"limit {TOKENIZER_DELTA_LIMIT:.0%}): the arms did not send the same workload"
        )
    if not excuses:
        problems += prompt_problems
    if problems and not force:
        raise IncomparableError(
            "results are not comparable: " + "; ".join(problems) + " (use --force to compare "
            "anyway; the output will say so)"
        )
    if not pairs:  # forcing cannot help: there is nothing to put side by side
        raise IncomparableError(
            "the arms have no cell (concurrency × prior tokens) in common, so there is "
            "nothing to compare, even with --force (" + "; ".join(only) + ")"
        )
    free = any(r.scenario.pacing.mode != "lockstep" for r in (a, b))
    metrics: list[MetricComparison] = []
    why: dict[str, str] = {}
    overlaps: dict[str, _Overlap] = {}
    overlap_notes = []
    for ca, cb in pairs:
        prefix = _where(ca, cb, swept)
        overlap = _overlap(ca, cb)
        why[prefix] = overlap.why()
        overlaps[prefix] = overlap
        if overlap.low and not free:
            overlap_notes.append(overlap.note(prefix))
        metrics += _run_metrics(prefix, ca, cb, min_effect, free, overlap)
        metrics += _goodput_rows(prefix, ca, cb, a, b, min_effect)
    metrics = _disagreements(familywise(metrics), overlaps)
    for prefix, reason in why.items():
        if any(m.cell == prefix and m.disagrees for m in metrics):
            overlap_notes.append(
                f"arms disagree{' at ' + prefix.rstrip(' ·') if prefix else ''}: a per-stream "
                "rate (the Σ or median of the streams' post-first rates, or prefill per "
                "request) goes one way and the wall throughput does not bear it out (it goes "
                f"the other way, or is not significant where the Σ overstates): {reason}"
            )
    arms, tags = arm_problems(a, b)
    if arms and force:
        problems += [f"verdicts given although {p}" for p in arms]
    elif arms:
        metrics = [dataclasses.replace(m, withheld=", ".join(tags)) for m in metrics]
    return Comparison(
        match=match,
        prompt_delta_tokens=delta,
        prompt_tokens_a=tokens_a,
        prompt_delta_fraction=fraction,
        forced_over=problems,
        metrics=metrics,
        prompt_delta_at=where,
        variable=variable,
        variable_values=values,
        hashed_prompts=hashed,
        hash_note=hash_note,
        identity=identities(a, b, completions_a=completions_a, completions_b=completions_b),
        correctness=correctness(a, b),
        likelihood=likelihood(a, b),
        arms=arms,
        arm_tags=", ".join(tags),
        forced=force,
        cache=cache_notes(a, b, variable),
        predicted=prediction_line(a, b),
        targets=target_differences(a, b),
        free=free,
        prompts_excused=excuses and bool(prompt_problems),
        overlap=overlap_notes,
    )


def _goodput_rows(
    prefix: str, ca: _Cell, cb: _Cell, a: RunResult, b: RunResult, min_effect: float
) -> list[MetricComparison]:
    """Goodput (requests that met / s) and session goodput per repetition, each arm judged
    by its own SLO (the row names both when they differ); none unless both arms have one
    their records can be judged by."""
    slo_a, slo_b = a.scenario.slo, b.scenario.slo
    if slo_a is None or slo_b is None:
        return []
    if missing_figure(ca.records, slo_a) or missing_figure(cb.records, slo_b):
        return []
    ga, gb = judge(ca.records, slo_a), judge(cb.records, slo_b)
    at = "" if slo_a == slo_b else f" (A at {slo_a.describe()}; B at {slo_b.describe()})"

    def rates(g: Goodput) -> list[float | None]:
        return [r.met / r.span_s if r.span_s else None for r in g.repetitions]

    def shares(g: Goodput) -> list[float | None]:
        return [r.good_sessions / r.sessions if r.sessions else None for r in g.repetitions]

    return [
        _row(prefix, f"goodput{at}", "requests/s", True, rates(ga), rates(gb), min_effect),
        _row(prefix, f"session goodput{at}", "", True, shares(ga), shares(gb), min_effect),
    ]


def comparison_lines(result: Comparison, name_a: str, name_b: str) -> list[Line]:
    """The lines above the table: who A and B are (and any arm that gets no verdict), the
    match, the variable under test, a replay's warm cache, what differs between the targets,
    what was forced, then the outputs' identity, correctness and likelihood."""
    at = f" at {result.prompt_delta_at}" if result.prompt_delta_at else ""
    if result.match == "matched":
        delta = f"byte-identical prompts ({result.hashed_prompts:,} prompt hashes equal)"
    else:
        delta = (
            f"median prompt tokens differ by at most {result.prompt_delta_tokens:+,.1f} of "
            f"{result.prompt_tokens_a:,.1f} ({result.prompt_delta_fraction:.3%}){at}"
            + (f"; not matched: {result.hash_note}" if result.hash_note else "")
        )
        if result.prompts_excused:
            delta = f"the prompts differ with the variable under test: {delta}"
    arms = "".join(f" · {arm}" for arm in result.arms)
    lines = [
        Line(
            f"A = {name_a}, B = {name_b}{arms} · {result.headline} · {delta}",
            "error" if result.withheld else "",
        )
    ]
    if result.predicted is not None:
        lines.append(Line(result.predicted, "warning"))
    if result.withheld:
        lines.append(
            Line(
                f"no verdicts ({result.arm_tags}): an invalid or incomplete arm "
                "is not timed against another (--force gives them, and says so)",
                "error",
            )
        )
    if result.variable is not None:
        values = (
            f": A {result.variable_values[0]} · B {result.variable_values[1]}"
            if result.variable_values
            else ""
        )
        lines.append(Line(f"variable under test: {result.variable}{values}"))
    lines += [Line(f"warm cache: {note}", "warning") for note in result.cache]
    lines += [Line(f"targets differ: {difference}", "warning") for difference in result.targets]
    lines += [Line(f"forced: {problem}", "warning") for problem in result.forced_over]
    for text in (result.correctness, result.likelihood, *(i.line() for i in result.identity)):
        if text:
            lines.append(Line(text))
    return lines


def comparison_table(result: Comparison, *, min_effect: float = MIN_EFFECT) -> ReportTable:
    """The figures of a comparison as a report table (the console reflows it to any width;
    the verdict column wraps at spaces). ``min_effect``: the smallest difference (a
    fraction) called significant, for the title."""
    tested = sum(m.test is not None for m in result.metrics)
    table = ReportTable(
        "median over measured repetitions (min–max); B/A of geometric means with its "
        f"interval, and n values per arm (A/B); significant when Welch's t on log values "
        f"(≥ 3 repetitions a side; alpha 0.05 over all {tested} tested rows, Bonferroni) "
        f"excludes 1 and the difference is ≥ {min_effect:.0%}",
        ["figure", "A", "B", "B vs A [interval]"],
        name="compare",
        left=(3,),
    )
    for m in result.metrics:
        unit = f" ({m.unit})" if m.unit else ""
        digits = 3 if m.unit in ("", "s") else None
        table.add_row(
            f"{m.name}{unit}", format_band(m.a, digits), format_band(m.b, digits), m.verdict
        )
    if result.free:
        table.notes.append(
            "† free or arrivals pacing: a turn's streams need not overlap in time, so their "
            "Σ overstates throughput; wall throughput (Σ tokens / span) leads"
        )
    table.notes.extend(result.overlap)
    return table
