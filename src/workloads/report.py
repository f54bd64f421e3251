"""Console and markdown reports of a RunResult (rich tables). Returns renderables and text;
printing is the CLI's job."""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from workloads import aggregate
from workloads.aggregate import BandSummary, TurnSummary
from workloads.records import TurnRecord
from workloads.results import RunResult, Window
from workloads.telemetry.figures import EnergyFigures, Reconciliation, ServerTelemetry
from workloads.telemetry.reconcile import UsageSums
from workloads.telemetry.servers import server_names

__all__ = [
    "cache_table",
    "coordinates_line",
    "format_band",
    "recomputed",
    "render",
    "run_line",
    "sizing_line",
    "sweep_line",
    "sweep_table",
    "turn_table",
    "what_if_table",
    "window_lines",
]

NOT_REPORTED = "not reported"
NO_VALID = "— (no valid turns)"


def _num(value: float | None, digits: int | None = None, *, compact: bool = False) -> str:
    """Three significant figures or so: 1,236, 247.2, 0.11 — no false precision.
    ``compact``: 1,000 and above as thousands, 48.7k, 166k (narrow columns of prefill)."""
    if value is None:
        return "—"
    if compact and abs(value) >= 1000:
        return f"{value / 1000:,.{0 if abs(value) >= 100_000 else 1}f}k"
    if digits is None:
        digits = 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2
    return f"{value:,.{digits}f}"


def format_band(
    b: BandSummary | None, digits: int | None = None, *, missing: str = "—",
    compact: bool = False,
) -> str:
    """"median (low–high)", or the median alone when the band is one value as printed."""
    if b is None:
        return missing
    median, low, high = (_num(v, digits, compact=compact) for v in (b.median, b.low, b.high))
    if b.n == 1 or low == high:
        return median
    return f"{median} ({low}–{high})"


def _effectiveness(t: TurnSummary) -> str:
    if not t.valid:
        return NO_VALID
    if t.cached_tokens is None:
        return NOT_REPORTED
    if t.cache_effectiveness is None:
        return "— (none shareable)"
    mark = "" if t.shareable_exact else "~"
    return f"{mark}{t.cache_effectiveness:.0%}"


def _table(title: str, columns: list[str]) -> Table:
    table = Table(title=title, title_justify="left", header_style="bold", box=box.SIMPLE_HEAD,
                  pad_edge=False)
    for i, name in enumerate(columns):
        table.add_column(name, justify="right" if i else "left", no_wrap=True)
    return table


def _free(result: RunResult) -> bool:
    return result.scenario.pacing.mode == "free"


def turn_table(result: RunResult) -> Table:
    """Per-turn rates and latency. Rates: medians over measured repetitions (min–max); TTFT
    and prefill: medians over the measured requests (min–max)."""
    free = _free(result)
    users = result.summary.run.users
    table = _table(
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
                f"turn {t.turn}: {_plural(t.partial_repetitions, 'repetition')} of "
                f"{t.streams.n if t.streams else 0} summed fewer valid streams than the "
                f"{users} users ({_span(t.streams)} streams per repetition)"
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
    table = _table(
        "Per turn — tokens (median, min–max); cache effectiveness = cached / shareable prefix"
        + (" (~ estimated)" if estimated else ""),
        ["turn", "configured prompt", "prompt (server)", "shareable", "cached", "cache eff."],
    )
    for t in result.summary.turns:
        table.add_row(
            str(t.turn),
            _num(t.configured_prompt_tokens, 0),
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
    table = _table(
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
        f"{s.turn_tokens:,} new per turn · {_plural(s.turns, 'turn')} × "
        f"{_plural(result.summary.run.measured_repetitions, 'measured repetition')}"
    )


def run_line(result: RunResult) -> str:
    """The headline: users × per-user median = aggregate, as in the seed records; with free
    pacing the streams need not overlap, so the per-user median and the wall aggregate."""
    r = result.summary.run
    if r.per_user_rate is None:
        return f"no valid measured turns ({r.errors} failed, {r.invalid} invalid)"
    ttft = f"TTFT median {_num(r.ttft_s.median)} s" if r.ttft_s else "TTFT —"
    wall = f"wall aggregate {format_band(r.wall_aggregate_rate)} tok/s"
    if _free(result) or r.aggregate_rate is None:
        head = f"per-user median {_num(r.per_user_rate)} tok/s; {wall}"
    else:
        head = (
            f"{r.users} × {_num(r.per_user_rate)} per-user median = {_num(r.aggregate_rate)} "
            f"aggregate tok/s · {wall}"
        )
    valid = f"{r.valid:,}/{r.records:,} valid {'turn' if r.records == 1 else 'turns'}"
    return f"{head} · {ttft} · {valid}"


_FIGURE_NAMES = {
    "prompt_tokens": "prompt tokens",
    "cached_prompt_tokens": "cached tokens",
    "uncached_prompt_tokens": "uncached tokens",
    "generation_tokens": "generated tokens",
    "finished_requests": "finished requests",
    "spec_draft_tokens": "draft tokens",
    "spec_accepted_tokens": "accepted tokens",
}


def _count(value: float | None) -> str:
    return NOT_REPORTED if value is None else f"{value:,.0f}"


def _not_reported(t: ServerTelemetry, figure: str) -> str:
    names = server_names(t.server)
    why = names.not_exported.get(figure) if names is not None else None
    return f"{NOT_REPORTED} ({why})" if why else NOT_REPORTED


def _verdict(r: Reconciliation) -> str:
    if r.verdict == "reconciles":
        return "reconciles" if not r.tolerance else f"reconciles (±{r.tolerance:,.0f})"
    if r.verdict == "differs" and r.difference is not None:
        return f"differs by {r.difference:+,.0f}"
    return "unknown"


def reconciliation_table(t: ServerTelemetry) -> Table:
    """Each server counter's window delta against the client's sum over measured turns."""
    table = Table(box=None, header_style="bold", padding=(0, 1), pad_edge=False)
    table.add_column("reconciliation", no_wrap=True, min_width=17)
    table.add_column("server Δ", justify="right")
    table.add_column("client Σ", justify="right")
    table.add_column("client sums")
    table.add_column("verdict")
    for r in t.reconciliation:
        style = {"reconciles": "green", "differs": "yellow"}.get(r.verdict, "")
        table.add_row(
            _FIGURE_NAMES.get(r.figure, r.figure),
            _count(r.server),
            _count(r.client),
            r.client_basis.removeprefix("Σ "),
            Text(_verdict(r), style=style),
        )
    return table


def reconciliation_notes(t: ServerTelemetry) -> list[str]:
    """Why figures differ, cannot be reconciled, or reconcile only within a tolerance: one
    line per distinct explanation, naming the figures it covers."""
    groups: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for r in t.reconciliation:
        if r.causes:
            groups.setdefault((r.verdict, tuple(r.causes)), []).append(
                _FIGURE_NAMES.get(r.figure, r.figure)
            )
    out = []
    for (verdict, causes), figures in groups.items():
        lead = {"differs": "differ — likely: ", "unknown": "cannot be compared: "}.get(
            verdict, "reconcile "
        )
        out.append(f"{', '.join(figures)} {lead}{'; '.join(causes)}")
    return out


def _spec_line(t: ServerTelemetry) -> str:
    if t.spec_acceptance_rate is not None:
        line = (
            f"acceptance {t.spec_acceptance_rate:.4f} ({_count(t.spec_accepted_tokens)} "
            f"accepted / {_count(t.spec_draft_tokens)} draft tokens)"
        )
        if t.spec_mean_accepted_length is not None:
            line += (
                f" · mean accepted length {t.spec_mean_accepted_length:.2f} "
                f"({_count(t.spec_drafts)} drafts)"
            )
        return line
    if "spec_accept_rate" in t.gauges:
        g = t.gauges["spec_accept_rate"]
        return (
            f"acceptance ≈{g.mean:.4f}: mean of {g.samples} samples of a gauge over the last "
            "decode steps (this server has no draft counters)"
        )
    if t.spec_draft_tokens == 0:
        return "no drafts in the window"
    return f"{NOT_REPORTED} (speculative decoding off, or no draft counters)"


def _energy_line(e: EnergyFigures) -> str:
    if e.joules is None:
        return f"not available ({e.not_available})" if e.not_available else "not available"
    parts = [f"{e.joules:,.2f} J over {e.duration_s or 0:.3f} s on {e.device}"]
    if e.mean_watts is not None:
        parts.append(f"mean {e.mean_watts:,.2f} W")
    if e.joules_per_token is not None and e.tokens_per_joule is not None:
        parts.append(
            f"{e.joules_per_token:,.2f} J/token · {e.tokens_per_joule:.4f} tokens/J over "
            f"{e.generated_tokens:,} generated tokens (includes prefill)"
        )
    return " · ".join(parts)


def _timings_spec_line(records: Sequence[TurnRecord]) -> str | None:
    """Acceptance from llama.cpp's per-response timings, when the responses carry them."""
    usage = UsageSums.of(records)
    if not usage.draft or usage.accepted is None:
        return None
    return (
        f"acceptance {usage.accepted / usage.draft:.4f} ({usage.accepted:,} accepted / "
        f"{usage.draft:,} draft tokens, from per-response timings)"
    )


def window_lines(
    window: Window, records: Sequence[TurnRecord] = ()
) -> list[tuple[str, str]]:
    """The window's figures other than the reconciliation, as (label, text) rows.
    ``records`` (the measured TurnRecords) supply per-response figures the server's
    counters lack."""
    rows: list[tuple[str, str]] = []
    timings_spec = _timings_spec_line(records)
    t = window.server
    if t is None:
        rows.append(("server", "metrics not read"))
    elif t.server is None:
        rows.append(("server", f"{NOT_REPORTED}: no readable metrics at {t.metrics_url}"))
    else:
        failed = f", {t.failed_scrapes} failed" if t.failed_scrapes else ""
        rows.append(("server", f"{t.server} · {t.metrics_url} · {t.scrapes} scrapes{failed}"))
        if not t.metrics_used:
            rows.append(("counters", f"{NOT_REPORTED} (the window-end scrape failed)"))
        else:
            if t.prefix_cache_queries == 0:
                cache = "no prefix-cache queries in the window"
            elif t.prefix_cache_hits is not None and t.prefix_cache_queries is not None:
                cache = (
                    f"{t.prefix_cache_hits:,.0f} hits / {t.prefix_cache_queries:,.0f} queried "
                    f"tokens = {_hit_rate(t.prefix_cache_hit_rate)}"
                )
            elif t.prefix_cache_hit_rate is not None:
                cache = f"{_hit_rate(t.prefix_cache_hit_rate)} (cached / prompt tokens)"
            else:
                cache = NOT_REPORTED
            rows.append(("prefix cache", cache))
            if t.finished_reasons is not None:
                reasons = [f"{k} {v:,.0f}" for k, v in sorted(t.finished_reasons.items()) if v]
                rows.append(("finish reasons", " · ".join(reasons) or "none"))
            spec = _spec_line(t)
            if t.spec_acceptance_rate is None and timings_spec is not None:
                spec = timings_spec
            rows.append(("spec decoding", spec))
            rows.append((
                "preemptions",
                _not_reported(t, "preemptions") if t.preemptions is None
                else _count(t.preemptions),
            ))
        kv = t.gauges.get("kv_usage")
        if kv is None:
            kv_text = _not_reported(t, "kv_usage")
        elif t.kv_usage_peak is None:
            kv_text = (
                f"{NOT_REPORTED} (no sample inside the window, which was shorter than the "
                f"sampling interval; {kv.last:.2%} at its end)"
            )
        else:
            kv_text = f"{t.kv_usage_peak:.2%} (mean {kv.mean:.2%} over {kv.samples} samples)"
        rows.append(("KV usage peak", kv_text))
    if (t is None or t.server is None or not t.metrics_used) and timings_spec is not None:
        rows.append(("spec decoding", timings_spec))
    if window.energy is not None:
        rows.append(("energy", _energy_line(window.energy)))
    return rows


def _hit_rate(rate: float | None) -> str:
    return NOT_REPORTED if rate is None else f"{rate:.1%} hit rate"


def window_section(result: RunResult) -> Group:
    """The "Window" block of the console report."""
    w = result.window
    head = "Window — measured repetitions only (warm-up excluded)"
    if w.duration_s is not None:
        head += f", {w.duration_s:.2f} s"
    parts: list[object] = [Text(head, style="bold")]
    rows = window_lines(w, [r for r in result.records if not r.warmup])

    def grid(chunk: list[tuple[str, str]]) -> Table:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold", no_wrap=True, min_width=17)
        table.add_column()
        for label, text in chunk:
            table.add_row(label, Text(text))  # Text: "[nvidia]" in a hint is not markup
        return table

    parts.append(grid(rows[:1]))  # which server, where, how many scrapes
    t = w.server
    if t is not None and t.reconciliation:
        parts.append(reconciliation_table(t))
        parts += [Text(note, style="yellow") for note in reconciliation_notes(t)]
    parts.append(grid(rows[1:]))
    return Group(*parts)  # type: ignore[arg-type]


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


def recomputed(result: RunResult) -> RunResult:
    """The result with its summary, and every cell's summary and generation rate, recomputed
    from its records (the file's summaries are a cache). Unchanged when it has no records."""
    if not result.records:
        return result
    update: dict[str, object] = {
        "summary": aggregate.summarize(result.records, users=result.scenario.users)
    }
    if result.cells is not None:
        cells = []
        for cell in result.cells:
            mine = [r for r in result.records if r.cell == cell.cell]
            cells.append(cell.model_copy(update={
                "summary": aggregate.summarize(mine, users=cell.concurrency),
                "generation_rate": aggregate.generation_rate(mine),
            }))
        update["cells"] = cells
    return result.model_copy(update=update)


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
    for warning in result.warnings:
        parts.append(Text(f"warning: {warning}", style="yellow"))
    if not result.complete:
        parts.append(Text("INCOMPLETE RUN", style="bold red"))
    return Group(*parts)  # type: ignore[arg-type]
