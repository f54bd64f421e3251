"""Console and markdown reports of a RunResult (rich tables). Returns renderables and text;
printing is the CLI's job."""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from workloads.aggregate import BandSummary, TurnSummary
from workloads.results import RunResult

__all__ = ["cache_table", "coordinates_line", "render", "run_line", "turn_table"]

NOT_REPORTED = "not reported"


def _num(value: float | None, digits: int | None = None) -> str:
    """Three significant figures or so: 1236, 247.2, 0.11 — no false precision."""
    if value is None:
        return "—"
    if digits is None:
        digits = 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2
    return f"{value:,.{digits}f}"


def _band(b: BandSummary | None, digits: int | None = None, *, missing: str = "—") -> str:
    if b is None:
        return missing
    if b.n == 1 or b.low == b.high:
        return _num(b.median, digits)
    return f"{_num(b.median, digits)} ({_num(b.low, digits)}–{_num(b.high, digits)})"


def _effectiveness(t: TurnSummary) -> str:
    if t.cached_tokens is None:
        return NOT_REPORTED
    if t.cache_effectiveness is None:
        return "— (none shareable)"
    mark = "" if t.shareable_exact else "~"
    return f"{mark}{t.cache_effectiveness:.0%}"


def _table(title: str, columns: list[str]) -> Table:
    table = Table(title=title, title_justify="left", header_style="bold", box=box.SIMPLE_HEAD)
    for i, name in enumerate(columns):
        table.add_column(name, justify="right" if i else "left", no_wrap=True)
    return table


def turn_table(result: RunResult) -> Table:
    """Per-turn rates and latency: medians over measured repetitions (min–max)."""
    table = _table(
        "Per turn — median over measured repetitions (min–max)",
        ["turn", "aggregate tok/s", "per-user tok/s", "TTFT s", "prefill tok/s",
         "uncached tok/s", "valid"],
    )
    for t in result.summary.turns:
        table.add_row(
            str(t.turn),
            _band(t.aggregate_rate),
            _band(t.per_user_rate),
            _band(t.ttft_s),
            _band(t.prefill_rate, 0),
            _band(t.uncached_prefill_rate, 0, missing=NOT_REPORTED),
            f"{t.valid}/{t.records}",
        )
    return table


def cache_table(result: RunResult) -> Table:
    """Per-turn tokens: configured depth, what the server counted, and what it cached."""
    table = _table(
        "Per turn — tokens (median, min–max); cache effectiveness = cached / shareable prefix"
        " (~ estimated)",
        ["turn", "configured prior", "prompt (server)", "shareable", "cached", "cache eff."],
    )
    for t in result.summary.turns:
        table.add_row(
            str(t.turn),
            f"{t.configured_prior_tokens:,}",
            _band(t.prompt_tokens, 0),
            _band(t.shareable_tokens, 0),
            _band(t.cached_tokens, 0, missing=NOT_REPORTED),
            _effectiveness(t),
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


def render(result: RunResult) -> Group:
    """Everything the console shows after a run."""
    target = result.target
    where = "simulated server" if target.simulated else target.base_url
    header = Text.assemble(
        (f"{result.scenario.name}", "bold"),
        f" → {target.model} @ {where}",
        (f"  [{result.label}]" if result.label else ""),
    )
    parts: list[object] = [
        header, Text(coordinates_line(result)), turn_table(result), cache_table(result)
    ]
    parts.append(Text(run_line(result), style="bold"))
    for warning in result.warnings:
        parts.append(Text(f"warning: {warning}", style="yellow"))
    if not result.complete:
        parts.append(Text("INCOMPLETE RUN", style="bold red"))
    return Group(*parts)  # type: ignore[arg-type]
