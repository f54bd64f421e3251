"""Judging a target from what the probe saw: one pure function per row of the probe table.

Each judge takes the :class:`Observations` that :func:`workloads.probe.observe.probe` gathered (the
chat responses, the ``/tokenize`` shape, ``/metrics`` before and after, identity) and returns a
:class:`Check`: a status, the evidence, and what a run will do about it. No I/O here, so each
rule is plain code and the wording of a consequence lives next to the condition behind it.

Size: past 400 lines: one short judge per probe row (about 20); each is read beside the
row it fills, so they stay in one table-like file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from workloads.model.base import Frozen
from workloads.model.results import ServerIdentity
from workloads.model.target import Target
from workloads.telemetry.prometheus import Snapshot
from workloads.telemetry.servers import CounterFigure, Read, ServerNames, detect_server
from workloads.telemetry.window import ENABLE_METRICS_HINT
from workloads.wire.client import ChatResponse

__all__ = ["CHECKS", "EXACT_TOKENS", "Check", "Observations", "Support", "judge"]

Support = Literal["yes", "no", "partial", "not reported"]

EXACT_TOKENS = 16  # asked with ignore_eos + min_tokens: a second on a 2-core CPU llama.cpp


class Check(Frozen):
    """One row of the probe: what was seen (``evidence``) and what a run will do about it
    (``consequence``)."""

    name: str
    status: Support
    evidence: str
    consequence: str


@dataclass(frozen=True)
class Observations:
    """Everything the probe gathered; every check is a pure function of it."""

    target: Target
    model: str
    identity: ServerIdentity
    short: ChatResponse  # a plain request for a few tokens
    exact: ChatResponse  # EXACT_TOKENS with ignore_eos + min_tokens
    cache_first: ChatResponse  # a fresh ~300-token prompt
    cache_again: ChatResponse  # the same prompt again
    tokenizer: str | None  # the target tokenizer's description; None: no known shape
    tokenized: int | None  # its count for the short request's chat
    metrics_url: str
    before: Snapshot | None  # /metrics before the chat requests
    after: Snapshot | None  # and after them
    metrics_error: str | None
    props: dict[str, Any] | None  # llama.cpp's /props

    @property
    def chats(self) -> tuple[ChatResponse, ...]:
        return (self.short, self.exact, self.cache_first, self.cache_again)

    @property
    def names(self) -> ServerNames | None:
        return detect_server(self.after) if self.after is not None else None


def _failure(response: ChatResponse) -> str:
    message = response.error_message.splitlines()[0] if response.error_message else ""
    return f"{response.error_kind}: {message[:120]}"


def _check_model(seen: Observations) -> Check:
    listed = seen.identity.models
    shown = ", ".join(listed[:3]) + (f" and {len(listed) - 3} more" if len(listed) > 3 else "")
    if seen.target.model and listed and seen.target.model not in listed:
        return Check(
            name="model",
            status="partial",
            evidence=f"--model {seen.target.model} is not among /v1/models: {shown}",
            consequence="requests name it anyway; the server may refuse them",
        )
    how = "" if seen.target.model else " (the first listed; --model picks another)"
    return Check(
        name="model",
        status="yes",
        evidence=f"/v1/models lists {shown or 'nothing'}",
        consequence=f"requests name {seen.model}{how}",
    )


def _check_streaming(seen: Observations) -> Check:
    ok = [r for r in (seen.short, seen.exact) if r.ok]
    if not ok:
        return Check(
            name="streaming",
            status="no",
            evidence=f"the short streamed request failed ({_failure(seen.short)})",
            consequence="every turn would fail the same way: check the URL, model and API key",
        )
    best = max(ok, key=lambda r: r.content_events)
    first, last = best.first_content_ns, best.last_content_ns
    spread = (last - first) / 1e6 if first is not None and last is not None else 0.0
    if best.content_events > 1 and spread > 0:
        return Check(
            name="streaming",
            status="yes",
            evidence=f"{best.content_events} content chunks over {spread:,.0f} ms",
            consequence="TTFT and per-stream decode rates are measured chunk by chunk",
        )
    if best.content_events > 1:
        evidence = f"{best.content_events} content chunks, all in one read (buffered?)"
    elif best.content_events == 1:
        evidence = "the whole reply came in one content chunk"
    else:
        evidence = "the stream ended without content"
    return Check(
        name="streaming",
        status="partial" if best.content_events else "no",
        evidence=evidence,
        consequence="decode rates not reported (they need chunks apart in time); TTFT is the "
        "whole response time",
    )


def _check_ttft(seen: Observations) -> Check:
    measured = [
        (r.first_content_ns - r.sent_ns, r)
        for r in (seen.short, seen.exact)
        if r.ok and r.first_content_ns is not None and r.sent_ns is not None
    ]
    if not measured:
        return Check(
            name="TTFT",
            status="not reported",
            evidence="no content arrived on a short request",
            consequence="TTFT not reported",
        )
    ttft, response = min(measured, key=lambda m: m[0])
    prompt = f"{response.usage.prompt_tokens}-token " if response.usage else ""
    return Check(
        name="TTFT",
        status="yes",
        evidence=f"{ttft / 1e6:,.0f} ms for a {prompt}prompt"
        + (f" (best of {len(measured)} short requests)" if len(measured) > 1 else ""),
        consequence="TTFT counts from request sent to first content; this is the idle floor",
    )


def _check_usage(seen: Observations) -> Check:
    response = next((r for r in (seen.short, seen.exact) if r.ok), None)
    if response is None:
        return Check(
            name="usage in stream",
            status="not reported",
            evidence=f"the short request failed ({_failure(seen.short)})",
            consequence="no token counts while requests fail",
        )
    if response.usage is None:
        return Check(
            name="usage in stream",
            status="no",
            evidence="no usage chunk, though stream_options.include_usage was sent",
            consequence="no token counts: every turn is invalid and no rate is reported",
        )
    u = response.usage
    return Check(
        name="usage in stream",
        status="yes",
        evidence=f"usage chunk: prompt {u.prompt_tokens}, completion {u.completion_tokens}",
        consequence="prompt, cached and generated tokens come from the server's usage",
    )


def _check_exact(seen: Observations) -> Check:
    r, n = seen.exact, EXACT_TOKENS
    fix = "set exact_output = false (no ignore_eos/min_tokens; lengths then vary)"
    if not r.ok:
        return Check(
            name="exact output length",
            status="no",
            evidence=f"asking {n} tokens with ignore_eos + min_tokens failed ({_failure(r)})",
            consequence=f"every turn would fail: {fix}",
        )
    if r.usage is None:
        return Check(
            name="exact output length",
            status="not reported",
            evidence=f"no usage to count the reply ({r.content_events} content chunks, "
            f"finish_reason {r.finish_reason})",
            consequence="turn lengths cannot be checked: every turn is invalid",
        )
    got = r.usage.completion_tokens
    if got == n and r.finish_reason == "length":
        return Check(
            name="exact output length",
            status="yes",
            evidence=f"{got} of {n} tokens, finish_reason length (ignore_eos + min_tokens)",
            consequence="every turn generates exactly output_tokens; one that does not is invalid",
        )
    return Check(
        name="exact output length",
        status="no",
        evidence=f"asked {n} with ignore_eos + min_tokens: got {got}, finish_reason "
        f"{r.finish_reason}",
        consequence=f"turns that stop early are invalid: {fix}",
    )


def _check_cached(seen: Observations) -> Check:
    first, again = seen.cache_first, seen.cache_again
    names = seen.names
    hint = (
        names.cached_usage_hint
        if names is not None and names.cached_usage_hint
        else "on vLLM start with --enable-prompt-tokens-details, on SGLang --enable-cache-report"
    )
    not_reported = "cache effectiveness will print 'not reported'"
    if not again.ok or again.usage is None:
        why = _failure(again) if not again.ok else "no usage"
        return Check(
            name="cached_tokens",
            status="not reported",
            evidence=f"the repeated prompt gave no usage ({why})",
            consequence=not_reported,
        )
    cached = again.usage.cached_tokens
    if cached is None:
        return Check(
            name="cached_tokens",
            status="not reported",
            evidence="usage has no prompt_tokens_details.cached_tokens",
            consequence=f"{not_reported}; {hint}",
        )
    before = first.usage.cached_tokens if first.ok and first.usage is not None else None
    seen_text = (
        f"repeat of a {again.usage.prompt_tokens}-token prompt: {cached} cached "
        f"(first send: {before if before is not None else 'not reported'})"
    )
    if cached > 0 and (before is None or cached > before):
        return Check(
            name="cached_tokens",
            status="yes",
            evidence=seen_text,
            consequence="prefix caching observed: cache effectiveness (cached / shareable "
            "prefix) is reported per turn",
        )
    return Check(
        name="cached_tokens",
        status="partial",
        evidence=f"reported, but no reuse: {seen_text}",
        consequence="cache effectiveness will read 0%: is prefix caching on? (OpenAI caches "
        "only prompts of 1,024+ tokens)",
    )


def _check_timings(seen: Observations) -> Check:
    timings = next((r.timings for r in seen.chats if r.timings), None)
    if timings is None:
        return Check(
            name="timings",
            status="no",
            evidence="no per-response timings object (a llama.cpp extension)",
            consequence="nothing lost: token counts come from usage",
        )
    keys = ("prompt_n", "cache_n", "predicted_n", "draft_n", "draft_n_accepted")
    shown = ", ".join(f"{k} {timings[k]}" for k in keys if k in timings)
    return Check(
        name="timings",
        status="yes",
        evidence=f"llama.cpp timings on each response ({shown})",
        consequence="kept on each TurnRecord; spec decoding is read from draft_n if /metrics "
        "lacks it",
    )


def _check_tokenize(seen: Observations) -> Check:
    if seen.tokenizer is None:
        return Check(
            name="/tokenize",
            status="no",
            evidence="no vLLM-shaped /tokenize with messages, no llama.cpp /apply-template",
            consequence="prompts sized by tiktoken estimate, rescaled from warm-up usage: "
            "depths are approximate",
        )
    usage = seen.short.usage.prompt_tokens if seen.short.usage is not None else None
    count = seen.tokenized
    if count is not None and usage is not None and count != usage:
        return Check(
            name="/tokenize",
            status="partial",
            evidence=f"{seen.tokenizer}: {count} tokens for the short chat, usage says {usage}",
            consequence="prompts sized with the server's tokenizer, off by that difference",
        )
    agree = " = usage.prompt_tokens" if count is not None and count == usage else ""
    counted = f": {count} tokens for the short chat{agree}" if count is not None else ""
    return Check(
        name="/tokenize",
        status="yes",
        evidence=f"{seen.tokenizer}{counted}",
        consequence="prompts sized exactly to the scenario's depths by the server's tokenizer",
    )


def _check_metrics(seen: Observations) -> Check:
    if seen.after is None:
        return Check(
            name="/metrics",
            status="no",
            evidence=f"GET {seen.metrics_url}: {seen.metrics_error}",
            consequence=f"no server counters over the window ({ENABLE_METRICS_HINT})",
        )
    names, samples = seen.names, len(list(seen.after.names()))
    if names is None:
        return Check(
            name="/metrics",
            status="partial",
            evidence=f"{seen.metrics_url}: {samples} samples, none with vLLM, SGLang, "
            "llama.cpp or TGI names",
            consequence="server figures not reported",
        )
    return Check(
        name="/metrics",
        status="yes",
        evidence=f"{names.server} names, {samples} samples at {seen.metrics_url}",
        consequence="counters read at the window's edges and reconciled with usage",
    )


def _present(seen: Observations, names: ServerNames, figure: CounterFigure) -> Read | None:
    """The first of a figure's names the last scrape has."""
    assert seen.after is not None
    return next((r for r in names.counters.get(figure, ()) if seen.after.has(r.name)), None)


def _no_family(name: str, consequence: str) -> Check:
    return Check(
        name=name,
        status="not reported",
        evidence="no known /metrics family",
        consequence=consequence,
    )


def _check_prefix_counters(seen: Observations) -> Check:
    name = "prefix-cache counters"
    names = seen.names
    if names is None:
        return _no_family(name, "cache figures come from usage only")
    hits = _present(seen, names, "prefix_cache_hits")
    queries = _present(seen, names, "prefix_cache_queries")
    cached = _present(seen, names, "cached_prompt_tokens")
    if hits is not None and queries is not None:
        return Check(
            name=name,
            status="yes",
            evidence=f"{hits.name}, {queries.name}",
            consequence="the server's hit rate over the window (hit / queried tokens)",
        )
    if cached is not None:
        return Check(
            name=name,
            status="partial",
            evidence=f"{cached.name} (no query counter)",
            consequence="cached tokens reconciled with usage; no server hit rate",
        )
    return Check(
        name=name,
        status="no",
        evidence=f"{names.server} exports no prefix-cache counter",
        consequence="cache figures come from usage only",
    )


def _delta(seen: Observations, read: Read) -> float:
    assert seen.after is not None
    end = seen.after.value(read.name, read.where) or 0.0
    start = seen.before.value(read.name, read.where) if seen.before is not None else None
    return end - (start or 0.0)


def _check_spec(seen: Observations) -> Check:
    name = "spec-decode counters"
    # llama.cpp adds to its counters when a slot is released, which can be a moment after the
    # last byte of the response: its per-response timings say whether drafting happened.
    timed = [r.timings for r in seen.chats if r.timings and "draft_n" in r.timings]
    timed_drafts = sum(int(t.get("draft_n") or 0) for t in timed)
    timed_accepted = sum(int(t.get("draft_n_accepted") or 0) for t in timed)
    from_timings = Check(
        name=name,
        status="yes",
        evidence=f"timings: {timed_drafts:,} draft tokens, {timed_accepted:,} accepted during "
        "the probe",
        consequence="acceptance read from timings.draft_n / draft_n_accepted per response",
    )
    names = seen.names
    if names is None:
        if timed_drafts:
            return from_timings
        return _no_family(name, "spec decoding read from llama.cpp timings.draft_n if sent")
    draft = _present(seen, names, "spec_draft_tokens")
    accepted = _present(seen, names, "spec_accepted_tokens")
    if draft is not None and accepted is not None:
        d, a = _delta(seen, draft), _delta(seen, accepted)
        if d > 0:
            return Check(
                name=name,
                status="yes",
                evidence=f"{d:,.0f} draft tokens, {a:,.0f} accepted during the probe ({a / d:.0%})",
                consequence="acceptance rate and mean accepted length reported per window",
            )
        if timed_drafts:
            return from_timings
        return Check(
            name=name,
            status="no",
            evidence=f"{draft.name} exported, but no drafts during the probe",
            consequence="speculative decoding is off; runs report it as off",
        )
    if timed_drafts:
        return from_timings
    gauge = names.gauges.get("spec_accept_rate")
    if gauge is not None and any(
        seen.after is not None and seen.after.has(r.name) for r in gauge.reads
    ):
        return Check(
            name=name,
            status="partial",
            evidence=f"{gauge.reads[0].name} gauge only (no draft/accepted counters)",
            consequence="acceptance shown from the gauge, sampled over the window",
        )
    return Check(
        name=name,
        status="no",
        evidence=f"{names.server} exports no spec-decode counters (speculation off)",
        consequence="spec decoding: not reported",
    )


def _check_preemptions(seen: Observations) -> Check:
    name = "preemption counters"
    names = seen.names
    if names is None:
        return _no_family(name, "preemptions not reported")
    read = _present(seen, names, "preemptions")
    if read is not None:
        assert seen.after is not None
        value = seen.after.value(read.name, read.where) or 0.0
        return Check(
            name=name,
            status="yes",
            evidence=f"{read.name} = {value:,.0f}",
            consequence="preemptions per window; they explain recomputed prompt tokens",
        )
    return Check(
        name=name,
        status="no",
        evidence=names.not_exported.get("preemptions", f"{names.server} exports none"),
        consequence="preemptions not reported",
    )


def _check_identity(seen: Observations) -> Check:
    fingerprint = next((r.system_fingerprint for r in seen.chats if r.system_fingerprint), None)
    parts = []
    if fingerprint:
        parts.append(f"system_fingerprint {fingerprint}")
    if seen.identity.version:
        parts.append(f"/version {seen.identity.version}")
    props = seen.props or {}
    if props.get("build_info"):
        parts.append(f"/props build {props['build_info']}")
    slots = props.get("total_slots")
    if isinstance(slots, int):
        parts.append(f"{slots} slot{'s' if slots != 1 else ''}")
    if not parts:
        return Check(
            name="server identity",
            status="not reported",
            evidence="no system_fingerprint, /version or /props",
            consequence="results cannot tell server builds apart: say which in --note",
        )
    saved = [
        x for x, have in (("fingerprint", fingerprint), ("version", seen.identity.version)) if have
    ]
    consequence = (
        f"{' and '.join(saved)} saved in result.json (target.server)"
        if saved
        else "not saved with results: say the build in --note"
    )
    if isinstance(slots, int):
        consequence += f"; users beyond {slots} queue at the server"
    return Check(
        name="server identity", status="yes", evidence=" · ".join(parts), consequence=consequence
    )


def _check_reuse(seen: Observations) -> Check:
    resends = sum(r.resends for r in seen.chats)
    n = len(seen.chats)
    if resends == 0:
        return Check(
            name="connection reuse",
            status="yes",
            evidence=f"{n} requests in a row on one pooled connection, none re-sent",
            consequence="connections stay open between turns",
        )
    return Check(
        name="connection reuse",
        status="partial",
        evidence=f"{resends} re-send{'s' if resends != 1 else ''} over {n} requests: the "
        "server had closed the pooled connection before they went out",
        consequence="harmless: re-sent before the server read it, counted as resends, not errors",
    )


CHECKS: tuple[Callable[[Observations], Check], ...] = (
    _check_model,
    _check_streaming,
    _check_ttft,
    _check_usage,
    _check_exact,
    _check_cached,
    _check_timings,
    _check_tokenize,
    _check_metrics,
    _check_prefix_counters,
    _check_spec,
    _check_preemptions,
    _check_identity,
    _check_reuse,
)


def judge(seen: Observations) -> tuple[Check, ...]:
    """Every row, in the table's order."""
    return tuple(check(seen) for check in CHECKS)
