"""The report's blocks for realistic agents (scenarios whose sizes vary or whose sessions
have an agent's steps): the per-kind table (human request, tool result, sub-agent,
compaction), the cache after compactions (the cliff), the drawn sizes (new and output
tokens, pauses: p50/p90/max), and what compressed pauses mean. Each is None, and the report
unchanged, for a fixed-shape scenario or records without step kinds. Pure: tables and text.
"""

from __future__ import annotations

from collections.abc import Iterable

from workloads.core import stats
from workloads.model.records import StepKind, TurnRecord
from workloads.model.results import RunResult
from workloads.model.scenario import describe, varies
from workloads.model.summary import KindSummary, Percentiles
from workloads.report.table import ReportTable
from workloads.report.text import (
    BOUNDS_NOTE,
    NO_VALID,
    NOT_REPORTED,
    num,
    percentile_text,
    plural,
)

__all__ = [
    "KIND_LABELS",
    "cache_cliff_line",
    "drawn_sizes_table",
    "kind_table",
    "sizes_line",
    "time_scale_line",
]

# How a step kind reads in a report.
KIND_LABELS: dict[StepKind, str] = {
    "human": "human request",
    "tool": "tool result",
    "subagent": "sub-agent",
    "compaction": "compaction",
}


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def _content_differs(kinds: Iterable[KindSummary]) -> bool:
    """Whether content-only TTFT is worth a column: some reply carried tool calls, or some
    kind's first content text came later than its first generated chunk (reasoning)."""
    for k in kinds:
        if k.tool_calls:
            return True
        t, c = k.ttft_percentiles, k.ttft_content_percentiles
        if t is not None and c is not None and num(c.p50) != num(t.p50):
            return True
    return False


def _kind_cells(k: KindSummary, content: bool) -> list[str]:
    missing = NO_VALID if not k.valid else "—"
    if not k.valid:
        hit = eff = missing
    elif k.hit_rate is None:
        hit = eff = NOT_REPORTED
    else:
        hit = _pct(k.hit_rate)
        eff = (
            "— (none shareable)"
            if k.cache_effectiveness is None
            else ("" if k.shareable_exact else "~") + _pct(k.cache_effectiveness)
        )
    t = k.ttft_percentiles
    cells = [
        f"{k.valid}/{k.records}",
        hit,
        eff,
        percentile_text(t, 50.0) if t else missing,
        percentile_text(t, 90.0) if t else missing,
    ]
    if content:
        c = k.ttft_content_percentiles
        cells.append(num(c.p50) if c else "—")
    cells += [
        num(k.per_user_rate) if k.per_user_rate is not None else missing,
        num(k.prompt_tokens, 0),
        num(k.new_tokens.p50, 0) if k.new_tokens else "—",
        num(k.output_tokens.p50, 0) if k.output_tokens else "—",
    ]
    return cells


_KIND_COLUMNS = ["valid", "hit rate", "cache eff.", "TTFT p50 s", "TTFT p90 s"]
_SIZE_COLUMNS = ["per-user tok/s", "prompt", "new", "output"]


def kind_table(result: RunResult) -> ReportTable | None:
    """Per step kind: requests, the prefix cache (hit rate = Σ cached / Σ prompt; cache
    effectiveness = Σ cached / Σ shareable), TTFT, the per-user rate and the median prompt,
    new and output tokens; per cell for a sweep. Sub-agents' steps are here (and not in the
    per-turn tables). None when the records carry no step kinds."""
    if result.cells is not None:
        per_cell = [(c, c.summary.kinds) for c in result.cells if c.summary.kinds]
        if not per_cell:
            return None
        every = [k for _, ks in per_cell for k in ks or ()]
    else:
        if not result.summary.kinds:
            return None
        every = list(result.summary.kinds)
    content = _content_differs(every)
    columns = [*_KIND_COLUMNS, *(["content TTFT p50 s"] if content else []), *_SIZE_COLUMNS]
    title = (
        "By step kind — valid measured requests, sub-agents included; medians (TTFT "
        "p50 and p90 with bounds); new and output tokens as drawn"
    )
    if result.cells is not None:
        table = ReportTable(title, ["C", "prior target", "kind", *columns], key=3, name="kinds")
        for cell, ks in per_cell:
            for k in ks or ():
                table.add_row(
                    str(cell.concurrency),
                    f"{cell.prior_tokens:,}",
                    KIND_LABELS[k.kind],
                    *_kind_cells(k, content),
                )
    else:
        table = ReportTable(title, ["kind", *columns], key=1, name="kinds")
        for k in every:
            table.add_row(KIND_LABELS[k.kind], *_kind_cells(k, content))
    table.notes.append(
        "hit rate = Σ cached / Σ prompt tokens; cache eff. = Σ cached / Σ shareable prefix"
        + (" (~ estimated)" if any(not k.shareable_exact for k in every if k.valid) else "")
    )
    if any("[" in cell or cell.startswith("needs") for row in table.rows for cell in row):
        table.notes.append(BOUNDS_NOTE)
    if content:
        table.notes.append(
            "content TTFT: sent → first content text (TTFT also counts "
            "reasoning and tool-call deltas)"
        )
    return table


def cache_cliff_line(result: RunResult) -> str | None:
    """The cache after compactions: the hit rate of the first step after each one beside
    every other human and tool step's. None without compactions (or for a sweep)."""
    cliff = result.summary.cache_cliff
    if cliff is None or result.cells is not None:
        return None
    head = f"cache after {plural(cliff.compactions, 'compaction')}: "
    if cliff.after_hit_rate is None:
        return head + (
            f"no valid step after one with cached tokens reported (hit rate {NOT_REPORTED})"
        )
    return (
        head + f"the first step after each hit {_pct(cliff.after_hit_rate)} of its prompt "
        f"(n {cliff.after}) vs {_pct(cliff.other_hit_rate)} over the other human and tool "
        f"steps past a session's first (n {cliff.other}): after a compaction the prompt "
        "starts anew from the system message and a summary the server has not cached"
    )


def _measured(result: RunResult) -> list[TurnRecord]:
    return [r for r in result.records if not r.warmup and r.step_kind is not None]


def _size_row(table: ReportTable, label: str, p: Percentiles | None, digits: int | None) -> None:
    if p is None:
        return
    table.add_row(label, *(num(v, digits) for v in (p.p50, p.p90, p.max)), f"{p.n:,}")


def drawn_sizes_table(result: RunResult) -> ReportTable | None:
    """What the scenario drew for the measured steps, valid or not: new tokens by kind,
    output tokens asked for, pauses (think before a human request, tool time before a tool
    step; as played, after time_scale): p50, p90, max and n. None unless the scenario's
    sizes vary and the records carry step kinds."""
    records = _measured(result)
    if not result.scenario.sizes_vary or not records:
        return None

    def of(kinds: tuple[StepKind, ...], field: str) -> Percentiles | None:
        return stats.percentiles(getattr(r, field) for r in records if r.step_kind in kinds)

    table = ReportTable(
        "Drawn sizes — measured steps (p50, p90, max)",
        ["drawn", "p50", "p90", "max", "n"],
        name="drawn",
    )
    _size_row(table, "new tokens: human request", of(("human",), "new_tokens"), 0)
    _size_row(table, "new tokens: tool result", of(("tool",), "new_tokens"), 0)
    _size_row(table, "new tokens: sub-agent step", of(("subagent",), "new_tokens"), 0)
    _size_row(table, "output tokens: steps", of(("human", "tool", "subagent"), "output_tokens"), 0)
    _size_row(table, "output tokens: summaries", of(("compaction",), "output_tokens"), 0)
    scale = result.scenario.pacing.time_scale
    played = "" if scale == 1 else f", ×{scale:g}"
    _size_row(table, f"pause s: think{played}", of(("human",), "pause_s"), None)
    _size_row(table, f"pause s: tool{played}", of(("tool",), "pause_s"), None)
    return table if table.rows else None


def _fold(times: float) -> str:
    """``times`` as a reader says it: 10,000 (not 1e+04), 333, 2.5."""
    return f"{times:,.0f}" if times >= 100 else f"{times:.3g}"


def time_scale_line(result: RunResult) -> str | None:
    """What compressed (or stretched) pauses change. None at time_scale 1."""
    scale = result.scenario.pacing.time_scale
    if scale == 1:
        return None
    if scale < 1:
        return (
            f"pauses compressed {_fold(1 / scale)}-fold (pacing.time_scale {scale:g}): think "
            "and tool times were waited at that fraction of what was drawn, which changes "
            "cache pressure: a prefix that a real 5-minute human pause lets the server evict "
            "stays warm here"
        )
    return (
        f"pauses stretched {_fold(scale)}-fold (pacing.time_scale {scale:g}): think and tool "
        "times were waited that many times what was drawn, which changes cache pressure: "
        "prefixes the server would keep through real pauses may be evicted here"
    )


def sizes_line(result: RunResult) -> str:
    """The coordinates' sizes where they are drawn: each distribution's median, named."""
    s = result.scenario
    parts = [f"opening {describe(s.opening_tokens)}"]
    if s.agent is not None:
        parts += [
            f"tool result {describe(s.turn_tokens)}",
            f"human request {describe(s.agent.request_tokens)}",
        ]
    else:
        parts.append(f"new per turn {describe(s.turn_tokens)}")
    parts.append(f"output {describe(s.output_tokens)}")
    drawn = any(varies(v) for v in (s.opening_tokens, s.turn_tokens, s.output_tokens))
    return ("sizes drawn per step, medians: " if drawn else "sizes: ") + ", ".join(parts)
