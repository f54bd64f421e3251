"""The measured window in the report: server counter deltas reconciled with usage,
speculative decoding, energy, gauges. Returns renderables; printing is the CLI's job."""

from __future__ import annotations

from collections.abc import Sequence

from workloads.model.figures import EnergyFigures, Reconciliation, ServerTelemetry
from workloads.model.records import TurnRecord
from workloads.model.results import RunResult, Window
from workloads.report.table import Block, Line, Pairs, ReportTable
from workloads.report.text import NOT_REPORTED, count
from workloads.telemetry.reconcile import UsageSums
from workloads.telemetry.servers import server_names

__all__ = [
    "reconciliation_notes",
    "reconciliation_table",
    "window_blocks",
    "window_lines",
]


_FIGURE_NAMES = {
    "prompt_tokens": "prompt tokens",
    "cached_prompt_tokens": "cached tokens",
    "uncached_prompt_tokens": "uncached tokens",
    "generation_tokens": "generated tokens",
    "finished_requests": "finished requests",
    "spec_draft_tokens": "draft tokens",
    "spec_accepted_tokens": "accepted tokens",
}


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


def reconciliation_table(t: ServerTelemetry) -> ReportTable:
    """Each server counter's window delta against the client's sum over measured turns."""
    table = ReportTable(
        "Reconciliation — server counter Δ over the window vs the client's Σ of usage",
        ["figure", "server Δ", "client Σ", "client sums", "verdict"],
        name="reconciliation",
        left=(3, 4),
    )
    for r in t.reconciliation:
        table.add_row(
            _FIGURE_NAMES.get(r.figure, r.figure),
            count(r.server),
            count(r.client),
            r.client_basis.removeprefix("Σ "),
            _verdict(r),
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
            f"acceptance {t.spec_acceptance_rate:.4f} ({count(t.spec_accepted_tokens)} "
            f"accepted / {count(t.spec_draft_tokens)} draft tokens)"
        )
        if t.spec_mean_accepted_length is not None:
            line += (
                f" · mean accepted length {t.spec_mean_accepted_length:.2f} "
                f"({count(t.spec_drafts)} drafts)"
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


def window_lines(window: Window, records: Sequence[TurnRecord] = ()) -> list[tuple[str, str]]:
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
            rows.append(
                (
                    "preemptions",
                    _not_reported(t, "preemptions")
                    if t.preemptions is None
                    else count(t.preemptions),
                )
            )
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


def window_blocks(result: RunResult) -> list[Block]:
    """The "Window" part of the report: heading, server, reconciliation, other figures."""
    w = result.window
    head = "Window — measured repetitions only (warm-up excluded)"
    if w.duration_s is not None:
        head += f", {w.duration_s:.2f} s"
    parts: list[Block] = [Line(head, "bold")]
    rows = window_lines(w, [r for r in result.records if not r.warmup])
    if result.predicted is not None:
        head = head.replace("Window", "Window (virtual time)", 1)
        rows[0] = ("server", "none: predicted (the simulated engine's figures, no metrics)")
    parts.append(Pairs(rows[:1]))  # which server, where, how many scrapes
    t = w.server
    if t is not None and t.reconciliation:
        parts.append(reconciliation_table(t))
        parts += [Line(note, "warning") for note in reconciliation_notes(t)]
    parts.append(Pairs(rows[1:]))
    return parts
