"""What each server calls its counters, and what each counter means — as data.

One :class:`ServerNames` per server family (vLLM, SGLang, llama.cpp, TGI), detected from the
metric names a scrape contains (``vllm:``, ``sglang:``, ``llamacpp:``, ``tgi_``), never from
the URL. The per-server semantics that reconciliation needs live here, not in if-chains:

* which exported sample answers each window figure, newest name first (vLLM ≤ 0.10 called the
  prefix-cache counters ``vllm:gpu_prefix_cache_*``);
* when the server adds to it (at admission, when prefill ends, at request finish), which is
  what explains a difference of timing;
* which client sum it must equal: llama.cpp's ``prompt_tokens_total`` excludes cached tokens,
  so it is compared with Σ(prompt − cached), not Σ prompt;
* how precisely values are printed (llama.cpp: 6 significant digits).

Source: the shared server reference (vLLM 0.33, SGLang 0.5.23, llama.cpp Oct 2026, TGI 3.3).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from workloads.telemetry.prometheus import LabelFilter, Snapshot

__all__ = [
    "SERVERS",
    "CounterFigure",
    "Gauge",
    "GaugeFigure",
    "Read",
    "ServerNames",
    "UsageSum",
    "detect_server",
    "kv_capacity_tokens",
    "server_names",
]

CounterFigure = Literal[
    "prompt_tokens",  # full prompts, cached part included
    "cached_prompt_tokens",
    "uncached_prompt_tokens",  # computed (prefilled) prompt tokens
    "generation_tokens",
    "prefix_cache_queries",
    "prefix_cache_hits",
    "preemptions",
    "spec_drafts",
    "spec_draft_tokens",
    "spec_accepted_tokens",
    "finished_requests",
]
GaugeFigure = Literal[
    "kv_usage", "requests_running", "requests_waiting", "spec_accept_rate", "spec_accept_length"
]
# The client-side sum over the measured TurnRecords that a counter should equal.
UsageSum = Literal["prompt", "cached", "uncached", "completion", "requests", "draft", "accepted"]

AT_ADMISSION = "when a request is admitted (not again after a preemption)"
AT_PREFILL_END = "when a request's prefill ends"
AT_FINISH = "when a request finishes"
EVERY_STEP = "every engine step"


@dataclass(frozen=True)
class Read:
    """One exported sample name (with an optional label filter) and when it moves."""

    name: str
    where: LabelFilter = field(default_factory=dict)
    counted: str = ""  # when the server adds to it, in words for the report


@dataclass(frozen=True)
class Gauge:
    """A gauge sampled through the window. ``combine`` merges label sets of one scrape: a
    fraction per engine takes the max (the fullest engine), a count per engine the sum."""

    reads: tuple[Read, ...]
    combine: Literal["max", "sum"]


@dataclass(frozen=True)
class ServerNames:
    """The name table and counting rules of one server family."""

    server: str  # display name
    prefix: str  # every metric of this server starts with it
    counters: Mapping[CounterFigure, tuple[Read, ...]]  # first name present wins
    gauges: Mapping[GaugeFigure, Gauge] = field(default_factory=dict)
    finished_reasons: tuple[str, str] | None = None  # (sample name, reason label)
    reconcile: Mapping[CounterFigure, UsageSum] = field(default_factory=dict)
    significant_digits: int | None = None  # values printed with this many digits
    metrics_hint: str = ""  # how to make the server export /metrics
    cached_usage_hint: str = ""  # how to make it report cached tokens per request
    not_exported: Mapping[str, str] = field(default_factory=dict)  # figure → why it never is

    def gauge_names(self) -> frozenset[str]:
        return frozenset(r.name for g in self.gauges.values() for r in g.reads)


def _r(name: str, counted: str = "", **where: tuple[str, ...]) -> tuple[Read, ...]:
    return (Read(name, {k: frozenset(v) for k, v in where.items()}, counted),)


VLLM = ServerNames(
    server="vLLM",
    prefix="vllm:",
    counters={
        "prompt_tokens": _r("vllm:prompt_tokens_total", AT_PREFILL_END),
        "cached_prompt_tokens": (
            Read("vllm:prompt_tokens_cached_total", {}, AT_PREFILL_END),
            # before prompt_tokens_cached existed: local hits only
            Read("vllm:prefix_cache_hits_total", {}, AT_ADMISSION),
            Read("vllm:gpu_prefix_cache_hits_total", {}, AT_ADMISSION),
        ),
        "uncached_prompt_tokens": _r(
            "vllm:prompt_tokens_by_source_total", AT_PREFILL_END, source=("local_compute",)
        ),
        "generation_tokens": _r("vllm:generation_tokens_total", EVERY_STEP),
        "prefix_cache_queries": (
            Read("vllm:prefix_cache_queries_total", {}, AT_ADMISSION),
            Read("vllm:gpu_prefix_cache_queries_total", {}, AT_ADMISSION),  # ≤ 0.10
        ),
        "prefix_cache_hits": (
            Read("vllm:prefix_cache_hits_total", {}, AT_ADMISSION),
            Read("vllm:gpu_prefix_cache_hits_total", {}, AT_ADMISSION),  # ≤ 0.10
        ),
        "preemptions": _r("vllm:num_preemptions_total", EVERY_STEP),
        "spec_drafts": _r("vllm:spec_decode_num_drafts_total", EVERY_STEP),
        "spec_draft_tokens": _r("vllm:spec_decode_num_draft_tokens_total", EVERY_STEP),
        "spec_accepted_tokens": _r("vllm:spec_decode_num_accepted_tokens_total", EVERY_STEP),
        "finished_requests": _r("vllm:request_success_total", AT_FINISH),
    },
    gauges={
        "kv_usage": Gauge(
            (Read("vllm:kv_cache_usage_perc"), Read("vllm:gpu_cache_usage_perc")), "max"
        ),
        "requests_running": Gauge(_r("vllm:num_requests_running"), "sum"),
        "requests_waiting": Gauge(_r("vllm:num_requests_waiting"), "sum"),
    },
    finished_reasons=("vllm:request_success_total", "finished_reason"),
    reconcile={
        "prompt_tokens": "prompt",
        "cached_prompt_tokens": "cached",
        "uncached_prompt_tokens": "uncached",
        "generation_tokens": "completion",
        "finished_requests": "requests",
    },
    metrics_hint="vLLM serves /metrics unless started with --disable-log-stats",
    cached_usage_hint="start vLLM with --enable-prompt-tokens-details",
)

_SGLANG_HITS = ("device_hit", "host_hit", "storage_hit")

SGLANG = ServerNames(
    server="SGLang",
    prefix="sglang:",
    counters={
        "prompt_tokens": _r("sglang:prompt_tokens_total", AT_FINISH),
        "cached_prompt_tokens": _r("sglang:cached_tokens_total", AT_FINISH),
        "generation_tokens": _r("sglang:generation_tokens_total", AT_FINISH),
        "prefix_cache_queries": _r("sglang:prefill_effective_tokens_total", EVERY_STEP),
        "prefix_cache_hits": _r(
            "sglang:prefill_effective_tokens_total", EVERY_STEP, mode=_SGLANG_HITS
        ),
        "preemptions": _r("sglang:num_retracted_requests_total", EVERY_STEP),
    },
    gauges={
        "kv_usage": Gauge(_r("sglang:token_usage"), "max"),
        "requests_running": Gauge(_r("sglang:num_running_reqs"), "sum"),
        "requests_waiting": Gauge(_r("sglang:num_queue_reqs"), "sum"),
        # SGLang has no draft/accepted counters, only gauges over the last 40 decode steps.
        "spec_accept_rate": Gauge(_r("sglang:spec_accept_rate"), "max"),
        "spec_accept_length": Gauge(_r("sglang:spec_accept_length"), "max"),
    },
    reconcile={
        "prompt_tokens": "prompt",
        "cached_prompt_tokens": "cached",
        "generation_tokens": "completion",
    },
    metrics_hint="start SGLang with --enable-metrics",
    cached_usage_hint="start SGLang with --enable-cache-report",
)

LLAMACPP = ServerNames(
    server="llama.cpp",
    prefix="llamacpp:",
    counters={
        # "Number of prompt tokens processed, excluding cached tokens"
        "uncached_prompt_tokens": _r("llamacpp:prompt_tokens_total", AT_FINISH),
        "cached_prompt_tokens": _r("llamacpp:prompt_tokens_cached_total", AT_FINISH),
        "generation_tokens": _r("llamacpp:tokens_predicted_total", AT_FINISH),
        "spec_drafts": _r("llamacpp:spec_decode_num_drafts_total", AT_FINISH),
        "spec_draft_tokens": _r("llamacpp:spec_decode_num_draft_tokens_total", AT_FINISH),
        "spec_accepted_tokens": _r("llamacpp:spec_decode_num_accepted_tokens_total", AT_FINISH),
    },
    gauges={
        "requests_running": Gauge(_r("llamacpp:requests_processing"), "sum"),
        "requests_waiting": Gauge(_r("llamacpp:requests_deferred"), "sum"),
    },
    reconcile={
        "uncached_prompt_tokens": "uncached",
        "cached_prompt_tokens": "cached",
        "generation_tokens": "completion",
        "spec_draft_tokens": "draft",  # Σ timings.draft_n
        "spec_accepted_tokens": "accepted",  # Σ timings.draft_n_accepted
    },
    significant_digits=6,  # printed with %g: 1234567 → 1.23457e+06
    metrics_hint="start llama-server with --metrics",
    not_exported={
        "preemptions": "llama.cpp has fixed slots: requests queue instead",
        "kv_usage": "llama.cpp stopped exporting KV usage in 2025",
    },
)

TGI = ServerNames(
    server="TGI",
    prefix="tgi_",
    counters={
        "prompt_tokens": _r("tgi_request_input_length_sum", AT_FINISH),
        "generation_tokens": _r("tgi_request_generated_tokens_sum", AT_FINISH),
        "finished_requests": _r("tgi_request_success", AT_FINISH),
    },
    gauges={"requests_waiting": Gauge(_r("tgi_queue_size"), "sum")},
    reconcile={
        "prompt_tokens": "prompt",
        "generation_tokens": "completion",
        "finished_requests": "requests",
    },
    metrics_hint="TGI serves /metrics on its main port",
    not_exported={"preemptions": "TGI exports none", "kv_usage": "TGI exports none"},
)

SERVERS: tuple[ServerNames, ...] = (VLLM, SGLANG, LLAMACPP, TGI)


def server_names(server: str | None) -> ServerNames | None:
    """The table of a server family by its display name (as saved in a result)."""
    return next((names for names in SERVERS if names.server == server), None)


def kv_capacity_tokens(snapshot: Snapshot) -> int | None:
    """The KV cache's capacity in tokens as the server exports it, else None. vLLM:
    ``vllm:cache_config_info`` (a gauge fixed at 1 whose labels are the CacheConfig's
    fields), ``num_gpu_blocks`` × ``block_size`` per engine (else its
    ``kv_cache_size_tokens``), summed over the ``engine`` label: data-parallel engines each
    hold their own KV. A label that is not a whole number ("None" before the engine has
    sized its cache) makes it unknown."""
    rows = snapshot.rows("vllm:cache_config_info")
    if not rows:
        return None
    per_engine: dict[str, int] = {}
    for labels, _ in rows.items():
        have = dict(labels)
        try:
            if "num_gpu_blocks" in have and "block_size" in have:
                tokens = int(have["num_gpu_blocks"]) * int(have["block_size"])
            else:
                tokens = int(have["kv_cache_size_tokens"])
        except (KeyError, ValueError):
            return None
        per_engine.setdefault(have.get("engine", ""), tokens)
    return sum(per_engine.values()) or None


def detect_server(snapshot: Snapshot) -> ServerNames | None:
    """The server family whose prefix most sample names carry; None when none does."""
    best, count = None, 0
    for names in SERVERS:
        n = sum(1 for name in snapshot.names() if name.startswith(names.prefix))
        if n > count:
            best, count = names, n
    return best
