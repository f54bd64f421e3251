"""The report in other forms, for ``show DIR --format text|md|json|csv|html``: the same
blocks the console draws (:func:`workloads.report.console.blocks`), as plain text, GitHub
Markdown, the result's JSON, one CSV row per (cell, turn) of raw figures, or the
self-contained HTML page (:mod:`workloads.report.html`). Pure: strings out.

The CSV's throughput columns are the console's, in its order and under its names
(:mod:`workloads.report.rates`): ``aggregate_tok_s``, ``wall_tok_s``, ``per_user_tok_s`` in
lock-step; ``wall_tok_s``, ``streams_sum_tok_s`` (the console's "Σ streams tok/s †"),
``per_user_tok_s`` with free or arrivals pacing, which has no aggregate."""

from __future__ import annotations

import csv
import io

from rich.console import Console

from workloads.model.capacity import CapacityResult
from workloads.model.results import RunResult
from workloads.model.scenario import nominal
from workloads.model.summary import BandSummary, KindSummary, Percentiles, TurnSummary
from workloads.report import console as report
from workloads.report import goodput, rates
from workloads.report.table import Block, Line, Pairs, ReportTable, markdown

__all__ = ["FORMATS", "csv_text", "export", "export_capacity", "markdown_text", "plain_text"]

FORMATS = ("text", "md", "json", "csv", "html")


def plain_text(result: RunResult, width: int = 120) -> str:
    """The console report without colours, laid out for ``width`` columns."""
    return _plain(report.render(result), width)


def _plain(renderable: object, width: int) -> str:
    console = Console(width=width, record=True, color_system=None, file=io.StringIO())
    console.print(renderable)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()) + "\n"


def markdown_text(result: RunResult) -> str:
    """The report in GitHub Markdown: headline lines, tables, the window's figures."""
    return _markdown(report.blocks(result))


def _markdown(blocks: list[Block]) -> str:
    out: list[str] = []
    for block in blocks:
        if isinstance(block, ReportTable):
            out.append(markdown(block))
        elif isinstance(block, Pairs):
            if block.rows:
                rows = [f"| {label} | {_md(text)} |" for label, text in block.rows]
                out.append("\n".join(["| | |", "|:---|:---|", *rows]))
        elif isinstance(block, Line):
            text = block.text
            if block.style in ("bold", "error"):
                text = f"**{text}**"
            elif block.style == "warning":
                text = f"> {text}"
            out.append(text)
    return "\n\n".join(out) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def _band(prefix: str, b: BandSummary | None) -> dict[str, float | None]:
    return {
        f"{prefix}_median": b.median if b else None,
        f"{prefix}_low": b.low if b else None,
        f"{prefix}_high": b.high if b else None,
    }


def _pct(prefix: str, p: Percentiles | None) -> dict[str, float | None]:
    bounds = {b.q: b for b in (p.bounds or ())} if p else {}
    return {
        f"{prefix}_p50": p.p50 if p else None,
        f"{prefix}_p90": p.p90 if p else None,
        f"{prefix}_p99": p.p99 if p else None,
        f"{prefix}_max": p.max if p else None,
        # order-statistics bounds, each one-sided 95%; empty: too few values to bound it
        **{
            f"{prefix}_p{q:g}_{side}": getattr(bounds[q], side) if q in bounds else None
            for q in (50.0, 90.0, 99.0)
            for side in ("low", "high")
        },
    }


def _turn_row(
    cell: int, concurrency: int, prior: int, t: TurnSummary, figures: list[rates.Rate]
) -> dict[str, object]:
    throughput: dict[str, float | None] = {}
    for f in figures:
        throughput.update(_band(f.key, f.read(t)))
    return {
        "cell": cell,
        "concurrency": concurrency,
        "prior_tokens": prior,
        "turn": t.turn,
        "configured_prompt_tokens": t.configured_prompt_tokens,
        "records": t.records,
        "valid": t.valid,
        "invalid": t.invalid,
        "errors": t.errors,
        **throughput,
        **_band("ttft_s", t.ttft_s),
        **_pct("ttft_s", t.ttft_percentiles),
        **_pct("itl_s", t.itl_percentiles),
        **_pct("e2e_s", t.e2e_percentiles),
        **_band("prefill_tok_s", t.prefill_rate),
        **_band("uncached_prefill_tok_s", t.uncached_prefill_rate),
        **_band("prompt_tokens", t.prompt_tokens),
        **_band("cached_tokens", t.cached_tokens),
        **_band("shareable_tokens", t.shareable_tokens),
        "shareable_exact": t.shareable_exact,
        "cache_effectiveness": t.cache_effectiveness,
        "hit_rate": t.hit_rate,
    }


def _kind_row(cell: int, concurrency: int, prior: int, k: KindSummary) -> dict[str, object]:
    return {
        "cell": cell,
        "concurrency": concurrency,
        "prior_tokens": prior,
        "step_kind": k.kind,
        "first_step": k.first_step,
        "records": k.records,
        "valid": k.valid,
        "per_user_tok_s_median": k.per_user_rate,
        **_pct("ttft_s", k.ttft_percentiles),
        **_pct("ttft_content_s", k.ttft_content_percentiles),
        "prompt_tokens_median": k.prompt_tokens,
        "shareable_exact": k.shareable_exact,
        "cache_effectiveness": k.cache_effectiveness,
        "hit_rate": k.hit_rate,
        **_pct("new_tokens", k.new_tokens),
        **_pct("output_tokens", k.output_tokens),
        **_pct("pause_s", k.pause_s),
        "tool_calls": k.tool_calls,
    }


def csv_text(result: RunResult) -> str:
    """One row per (cell, turn) of raw, unrounded figures: seconds, tokens, tok/s; with step
    kinds, then one row per (cell, step kind, first step or not) (``turn`` empty,
    ``step_kind`` and ``first_step`` set; a kind's goodput columns cover both). An empty
    field is a figure that is not known (not reported, no valid turns), never 0. The
    throughput columns follow the console's (see the module's doc). Each percentile has its
    bounds (``_p90_low``, ``_p90_high``), and with an SLO each row its goodput
    (``goodput_met``, ``goodput_share``, ``goodput_sessions_good_through``) and the run's
    (a sweep's: the row's cell's) on every row: ``goodput_run_met``, ``_requests``,
    ``_share``, ``_session_share``, and the rates' bands over the repetitions
    (``goodput_run_requests_per_s_median``/``_low``/``_high``, ``goodput_run_tok_s_…``)."""
    figures = rates.turn_rates(result)
    rows: list[dict[str, object]] = []
    kinds: list[dict[str, object]] = []
    if result.cells is not None:
        for c in result.cells:
            rows += [
                _turn_row(c.cell, c.concurrency, c.prior_tokens, t, figures)
                for t in c.summary.turns
            ]
            kinds += [
                _kind_row(c.cell, c.concurrency, c.prior_tokens, k) for k in c.summary.kinds or ()
            ]
    else:
        s = result.scenario
        rows += [
            _turn_row(0, s.users, nominal(s.opening_tokens), t, figures)
            for t in result.summary.turns
        ]
        kinds += [
            _kind_row(0, s.users, nominal(s.opening_tokens), k) for k in result.summary.kinds or ()
        ]
    if not result.scenario.sizes_vary:
        kinds = []  # a fixed shape: the per-turn rows say it all
    out = io.StringIO()
    if rows or kinds:
        fieldnames = list(rows[0]) if rows else []
        if kinds:
            at = fieldnames.index("turn") + 1 if "turn" in fieldnames else 0
            fieldnames.insert(at, "step_kind")
            fieldnames += [f for f in kinds[0] if f not in fieldnames]
        fieldnames += [f for f in goodput.csv_columns(result, {}) if f not in fieldnames]
        writer = csv.DictWriter(out, fieldnames=fieldnames, lineterminator="\n", restval="")
        writer.writeheader()
        for row in rows + kinds:
            row = {**row, **goodput.csv_columns(result, row)}
            writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return out.getvalue()


def export(result: RunResult, fmt: str, *, width: int = 120) -> str:
    """``result`` in one of :data:`FORMATS`. ``html`` embeds the plots when matplotlib is
    installed."""
    if fmt == "text":
        return plain_text(result, width)
    if fmt == "md":
        return markdown_text(result)
    if fmt == "json":
        return result.model_dump_json(indent=2) + "\n"
    if fmt == "csv":
        return csv_text(result)
    if fmt == "html":
        from workloads.report.html import html_report

        page: str = html_report(result)
        return page
    raise ValueError(f"format {fmt!r}: choose one of {', '.join(FORMATS)}")


def export_capacity(result: CapacityResult, fmt: str, *, width: int = 120) -> str:
    """A capacity search (``show DIR --format``, DIR holding capacity.json) in one of
    :data:`FORMATS`: its report (text, md, html), capacity.json (json), or one CSV row per
    load measured (``knee`` true on the knee's row; an empty field is not known)."""
    blocks = goodput.capacity_blocks(result)
    if fmt == "text":
        from rich.console import Group

        return _plain(Group(*blocks), width)
    if fmt == "md":
        return _markdown(blocks)
    if fmt == "json":
        return result.model_dump_json(indent=2) + "\n"
    if fmt == "html":
        from workloads.report.html import blocks_html

        return blocks_html(f"capacity of {result.scenario.name}", blocks)
    if fmt == "csv":
        out = io.StringIO()
        rows = [
            {
                "axis": result.axis,
                "load": p.load,
                "verdict": p.verdict,
                "knee": p.load == result.knee,
                "repetitions": p.repetitions,
                "sessions": p.sessions,
                "good_sessions": p.good_sessions,
                "session_share": p.session_share,
                "session_share_low": p.low,
                "session_share_high": p.high,
                "requests": p.requests,
                "requests_met": p.met,
                "request_share": p.request_share,
                "per_user_tok_s_median": p.per_user_rate,
                "goodput_tok_s_median": p.goodput_token_rate,
            }
            for p in result.points
        ]
        if rows:
            writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
            writer.writeheader()
            for row in rows:
                writer.writerow({k: "" if v is None else v for k, v in row.items()})
        return out.getvalue()
    raise ValueError(f"format {fmt!r}: choose one of {', '.join(FORMATS)}")
