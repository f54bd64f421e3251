"""Prometheus text → Snapshot, on prometheus_client's parser; server detection by names."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily

from workloads.telemetry.prometheus import parse_metrics
from workloads.telemetry.servers import detect_server

# Rebuilt from the shared server reference (vLLM 0.33 serialization).
VLLM = """\
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-8B"} 0.4375
vllm:kv_cache_usage_perc{engine="1",model_name="Qwen/Qwen3-8B"} 0.25
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="Qwen/Qwen3-8B"} 182340.0
vllm:prefix_cache_queries_total{engine="1",model_name="Qwen/Qwen3-8B"} 1000.0
# HELP vllm:prefix_cache_queries_created Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_created gauge
vllm:prefix_cache_queries_created{engine="0",model_name="Qwen/Qwen3-8B"} 1.7960200004083347e+09
# HELP vllm:prompt_tokens_by_source_total Number of prompt tokens by source.
# TYPE vllm:prompt_tokens_by_source_total counter
vllm:prompt_tokens_by_source_total{engine="0",model_name="q",source="local_compute"} 31044.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="q",source="local_cache_hit"} 151296.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="q",source="external_kv_transfer"} 0.0
"""

LLAMACPP = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 48213
# HELP llamacpp:prompt_tokens_cached_total Number of prompt tokens reused from the cache
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total 1.23457e+06
# HELP llamacpp:requests_processing Number of requests processing
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 4
"""

SGLANG = """\
# HELP sglang:cached_tokens_total Number of cached prompt tokens by source (device/host/storage).
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{cache_source="device",engine_type="unified",model_name="m"} 151310.0
sglang:cached_tokens_total{cache_source="host",engine_type="unified",model_name="m"} 10.0
"""

TGI = """\
# TYPE tgi_request_success counter
tgi_request_success 12
# TYPE tgi_request_input_length histogram
tgi_request_input_length_bucket{le="+Inf"} 3
tgi_request_input_length_sum 1843
tgi_request_input_length_count 3
"""


def test_values_sum_over_labels_not_asked_for():
    snap = parse_metrics(VLLM)
    assert snap.value("vllm:prefix_cache_queries_total") == 183340.0
    assert snap.value("vllm:prompt_tokens_by_source_total") == 182340.0


def test_a_label_filter_keeps_only_matching_samples():
    snap = parse_metrics(VLLM)
    where = {"source": frozenset({"local_compute"})}
    assert snap.value("vllm:prompt_tokens_by_source_total", where) == 31044.0
    assert snap.by_label("vllm:prompt_tokens_by_source_total", "source") == {
        "local_compute": 31044.0,
        "local_cache_hit": 151296.0,
        "external_kv_transfer": 0.0,
    }


def test_an_absent_name_is_none_not_zero():
    snap = parse_metrics(VLLM)
    assert snap.value("vllm:num_preemptions_total") is None
    assert snap.by_label("vllm:request_success_total", "finished_reason") is None


def test_llamacpp_six_significant_digits_are_read_as_printed():
    snap = parse_metrics(LLAMACPP)
    assert snap.value("llamacpp:prompt_tokens_cached_total") == 1234570.0
    assert snap.value("llamacpp:prompt_tokens_total") == 48213.0


def test_a_counter_without_total_is_found_by_its_exported_name():
    # prometheus_client's text parser renames TGI's tgi_request_success to ..._total.
    snap = parse_metrics(TGI)
    assert snap.value("tgi_request_success") == 12.0
    assert snap.value("tgi_request_input_length_sum") == 1843.0


def test_only_keeps_the_named_families_and_reads_them_the_same():
    full = parse_metrics(VLLM)
    few = parse_metrics(VLLM, only=frozenset({"vllm:kv_cache_usage_perc"}))
    assert set(few.names()) == {"vllm:kv_cache_usage_perc"}
    assert few.samples["vllm:kv_cache_usage_perc"] == full.samples["vllm:kv_cache_usage_perc"]
    counters = parse_metrics(VLLM, only=frozenset({"vllm:prefix_cache_queries_total"}))
    assert counters.value("vllm:prefix_cache_queries_total") == 183340.0


def test_nan_makes_the_figure_unknown():
    snap = parse_metrics("# TYPE x_total counter\nx_total NaN\n")
    assert snap.value("x_total") is None


def test_text_that_is_not_exposition_format_raises_value_error():
    with pytest.raises(ValueError):
        parse_metrics("<html>404 Not Found {</html>\n")


@pytest.mark.parametrize(
    "text",
    [
        '# TYPE h histogram\nh_bucket{le="1"} 2\na{b="c"} 1oa{b="c"} 1\n# EOF\n',  # KeyError
        ' {b="c"} 1\n# TYPE a counter\na_total 1\n# EOF\n',  # IndexError
    ],
)
def test_malformed_openmetrics_the_parser_trips_on_is_a_value_error_too(text):
    """prometheus_client's OpenMetrics parser raises KeyError or IndexError on these (found
    by fuzzing): the window counts ValueError as "not Prometheus text", and any other
    exception as a bug of ours."""
    with pytest.raises(ValueError, match="malformed exposition text"):
        parse_metrics(text, openmetrics=True)


@pytest.mark.parametrize(
    ("text", "server"),
    [(VLLM, "vLLM"), (LLAMACPP, "llama.cpp"), (SGLANG, "SGLang"), (TGI, "TGI")],
)
def test_the_server_is_detected_from_its_metric_names(text, server):
    names = detect_server(parse_metrics(text))
    assert names is not None and names.server == server


def test_unknown_metrics_detect_no_server():
    assert (
        detect_server(
            parse_metrics(
                "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 3.5\n"
            )
        )
        is None
    )


label_values = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=8)


@given(
    st.dictionaries(label_values, st.integers(min_value=0, max_value=2**50), min_size=1, max_size=6)
)
def test_sums_survive_prometheus_client_rendering(per_engine):
    """Whatever label values a server prints (quotes, backslashes, unicode), the sum over
    them is the sum of what it counted, exactly (sums below 2**53, where float64 is exact)."""
    family = CounterMetricFamily("vllm:generation_tokens", "doc", labels=["engine"])
    for engine, value in per_engine.items():
        family.add_metric([engine], value)

    class One:
        def collect(self):
            yield family

    registry = CollectorRegistry(auto_describe=False)
    registry.register(One())  # type: ignore[arg-type]
    snap = parse_metrics(generate_latest(registry).decode())
    assert snap.value("vllm:generation_tokens_total") == sum(per_engine.values())
    for engine, value in per_engine.items():
        assert snap.value("vllm:generation_tokens_total", {"engine": frozenset({engine})}) == value
