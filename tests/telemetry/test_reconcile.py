"""Window deltas and reconciliation with the client's usage: pure, from hand-made scrapes."""

from __future__ import annotations

import pytest

from workloads.model.records import TurnRecord
from workloads.telemetry.prometheus import parse_metrics
from workloads.telemetry.reconcile import UsageSums, window_figures
from workloads.telemetry.servers import LLAMACPP, SGLANG, VLLM

L = '{engine="0",model_name="m"}'


def vllm(
    prompt=0,
    cached=0,
    gen=0,
    queries=None,
    hits=None,
    length=0,
    preempt=0,
    running=0,
    kv=0.0,
    created=1.0,
    spec=None,
    old_names=False,
):
    q = prompt if queries is None else queries
    h = cached if hits is None else hits
    prefix = "vllm:gpu_prefix_cache" if old_names else "vllm:prefix_cache"
    kv_name = "vllm:gpu_cache_usage_perc" if old_names else "vllm:kv_cache_usage_perc"
    lines = [
        "# TYPE vllm:prompt_tokens_total counter",
        f"vllm:prompt_tokens_total{L} {prompt}",
        "# TYPE vllm:prompt_tokens_created gauge",
        f"vllm:prompt_tokens_created{L} {created}",
        "# TYPE vllm:generation_tokens_total counter",
        f"vllm:generation_tokens_total{L} {gen}",
        f"# TYPE {prefix}_queries_total counter",
        f"{prefix}_queries_total{L} {q}",
        f"# TYPE {prefix}_hits_total counter",
        f"{prefix}_hits_total{L} {h}",
        "# TYPE vllm:num_preemptions_total counter",
        f"vllm:num_preemptions_total{L} {preempt}",
        "# TYPE vllm:request_success_total counter",
        f'vllm:request_success_total{{engine="0",finished_reason="length",model_name="m"}} '
        f"{length}",
        'vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 0',
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{L} {running}",
        f"# TYPE {kv_name} gauge",
        f"{kv_name}{L} {kv}",
    ]
    if not old_names:
        lines += [
            "# TYPE vllm:prompt_tokens_cached_total counter",
            f"vllm:prompt_tokens_cached_total{L} {cached}",
            "# TYPE vllm:prompt_tokens_by_source_total counter",
            f'vllm:prompt_tokens_by_source_total{{engine="0",model_name="m",'
            f'source="local_compute"}} {prompt - cached}',
        ]
    if spec is not None:
        drafts, draft_tokens, accepted = spec
        for name, value in (
            ("num_drafts", drafts),
            ("num_draft_tokens", draft_tokens),
            ("num_accepted_tokens", accepted),
        ):
            lines += [
                f"# TYPE vllm:spec_decode_{name}_total counter",
                f"vllm:spec_decode_{name}_total{L} {value}",
            ]
    return parse_metrics("\n".join(lines) + "\n")


def rec(prompt, cached, completion, *, warmup=False, http=200, timings=None, turn=1):
    return TurnRecord(
        repetition=0 if warmup else 1,
        warmup=warmup,
        session=0,
        turn=turn,
        status="ok" if http == 200 and prompt is not None else "error",
        http_status=http,
        prompt_tokens=prompt,
        cached_tokens=cached,
        completion_tokens=completion,
        configured_prior_tokens=0,
        started_ns=100,
        timings=timings,
    )


RECORDS = [rec(1000, 0, 64), rec(1200, 1024, 64, turn=2), rec(5, 0, 64, warmup=True)]


def figures(names, start, end, records=RECORDS, samples=None):
    return window_figures(
        names, start, end, samples or [], UsageSums.of(records), metrics_url="http://x/metrics"
    )


def by_figure(t):
    return {r.figure: r for r in t.reconciliation}


def test_usage_sums_cover_measured_records_only():
    usage = UsageSums.of(RECORDS)
    assert (usage.prompt, usage.cached, usage.completion, usage.requests) == (2200, 1024, 128, 2)
    assert usage.get("uncached") == 1176


def test_deltas_equal_to_measured_usage_reconcile_exactly():
    start = vllm(prompt=5, cached=0, gen=64, length=1, created=7.0)
    end = vllm(prompt=2205, cached=1024, gen=192, length=3, kv=0.5, created=7.0)
    t, warnings = figures(VLLM, start, end)
    assert warnings == []
    rows = by_figure(t)
    assert set(rows) == {
        "prompt_tokens",
        "cached_prompt_tokens",
        "uncached_prompt_tokens",
        "generation_tokens",
        "finished_requests",
    }
    assert all(r.verdict == "reconciles" and r.difference == 0 for r in rows.values())
    assert t.reconciles is True
    assert (t.prompt_tokens, t.generation_tokens, t.finished_requests) == (2200, 128, 2)
    assert t.prefix_cache_hit_rate == pytest.approx(1024 / 2200)
    assert t.finished_reasons == {"length": 2, "stop": 0}
    # Only the window's edges were sampled: a KV "peak" from them would be a guess.
    assert t.kv_usage_peak is None and t.gauges["kv_usage"].peak == 0.5
    assert t.gauges["kv_usage"].inside == 0
    assert t.preemptions == 0
    assert t.spec_acceptance_rate is None  # not exported: not reported, never 0


def test_seed_acceptance_from_window_counters():
    # Seed 001: "Acceptance 0.5435 from measured-window counters (804 draft / 437 accepted)".
    start = vllm(spec=(1000, 4000, 2000))
    end = vllm(spec=(1000 + 201, 4000 + 804, 2000 + 437))
    t, _ = figures(VLLM, start, end, records=[])
    assert round(t.spec_acceptance_rate, 4) == 0.5435
    assert t.spec_mean_accepted_length == pytest.approx(1 + 437 / 201)
    assert (t.spec_drafts, t.spec_draft_tokens, t.spec_accepted_tokens) == (201, 804, 437)


def test_a_counter_that_went_down_is_unknown_with_a_warning():
    start = vllm(prompt=90_000, cached=0, gen=5000, length=80)
    end = vllm(prompt=2200, cached=1024, gen=128, length=2)
    t, warnings = figures(VLLM, start, end)
    assert t.prompt_tokens is None and t.generation_tokens is None
    assert t.finished_reasons is None
    assert len(warnings) == 1 and "server restarted during the run" in warnings[0]
    assert "vllm:prompt_tokens_total 90,000 → 2,200" in warnings[0]
    row = by_figure(t)["prompt_tokens"]
    assert row.verdict == "unknown" and "restarted" in row.causes[0]


def test_a_new_created_timestamp_means_a_restart_even_if_the_counter_grew():
    start = vllm(prompt=100, created=1.0)
    end = vllm(prompt=2300, created=2.0)
    t, warnings = figures(VLLM, start, end)
    assert t.prompt_tokens is None and warnings


def test_other_traffic_is_named_with_its_evidence():
    start = vllm(prompt=0, cached=0, gen=0, length=0, running=1)
    end = vllm(prompt=2200 + 700, cached=1024, gen=128 + 64, length=3)
    t, _ = figures(VLLM, start, end)
    rows = by_figure(t)
    assert rows["prompt_tokens"].verdict == "differs"
    assert rows["prompt_tokens"].difference == 700
    causes = " ".join(rows["prompt_tokens"].causes)
    assert "other traffic" in causes and "1 more requests" in causes
    assert "already running" in causes
    assert rows["cached_prompt_tokens"].verdict == "reconciles"
    assert t.reconciles is False


def test_a_lagging_counter_points_at_counter_timing():
    start = vllm()
    end = vllm(prompt=1000, cached=0, gen=64, length=1)  # the second request not counted yet
    t, _ = figures(VLLM, start, end)
    row = by_figure(t)["prompt_tokens"]
    assert row.difference == -1200
    assert row.causes[0].startswith(
        "counter timing: vLLM adds to vllm:prompt_tokens_total when a request's prefill ends"
    )


def test_requests_without_usage_explain_a_server_surplus():
    records = [*RECORDS, rec(None, None, None, http=200)]
    end = vllm(prompt=2200 + 900, cached=1024, gen=128 + 10, length=3)
    t, _ = figures(VLLM, vllm(), end, records=records)
    causes = by_figure(t)["prompt_tokens"].causes
    assert causes[0].startswith("1 measured requests ended without usage")


def test_requests_the_client_cut_off_are_why_the_server_finished_fewer():
    """A stop cancelled one request in flight: the server aborted it and counts 2 finished
    requests to the client's 3 answered 200. Not counter timing."""
    cut = rec(None, None, None, http=200).model_copy(
        update={"status": "incomplete", "error_kind": "cancelled"}
    )
    end = vllm(prompt=2200 + 900, cached=1024, gen=128 + 10, length=2)
    t, _ = figures(VLLM, vllm(), end, records=[*RECORDS, cut])
    row = by_figure(t)["finished_requests"]
    assert row.difference == -1
    assert row.causes == [
        "1 measured requests answered 200 were ended by the client "
        "(cancelled by a stop, a read stall or the turn deadline): the "
        "server aborted them, so it never counted them finished"
    ]
    lagging = vllm(prompt=1000, cached=0, gen=64, length=1)
    assert (
        by_figure(figures(VLLM, vllm(), lagging)[0])["finished_requests"]
        .causes[0]
        .startswith("counter timing")
    )  # nothing cut off: the lag is the counter's


def test_cached_tokens_not_reported_per_request_cannot_reconcile():
    records = [rec(1000, None, 64), rec(1200, None, 64)]
    end = vllm(prompt=2200, cached=1024, gen=128, length=2)
    t, _ = figures(VLLM, vllm(), end, records=records)
    row = by_figure(t)["cached_prompt_tokens"]
    assert row.verdict == "unknown" and row.client is None and row.server == 1024
    assert "--enable-prompt-tokens-details" in row.causes[0]
    assert t.reconciles is True  # every figure that could be compared reconciles
    assert by_figure(t)["prompt_tokens"].verdict == "reconciles"


def test_vllm_0_10_names_are_read():
    start = vllm(old_names=True)
    end = vllm(prompt=2200, cached=1024, gen=128, length=2, kv=0.25, old_names=True)
    t, _ = figures(VLLM, start, end, samples=[vllm(kv=0.125, old_names=True)])
    assert t.metrics_used["prefix_cache_hits"] == "vllm:gpu_prefix_cache_hits_total"
    assert t.prefix_cache_hits == 1024 and t.prefix_cache_queries == 2200
    assert t.kv_usage_peak == 0.25
    # no prompt_tokens_cached before 0.11: cached tokens come from the local-hit counter
    assert t.metrics_used["cached_prompt_tokens"] == "vllm:gpu_prefix_cache_hits_total"
    assert by_figure(t)["cached_prompt_tokens"].verdict == "reconciles"
    assert t.uncached_prompt_tokens is None


def test_kv_peak_is_the_highest_sample_and_engines_take_the_max():
    two_engines = parse_metrics(
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        'vllm:kv_cache_usage_perc{engine="0"} 0.7\nvllm:kv_cache_usage_perc{engine="1"} 0.2\n'
    )
    samples = [vllm(kv=0.1), two_engines, vllm(kv=0.3)]
    t, _ = figures(VLLM, vllm(), vllm(), samples=samples, records=[])
    assert t.kv_usage_peak == 0.7
    assert t.gauges["kv_usage"].samples == 5 and t.gauges["kv_usage"].inside == 3


def cache_config(*engines: tuple[str, str, str]) -> str:
    """vLLM's cache_config_info per engine: (engine, num_gpu_blocks, block_size)."""
    return "# TYPE vllm:cache_config_info gauge\n" + "".join(
        f'vllm:cache_config_info{{block_size="{size}",enable_prefix_caching="True",'
        f'engine="{engine}",num_gpu_blocks="{blocks}"}} 1.0\n'
        for engine, blocks, size in engines
    )


def test_the_kv_capacity_is_read_from_vllms_cache_config_summed_over_engines():
    one = parse_metrics(cache_config(("0", "6250", "16")))
    t, _ = figures(VLLM, one, one, records=[])
    assert t.kv_capacity_tokens == 100_000
    two = parse_metrics(cache_config(("0", "6250", "16"), ("1", "6250", "16")))
    assert figures(VLLM, two, two, records=[])[0].kv_capacity_tokens == 200_000
    # Before the engine has sized its cache vLLM prints "None": unknown, not 0.
    unsized = parse_metrics(cache_config(("0", "None", "16")))
    assert figures(VLLM, unsized, unsized, records=[])[0].kv_capacity_tokens is None
    assert figures(VLLM, vllm(), vllm(), records=[])[0].kv_capacity_tokens is None


def llama(uncached, cached, predicted, draft=0, accepted=0, drafts=0):
    def g(v):  # llama.cpp prints %g: 6 significant digits
        return f"{v:g}"

    return parse_metrics(
        "# TYPE llamacpp:prompt_tokens_total counter\n"
        f"llamacpp:prompt_tokens_total {g(uncached)}\n"
        "# TYPE llamacpp:prompt_tokens_cached_total counter\n"
        f"llamacpp:prompt_tokens_cached_total {g(cached)}\n"
        "# TYPE llamacpp:tokens_predicted_total counter\n"
        f"llamacpp:tokens_predicted_total {g(predicted)}\n"
        "# TYPE llamacpp:spec_decode_num_draft_tokens_total counter\n"
        f"llamacpp:spec_decode_num_draft_tokens_total {g(draft)}\n"
        "# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter\n"
        f"llamacpp:spec_decode_num_accepted_tokens_total {g(accepted)}\n"
        "# TYPE llamacpp:spec_decode_num_drafts_total counter\n"
        f"llamacpp:spec_decode_num_drafts_total {g(drafts)}\n"
    )


def test_llamacpp_prompt_counter_is_compared_with_uncached_usage():
    timings = {"draft_n": 40, "draft_n_accepted": 25}
    records = [rec(1000, 0, 64, timings=timings), rec(1200, 1024, 64, timings=timings)]
    t, _ = figures(LLAMACPP, llama(0, 0, 0), llama(1176, 1024, 128, 80, 50, 20), records)
    rows = by_figure(t)
    assert "prompt_tokens" not in rows  # llama.cpp has no full-prompt counter
    assert rows["uncached_prompt_tokens"].client_basis == "Σ (prompt − cached)"
    assert all(r.verdict == "reconciles" for r in rows.values())
    assert rows["spec_draft_tokens"].client == 80
    assert t.spec_acceptance_rate == 50 / 80
    assert t.prefix_cache_hit_rate == pytest.approx(1024 / 2200)  # cached / (cached + uncached)


def test_llamacpp_six_digit_values_reconcile_within_their_printed_precision():
    # 12,345,678 prints as 1.23457e+07 and 12,348,668 as 1.23487e+07: the delta reads 3,000
    # for 2,990 cached tokens. Half a unit in the last digit at each edge: ±100.
    records = [rec(3000, 2990, 64)]
    t, _ = figures(LLAMACPP, llama(0, 12_345_678, 0), llama(10, 12_348_668, 64), records)
    row = by_figure(t)["cached_prompt_tokens"]
    assert row.server == 3000 and row.client == 2990
    assert row.verdict == "reconciles" and row.tolerance == 100
    assert "6 significant digits" in row.causes[0]


def test_sglang_hit_rate_uses_the_hit_modes_of_prefill_effective_tokens():
    def sg(compute, device, host):
        return parse_metrics(
            "# TYPE sglang:prefill_effective_tokens_total counter\n"
            f'sglang:prefill_effective_tokens_total{{mode="compute"}} {compute}\n'
            f'sglang:prefill_effective_tokens_total{{mode="device_hit"}} {device}\n'
            f'sglang:prefill_effective_tokens_total{{mode="host_hit"}} {host}\n'
            f'sglang:prefill_effective_tokens_total{{mode="storage_hit"}} 0\n'
        )

    t, _ = figures(SGLANG, sg(100, 100, 0), sg(1100, 2600, 500), records=[])
    assert t.prefix_cache_queries == 4000 and t.prefix_cache_hits == 3000
    assert t.prefix_cache_hit_rate == 0.75
    rows = by_figure(t)
    assert rows["prompt_tokens"].verdict == "unknown"  # not exported in this scrape
    assert "does not export" in rows["prompt_tokens"].causes[0]


def success(**per_reason):
    return parse_metrics(
        "# TYPE vllm:request_success_total counter\n"
        + "".join(
            f'vllm:request_success_total{{finished_reason="{k}"}} {v}\n'
            for k, v in per_reason.items()
        )
    )


def test_a_label_set_first_seen_in_the_window_counts_from_zero():
    # prometheus_client creates a labelled child on first use: "abort" appears mid-window.
    t, warnings = figures(VLLM, success(length=5), success(length=7, abort=1), records=[])
    assert warnings == []
    assert t.finished_requests == 3
    assert t.finished_reasons == {"length": 2, "abort": 1}


def test_one_engine_restarting_is_caught_even_if_the_sum_grew():
    def two(e0, e1):
        return parse_metrics(
            "# TYPE vllm:generation_tokens_total counter\n"
            f'vllm:generation_tokens_total{{engine="0"}} {e0}\n'
            f'vllm:generation_tokens_total{{engine="1"}} {e1}\n'
        )

    t, warnings = figures(VLLM, two(100, 100), two(5000, 3), records=[])
    assert t.generation_tokens is None and "restarted" in warnings[0]


def test_a_counter_that_vanishes_is_unknown_with_a_warning():
    t, warnings = figures(VLLM, vllm(prompt=10), success(length=1), records=[])
    assert t.prompt_tokens is None
    assert any("disappeared during the window (vllm:prompt_tokens_total" in w for w in warnings)
