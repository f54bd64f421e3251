"""The window's telemetry as saved in the RunResult: server counter deltas, reconciliation
with the client's usage, sampled gauges, and energy.

Every figure the server (or the machine) does not report is None and printed "not reported";
a counter that went down (the server restarted) is None too, with a warning. Never 0.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from workloads.model.base import Frozen

__all__ = [
    "EnergyDevice",
    "EnergyFigures",
    "GaugeSummary",
    "Reconciliation",
    "ServerTelemetry",
]


class GaugeSummary(Frozen):
    """A gauge sampled through the window (start, periodic samples, end)."""

    peak: float
    mean: float
    last: float
    samples: int  # window edges included
    inside: int = 0  # samples taken strictly inside the window


Verdict = Literal["reconciles", "differs", "unknown"]


class Reconciliation(Frozen):
    """One server counter's window delta against the client's Σ over measured TurnRecords."""

    figure: str  # e.g. "prompt_tokens"
    metric: str | None  # the exported sample read, e.g. "vllm:prompt_tokens_total"
    server: float | None  # Δ over the window; None: not reported or unknown
    client: float | None  # Σ over the measured TurnRecords; None: not reported per request
    client_basis: str  # what was summed, e.g. "Σ usage.prompt_tokens"
    difference: float | None  # server − client
    tolerance: float = 0.0  # from the server's printed precision (llama.cpp: 6 digits)
    verdict: Verdict
    causes: list[str] = Field(default_factory=list)  # likely causes, most likely first


class ServerTelemetry(Frozen):
    """Server counters over the measured window, read from its Prometheus ``/metrics``."""

    server: str | None  # "vLLM", "SGLang", "llama.cpp", "TGI"; None: not recognised or unread
    metrics_url: str
    scrapes: int = 0  # successful scrapes (window edges and gauge samples)
    failed_scrapes: int = 0
    metrics_used: dict[str, str] = Field(default_factory=dict)  # figure → exported name read
    prompt_tokens: float | None = None  # as the server counted them (full prompts)
    cached_prompt_tokens: float | None = None
    uncached_prompt_tokens: float | None = None
    generation_tokens: float | None = None
    prefix_cache_queries: float | None = None  # tokens
    prefix_cache_hits: float | None = None  # tokens
    prefix_cache_hit_rate: float | None = None  # hits / queries (or cached / prompt)
    preemptions: float | None = None
    finished_requests: float | None = None
    finished_reasons: dict[str, float] | None = None  # e.g. {"length": 15, "stop": 0, ...}
    spec_drafts: float | None = None
    spec_draft_tokens: float | None = None
    spec_accepted_tokens: float | None = None
    spec_acceptance_rate: float | None = None  # Δaccepted / Δdraft_tokens
    spec_mean_accepted_length: float | None = None  # 1 + Δaccepted / Δdrafts
    # fraction 0..1, peak over the samples; None when no sample fell inside the window (a
    # window shorter than the sampling interval has only its idle edges: no peak to tell)
    kv_usage_peak: float | None = None
    gauges: dict[str, GaugeSummary] = Field(default_factory=dict)
    reconciliation: list[Reconciliation] = Field(default_factory=list)
    # Format 6.2: the KV cache's capacity in tokens as the server exports it (vLLM's
    # cache_config_info: num_gpu_blocks × block_size, summed over engines); None: not
    # exported. What the pause pressure is compared with.
    kv_capacity_tokens: int | None = None

    @property
    def reconciles(self) -> bool | None:
        """True when every comparable figure reconciles; None when none could be compared."""
        verdicts = [r.verdict for r in self.reconciliation if r.verdict != "unknown"]
        return None if not verdicts else all(v == "reconciles" for v in verdicts)


class EnergyDevice(Frozen):
    """One energy counter (a GPU, a card, a CPU package) over the window."""

    device: str
    joules: float | None  # None: unreadable during the window, or its counter reset


class EnergyFigures(Frozen):
    """Energy over the window, read at its edges (and often enough to catch wrap-arounds).

    Includes prefill and idle gaps: it is the devices' energy between the two edges.
    """

    source: Literal["nvml", "hwmon", "rapl"] | None  # None: not available
    devices: list[EnergyDevice] = Field(default_factory=list)
    joules: float | None = None  # Σ over devices; None if any device is unknown
    duration_s: float | None = None  # between the first and last reading
    mean_watts: float | None = None
    generated_tokens: int | None = None  # Σ completion tokens over measured TurnRecords
    joules_per_token: float | None = None
    tokens_per_joule: float | None = None
    reads: int = 0
    not_available: str | None = None  # why, when joules is None

    @property
    def device(self) -> str | None:
        """The devices measured, in one line."""
        if not self.devices:
            return None
        return " + ".join(d.device for d in self.devices)
