"""Console and markdown reports of a RunResult (rich tables). Returns renderables and text;
printing is the CLI's job."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from workloads.aggregate import BandSummary, TurnSummary
from workloads.results import RunResult

__all__ = [
    "coordinates_line",
    "render",
    "run_line",
    "sizing_line",
    "sweep_line",
    "sweep_table",
    "turn_table",
]

NOT_REPORTED = "not reported"


def _num(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _band(b: BandSummary | None, digits: int = 1, *, missing: str = "—") -> str:
    if b is None:
        return missing
    if b.n == 1 or b.low == b.high:
        return _num(b.median, digits)
    return f"{_num(b.median, digits)} [{_num(b.low, digits)}–{_num(b.high, digits)}]"


def _effectiveness(t: TurnSummary) -> str:
    if t.cached_tokens is None:
        return NOT_REPORTED
    if t.cache_effectiveness is None:
        return "— (nothing shareable)"
    mark = "" if t.shareable_exact else "~"
    return f"{mark}{t.cache_effectiveness:.0%}"


def turn_table(result: RunResult) -> Table:
    """Per-turn figures: medians over measured repetitions with [min–max]."""
    table = Table(
        title="Per turn — medians over measured repetitions [min–max]",
        title_justify="left",
        header_style="bold",
    )
    for name, justify in (
        ("turn", "right"),
        ("aggregate tok/s", "right"),
        ("per-user tok/s", "right"),
        ("TTFT s", "right"),
        ("prefill tok/s", "right"),
        ("uncached tok/s", "right"),
        ("configured", "right"),
        ("prompt tok", "right"),
        ("cached tok", "right"),
        ("cache eff.", "right"),
        ("valid", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for t in result.summary.turns:
        table.add_row(
            str(t.turn),
            _band(t.aggregate_rate),
            _band(t.per_user_rate),
            _band(t.ttft_s, 2),
            _band(t.prefill_rate, 0),
            _band(t.uncached_prefill_rate, 0, missing=NOT_REPORTED),
            _num(t.configured_prompt_tokens, 0),
            _band(t.prompt_tokens, 0),
            _band(t.cached_tokens, 0, missing=NOT_REPORTED),
            _effectiveness(t),
            f"{t.valid}/{t.records}",
        )
    return table


def coordinates_line(result: RunResult) -> str:
    """Where this measurement sits: concurrency, actual prompt tokens, output, depth."""
    s = result.scenario
    prompts = [t.prompt_tokens for t in result.summary.turns if t.prompt_tokens]
    if prompts:
        low = min(p.low for p in prompts)
        high = max(p.high for p in prompts)
        actual = f"{low:,.0f}–{high:,.0f}" if low != high else f"{low:,.0f}"
    else:
        actual = "—"
    return (
        f"C{s.users} · actual prompt tokens {actual} (server count) · "
        f"{s.output_tokens} generated per turn · depth {s.opening_tokens:,} opening + "
        f"{s.turn_tokens:,} new per turn · {s.turns} turns × "
        f"{result.summary.run.measured_repetitions} measured repetitions"
    )


def run_line(result: RunResult) -> str:
    """The headline: users × per-user median = aggregate, as in the seed records."""
    r = result.summary.run
    if r.per_user_rate is None or r.aggregate_rate is None:
        return f"no valid measured turns ({r.errors} failed, {r.invalid} invalid)"
    ttft = f"TTFT median {r.ttft_s.median:.2f} s" if r.ttft_s else "TTFT —"
    return (
        f"{r.users} × {r.per_user_rate:.1f} per-user median = {r.aggregate_rate:.1f} aggregate "
        f"tok/s · {ttft} · {r.valid}/{r.records} valid turns"
    )


def sweep_table(result: RunResult) -> Table:
    """One row per cell, shaped like seed 000's throughput rows: configured prior-token
    target, actual prompt tokens (server count), median generation rate and its range."""
    cells = result.cells or []
    concurrent = any(c.concurrency > 1 for c in cells)
    table = Table(
        title="Per cell — turn-1 prompt tokens; generation rate over valid measured turns",
        title_justify="left",
        header_style="bold",
    )
    names = ["C", "prior\ntarget", "configured\nprompt", "actual\nprompt", "median\ntok/s",
             "range"]
    names += ["aggregate\ntok/s"] if concurrent else []
    names += ["TTFT s", "valid"]
    for name in names:  # "range" must not be cut: it is half of the seed's figure
        table.add_column(name, justify="right", no_wrap=name == "range", min_width=5)
    for cell in cells:
        first = cell.summary.turns[0] if cell.summary.turns else None
        rate = cell.generation_rate
        run = cell.summary.run
        row = [
            str(cell.concurrency),
            f"{cell.prior_tokens:,}",
            f"{cell.configured_prompt_tokens:,}",
            _span(first.prompt_tokens if first else None),
            _num(rate.median if rate else None),
            f"{_num(rate.low)}–{_num(rate.high)}" if rate else "—",
        ]
        row += [_num(run.aggregate_rate)] if concurrent else []
        row += [_num(run.ttft_s.median if run.ttft_s else None, 2), f"{run.valid}/{run.records}"]
        table.add_row(*row)
    return table


def _span(b: BandSummary | None) -> str:
    if b is None:
        return "—"
    if b.low == b.high:
        return f"{b.low:,.0f}"
    return f"{b.low:,.0f}–{b.high:,.0f}"


def sweep_line(result: RunResult) -> str:
    """Where a sweep sits: its axes and what every cell shares."""
    s = result.scenario
    cells = result.cells or []
    cs = sorted({c.concurrency for c in cells})
    ps = sorted({c.prior_tokens for c in cells})
    measured = max((c.summary.run.measured_repetitions for c in cells), default=0)
    return (
        f"sweep of {len(cells)} cells: C {', '.join(map(str, cs))} × prior "
        f"{', '.join(f'{p:,}' for p in ps)} tokens · {s.turn_tokens:,} new per turn · "
        f"{s.output_tokens} generated per turn · {_plural(s.turns, 'turn')} × {measured} "
        f"measured (+{s.repetitions.warmup} warm-up) per cell"
    )


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def sizing_line(result: RunResult) -> str | None:
    """How depths were sized, and what the tokenizer calls cost the target."""
    z = result.sizing
    if z is None:
        return None
    if z.exact:
        return (
            f"depths and shareable prefixes exact, from the target's {z.tokenizer}: "
            f"{z.calls:,} calls, {z.seconds:.1f} s, none between a request and its first token"
        )
    return f"depths sized with {z.tokenizer}; shareable prefixes are estimates (~)"


def render(result: RunResult) -> Group:
    """Everything the console shows after a run."""
    target = result.target
    where = "simulated server" if target.simulated else target.base_url
    header = Text.assemble(
        (f"{result.scenario.name}", "bold"),
        f" → {target.model} @ {where}",
        (f"  [{result.label}]" if result.label else ""),
    )
    parts: list[object] = [header]
    if result.cells is not None:
        parts += [Text(sweep_line(result)), sweep_table(result)]
    else:
        parts += [Text(coordinates_line(result)), turn_table(result)]
        parts.append(Text(run_line(result), style="bold"))
    if (line := sizing_line(result)) is not None:
        parts.append(Text(line))
    for warning in result.warnings:
        parts.append(Text(f"warning: {warning}", style="yellow"))
    if not result.complete:
        parts.append(Text("INCOMPLETE RUN", style="bold red"))
    return Group(*parts)  # type: ignore[arg-type]
