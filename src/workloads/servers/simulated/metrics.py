"""vLLM-shaped ``/metrics`` for the simulated engine, rendered by prometheus_client.

Names follow vLLM's current exporter (see shared reference): counters carry ``_total`` and a
``_created`` sample, labels ``engine`` and ``model_name``. Counters move when vLLM's do:
prefix-cache queries/hits at a request's first admission, prompt tokens (and their split by
source) when its prefill completes, generation tokens every step, request_success when it
finishes — so over a quiet window their deltas equal the sums of the requests' usage.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from workloads.servers.simulated.engine import Engine

_COUNTERS = {
    "prefix_cache_queries": "Prefix cache queries, in terms of number of queried tokens.",
    "prefix_cache_hits": "Prefix cache hits, in terms of number of cached tokens.",
    "prompt_tokens": "Number of prefill tokens processed.",
    "prompt_tokens_cached": "Number of cached prompt tokens (local + external).",
    "generation_tokens": "Number of generation tokens processed.",
    "num_preemptions": "Cumulative number of preemptions from the engine.",
    "spec_decode_num_drafts": "Number of spec decoding drafts.",
    "spec_decode_num_draft_tokens": "Number of draft tokens.",
    "spec_decode_num_accepted_tokens": "Number of accepted tokens.",
}


class _EngineCollector(Collector):
    def __init__(self, engine: Engine, created: float) -> None:
        self.engine = engine
        self.created = created

    def collect(self) -> Iterator[Metric]:
        e = self.engine
        labels = ["engine", "model_name"]
        values = ["0", e.profile.model]
        spec = e.profile.spec_tokens > 0
        for name, doc in _COUNTERS.items():
            if name.startswith("spec_decode") and not spec:
                continue  # vLLM exports these only with speculative decoding on
            family = CounterMetricFamily(f"vllm:{name}", doc, labels=labels, created=self.created)
            family.add_metric(values, e.counters[name], created=self.created)
            yield family
        if spec:
            per_pos = CounterMetricFamily(
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                "Accepted tokens per draft position.",
                labels=[*labels, "position"],
            )
            for pos, count in enumerate(e.accepted_per_pos):
                per_pos.add_metric([*values, str(pos)], count, created=self.created)
            yield per_pos
        by_source = CounterMetricFamily(
            "vllm:prompt_tokens_by_source",
            "Number of prompt tokens by source.",
            labels=[*labels, "source"],
        )
        cached = e.counters["prompt_tokens_cached"]
        for source, tokens in (
            ("local_compute", e.counters["prompt_tokens"] - cached),
            ("local_cache_hit", cached),
            ("external_kv_transfer", 0),
        ):
            by_source.add_metric([*values, source], tokens, created=self.created)
        yield by_source
        success = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=[*labels, "finished_reason"],
        )
        for reason in ("stop", "length", "abort", "error", "repetition"):
            success.add_metric([*values, reason], e.finished_reasons[reason], created=self.created)
        yield success
        for name, doc, value in (
            (
                "vllm:num_requests_running",
                "Number of requests in model execution batches.",
                float(len(e.running)),
            ),
            (
                "vllm:num_requests_waiting",
                "Number of requests waiting to be processed.",
                float(len(e.waiting)),
            ),
            ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", e.kv_usage),
        ):
            gauge = GaugeMetricFamily(name, doc, labels=labels)
            gauge.add_metric(values, value)
            yield gauge
        # The KV capacity as vLLM exports it (its CacheConfig's fields as labels of a gauge
        # fixed at 1, with the engine's index): what the window telemetry reads it from.
        p = e.profile
        info = GaugeMetricFamily(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            labels=[
                "block_size",
                "enable_prefix_caching",
                "engine",
                "kv_cache_size_tokens",
                "num_gpu_blocks",
            ],
        )
        info.add_metric(
            [
                str(p.block_size),
                str(p.prefix_caching),
                "0",
                str(p.num_blocks * p.block_size),
                str(p.num_blocks),
            ],
            1.0,
        )
        yield info


def render_metrics(engine: Engine, created: float) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_EngineCollector(engine, created))
    return generate_latest(registry)
