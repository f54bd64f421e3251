"""The HTML report: one self-contained file (no scripts, no links, the plots inline as PNG
data) that leads with the answer: its lead first (the run header, the headline figures, the
SLO's verdicts and goodput, the correctness and other verdicts, every warning), then the
provenance, every other table and line of the console report, the window's figures and the
plots. ``run`` writes it next to result.json as ``report.html``;
``show DIR --format html`` prints it.

    from workloads.report.html import write_html
    write_html(workloads.load_result("runs/first"), "runs/first/report.html")
"""

from __future__ import annotations

import base64
import html
import time
from pathlib import Path

from workloads.model.files import replace_file
from workloads.model.results import RunResult
from workloads.report import console as report
from workloads.report import goodput, rates
from workloads.report.table import Block, Line, Pairs, ReportTable
from workloads.report.verdicts import verdict_lines

__all__ = ["REPORT_FILE", "blocks_html", "html_report", "write_html"]

REPORT_FILE = "report.html"

_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d2330;
       margin: 2em auto; max-width: 1200px; padding: 0 1.5em; }
h1 { font-size: 1.45em; margin-bottom: 0.2em; }
h2 { font-size: 1.1em; margin: 1.6em 0 0.4em; }
p { margin: 0.35em 0; }
.headline { font-weight: 600; }
section.lead { background: #f3f5f9; border: 1px solid #e3e6ec; padding: 0.4em 1em 0.8em; }
section.lead h1 { margin-top: 0.3em; }
.warning { background: #fff6d6; border-left: 4px solid #e0a800; padding: 0.3em 0.6em; }
.error { background: #fde2e1; border-left: 4px solid #c62828; padding: 0.3em 0.6em;
         font-weight: 600; }
table { border-collapse: collapse; margin: 0.3em 0 0.8em; font-variant-numeric: tabular-nums; }
th, td { padding: 0.22em 0.7em; border-bottom: 1px solid #e3e6ec; white-space: nowrap; }
th { text-align: right; background: #f3f5f9; font-weight: 600; }
td { text-align: right; }
th.l, td.l { text-align: left; }
td.wrap { white-space: normal; }
.note { color: #4a5263; font-size: 0.92em; }
dl.provenance { display: grid; grid-template-columns: max-content auto; gap: 0.1em 1.2em; }
dl.provenance dt { font-weight: 600; }
dl.provenance dd { margin: 0; }
figure { margin: 1em 0 1.6em; }
figure img { max-width: 100%; border: 1px solid #e3e6ec; }
figcaption { color: #4a5263; font-size: 0.92em; }
"""

_CAPTIONS = {
    "ttft.png": "Time to first token of every measured request (jittered), with the median.",
    "latency.png": "ITL (every gap between content chunks) and E2E latency (request written "
    "→ end of stream) of every valid measured request: the CDFs the latency "
    "table's percentiles summarize, p50, p90 and p99 marked.",
    "timeline.png": "Every measured request from send to first token to last token, one row "
    "per session.",
    "prefill.png": "Prefill rate (prompt tokens / TTFT) against prompt depth.",
    "cache.png": "Prefix cache per cell: cache effectiveness, hit rate and the server's own "
    "hit rate.",
    "concurrency.png": "Requests in flight over the measured span.",
    "context.png": "Context length over time: each request's prompt tokens at its send, one "
    "line per session (sub-agents lighter); a compaction's drop is the context "
    "starting anew from the system message and the summary.",
    "sizes.png": "What the scenario drew for the measured steps: output tokens, new tokens "
    "by step kind, and pauses (log scales).",
}


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _table(t: ReportTable) -> str:
    def cls(i: int) -> str:
        return ' class="l"' if i < t.key or i in t.left else ""

    head = "".join(f"<th{cls(i)}>{_e(c)}</th>" for i, c in enumerate(t.columns))
    body = "".join(
        "<tr>" + "".join(f"<td{cls(i)}>{_e(c)}</td>" for i, c in enumerate(row)) + "</tr>"
        for row in t.rows
    )
    notes = "".join(f'<p class="note">{_e(n)}</p>' for n in t.notes)
    return (
        f'<h2 id="{_e(t.name or "table")}">{_e(t.title)}</h2>'
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{notes}"
    )


def _pairs(p: Pairs) -> str:
    rows = "".join(
        f'<tr><td class="l"><b>{_e(label)}</b></td><td class="l wrap">{_e(text)}</td></tr>'
        for label, text in p.rows
    )
    return f"<table>{rows}</table>" if rows else ""


def _provenance(result: RunResult) -> str:
    t = result.target
    items = [
        (
            "scenario",
            result.scenario.name
            + (f" — {result.scenario.description}" if result.scenario.description else ""),
        ),
        (
            "target",
            ("embedded simulated server" if t.simulated else t.base_url) + f" · model {t.model}",
        ),
    ]
    if t.simulator_profile:
        items.append(("simulator profile", str(t.simulator_profile.get("name", "—"))))
    if (p := result.predicted) is not None:
        items[1] = ("target", f"none: PREDICTED by the simulated engine · model {t.model}")
        items.append(
            ("predicted", f"profile {p.file or p.profile}, sha256 {p.profile_sha256}, virtual time")
        )
    ident = t.server
    if ident.version or ident.system_fingerprint:
        items.append(
            (
                "server identity",
                " · ".join(x for x in (ident.version, ident.system_fingerprint) if x),
            )
        )
    if result.label:
        items.append(("label", result.label))
    if result.note:
        items.append(("note", result.note))
    items.append(
        ("created", time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(result.created_unix)))
    )
    items.append(
        ("workloads", f"{result.workloads_version} · result format {result.format_version}")
    )
    env = result.environment
    if env:
        items.append(("environment", " · ".join(f"{k} {v}" for k, v in sorted(env.items()))))
    items.append(("complete", "yes" if result.complete else "no: the run was interrupted"))
    rows = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in items)
    return f'<dl class="provenance">{rows}</dl>'


def _rates_caption(result: RunResult) -> str:
    """rates.png's caption, naming its panels as the per-turn table does."""
    if result.cells is not None:
        return "Generation rates per cell: median with min–max bars."
    names = ", ".join(f.label for f in rates.turn_rates(result))
    note = rates.dagger_note(result)
    return f"Per-turn rates, the table's columns ({names}): median with min–max bars." + (
        f" {note}." if note else ""
    )


def _figures(result: RunResult) -> str:
    from workloads.report import plots

    if not plots.available():
        return (
            '<p class="note">No plots: install the plots extra '
            "(pip install 'workloads[plots]') and run show DIR --format html.</p>"
        )
    out = ['<h2 id="plots">Plots</h2>']
    for name, png in plots.figures(result):
        data = base64.b64encode(png).decode("ascii")
        caption = _rates_caption(result) if name == "rates.png" else _CAPTIONS.get(name, name)
        out.append(
            f'<figure><img alt="{_e(name)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{_e(caption)}</figcaption></figure>"
        )
    return "".join(out)


def _lead_texts(result: RunResult) -> set[str]:
    """The console lines the lead holds (besides every warning and error): the
    headline (a sweep's: where it sits), the SLO's lines and the verdicts."""
    headline = report.sweep_line(result) if result.cells is not None else report.run_line(result)
    lines = [b.text for b in goodput.blocks(result) if isinstance(b, Line)]
    return {headline, *lines, *(text for text, _ in verdict_lines(result))}


def _lead(result: RunResult, blocks: list[Block]) -> tuple[list[Line], list[Block]]:
    """``blocks`` split into the lead's lines (in the console's order) and the rest."""
    texts = _lead_texts(result)
    lead: list[Line] = []
    rest: list[Block] = []
    for block in blocks:
        if isinstance(block, Line) and (block.text in texts or block.style in ("warning", "error")):
            lead.append(block)
        else:
            rest.append(block)
    return lead, rest


def _line(block: Line) -> str:
    cls = {"bold": "headline", "warning": "warning", "error": "error"}.get(block.style, "")
    return f'<p class="{cls}">{_e(block.text)}</p>' if cls else f"<p>{_e(block.text)}</p>"


def html_report(result: RunResult, *, with_plots: bool = True) -> str:
    """The whole report as one HTML document (UTF-8, no external resources), the lead
    first."""
    parts: list[str] = []
    title = report.header_line(result)
    # the first block is the header line: the lead's <h1>
    lead, rest = _lead(result, report.blocks(result)[1:])
    top = "".join(_line(b) for b in lead)
    for block in rest:
        if isinstance(block, ReportTable):
            parts.append(_table(block))
        elif isinstance(block, Pairs):
            parts.append(_pairs(block))
        elif isinstance(block, Line):
            if block.style == "bold" and block.text.startswith("Window"):
                parts.append(f'<h2 id="window">{_e(block.text)}</h2>')
            else:
                parts.append(_line(block))
    figures = _figures(result) if with_plots else ""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        f'<section class="lead" id="lead"><h1>{_e(title)}</h1>{top}</section>'
        f"{_provenance(result)}{''.join(parts)}{figures}"
        "</body></html>\n"
    )


def blocks_html(title: str, blocks: list[Block]) -> str:
    """A page of report blocks under ``title``, the first block leading (the capacity
    search's report: ``show DIR --format html``)."""
    body = []
    for block in blocks:
        if isinstance(block, ReportTable):
            body.append(_table(block))
        elif isinstance(block, Pairs):
            body.append(_pairs(block))
        elif isinstance(block, Line):
            body.append(_line(block))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{_e(title)}</h1>{''.join(body)}</body></html>\n"
    )


def write_html(result: RunResult, path: str | Path, *, with_plots: bool = True) -> Path:
    """Write :func:`html_report` to ``path`` (a file, or a directory: DIR/report.html)."""
    out = Path(path)
    if out.is_dir():
        out = out / REPORT_FILE
    # a full disk: no half report left behind, and the error names the file
    return replace_file(out, html_report(result, with_plots=with_plots))
