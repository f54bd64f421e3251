"""Compare two RunResults (A/B arms): refuse what is not comparable, and say "not
significant" rather than print a ratio that is noise. Pure.

Size: past 400 lines: comparability (matching, the variable under test), the significance
rows and the identity/correctness/likelihood lines all read the same two results and are
judged together; splitting the identity lines out is the natural next cut.

Matching, as in the seed records' A/B classes, judged per (cell, turn):

* ``matched`` — byte-identical prompts: every (repetition, session, turn) both arms measured
  has the same prompt hash (``TurnRecord.prompt_sha256``; ``run --replay`` makes such arms),
  nothing looser;
* ``matched_with_tokenizer_delta`` — the median of the server's prompt-token count (over
  every measured record with usage, valid or not: a failure pattern is not a different
  workload) differs by at most 1 % per (cell, turn) (the largest delta is reported), but the
  prompts are not known to be byte-identical;
* otherwise the arms did not run the same workload: :class:`IncomparableError` unless forced.

The scenario (minus its name) and the model must also be equal unless forced (pyperf's
``_CHECKED_METADATA`` idea), except the declared *variable under test* (``variable``: a
scenario field such as ``sampling``, ``model``, or any name, e.g. a server flag, which is
then only printed). A sweep is compared cell by cell, cells matched by (concurrency, prior
tokens); arms with different cells are refused unless forced (then the common cells are
compared).

Significance (:func:`workloads.core.stats.ratio_test`): Welch's t on the logarithms of the
per-repetition values, at least 3 repetitions a side ("too few repetitions" otherwise); the
verdict prints the ratio of geometric means B/A with its interval, "1.40x [1.31-1.49]".
Alpha 0.05 is family-wise over the rows of one comparison (Bonferroni: each of the m tested
rows at 0.05 / m, and its interval at 1 − 0.05 / m): a compare tests a dozen rows or more,
and at 0.05 each, two identical arms would get a chance verdict on some row about half the
time (1 − 0.95^12 = 46 %). Bonferroni rather than Holm so that every printed interval is
the test it stands for. A difference smaller than ``min_effect`` (2 % by default) is "not
significant" whatever the test says: same-host re-runs of one configuration drift by about
that much (seed 001 calls a ≤ 1.5 % effect "inert"), and repetitions inside one run do not
see that drift, so the test alone would call it.

The figures are the report's (:mod:`workloads.core.aggregate`): per repetition, the run
figures of :func:`aggregate.repetitions`; per turn, each repetition's turn figures of
:func:`aggregate.turn_repetitions` (aggregate, TTFT, prefill rate, cache effectiveness).
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
from workloads.model.errors import IncomparableError
from workloads.model.likelihood import Likelihood
from workloads.model.records import TurnRecord
from workloads.model.results import RunResult, Window
from workloads.model.summary import BandSummary
from workloads.report.table import ReportTable
from workloads.report.text import format_band

__all__ = [
    "Comparison", "Identity", "MetricComparison", "compare", "comparison_table", "correctness",
    "familywise", "identities",
]

MatchClass = Literal["matched", "matched_with_tokenizer_delta", "unmatched"]
TOKENIZER_DELTA_LIMIT = 0.01
MIN_EFFECT = 0.02  # smaller differences are not called significant (same-host drift)

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

    @functools.cached_property
    def test(self) -> stats.RatioTest | None:
        """Welch's t on log values; None with fewer than 3 repetitions a side."""
        return stats.ratio_test(self.a_values, self.b_values, alpha=self.alpha)

    @property
    def ratio(self) -> float | None:
        """B/A: of geometric means when tested, else of medians."""
        if (t := self.test) is not None:
            return t.ratio
        if self.a is None or self.b is None or self.a.median == 0:
            return None
        return self.b.median / self.a.median

    @property
    def enough(self) -> bool:
        """Both arms have at least :data:`stats.MIN_REPETITIONS` values."""
        return self.test is not None

    @property
    def significant(self) -> bool:
        t = self.test
        return t is not None and t.significant and abs(t.ratio - 1) >= self.min_effect

    @property
    def verdict(self) -> str:
        if self.a is None or self.b is None:
            return "not reported"
        t = self.test
        if t is None:
            n = min(len(self.a_values), len(self.b_values)) if self.a_values or self.b_values \
                else min(self.a.n, self.b.n)
            return f"too few repetitions (n={n})"
        if not self.significant:
            return "not significant"
        better = (t.ratio > 1) == self.higher_is_better
        return (
            f"{t.ratio:.2f}x [{t.low:.2f}-{t.high:.2f}] ({t.ratio - 1:+.1%}) "
            f"{'better' if better else 'worse'}"
        )


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


@dataclass(frozen=True)
class Identity:
    """Greedy byte-identity of one kind of output between the arms."""

    what: str  # "gate outputs", "measured completions"
    compared: int
    identical: int
    first_difference: str | None = None  # where the first differing output first differs
    note: str = ""  # why it was not compared, when compared is 0

    def line(self) -> str:
        """"identity of gate outputs: 12/12 byte-identical", or the differences."""
        if not self.compared:
            return f"identity of {self.what}: not compared ({self.note})"
        head = f"identity of {self.what}: {self.identical}/{self.compared} byte-identical"
        if self.identical == self.compared:
            return head
        where = f"; first difference at {self.first_difference}" if self.first_difference \
            else ""
        return f"{head}, {self.compared - self.identical} differ{where}"


def _first_difference(x: str, y: str) -> int:
    """The first character position at which ``x`` and ``y`` differ."""
    for i, (p, q) in enumerate(zip(x, y, strict=False)):
        if p != q:
            return i
    return min(len(x), len(y))


def _greedy(result: RunResult) -> bool:
    return result.scenario.sampling.temperature == 0


Completions = dict[tuple[int, int, int, int], str | None]  # (cell, repetition, session, turn)


def identities(
    a: RunResult, b: RunResult, *, completions_a: Completions | None = None,
    completions_b: Completions | None = None,
) -> list[Identity]:
    """Byte-identity of the gate outputs (always greedy) and, where both arms ran greedy, of
    every measured completion, paired by (cell, measured repetition, session, turn). The first
    differing position needs the texts (the runs' transcripts); hashes give the counts."""
    out = []
    if a.gate is not None and b.gate is not None:
        ga = {(o.case, o.phase): o.output for o in a.gate.outputs if o.error_kind is None}
        gb = {(o.case, o.phase): o.output for o in b.gate.outputs if o.error_kind is None}
        common = sorted(ga.keys() & gb.keys())
        differing = [k for k in common if ga[k] != gb[k]]
        first = None
        if differing:
            k = differing[0]
            first = f"{k[0]} ({k[1]}), character {_first_difference(ga[k], gb[k])}"
        out.append(Identity("gate outputs", len(common), len(common) - len(differing), first,
                            "" if common else "no gate case answered in both arms"))
    else:
        out.append(Identity("gate outputs", 0, 0, note="an arm ran without the gate"))
    if not (_greedy(a) and _greedy(b)):
        out.append(Identity("measured completions", 0, 0,
                            note="an arm did not run greedy (sampling.temperature = 0)"))
        return out

    Key = tuple[int, int, int, int]

    def keyed(result: RunResult) -> dict[Key, tuple[str, Key]]:
        reps: dict[int, list[int]] = defaultdict(list)
        for r in result.records:
            if not r.warmup and r.repetition not in reps[r.cell]:
                reps[r.cell].append(r.repetition)
        return {
            (r.cell, sorted(reps[r.cell]).index(r.repetition), r.session, r.turn):
                (r.completion_sha256, (r.cell, r.repetition, r.session, r.turn))
            for r in result.records if not r.warmup and r.completion_sha256 is not None
        }

    ka, kb = keyed(a), keyed(b)
    paired = sorted(ka.keys() & kb.keys())
    unequal = [k for k in paired if ka[k][0] != kb[k][0]]
    where = None
    if unequal:
        key = unequal[0]
        where = (f"cell {key[0]}, measured repetition {key[1] + 1}, session {key[2]}, "
                 f"turn {key[3]}")
        x = (completions_a or {}).get(ka[key][1])
        y = (completions_b or {}).get(kb[key][1])
        if x is not None and y is not None:
            where += f", character {_first_difference(x, y)}"
    out.append(Identity("measured completions", len(paired), len(paired) - len(unequal),
                        where, "" if paired else "no completion hashes in both arms"))
    return out


def likelihood(a: RunResult, b: RunResult) -> str | None:
    """The likelihood probes side by side (mean NLL of the same fixed text), as seed 000
    compared MTP profiles; None when neither arm ran it."""
    x, y = a.likelihood, b.likelihood
    if x is None and y is None:
        return None

    def one(p: Likelihood | None) -> str:
        if p is None:
            return "not run"
        if p.mean_nll is None:
            return p.reason or "not measured"
        return f"{p.mean_nll:.4f}"

    line = f"likelihood (mean NLL of the fixed text): A {one(x)} · B {one(y)}"
    if x is not None and y is not None and x.mean_nll is not None and y.mean_nll is not None:
        line += f" · Δ {y.mean_nll - x.mean_nll:+.4f} over {y.tokens} tokens"
        if x.tokens != y.tokens:
            line += f" (A scored {x.tokens}: different tokenizers)"
    return line


def correctness(a: RunResult, b: RunResult) -> str | None:
    """The gates side by side, judged against A's own pass set: a case A failed too is not
    held against B (a weak model is judged honestly, not to an absolute bar)."""
    if a.gate is None and b.gate is None:
        return None
    if a.gate is None or b.gate is None:
        return "correctness: " + ("A" if a.gate is None else "B") + " ran without the gate"
    pa, pb = set(a.gate.passed_cases), set(b.gate.passed_cases)
    line = (f"correctness: A {len(pa)}/{len(a.gate.cases)}, B {len(pb)}/{len(b.gate.cases)}")
    lost = [c for c in a.gate.cases if c in pa and c not in pb]
    gained = [c for c in b.gate.cases if c in pb and c not in pa]
    if lost:
        line += " · B FAILS where A passed: " + ", ".join(lost)
    if gained:
        line += " · B passes where A failed: " + ", ".join(gained)
    if not lost and not gained:
        line += " · the same cases pass"
    return line


@dataclass(frozen=True)
class _Cell:
    index: int
    users: int
    records: list[TurnRecord]
    window: Window | None = None  # the cell's measured window (one per arm: not tested)


def _cells(result: RunResult) -> dict[Coordinate, _Cell]:
    """The result's cells by (concurrency, prior tokens), each with its measured records."""
    by_cell: dict[int, list[TurnRecord]] = defaultdict(list)
    for r in result.records:
        if not r.warmup:
            by_cell[r.cell].append(r)
    windows = {c.cell: c.window for c in result.cells or []}
    if result.cells is None:
        windows[0] = result.window
    return {
        (c.concurrency, c.prior_tokens): _Cell(c.index, c.concurrency, by_cell.get(c.index, []),
                                               windows.get(c.index))
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


def _scenario_differences(a: RunResult, b: RunResult, variable: str | None) -> list[str]:
    # Repetition counts may differ between arms: more repetitions is more evidence, not a
    # different workload. The variable under test is what the arms are meant to differ in.
    skip = {"name", "description", "repetitions", "gate"}
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
    """A's and B's value of the variable when it names a scenario field or the model."""
    if variable == "model":
        return a.target.model, b.target.model

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


def _row(prefix: str, name: str, unit: str, higher: bool, xs: list[float | None],
         ys: list[float | None], min_effect: float) -> MetricComparison:
    return MetricComparison(
        prefix + name, unit, stats.band(xs), stats.band(ys), higher,
        _values(xs), _values(ys), min_effect,
    )


def _run_metrics(prefix: str, a: _Cell, b: _Cell, min_effect: float) -> list[MetricComparison]:
    ra = aggregate.repetitions(a.records, users=a.users)
    rb = aggregate.repetitions(b.records, users=b.users)

    def row(name: str, unit: str, get: Callable[[RepetitionFigures], float | None],
            higher: bool) -> MetricComparison:
        return _row(prefix, name, unit, higher, [get(f) for f in ra], [get(f) for f in rb],
                    min_effect)

    metrics = [
        row("aggregate", "tok/s", lambda f: f.aggregate_rate, True),
        row("per-user median", "tok/s", lambda f: f.per_user_rate, True),
        row("wall throughput", "tok/s", lambda f: f.wall_aggregate_rate, True),
        row("TTFT median", "s", lambda f: f.ttft_s, False),
    ]
    # Window figures: one value per arm (the whole measured window), so shown, never tested.
    window_rows: list[tuple[str, str, bool, Callable[[Window], float | None]]] = [
        ("spec acceptance (window)", "", True,
         lambda w: w.server.spec_acceptance_rate if w.server else None),
        ("J per token (window)", "J", False,
         lambda w: w.energy.joules_per_token if w.energy else None),
    ]
    for label, what, up, read in window_rows:
        wa = [read(a.window)] if a.window is not None else []
        wb = [read(b.window)] if b.window is not None else []
        if _values(wa) or _values(wb):
            metrics.append(_row(prefix, label, what, up, wa, wb, min_effect))
    ta = aggregate.turn_repetitions(a.records, users=a.users)
    tb = aggregate.turn_repetitions(b.records, users=b.users)
    per_turn: list[tuple[str, str, bool, Callable[[TurnRepetitionFigures], float | None]]] = [
        ("aggregate", "tok/s", True, lambda f: f.aggregate_rate),
        ("TTFT median", "s", False, lambda f: f.ttft_s),
        ("prefill rate", "tok/s", True, lambda f: f.prefill_rate),
        ("cache effectiveness", "", True, lambda f: f.cache_effectiveness),
    ]
    for turn in sorted({f.turn for f in ta} | {f.turn for f in tb}):
        xa = [f for f in ta if f.turn == turn]
        xb = [f for f in tb if f.turn == turn]
        for name, unit, higher, get in per_turn:
            row_a = [get(f) for f in xa]
            row_b = [get(f) for f in xb]
            if name != "aggregate" and not _values(row_a) and not _values(row_b):
                continue  # e.g. cache effectiveness where the server reports no cached tokens
            metrics.append(_row(prefix, f"turn {turn} {name}", unit, higher, row_a, row_b,
                                min_effect))
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
    hashed = differing = unhashed = 0
    for coordinate in common:
        pairs, differ, without = _hash_match(cells_a[coordinate], cells_b[coordinate])
        hashed, differing, unhashed = hashed + pairs, differing + differ, unhashed + without
    if unhashed:
        hash_note = f"{unhashed} measured records carry no prompt hash (an older result)"
    elif not hashed:
        hash_note = "no (repetition, session, turn) measured by both arms"
    elif differing:
        hash_note = f"{differing} of {hashed} prompts differ byte for byte"
    else:
        hash_note = ""
    delta, tokens_a, fraction, where = largest
    fraction = max(fraction, 0.0)
    match: MatchClass
    if missing or not where:
        match = "unmatched"
        problems.append(
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
        problems.append(
            f"median prompt tokens differ by up to {delta:+,.1f} at {where} ({fraction:.3%}; "
            f"limit {TOKENIZER_DELTA_LIMIT:.0%}): the arms did not send the same workload"
        )
    if problems and not force:
        raise IncomparableError(
            "results are not comparable: " + "; ".join(problems) + " (use --force to compare "
            "anyway; the output will say so)"
        )
    if not common:  # forcing cannot help: there is nothing to put side by side
        raise IncomparableError(
            "the arms have no cell (concurrency × prior tokens) in common, so there is "
            "nothing to compare, even with --force (" + "; ".join(only) + ")"
        )
    metrics: list[MetricComparison] = []
    for coordinate in common:
        metrics += _run_metrics(
            _where(coordinate, swept), cells_a[coordinate], cells_b[coordinate], min_effect
        )
    metrics = familywise(metrics)
    return Comparison(
        match=match,
        prompt_delta_tokens=delta,
        prompt_tokens_a=tokens_a,
        prompt_delta_fraction=fraction,
        forced_over=problems,
        metrics=metrics,
        prompt_delta_at=where,
        variable=variable,
        variable_values=None if variable is None else _variable_values(a, b, variable),
        hashed_prompts=hashed,
        hash_note=hash_note,
        identity=identities(a, b, completions_a=completions_a, completions_b=completions_b),
        correctness=correctness(a, b),
        likelihood=likelihood(a, b),
    )


def comparison_table(result: Comparison, *, min_effect: float = MIN_EFFECT) -> ReportTable:
    """The figures of a comparison as a report table (the console reflows it to any width;
    the verdict column wraps at spaces). ``min_effect``: the smallest difference (a
    fraction) called significant, for the title."""
    tested = sum(m.test is not None for m in result.metrics)
    table = ReportTable(
        "median over measured repetitions (min–max); B/A of geometric means with its "
        f"interval; significant when Welch's t on log values (≥ 3 repetitions a side; alpha "
        f"0.05 over all {tested} tested rows, Bonferroni) excludes 1 and the difference is "
        f"≥ {min_effect:.0%}",
        ["figure", "A", "B", "B vs A [interval]"], name="compare", left=(3,),
    )
    for m in result.metrics:
        unit = f" ({m.unit})" if m.unit else ""
        digits = 3 if m.unit in ("", "s") else None
        table.add_row(f"{m.name}{unit}", format_band(m.a, digits), format_band(m.b, digits),
                      m.verdict)
    return table
