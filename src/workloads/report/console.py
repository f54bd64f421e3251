"""The console report of a RunResult: the per-turn table, cache effectiveness, the what-if
cache table, the run line, sweeps, then the window (:mod:`workloads.report.window`). Returns
renderables and text; printing is the CLI's job.

Size: past 400 lines: one builder per block of the report (turns, tokens, latency, what-if,
sweep cells, lines); each is short and they share the number formats of report/text.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.console import Group
from rich.text import Text

from workloads.core.agent import planned_requests
from workloads.core.concurrency import LOW_DECODE_OVERLAP
from workloads.core.traces import observed_hit_rate
from workloads.model.results import RunResult
from workloads.model.scenario import Scenario, describe
from workloads.model.summary import BandSummary, Percentiles, TurnSummary
from workloads.report import agent_trace, agents, flow, goodput, rates
from workloads.report.table import Block, Line, ReportTable
from workloads.report.text import (
    BOUNDS_NOTE,
    NO_VALID,
    NOT_REPORTED,
    format_band,
    num,
    percentile_text,
    plural,
    span,
)
from workloads.report.verdicts import verdict_lines
from workloads.report.window import window_blocks

__all__ = [
    "blocks",
    "cache_table",
    "client_line",
    "concurrency_line",
    "coordinates_line",
    "latency_table",
    "overstates_line",
    "predicted_line",
    "records_notes",
    "render",
    "run_line",
    "scenarios_table",
    "sizing_line",
    "stopped_early",
    "sweep_line",
    "sweep_server_table",
    "sweep_table",
    "turn_table",
    "users_label",
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


# A fleet's per-turn tables show its first turns: later turn numbers are reached by fewer and
# fewer sessions (a session's length is drawn), so their rows say little; the per-kind table
# and result.json have every step.
FLEET_TURN_ROWS = 16


def shown_turns(result: RunResult) -> list[TurnSummary]:
    """The per-turn summaries the per-turn tables show: all, or a fleet's first
    :data:`FLEET_TURN_ROWS`."""
    turns = result.summary.turns
    return turns[:FLEET_TURN_ROWS] if result.scenario.fleet is not None else turns


def fleet_turns_line(result: RunResult) -> str | None:
    """What a fleet's per-turn tables leave out; None when they show every turn."""
    turns = result.summary.turns
    if result.scenario.fleet is None or len(turns) <= FLEET_TURN_ROWS:
        return None
    return (
        f"per-turn tables: turns 1–{FLEET_TURN_ROWS} of {len(turns)} (a fleet: later turns "
        "are steps of fewer, longer sessions; the per-kind table counts every step, and "
        "result.json has every turn)"
    )


def turn_table(result: RunResult) -> ReportTable:
    """Per-turn rates and latency. Rates: medians over measured repetitions (min–max); TTFT
    and prefill: medians over the measured requests (min–max)."""
    figures = rates.turn_rates(result)  # the aggregate, or wall throughput first and a Σ †
    summed_name = rates.STREAMS_SUM.label if rates.free_pacing(result) else "aggregate"
    users = result.summary.run.users
    table = ReportTable(
        "Per turn — rates: median over measured repetitions (min–max); TTFT and prefill: "
        "median over requests (min–max)",
        ["turn", *(f.label for f in figures), "TTFT s", "prefill tok/s", "uncached tok/s", "valid"],
        name="turns",
    )
    notes = []
    partial = []
    marked = []  # lock-step turns whose streams did not decode together: the aggregate ‡
    for t in shown_turns(result):
        missing = NO_VALID if not t.valid else "—"
        cells = [format_band(f.read(t), missing=missing) for f in figures]
        if figures[0] is rates.AGGREGATE and rates.low_overlap(_median(t.decode_overlap)):
            cells[0] += f" {rates.OVERSTATES}"
            marked.append(t)
        if t.partial_repetitions and any(f.summed for f in figures):
            cells = [c + " *" if f.summed else c for f, c in zip(figures, cells, strict=True)]
            partial.append(t)
            notes.append(
                f"turn {t.turn}: {plural(t.partial_repetitions, 'repetition')} of "
                f"{t.streams.n if t.streams else 0} summed fewer valid streams than the "
                f"{plural(users, 'user')} ({span(t.streams)} streams per repetition)"
            )
        table.add_row(
            str(t.turn),
            *cells,
            format_band(t.ttft_s, missing=missing),
            format_band(t.prefill_rate, 0, missing=missing, compact=True),
            format_band(
                t.uncached_prefill_rate,
                0,
                compact=True,
                missing=missing if not t.valid else NOT_REPORTED,
            ),
            f"{t.valid}/{t.records}" + (f", {t.cancelled} cancelled" if t.cancelled else ""),
        )
    captions = [note] if (note := rates.dagger_note(result)) else []
    if len(notes) > 3:  # one line, not one clause per turn
        low = min(t.streams.low for t in partial if t.streams) if partial else 0
        why = (
            " (sessions that played fewer steps, or failed turns)"
            if result.scenario.agent is not None
            else ""
        )
        notes = [
            f"turns {', '.join(str(t.turn) for t in partial)}: some repetitions summed fewer "
            f"valid streams than the {plural(users, 'user')}{why}, as few as {low:,.0f}"
        ]
    if notes:
        captions.append(
            f"* left out of {summed_name} and wall tok/s (a Σ over fewer streams is not the same "
            "figure): " + "; ".join(notes)
        )
    if marked:
        captions.append(_overstates_caption(marked, users))
    table.notes.extend(captions)
    return table


def _median(b: BandSummary | None) -> float | None:
    return b.median if b is not None else None


def _overstates_caption(turns: list[TurnSummary], users: int) -> str:
    """Why the marked turns' aggregate overstates, in the figures of the lowest overlap."""
    t = min(turns, key=lambda t: _median(t.decode_overlap) or 0.0)
    where = (
        f"turn {t.turn}: "
        if len(turns) == 1
        else f"turns {', '.join(str(x.turn) for x in turns)} (the lowest, turn {t.turn}): "
    )
    overlap = _median(t.decode_overlap) or 0.0
    return rates.overstates_note(overlap, _median(t.streams_decoding), users, where=where)


def _spec_shown(result: RunResult) -> bool:
    """Whether the tokens table has a spec-acceptance column: some turn's responses
    reported their drafts, or the server's counters saw drafting in the window."""
    if any(t.spec_draft_tokens is not None for t in result.summary.turns):
        return True
    server = result.window.server
    return server is not None and bool(server.spec_draft_tokens)


def _spec_acceptance(t: TurnSummary) -> str:
    if t.spec_draft_tokens is None:
        return NOT_REPORTED
    if t.spec_acceptance is None:
        return "none drafted"
    return f"{t.spec_acceptance:.1%} of {t.spec_draft_tokens:,}"


def cache_table(result: RunResult) -> ReportTable:
    """Per-turn tokens: configured depth, what the server counted, and what it cached;
    with speculative decoding, the per-turn acceptance."""
    spec = _spec_shown(result)
    estimated = any(not t.shareable_exact for t in result.summary.turns if t.valid)
    # Drawn sizes give every session its own configured prompt: no one number per turn.
    configured = not result.scenario.sizes_vary
    table = ReportTable(
        "Per turn — tokens (median, min–max, over the requests whose shareable prefix is "
        "known); cache effectiveness = cached / shareable prefix"
        + (" (~ estimated)" if estimated else ""),
        [
            "turn",
            *(["configured prompt"] if configured else []),
            "prompt (server)",
            "shareable",
            "cached",
            "cache eff.",
            *(["spec accepted"] if spec else []),
        ],
        name="tokens",
    )
    if spec:
        table.notes.append(
            "spec accepted: accepted / drafted tokens over the turn's responses, from their "
            "own counts (llama.cpp's timings.draft_n_accepted / draft_n); not reported where "
            "the responses carry none (the window's acceptance, from the server's counters, "
            "is below)"
        )
    for t in shown_turns(result):
        table.add_row(
            str(t.turn),
            *([num(t.configured_prompt_tokens, 0)] if configured else []),
            format_band(t.prompt_tokens, 0, missing=NO_VALID if not t.valid else "—"),
            format_band(t.shareable_tokens, 0),
            format_band(t.cached_tokens, 0, missing=NOT_REPORTED if t.valid else NO_VALID),
            _effectiveness(t),
            *([_spec_acceptance(t)] if spec else []),
        )
    return table


def what_if_table(result: RunResult) -> ReportTable | None:
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
    table = ReportTable(
        "What-if prefix cache — hit rate, observed vs replayed with no contention",
        ["turn", "observed", f"LRU of {capacity:,} tokens", "unlimited"],
        name="what_if",
    )
    observed = {t.turn: t.hit_rate for t in result.summary.turns}

    def pct(value: float | None) -> str:
        return "—" if value is None else f"{value:.0%}"

    last = shown_turns(result)[-1].turn if result.summary.turns else 0
    for w in result.cache_what_if:
        if w.turn > last:
            continue
        table.add_row(
            str(w.turn), pct(observed.get(w.turn)), pct(w.lru_hit_rate), pct(w.unlimited_hit_rate)
        )
    return table


LOW_IN_FLIGHT = 0.5  # of users: below it, "C32" needs the in-flight mean and its why


def users_label(result: RunResult) -> str:
    """ "C32", and when free or arrivals pacing kept fewer requests in flight than half the
    users, what ran and why: how many sessions were active at once on average (between
    their first send and last response) and how much of that time each had a request in
    flight. Their product is the time-weighted mean in flight (one request at a time per
    session), so the why adds up to the figure it explains."""
    s, c = result.scenario, result.concurrency
    label = f"C{s.users}"
    if c is None or s.pacing.mode == "lockstep" or c.mean >= LOW_IN_FLIGHT * s.users:
        return label
    sessions: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
    for r in result.records:
        end = r.done_ns or r.last_content_ns or r.first_content_ns or r.headers_ns
        if not r.warmup and r.sent_ns is not None and end is not None and end >= r.sent_ns:
            sessions.setdefault((r.cell, r.repetition, r.session), []).append((r.sent_ns, end))
    spans = sum(max(e for _, e in v) - min(t for t, _ in v) for v in sessions.values())
    busy = sum(e - t for v in sessions.values() for t, e in v)
    if spans <= 0 or c.span_s <= 0:
        return label
    return (
        f"{label} (requests in flight averaged {c.mean:.1f}: "
        f"{spans / 1e9 / c.span_s:.1f} sessions active at a time on average, each with a "
        f"request in flight {busy / spans:.0%} of that time and between turns the rest)"
    )


def _actual_prompts(result: RunResult) -> str:
    """The range of the prompts the server counted, over the users' own valid measured
    requests (every one: the per-turn table's medians leave out those whose shareable
    prefix is not known)."""
    prompts = [
        r.prompt_tokens
        for r in result.records
        if not r.warmup and r.valid and r.parent_session is None and r.prompt_tokens
    ]
    if not prompts:
        return "—"
    low, high = min(prompts), max(prompts)
    return f"{low:,.0f}–{high:,.0f}" if low != high else f"{low:,.0f}"


def coordinates_line(result: RunResult) -> str:
    """Where this measurement sits: concurrency, actual prompt tokens, output, depth."""
    s = result.scenario
    actual = _actual_prompts(result)
    repetitions = plural(result.summary.run.measured_repetitions, "measured repetition")
    if s.sizes_vary:  # one number per size would be wrong: name each drawn size's median
        steps = (
            f"up to {plural(s.turns, 'step')} per session"
            if s.agent is not None
            else plural(s.turns, "turn")
        )
        if s.fleet is not None:
            windows = plural(result.summary.run.measured_repetitions, "measured window")
            return (
                f"{users_label(result)} · actual prompt tokens {actual} (server count) · "
                f"{agents.sizes_line(result)} · a fleet: each slot plays session after "
                f"session (up to {plural(s.turns, 'step')} each) for {windows} of "
                f"{s.fleet.window_s:g} s"
            )
        return (
            f"{users_label(result)} · actual prompt tokens {actual} (server count) · "
            f"{agents.sizes_line(result)} · {steps} × {repetitions}"
        )
    return (
        f"{users_label(result)} · actual prompt tokens {actual} (server count) · "
        f"{describe(s.output_tokens)} generated per turn · depth "
        f"{describe(s.opening_tokens)} opening + {describe(s.turn_tokens)} new per turn · "
        f"{plural(s.turns, 'turn')} × {repetitions}"
    )


def run_line(result: RunResult) -> str:
    """The headline: the aggregate (median over full (repetition, turn)s of the Σ of their
    streams' post-first rates), the per-user median and the wall throughput. No headline from
    repetitions whose streams were not all valid: it says why instead (survivors decode
    faster, so such a figure reads high). With free pacing the streams need not overlap, so
    no aggregate: the wall throughput, then the per-user median. Where lock-step streams did
    not decode together (a low decode overlap) the wall throughput leads and the aggregate
    carries ‡, which :func:`overstates_line` explains."""
    r = result.summary.run
    cut = f", {r.cancelled} cancelled" if r.cancelled else ""
    if r.per_user_rate is None and not r.valid:
        return f"no valid measured turns ({r.errors} failed, {r.invalid} invalid{cut})"
    ttft = f"TTFT median {num(r.ttft_s.median)} s" if r.ttft_s else "TTFT —"
    wall = f"wall throughput {format_band(r.wall_aggregate_rate)} tok/s"
    valid = f"{r.valid:,}/{r.records:,} valid {'turn' if r.records == 1 else 'turns'}{cut}"
    # One-token replies have no post-first rate: no stream counts toward a turn's Σ, so
    # every turn reads partial although every turn was valid; the headline says so instead.
    # (Free pacing has no aggregate to lead with: the wall throughput leads, below; a fleet's
    # turns, steps of sessions that start and end at any time, are never all full.)
    free = rates.free_pacing(result)
    if (
        not free
        and r.aggregate_rate is None
        and r.partial_turns
        and not r.full_turns
        and r.per_user_rate
    ):
        return (
            f"no headline: in no turn of any measured repetition were all {r.users} streams "
            f"valid ({plural(r.partial_turns, 'partial turn')}; a figure from the survivors "
            f"would read high) · {valid}"
        )
    if r.per_user_rate is None:  # valid turns, but no reply had a second token to time
        head = f"{wall} · per-user rate not measured (no valid reply had two tokens)"
    elif free:  # no aggregate: the wall throughput leads
        head = f"{wall} · per-user median {num(r.per_user_rate)} tok/s"
    elif r.aggregate_rate is None:
        head = f"per-user median {num(r.per_user_rate)} tok/s; {wall}"
    else:
        left_out = f", {r.partial_turns} partial left out" if r.partial_turns else ""
        summed = (
            f"aggregate {num(r.aggregate_rate)} tok/s (median Σ of {r.users} streams over "
            f"{plural(r.full_turns, 'turn')}{left_out})"
        )
        per_user = f"per-user median {num(r.per_user_rate)} tok/s"
        if rates.low_overlap(r.decode_overlap):  # the Σ overstates: the wall throughput leads
            head = f"{wall} · {summed} {rates.OVERSTATES} · {per_user}"
        else:
            head = f"{summed} · {per_user} · {wall}"
    line = f"{head} · {ttft} · {valid}"
    if r.request_rate is not None:
        line += f" · {format_band(r.request_rate)} requests/s"
    return line


def overstates_line(result: RunResult) -> str | None:
    """Why the headline's aggregate carries ‡ (its streams did not decode together); None
    when it carries none."""
    r = result.summary.run
    if r.aggregate_rate is None or r.decode_overlap is None:
        return None
    if rates.free_pacing(result) or not rates.low_overlap(r.decode_overlap):
        return None
    return rates.overstates_note(r.decode_overlap, r.streams_decoding, r.users)


def sweep_table(result: RunResult) -> ReportTable:
    """One row per cell, shaped like seed 000's throughput rows: configured prior-token
    target, actual prompt tokens (server count), median generation rate and its range."""
    cells = result.cells or []
    concurrent = any(c.concurrency > 1 for c in cells)
    names = ["C", "prior target", "configured prompt", "actual prompt", "median tok/s", "range"]
    # No aggregate where streams need not overlap: the wall throughput (per repetition).
    free = rates.free_pacing(result)
    names += [(rates.WALL if free else rates.AGGREGATE).label] if concurrent else []
    names += ["TTFT s", "requests/s", "valid"]
    table = ReportTable(
        "Per cell — turn-1 prompt tokens; generation rate over valid measured turns",
        names,
        key=2,
        name="cells",
    )
    marked: list[str] = []  # cells whose streams did not decode together
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
        wall = run.wall_aggregate_rate.median if run.wall_aggregate_rate else None
        summed = num(wall if free else run.aggregate_rate)
        if not free and run.aggregate_rate is not None and rates.low_overlap(run.decode_overlap):
            summed += f" {rates.OVERSTATES}"
            marked.append(f"C{cell.concurrency} {run.decode_overlap:.0%}")
        row += [summed] if concurrent else []
        row += [
            num(run.ttft_s.median if run.ttft_s else None, 2),
            num(run.request_rate.median if run.request_rate else None),
            f"{run.valid}/{run.records}"
            + (f", {run.cancelled} cancelled" if run.cancelled else ""),
        ]
        table.add_row(*row)
    if marked:
        table.notes.append(
            f"{rates.OVERSTATES} the streams decoded together under "
            f"{LOW_DECODE_OVERLAP:.0%} of their decode time ({', '.join(marked)}; median "
            "over turns): a stream decodes faster alone, so the Σ of their rates overstates "
            "what the server delivered; read the cell's wall throughput"
        )
    return table


def sweep_line(result: RunResult) -> str:
    """Where a sweep sits: its axes and what every cell shares."""
    s = result.scenario
    cells = result.cells or []
    cs = sorted({c.concurrency for c in cells})
    ps = sorted({c.prior_tokens for c in cells})
    measured = max((c.summary.run.measured_repetitions for c in cells), default=0)
    return (
        f"sweep of {plural(len(cells), 'cell')}: C {', '.join(map(str, cs))} × prior "
        f"{', '.join(f'{p:,}' for p in ps)} tokens · {describe(s.turn_tokens)} new per turn · "
        f"{describe(s.output_tokens)} generated per turn · {plural(s.turns, 'turn')} × "
        f"{measured} "
        f"measured (+{s.repetitions.warmup} warm-up) per cell"
    )


def trace_lines(result: RunResult) -> list[str]:
    """A trace replay: the trace, and its prefix-cache hit rate observed beside the ideal
    one (an unlimited cache at the trace's block size). Each line fits 80 columns."""
    t = result.trace
    if t is None:
        return []
    observed = observed_hit_rate(result.records) if result.records else t.observed_hit_rate
    cut = " (cut by scenario.trace limits)" if t.truncated else ""

    def pct(value: float | None) -> str:
        return "not reported" if value is None else f"{value:.1%}"

    return [
        f"trace {t.file} · sha256 {t.sha256[:12]} · {t.requests:,} requests{cut}",
        f"  over {t.duration_s:,.1f} s × time_scale {t.time_scale:g} · "
        f"{t.input_tokens:,} input, {t.output_tokens:,} output tokens",
        f"prefix-cache hit rate: observed {pct(observed)} · ideal {pct(t.ideal_hit_rate)}",
        f"  (ideal: an unlimited cache of {t.block_tokens}-token blocks, token-weighted)",
    ]


def _trace_coordinates(result: RunResult) -> str:
    """Where a trace replay sits: its prompts as the server counted them."""
    actual = _actual_prompts(result)
    runs = plural(result.summary.run.measured_repetitions, "measured repetition")
    return f"open loop, one turn per request · prompt tokens {actual} (server count) · {runs}"


def sizing_line(result: RunResult) -> str | None:
    """How depths were sized, and what the tokenizer calls cost the target."""
    z = result.sizing
    if z is None:
        return None
    if result.trace is not None:
        how = f"the target's {z.tokenizer}" if z.exact else z.tokenizer
        return (
            f"trace blocks cut to {result.trace.block_tokens} tokens by {how}: "
            f"{z.calls:,} calls, {z.seconds:.1f} s, all before the window"
        )
    if z.exact:
        estimated = _estimate_sized(result)
        why = "quiet sizing: no /tokenize call while streams were in flight"
        if z.fallbacks:
            why = "quiet sizing, or a failed /tokenize call: see warnings"
        if estimated:
            return (
                f"depths and shareable prefixes exact, from the target's {z.tokenizer} "
                f"({z.calls:,} calls, {z.seconds:.1f} s, none between a request and its first "
                f"token), except {plural(estimated, 'measured turn')} sized by tiktoken "
                f"estimate ({why}), shareable prefixes ~"
            )
        return (
            f"depths and shareable prefixes exact, from the target's {z.tokenizer}: "
            f"{z.calls:,} calls, {z.seconds:.1f} s, none between a request and its first token"
        )
    return f"depths sized with {z.tokenizer}; shareable prefixes are estimates (~)"


def _estimate_sized(result: RunResult) -> int:
    """Measured turns sized without the target's /tokenize count (quiet sizing inside the
    window, or a failed call), though the target has one."""
    return sum(
        1
        for r in result.records
        if not r.warmup and r.tokenized_prompt_tokens is None and r.prompt_tokens is not None
    )


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def sweep_server_table(result: RunResult) -> ReportTable | None:
    """Per cell: cache effectiveness and hit rate from the responses' usage, beside the
    server's own window figures (its prefix-cache hit rate, whether its counters reconcile
    with usage, KV usage peak, preemptions, acceptance). None for a run without cells."""
    if result.cells is None:
        return None
    table = ReportTable(
        "Per cell — cache (from usage) and the server's window figures",
        [
            "C",
            "prior target",
            "cache eff.",
            "hit rate",
            "server hit rate",
            "counters",
            "KV peak",
            "preemptions",
        ],
        key=2,
        name="cells_server",
        left=(5,),
    )
    speculating = any(
        c.window.server is not None and c.window.server.spec_acceptance_rate is not None
        for c in result.cells
    )
    if speculating:
        table.columns.append("acceptance")
    for cell in result.cells:
        valid = [
            r
            for r in result.records
            if r.cell == cell.cell and r.valid and not r.warmup and r.cached_tokens is not None
        ]
        both = [r for r in valid if r.shareable_tokens is not None]
        shareable = sum(r.shareable_tokens or 0 for r in both)
        prompt = sum(r.prompt_tokens or 0 for r in valid)
        if not valid:
            eff, hit = NOT_REPORTED, NOT_REPORTED
        else:
            eff = (
                "— (none shareable)"
                if shareable == 0
                else _pct(sum(r.cached_tokens or 0 for r in both) / shareable)
            )
            hit = _pct(sum(r.cached_tokens or 0 for r in valid) / prompt if prompt else None)
        t = cell.window.server
        if t is None or t.server is None or not t.metrics_used:
            server = [NOT_REPORTED, "not read", "—", "—", "—"]  # hit rate … acceptance
        else:
            verdicts = [r.verdict for r in t.reconciliation]
            differs = verdicts.count("differs")
            counters = (
                "reconcile"
                if verdicts and all(v == "reconciles" for v in verdicts)
                else f"{differs} differ"
                if differs
                else "unknown"
            )
            server = [
                _pct(t.prefix_cache_hit_rate)
                if t.prefix_cache_hit_rate is not None
                else NOT_REPORTED,
                counters,
                "—" if t.kv_usage_peak is None else f"{t.kv_usage_peak:.1%}",
                NOT_REPORTED if t.preemptions is None else f"{t.preemptions:,.0f}",
                "—" if t.spec_acceptance_rate is None else f"{t.spec_acceptance_rate:.3f}",
            ]
        if not speculating:
            server = server[:4]
        table.add_row(str(cell.concurrency), f"{cell.prior_tokens:,}", eff, hit, *server)
    return table


def _latency_rows(table: ReportTable, key: list[str], p: dict[str, Percentiles | None]) -> None:
    for figure, (scale, digits) in _LATENCY_UNITS.items():
        d = p[figure]
        if d is None:
            continue
        values = [percentile_text(d, q, scale, digits) for q in (50.0, 90.0, 99.0)]
        table.add_row(*key, figure, *values, num(d.max * scale, digits), f"{d.n:,}")


# seconds for TTFT and end-to-end latency, milliseconds for the gaps between chunks
_LATENCY_UNITS = {"TTFT s": (1.0, None), "ITL ms": (1000.0, None), "E2E s": (1.0, None)}


def latency_table(result: RunResult) -> ReportTable | None:
    """TTFT, inter-token latency (ITL: each gap between content chunks) and end-to-end
    latency (sent → end of stream): p50, p90, p99 and max over the valid measured
    requests, per turn and for the run (per cell for a sweep). None when nothing is known."""
    columns = ["p50", "p90", "p99", "max", "n"]
    if result.cells is not None:
        table = ReportTable(
            "Per cell — latency over valid measured requests (ITL: gaps between content chunks)",
            ["C", "prior target", "latency", *columns],
            key=3,
            name="latency",
        )
        for cell in result.cells:
            run = cell.summary.run
            _latency_rows(
                table,
                [str(cell.concurrency), f"{cell.prior_tokens:,}"],
                {
                    "TTFT s": run.ttft_percentiles,
                    "ITL ms": run.itl_percentiles,
                    "E2E s": run.e2e_percentiles,
                },
            )
    else:
        table = ReportTable(
            "Latency over valid measured requests (ITL: gaps between content chunks)",
            ["turn", "latency", *columns],
            key=2,
            name="latency",
        )
        for t in shown_turns(result):
            _latency_rows(
                table,
                [str(t.turn)],
                {
                    "TTFT s": t.ttft_percentiles,
                    "ITL ms": t.itl_percentiles,
                    "E2E s": t.e2e_percentiles,
                },
            )
        run = result.summary.run
        if len(result.summary.turns) > 1:
            _latency_rows(
                table,
                ["all"],
                {
                    "TTFT s": run.ttft_percentiles,
                    "ITL ms": run.itl_percentiles,
                    "E2E s": run.e2e_percentiles,
                },
            )
    if not table.rows:
        return None
    itl = any(row[table.key - 1] == "ITL ms" for row in table.rows)
    if any("[" in cell or cell.startswith("needs") for row in table.rows for cell in row):
        table.notes.append(BOUNDS_NOTE + (goodput.ITL_BOUNDS_NOTE if itl else ""))
    if not itl:
        table.notes.append("ITL not recorded: these records carry no content-chunk arrival times")
    return table


def scenarios_table(scenarios: Sequence[Scenario]) -> ReportTable:
    """The packaged scenarios: shape and what each is (a sweep axis as "low–high")."""

    def axis(values: set[int]) -> str:
        low, high = min(values), max(values)
        return f"{low:,}" if low == high else f"{low:,}–{high:,}"

    table = ReportTable(
        "Scenarios — run one with: python -m workloads run NAME",
        ["name", "users", "turns", "opening", "new/turn", "output", "what"],
        name="scenarios",
        left=(6,),
    )
    for s in scenarios:
        cells = s.cells()
        table.add_row(
            s.name,
            axis({c.concurrency for c in cells}),
            str(s.turns),
            axis({c.prior_tokens for c in cells}),
            describe(s.turn_tokens),
            describe(s.output_tokens),
            s.description or "",
        )
    return table


def concurrency_line(result: RunResult) -> str | None:
    """Requests in flight over the measured span: set by the scenario in lock-step, an
    outcome of arrivals and the server's speed otherwise."""
    c = result.concurrency
    if c is None:
        return None
    return f"in flight: mean {c.mean:.1f}, max {c.max} requests over the measured {c.span_s:,.1f} s"


def client_line(result: RunResult) -> str | None:
    """How the client itself fared: event-loop lag, CPU share, send delay."""
    c = result.client
    if c is None:
        return None

    def ms(value: float | None) -> str:
        return "—" if value is None else f"{num(value)} ms"

    parts = [
        f"event-loop lag p50 {ms(c.loop_lag_p50_ms)}, p99 {ms(c.loop_lag_p99_ms)}, "
        f"max {ms(c.loop_lag_max_ms)}"
    ]
    if c.cpu_share is not None:
        parts.append(f"CPU {c.cpu_share:.2f} of a core")
    if c.send_delay_p50_ms is not None:
        parts.append(f"send delay p50 {ms(c.send_delay_p50_ms)}, p99 {ms(c.send_delay_p99_ms)}")
    if c.processes > 1:  # lag and CPU are the worst process's
        return f"client ({c.processes} worker processes, the worst's): " + " · ".join(parts)
    return "client: " + " · ".join(parts)


def records_notes(result: RunResult, records_path: Path) -> list[str]:
    """What ``show`` must say about the records it recomputed from: a torn last line (a run
    killed mid-write: the line is skipped), or fewer turns than the scenario sends."""
    notes = []
    if not records_path.exists():
        return [
            f"{records_path} is missing: the figures are the summaries saved in the "
            "result, not recomputed"
        ]
    with records_path.open("rb") as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(max(0, size - 1))
        torn = size > 0 and f.read(1) != b"\n"
    if torn:
        notes.append(
            f"{records_path} ends in a torn line (the run was killed while writing "
            "it): that turn is left out"
        )
    expected = planned_requests(result.scenario)
    if expected is not None and len(result.records) < expected:
        notes.append(
            f"{records_path} holds {len(result.records):,} of the {expected:,} turns "
            "the scenario sends: the run did not finish, and the figures cover only "
            "the turns recorded"
        )
    return notes


def stopped_early(result: RunResult) -> str | None:
    """When a stopped run has nothing measured to report: "before any measured turn" (none
    sent, or none finished: each cut off in flight); None when a measured turn finished."""
    measured = [r for r in result.records if not r.warmup]
    cut = sum(1 for r in measured if r.error_kind == "cancelled")
    if len(measured) > cut:
        return None
    if not cut:
        return "before any measured turn"
    return f"before any measured turn finished ({plural(cut, 'turn')} cancelled in flight)"


def header_line(result: RunResult) -> str:
    """Scenario → model @ target [label]; a prediction's starts with PREDICTED and names the
    profile instead of a server."""
    target = result.target
    where = "simulated server" if target.simulated else target.base_url
    if (p := result.predicted) is not None:
        return (
            f"PREDICTED · {result.scenario.name} → {target.model} @ the simulated engine, "
            f"profile {p.file or p.profile} (sha256 {p.profile_sha256[:12]}), virtual time"
            + (f"  [{result.label}]" if result.label else "")
        )
    proxy = result.environment.get("proxy")  # no credentials: the transport wrote it
    if proxy is not None:
        where += f" via proxy {proxy}"
    return f"{result.scenario.name} → {target.model} @ {where}" + (
        f"  [{result.label}]" if result.label else ""
    )


def predicted_line(result: RunResult) -> str | None:
    """What a prediction's figures are, under its header; None for a measured run."""
    p = result.predicted
    if p is None:
        return None
    cpu = f" in {p.cpu_s:.2f} s of CPU" if p.cpu_s is not None else ""
    trip = (
        f"each request's intake the fit's round trip, {p.round_trip_s * 1000:.1f} ms"
        if p.round_trip_s is not None
        else "no round trip measured (each request's intake 0.2 ms)"
    )
    return (
        f"predicted, not measured: `workloads predict` played the scenario against the "
        f"simulated engine ({p.profile} profile) on a virtual clock{cpu}; {trip}; no gate, "
        "likelihood or server telemetry"
    )


def _agent_blocks(result: RunResult) -> list[Block]:
    """An agent's steps: the per-kind table, the cache after compactions and after a pause,
    the drawn sizes and what compressed pauses change (none of them for a fixed-shape run,
    whose steps are all alike: its records still say which step was the human's)."""
    parts: list[Block] = []
    if not result.scenario.sizes_vary:
        return parts
    if (kinds := agents.kind_table(result)) is not None:
        parts.append(kinds)
    if (flowed := flow.flow_line(result)) is not None:
        parts.append(Line(flowed))
    if (cliff := agents.cache_cliff_line(result)) is not None:
        parts.append(Line(cliff))
    if (pause := agents.pause_pressure_line(result)) is not None:
        parts.append(Line(pause))
    if (drawn := agents.drawn_sizes_table(result)) is not None:
        parts.append(drawn)
    if (scale := agents.time_scale_line(result)) is not None:
        parts.append(Line(scale))
    return parts


def blocks(result: RunResult) -> list[Block]:
    """The report as a sequence of lines, tables and labelled rows: what the console, the
    Markdown and the HTML exports all draw."""
    parts: list[Block] = [Line(header_line(result), "bold")]
    if (predicted := predicted_line(result)) is not None:
        parts.append(Line(predicted, "warning"))
    if result.cells is not None:
        parts += [Line(sweep_line(result)), sweep_table(result)]
        if (latency := latency_table(result)) is not None:
            parts.append(latency)
        if (server := sweep_server_table(result)) is not None:
            parts.append(server)
        parts += _agent_blocks(result)
    else:
        if result.trace is not None:
            parts += [Line(text) for text in trace_lines(result)]
        coordinates = _trace_coordinates if result.trace is not None else coordinates_line
        parts += [Line(text) for text in agent_trace.lines(result)]
        line = agent_trace.coordinates(result) or coordinates(result)
        parts += [Line(line), turn_table(result), cache_table(result)]
        if (cut := fleet_turns_line(result)) is not None:
            parts.append(Line(cut))
        parts += _agent_blocks(result)
        if (latency := latency_table(result)) is not None:
            parts.append(latency)
        if (oracle := what_if_table(result)) is not None:
            parts.append(oracle)
        parts.append(Line(run_line(result), "bold"))
        if (overstates := overstates_line(result)) is not None:
            parts.append(Line(overstates, "warning"))
    parts += goodput.blocks(result)
    for line in (sizing_line(result), concurrency_line(result), client_line(result)):
        if line is not None:
            parts.append(Line(line))
    if result.cells is None:
        parts += window_blocks(result)
    parts += [Line(text, style) for text, style in verdict_lines(result)]
    for warning in result.warnings:
        parts.append(Line(f"warning: {warning}", "warning"))
    if not result.complete:
        parts.append(Line("INCOMPLETE RUN", "error"))
    return parts


def render(result: RunResult) -> Group:
    """Everything the console shows after a run: tables reflow to the console's width and
    never cut a value; a blank line sets each table and the window apart."""
    out: list[Block | Text] = []
    for number, block in enumerate(blocks(result)):
        apart = isinstance(block, ReportTable) or (
            number
            and isinstance(block, Line)
            and block.style == "bold"
            and block.text.startswith("Window")
        )
        if apart and out and not isinstance(out[-1], Text):
            out.append(Text(""))
        out.append(block)
        if isinstance(block, ReportTable):
            out.append(Text(""))
    return Group(*out)
