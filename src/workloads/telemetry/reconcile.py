"""From two scrapes (window start and end), the gauge samples between them and the measured
TurnRecords to :class:`ServerTelemetry`: counter deltas, derived rates, and the
reconciliation of each counter with the client's per-request usage. Pure.

A counter that went down, or whose ``_created`` timestamp changed, belongs to a restarted
server: its window value is unknown (None) and a warning says so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from workloads.model.figures import GaugeSummary, Reconciliation, ServerTelemetry
from workloads.model.records import TurnRecord
from workloads.telemetry.prometheus import Snapshot
from workloads.telemetry.servers import (
    CounterFigure,
    Read,
    ServerNames,
    UsageSum,
    kv_capacity_tokens,
)

__all__ = ["UsageSums", "counter_delta", "window_figures"]

BASIS: dict[UsageSum, str] = {
    "prompt": "Σ usage.prompt_tokens",
    "cached": "Σ usage cached_tokens",
    "uncached": "Σ (prompt − cached)",
    "completion": "Σ usage.completion_tokens",
    "requests": "requests answered 200",
    "draft": "Σ timings.draft_n",
    "accepted": "Σ timings.draft_n_accepted",
}
_PROMPT_FIGURES = {"prompt_tokens", "uncached_prompt_tokens", "prefix_cache_queries"}


@dataclass(frozen=True)
class UsageSums:
    """What the client saw over the measured TurnRecords (warm-ups excluded)."""

    requests: int  # answered HTTP 200
    missing_usage: int  # reached the server but carry no usage (cut off, failed mid-stream)
    prompt: int
    cached: int | None  # None: some record's usage has no cached_tokens
    completion: int
    draft: int | None  # llama.cpp timings.draft_n; None: no record carries it
    accepted: int | None
    # Answered 200, then ended by the client (a stop, a read stall, the turn deadline): the
    # server aborted them, so it never counted them finished.
    cut_off: int = 0

    @classmethod
    def of(cls, records: Iterable[TurnRecord]) -> UsageSums:
        measured = [r for r in records if not r.warmup]
        with_usage = [r for r in measured if r.prompt_tokens is not None]
        cached = [r.cached_tokens for r in with_usage]
        return cls(
            requests=sum(1 for r in measured if r.http_status == 200),
            missing_usage=sum(
                1
                for r in measured
                if r.prompt_tokens is None and (r.http_status == 200 or r.status == "incomplete")
            ),
            prompt=sum(r.prompt_tokens or 0 for r in with_usage),
            cached=None if any(c is None for c in cached) else sum(c or 0 for c in cached),
            completion=sum(r.completion_tokens or 0 for r in with_usage),
            draft=_timings_sum(measured, "draft_n"),
            accepted=_timings_sum(measured, "draft_n_accepted"),
            cut_off=sum(
                1
                for r in measured
                if r.http_status == 200
                and r.error_kind in ("cancelled", "read_stall", "turn_deadline")
            ),
        )

    def get(self, key: UsageSum) -> int | None:
        if key == "uncached":
            return None if self.cached is None else self.prompt - self.cached
        value: int | None = getattr(self, key)
        return value


def _timings_sum(records: Sequence[TurnRecord], key: str) -> int | None:
    values = [r.timings.get(key) for r in records if r.timings is not None]
    numbers = [int(v) for v in values if isinstance(v, int | float)]
    return sum(numbers) if numbers else None


@dataclass(frozen=True)
class Delta:
    """A counter over the window: ``value`` is None when unknown, ``problem`` says why."""

    read: Read | None
    value: float | None
    start: float | None = None
    end: float | None = None
    problem: str | None = None  # "absent" | "restart" | "disappeared"


def counter_delta(reads: Sequence[Read], start: Snapshot, end: Snapshot) -> Delta:
    """The window value of the first of ``reads`` the server exports.

    Compared per label set: a label set (or a whole counter) first seen at the window end
    started the window at 0 (prometheus_client creates labelled children on first use); one
    that went down, vanished, or got a new ``_created`` time means the server restarted.
    """
    for read in reads:
        a, b = start.rows(read.name, read.where), end.rows(read.name, read.where)
        if a is None and b is None:
            continue
        if b is None:
            return Delta(read, None, problem="disappeared")
        a = a or {}
        total_a, total_b = sum(a.values()), sum(b.values())
        if math.isnan(total_a) or math.isnan(total_b):
            return Delta(read, None, problem="absent")
        created = read.name.removesuffix("_total") + "_created"
        ca, cb = start.rows(created, read.where) or {}, end.rows(created, read.where) or {}
        restarted = any(k not in b or b[k] < v for k, v in a.items()) or any(
            k in cb and cb[k] != v for k, v in ca.items()
        )
        if restarted:
            return Delta(read, None, total_a, total_b, problem="restart")
        return Delta(read, total_b - total_a, total_a, total_b)
    return Delta(None, None, problem="absent")


def _resolution(value: float | None, digits: int | None) -> float:
    """Half a unit in the last printed digit (llama.cpp prints 1234567 as 1.23457e+06)."""
    if digits is None or value is None or value == 0 or abs(value) < 10**digits:
        return 0.0
    exponent = math.floor(math.log10(abs(value))) - (digits - 1)
    return 0.5 * 10.0**exponent


def _gauge(
    names: ServerNames, figure: str, edges: tuple[Snapshot, Snapshot], inner: Sequence[Snapshot]
) -> GaugeSummary | None:
    gauge = names.gauges.get(figure)  # type: ignore[call-overload]
    if gauge is None:
        return None
    values: list[float] = []
    inside = 0
    for i, snap in enumerate([edges[0], *inner, edges[1]]):
        read = next((r for r in gauge.reads if snap.has(r.name)), None)
        if read is None:
            continue
        rows = [v for labels, v in snap.samples[read.name] if not math.isnan(v)]
        if rows:
            values.append(max(rows) if gauge.combine == "max" else sum(rows))
            inside += 0 < i <= len(inner)
    if not values:
        return None
    return GaugeSummary(
        peak=max(values),
        mean=sum(values) / len(values),
        last=values[-1],
        samples=len(values),
        inside=inside,
    )


def _ratio(top: float | None, bottom: float | None) -> float | None:
    if top is None or bottom is None or bottom <= 0:
        return None
    return top / bottom


def window_figures(
    names: ServerNames,
    start: Snapshot,
    end: Snapshot,
    samples: Sequence[Snapshot],
    usage: UsageSums,
    *,
    metrics_url: str,
    scrapes: int = 2,
    failed_scrapes: int = 0,
) -> tuple[ServerTelemetry, list[str]]:
    """The window's server figures and reconciliation, and warnings for restarted counters.
    ``samples`` are the periodic gauge samples taken inside the window (edges excluded)."""
    deltas: dict[CounterFigure, Delta] = {
        figure: counter_delta(reads, start, end) for figure, reads in names.counters.items()
    }
    values = {figure: d.value for figure, d in deltas.items()}
    warnings: list[str] = []
    restarted = [d for d in deltas.values() if d.problem == "restart" and d.read is not None]
    if restarted:
        listed = ", ".join(
            f"{d.read.name} {d.start:,.0f} → {d.end:,.0f}" for d in restarted if d.read
        )
        warnings.append(
            f"server counters went down or were re-created over the window ({listed}): the "
            "server restarted during the run; those window figures are unknown"
        )
    vanished = [
        d.read.name for d in deltas.values() if d.problem == "disappeared" and d.read is not None
    ]
    if vanished:
        warnings.append(
            f"server counters disappeared during the window ({', '.join(vanished)}): the "
            "server restarted or changed configuration; those figures are unknown"
        )

    reasons = _finished_reasons(names, start, end)
    hit_rate = _ratio(values.get("prefix_cache_hits"), values.get("prefix_cache_queries"))
    if hit_rate is None and values.get("prefix_cache_queries") is None:
        cached, uncached = values.get("cached_prompt_tokens"), values.get("uncached_prompt_tokens")
        prompt = values.get("prompt_tokens")
        if prompt is None and cached is not None and uncached is not None:
            prompt = cached + uncached
        hit_rate = _ratio(cached, prompt)
    accepted = values.get("spec_accepted_tokens")
    drafts_ratio = _ratio(accepted, values.get("spec_drafts"))
    gauges: dict[str, GaugeSummary] = {
        figure: summary
        for figure in names.gauges
        if (summary := _gauge(names, figure, (start, end), samples)) is not None
    }
    running = _gauge(names, "requests_running", (start, start), [])
    finished = values.get("finished_requests")
    evidence = _Evidence(
        usage=usage,
        extra_requests=None if finished is None else finished - usage.requests,
        running_at_start=running.peak if running else None,
        preemptions=values.get("preemptions"),
    )
    rows = [
        _reconcile(names, figure, key, deltas[figure], usage, evidence)
        for figure, key in names.reconcile.items()
        if figure in deltas
    ]
    rows = [
        r
        for r in rows
        if not (r.figure.startswith("spec_") and r.server is None and r.client is None)
    ]
    telemetry = ServerTelemetry(
        server=names.server,
        metrics_url=metrics_url,
        scrapes=scrapes,
        failed_scrapes=failed_scrapes,
        metrics_used={f: d.read.name for f, d in deltas.items() if d.read is not None},
        prompt_tokens=values.get("prompt_tokens"),
        cached_prompt_tokens=values.get("cached_prompt_tokens"),
        uncached_prompt_tokens=values.get("uncached_prompt_tokens"),
        generation_tokens=values.get("generation_tokens"),
        prefix_cache_queries=values.get("prefix_cache_queries"),
        prefix_cache_hits=values.get("prefix_cache_hits"),
        prefix_cache_hit_rate=hit_rate,
        preemptions=values.get("preemptions"),
        finished_requests=values.get("finished_requests"),
        finished_reasons=reasons,
        spec_drafts=values.get("spec_drafts"),
        spec_draft_tokens=values.get("spec_draft_tokens"),
        spec_accepted_tokens=accepted,
        spec_acceptance_rate=_ratio(accepted, values.get("spec_draft_tokens")),
        spec_mean_accepted_length=None if drafts_ratio is None else 1 + drafts_ratio,
        kv_usage_peak=(
            gauges["kv_usage"].peak if "kv_usage" in gauges and gauges["kv_usage"].inside else None
        ),
        gauges=gauges,
        reconciliation=rows,
        kv_capacity_tokens=kv_capacity_tokens(end) or kv_capacity_tokens(start),
    )
    return telemetry, warnings


def _finished_reasons(
    names: ServerNames, start: Snapshot, end: Snapshot
) -> dict[str, float] | None:
    if names.finished_reasons is None:
        return None
    name, label = names.finished_reasons
    a, b = start.by_label(name, label), end.by_label(name, label)
    if a is None or b is None:
        return None
    out = {reason: b[reason] - a.get(reason, 0.0) for reason in b}
    if any(v < 0 for v in out.values()):
        return None  # restarted; the warning comes from the finished_requests counter
    return out


@dataclass(frozen=True)
class _Evidence:
    """What the window shows about the likely causes of a difference."""

    usage: UsageSums
    extra_requests: float | None  # server-finished requests − requests this run sent
    running_at_start: float | None
    preemptions: float | None


def _reconcile(
    names: ServerNames,
    figure: CounterFigure,
    key: UsageSum,
    delta: Delta,
    usage: UsageSums,
    evidence: _Evidence,
) -> Reconciliation:
    client_value = usage.get(key)
    client = None if client_value is None else float(client_value)
    server = delta.value
    if client is None and server == 0 and key in ("draft", "accepted"):
        # llama.cpp sends timings.draft_n only while drafting: no response carrying it and no
        # drafts counted by the server agree — nothing was drafted in the window.
        client = 0.0
    tolerance = _resolution(delta.start, names.significant_digits) + _resolution(
        delta.end, names.significant_digits
    )
    row = Reconciliation(
        figure=figure,
        metric=delta.read.name if delta.read else None,
        server=server,
        client=client,
        client_basis=BASIS[key],
        difference=None,
        tolerance=tolerance,
        verdict="unknown",
    )
    if server is None or client is None:
        causes = []
        if server is None:
            causes.append(
                "the counter went down or changed: the server restarted during the window"
                if delta.problem in ("restart", "disappeared")
                else f"{names.server} does not export this counter here (flag off or another "
                "version)"
            )
        if client is None:
            causes.append(_client_unknown(names, key))
        return row.model_copy(update={"causes": causes})
    difference = server - client
    if abs(difference) <= tolerance:
        causes = (
            []
            if tolerance == 0
            else [
                f"within the server's printed precision (±{tolerance:,.0f}: "
                f"{names.server} prints {names.significant_digits} significant digits)"
            ]
        )
        return row.model_copy(
            update={"difference": difference, "verdict": "reconciles", "causes": causes}
        )
    return row.model_copy(
        update={
            "difference": difference,
            "verdict": "differs",
            "causes": _causes(names, figure, delta, difference, evidence),
        }
    )


def _client_unknown(names: ServerNames, key: UsageSum) -> str:
    if key in ("cached", "uncached"):
        hint = f" ({names.cached_usage_hint})" if names.cached_usage_hint else ""
        return f"the server does not report cached tokens per request: flag off{hint}"
    if key in ("draft", "accepted"):
        return "no response carried timings.draft_n (llama.cpp sends it only while drafting)"
    return "the client has no usage for this figure"


def _causes(
    names: ServerNames, figure: CounterFigure, delta: Delta, difference: float, ev: _Evidence
) -> list[str]:
    out: list[str] = []
    if difference > 0:
        if ev.usage.missing_usage:
            out.append(
                f"{ev.usage.missing_usage} measured requests ended without usage (failed or "
                "cut off): the server counted their tokens, the client could not"
            )
        if ev.extra_requests is not None and ev.extra_requests > 0:
            out.append(
                f"other traffic on the server: it finished {ev.extra_requests:,.0f} more "
                f"requests in the window than this run sent ({ev.usage.requests})"
            )
        if ev.running_at_start:
            out.append(
                f"{ev.running_at_start:,.0f} requests were already running when the window "
                "opened (other traffic, or requests left over from before)"
            )
        if ev.preemptions and figure in _PROMPT_FIGURES:
            out.append(
                f"{ev.preemptions:,.0f} preemptions in the window: recomputed prompts can be "
                "counted again"
            )
        if not out:
            out.append("other traffic on the server during the window (requests not from this run)")
    else:
        if figure == "finished_requests" and ev.usage.cut_off:
            out.append(
                f"{ev.usage.cut_off} measured requests answered 200 were ended by the client "
                "(cancelled by a stop, a read stall or the turn deadline): the server aborted "
                "them, so it never counted them finished"
            )
        counted = delta.read.counted if delta.read else ""
        if counted and not (figure == "finished_requests" and ev.usage.cut_off >= -difference):
            out.append(
                f"counter timing: {names.server} adds to {delta.read.name if delta.read else ''} "
                f"{counted}; requests not yet counted when the window closed are missing"
            )
        if delta.read is not None and "prefix_cache_hits" in delta.read.name:
            out.append(
                "this counter has local prefix-cache hits only; usage cached_tokens also counts "
                "hits from an external KV connector"
            )
        if not out:
            out.append(f"{names.server} counted fewer than the responses reported")
    return out
