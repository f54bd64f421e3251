"""The console report of a RunResult: the per-turn table, cache effectiveness, the what-if
cache table, the run line, sweeps, then the window (:mod:`workloads.report.window`). Returns
renderables and text; printing is the CLI's job."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from workloads.model.results import RunResult
from workloads.model.summary import TurnSummary
from workloads.report.text import (
    NO_VALID,
    NOT_REPORTED,
    format_band,
    num,
    plural,
    span,
    titled_table,
)
from workloads.report.verdicts import verdict_lines
from workloads.report.window import window_section

__all__ = [
    "cache_table",
    "coordinates_line",
    "render",
    "run_line",
    "sizing_line",
    "sweep_line",
    "sweep_table",
    "turn_table",
    "what_if_table",
]


def _effectiveness(t: TurnSummary) -> str:
    if not t.valid:
        return NO_VALID
    if t.cached_tokens is None:
        return NOT_REPORTED
    if t.cache_effectiveness is None:
        return "— (none shareable)"
    mark = "" if t.shareable_exact else "~"
    return f"{mark}{t.cache_effectiveness:.0%}"



def _free(result: RunResult) -> bool:
    return result.scenario.pacing.mode != "lockstep"  # free or arrivals: streams need not overlap


def turn_table(result: RunResult) -> Table:
    """Per-turn rates and latency. Rates: medians over measured repetitions (min–max); TTFT
    and prefill: medians over the measured requests (min–max)."""
    free = _free(result)
    users = result.summary.run.users
    table = titled_table(
        "Per turn — rates: median over measured repetitions (min–max); TTFT and prefill: "
        "median over requests (min–max)",
        ["turn", "Σ streams tok/s †" if free else "aggregate tok/s", "wall tok/s",
         "per-user tok/s", "TTFT s", "prefill tok/s", "uncached tok/s", "valid"],
    )
    notes = []
    for t in result.summary.turns:
        missing = NO_VALID if not t.valid else "—"
        summed = format_band(t.aggregate_rate, missing=missing)
        if t.partial_repetitions:
            summed += " *"
            notes.append(
                f"turn {t.turn}: {plural(t.partial_repetitions, 'repetition')} of "
                f"{t.streams.n if t.streams else 0} summed fewer valid streams than the "
                f"{users} users ({span(t.streams)} streams per repetition)"
            )
        table.add_row(
            str(t.turn),
            summed,
            format_band(t.wall_aggregate_rate, missing=missing),
            format_band(t.per_user_rate, missing=missing),
            format_band(t.ttft_s, missing=missing),
            format_band(t.prefill_rate, 0, missing=missing, compact=True),
            format_band(t.uncached_prefill_rate, 0, compact=True,
                        missing=missing if not t.valid else NOT_REPORTED),
            f"{t.valid}/{t.records}",
        )
    captions = []
    if free:
        captions.append(
            "† free pacing: a turn's streams need not overlap in time, so their Σ overstates "
            "throughput; wall tok/s = Σ tokens / the turn's span"
        )
    if notes:
        captions.append(
            "* left out of aggregate and wall tok/s (a Σ over fewer streams is not the same "
            "figure): " + "; ".join(notes)
        )
    if captions:
        table.caption = "\n".join(captions)
        table.caption_justify = "left"
    return table


def cache_table(result: RunResult) -> Table:
    """Per-turn tokens: configured depth, what the server counted, and what it cached."""
    estimated = any(not t.shareable_exact for t in result.summary.turns if t.valid)
    table = titled_table(
        "Per turn — tokens (median, min–max); cache effectiveness = cached / shareable prefix"
        + (" (~ estimated)" if estimated else ""),
        ["turn", "configured prompt", "prompt (server)", "shareable", "cached", "cache eff."],
    )
    for t in result.summary.turns:
        table.add_row(
            str(t.turn),
            num(t.configured_prompt_tokens, 0),
            format_band(t.prompt_tokens, 0, missing=NO_VALID if not t.valid else "—"),
            format_band(t.shareable_tokens, 0),
            format_band(t.cached_tokens, 0, missing=NOT_REPORTED if t.valid else NO_VALID),
            _effectiveness(t),
        )
    return table


def what_if_table(result: RunResult) -> Table | None:
    """Observed prefix-cache hit rate per turn beside what the what-if oracle says a prefix
    cache would serve with no contention: an LRU of the server's KV capacity, and unlimited.
    None when the oracle did not run, or when every turn got what an unlimited cache would
    give (nothing to explain)."""
    if not result.cache_what_if:
        return None
    observed_rates = {t.turn: t.hit_rate for t in result.summary.turns}
    gap = 0.0
    for w in result.cache_what_if:
        best = w.unlimited_hit_rate or 0.0
        seen = observed_rates.get(w.turn)
        gap = max(gap, best - (w.lru_hit_rate or 0.0), best - (seen if seen is not None else best))
    if gap < 0.01:
        return None
    capacity = result.cache_what_if[0].capacity_tokens
    table = titled_table(
        "What-if prefix cache — hit rate, observed vs replayed with no contention",
        ["turn", "observed", f"LRU of {capacity:,} tokens", "unlimited"],
    )
    observed = {t.turn: t.hit_rate for t in result.summary.turns}

    def pct(value: float | None) -> str:
        return "—" if value is None else f"{value:.0%}"

    for w in result.cache_what_if:
        table.add_row(
            str(w.turn), pct(observed.get(w.turn)), pct(w.lru_hit_rate), pct(w.unlimited_hit_rate)
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
        f"{s.turn_tokens:,} new per turn · {plural(s.turns, 'turn')} × "
        f"{plural(result.summary.run.measured_repetitions, 'measured repetition')}"
    )


def run_line(result: RunResult) -> str:
    """The headline: the aggregate (median over full (repetition, turn)s of the Σ of their
    streams' post-first rates), the per-user median and the wall throughput. No headline from
    repetitions whose streams were not all valid: it says why instead (survivors decode
    faster, so such a figure reads high). With free pacing the streams need not overlap, so
    the per-user median and the wall throughput."""
    r = result.summary.run
    if r.per_user_rate is None:
        return f"no valid measured turns ({r.errors} failed, {r.invalid} invalid)"
    ttft = f"TTFT median {num(r.ttft_s.median)} s" if r.ttft_s else "TTFT —"
    wall = f"wall throughput {format_band(r.wall_aggregate_rate)} tok/s"
    valid = f"{r.valid:,}/{r.records:,} valid {'turn' if r.records == 1 else 'turns'}"
    if r.aggregate_rate is None and r.partial_turns and not r.full_turns:
        return (
            f"no headline: in no turn of any measured repetition were all {r.users} streams "
            f"valid ({plural(r.partial_turns, 'partial turn')}; a figure from the survivors "
            f"would read high) · {valid}"
        )
    if _free(result) or r.aggregate_rate is None:
        head = f"per-user median {num(r.per_user_rate)} tok/s; {wall}"
    else:
        left_out = f", {r.partial_turns} partial left out" if r.partial_turns else ""
        head = (
            f"aggregate {num(r.aggregate_rate)} tok/s (median Σ of {r.users} streams over "
            f"{plural(r.full_turns, 'turn')}{left_out}) · per-user median "
            f"{num(r.per_user_rate)} tok/s · {wall}"
        )
    return f"{head} · {ttft} · {valid}"



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
            span(first.prompt_tokens if first else None),
            num(rate.median if rate else None),
            f"{num(rate.low)}–{num(rate.high)}" if rate else "—",
        ]
        row += [num(run.aggregate_rate)] if concurrent else []
        row += [num(run.ttft_s.median if run.ttft_s else None, 2), f"{run.valid}/{run.records}"]
        table.add_row(*row)
    return table



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
        f"{s.output_tokens} generated per turn · {plural(s.turns, 'turn')} × {measured} "
        f"measured (+{s.repetitions.warmup} warm-up) per cell"
    )



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
        parts += [Text(coordinates_line(result)), turn_table(result), cache_table(result)]
        if (oracle := what_if_table(result)) is not None:
            parts.append(oracle)
        parts.append(Text(run_line(result), style="bold"))
    if (line := sizing_line(result)) is not None:
        parts.append(Text(line))
    if result.cells is None:
        parts.append(window_section(result))
    parts += [Text(text, style=style) for text, style in verdict_lines(result)]
    for warning in result.warnings:
        parts.append(Text(f"warning: {warning}", style="yellow"))
    if not result.complete:
        parts.append(Text("INCOMPLETE RUN", style="bold red"))
    return Group(*parts)  # type: ignore[arg-type]
