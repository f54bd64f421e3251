"""The report's blocks for realistic agents (scenarios whose sizes vary or whose sessions
have an agent's steps): the per-kind table (human request, tool result, sub-agent,
compaction; sessions' first steps apart), the cache after compactions (the cliff), the
cache after a pause (its hit rate beside the tool steps', and the pause pressure that
explains it), the drawn sizes (new and output tokens, pauses: p50/p90/max), and what
compressed pauses mean. Each is None, and the report
unchanged, for a fixed-shape scenario or records without step kinds. Pure: tables and text.
"""

from __future__ import annotations

from collections.abc import Iterable

from workloads.core import stats
from workloads.model.records import StepKind, TurnRecord
from workloads.model.results import RunResult
from workloads.model.scenario import describe, varies
from workloads.model.summary import KindSummary, PausePressure, Percentiles
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
    "kind_label",
    "kind_table",
    "pause_pressure_line",
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


# How a kind's first steps and later steps read, where a kind has both (KindSummary.first_step).
_FIRST_STEP = {True: " (first step)", False: " (later steps)"}
_AFTER_PAUSE = "human request (after a pause)"


def kind_label(k: KindSummary) -> str:
    """A per-kind row's name: the kind, and for a kind that has first steps (human
    requests, sub-agents) whether the row is its first steps or its later ones (a human
    request's are "after a pause")."""
    label = KIND_LABELS[k.kind]
    if k.first_step is None:
        return label
    if k.kind == "human" and not k.first_step:
        return _AFTER_PAUSE
    if k.first_step or k.kind == "subagent":  # a trace's session may open with a tool step
        return label + _FIRST_STEP[k.first_step]
    return label


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
                    kind_label(k),
                    *_kind_cells(k, content),
                )
    else:
        table = ReportTable(title, ["kind", *columns], key=1, name="kinds")
        for k in every:
            table.add_row(kind_label(k), *_kind_cells(k, content))
    table.notes.append(
        "hit rate = Σ cached / Σ prompt tokens; cache eff. = Σ cached / Σ shareable prefix"
        + (" (~ estimated)" if any(not k.shareable_exact for k in every if k.valid) else "")
    )
    if any(k.first_step for k in every):
        table.notes.append(
            "first step: a session's turn 1 (cold but for the shared system prefix); after a "
            "pause: a human request past it, sent after the human's think time"
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


def _times_kv(tokens: float, capacity: int | None) -> str:
    """``tokens`` with, where the capacity is known, what share of the KV that is: 5,270
    (5.3% of the KV), 114,771 (1.1× the KV)."""
    text = f"{tokens:,.0f}"
    if capacity is None:
        return text
    share = tokens / capacity
    if share >= 1:
        return f"{text} ({_fold(share)}× the KV)"
    return f"{text} ({'<0.1' if share < 0.001 else f'{share * 100:.2g}'}% of the KV)"


def _row(result: RunResult, kind: str, first: bool) -> KindSummary | None:
    return next(
        (k for k in result.summary.kinds or () if k.kind == kind and k.first_step is first),
        None,
    )


def _hit_n(rate: float | None, n: int) -> str:
    return f"{_pct(rate)} (n {n})" if rate is not None else f"— (n {n})"


def pause_pressure_line(result: RunResult) -> str | None:
    """The cache after a pause: the hit rate of human requests after a pause beside the
    tool steps', the pause pressure (median and p90 of the tokens other sessions wrote into
    the KV over each pause, and in KV capacities where known), the hit rate of the steps
    whose pressure stayed within the KV's room for idle prefixes and of those past it, and
    what that says. None without steps after a pause with cached tokens reported (or for a
    sweep, whose cells each have their own)."""
    pp = result.summary.pause_pressure
    if pp is None or result.cells is not None:
        return None
    after, tool = _row(result, "human", False), _row(result, "tool", False)
    if after is None or after.hit_rate is None:
        return None
    head = f"cache after a pause: human requests after a pause hit {_pct(after.hit_rate)}"
    if tool is not None and tool.hit_rate is not None:
        head += f" vs {_pct(tool.hit_rate)} for tool results"
    p, capacity = pp.pressure_tokens, pp.kv_capacity_tokens
    if p is None:
        why = (
            "the records' stamps are several hosts' clocks"
            if len({r.host for r in result.records}) > 1
            else f"a request over each pause had no usage, or cached tokens {NOT_REPORTED}"
        )
        return head + f"; pause pressure not known for any of the {pp.steps} steps ({why})"
    text = (
        f"{head}. Pause pressure (the tokens other sessions wrote into the KV over a pause: "
        f"their uncached prompt and completion tokens): median {_times_kv(p.p50, capacity)}, "
        f"p90 {_times_kv(p.p90, capacity)} over {pp.known} steps"
        + (f" ({pp.steps - pp.known} not known)" if pp.known < pp.steps else "")
    )
    if capacity is None:
        return text + (
            "; the KV capacity is not known (the server exports none: pass --kv-capacity), "
            "so the pressure cannot be read against it"
        )
    room = f"{pp.room_tokens:,} tokens" if pp.room_tokens is not None else "—"
    if pp.kv_usage is not None:
        room = (
            f"the KV's room for idle prefixes, {capacity:,} × (1 − {_pct(pp.kv_usage)} held "
            f"by running requests on average) = {room}"
        )
    else:
        room = f"the KV capacity, {room} (its usage was not sampled)"
    if pp.above == 0:
        text += f"; all {pp.below} within {room}"
    elif pp.below == 0:
        text += f"; all {pp.above} past {room}"
    else:
        text += (
            f"; hit rate within {room}: {_hit_n(pp.below_hit_rate, pp.below)}, past it: "
            f"{_hit_n(pp.above_hit_rate, pp.above)}"
        )
    return text + _attribution(pp, after, tool)


def _attribution(pp: PausePressure, after: KindSummary, tool: KindSummary | None) -> str:
    """What the figures say about a lower hit rate after a pause."""
    lower = (
        tool is not None
        and tool.hit_rate is not None
        and after.hit_rate is not None
        and after.hit_rate < tool.hit_rate
    )
    evicted = (
        pp.above > 0
        and pp.above_hit_rate is not None
        and (pp.below_hit_rate is None or pp.above_hit_rate < pp.below_hit_rate)
    )
    if lower and evicted:
        return (
            ": the lower hit rate after a pause is eviction by other sessions' traffic — "
            "over a pause in which they wrote more than that room, the server evicted the "
            "session's prefix (least recently used first)"
        )
    if lower and pp.above == 0:
        return (
            ": no pause saw that much of this run's traffic, so its eviction does not "
            "explain the lower hit rate after a pause (other traffic on the server may)"
        )
    return ""


def _fold(times: float) -> str:
    """``times`` as a reader says it: 10,000 (not 1e+04), 333, 2.5."""
    return f"{times:,.0f}" if times >= 100 else f"{times:.3g}"


def time_scale_line(result: RunResult) -> str | None:
    """What compressed (or stretched) pauses change: the server's time is not scaled, so a
    pause scaled by ``time_scale`` sees that fraction of the traffic other sessions would
    send over the drawn pause at the same rate; the pause pressure measured, and what it
    would be at the drawn length. None at time_scale 1."""
    scale = result.scenario.pacing.time_scale
    if scale == 1:
        return None
    pp = result.summary.pause_pressure if result.cells is None else None
    p = pp.pressure_tokens if pp is not None else None
    measured = ""
    if pp is not None and p is not None:
        measured = (
            f" (here a median pause pressure of {_times_kv(p.p50, pp.kv_capacity_tokens)}; at "
            f"this traffic rate the drawn pauses would see "
            f"~{_times_kv(p.p50 / scale, pp.kv_capacity_tokens)})"
        )
    share = f"{scale * 100:.3g}%" if scale < 1 else f"{scale:g} times"
    if scale < 1:
        return (
            f"pauses compressed {_fold(1 / scale)}-fold (pacing.time_scale {scale:g}): think "
            "and tool times were waited at that fraction of what was drawn, but the server's "
            f"time was not compressed, so a pause saw ~{share} of the traffic other sessions "
            f"would send over a real one at the same rate{measured}: prefixes that real "
            "pauses let the server evict stay warm here; to keep the pressure, run more "
            "sessions (users)"
        )
    return (
        f"pauses stretched {_fold(scale)}-fold (pacing.time_scale {scale:g}): think and tool "
        f"times were waited that many times what was drawn, so a pause saw ~{share} the "
        f"traffic other sessions would send over a real one at the same rate{measured}: "
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
