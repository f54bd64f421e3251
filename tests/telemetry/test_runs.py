"""Whole runs with telemetry: against the simulated server (vLLM-shaped /metrics), a
llama.cpp-shaped server, and a server without /metrics — all real servers on 127.0.0.1."""

from __future__ import annotations

import io
import json
import math

import pytest
from aiohttp import web
from rich.console import Console

import workloads
from workloads.cli import main
from workloads.report import console as report

NO_ENERGY = workloads.TelemetryOptions(energy="off")


def rendered(result: workloads.RunResult) -> str:
    console = Console(record=True, width=160, file=io.StringIO())
    console.print(report.render(result))
    return console.export_text()


def test_sim_window_deltas_equal_the_measured_usage_exactly(run_scenario, tiny_scenario):
    scenario = tiny_scenario.with_overrides(["repetitions.measured=2"])
    result = run_scenario(
        scenario, telemetry=workloads.TelemetryOptions(energy="off", gauge_interval_s=0.05)
    )
    measured = [r for r in result.records if not r.warmup]
    warmup = [r for r in result.records if r.warmup]
    assert measured and warmup and all(r.valid for r in result.records)
    t = result.window.server
    assert t is not None and t.server == "vLLM"
    prompt = sum(r.prompt_tokens for r in measured)
    cached = sum(r.cached_tokens for r in measured)
    completion = sum(r.completion_tokens for r in measured)
    assert t.prompt_tokens == prompt and t.cached_prompt_tokens == cached
    assert t.uncached_prompt_tokens == prompt - cached
    assert t.generation_tokens == completion
    assert t.finished_requests == len(measured)
    assert t.finished_reasons["length"] == len(measured)
    assert t.prefix_cache_queries == prompt and t.prefix_cache_hits == cached
    assert t.prefix_cache_hit_rate == pytest.approx(cached / prompt)
    assert t.preemptions == 0
    assert t.kv_usage_peak is not None and 0 < t.kv_usage_peak < 1
    # The simulator exports its KV capacity as vLLM does (cache_config_info).
    assert t.kv_capacity_tokens == result.target.simulator_profile["kv_capacity_tokens"]
    assert cached > 0  # later turns hit the cache, so "reconciles" is not 0 == 0
    assert [r.verdict for r in t.reconciliation] == ["reconciles"] * 5
    assert t.reconciles is True
    assert not [w for w in result.warnings if "metric" in w or "counter" in w]
    text = rendered(result)
    assert "Window — measured repetitions only (warm-up excluded)" in text
    assert text.count("reconciles") == 5 and "differs" not in text
    assert "speculative decoding off" in text


def test_sim_acceptance_matches_its_configured_truth(tiny_scenario):
    k, p = 3, 0.6
    with workloads.SimulatedServer("fast", sim={"spec_tokens": k, "spec_acceptance": p}) as server:
        result = workloads.run(
            tiny_scenario.with_overrides(["output_tokens=200", "users=3"]),
            server.target,
            telemetry=NO_ENERGY,
        )
    t = result.window.server
    n = t.spec_draft_tokens
    assert n and t.spec_drafts and t.spec_accepted_tokens is not None
    assert t.spec_mean_accepted_length == pytest.approx(1 + t.spec_accepted_tokens / t.spec_drafts)
    assert 1 <= t.spec_mean_accepted_length <= 1 + k
    # Per-position acceptance p, independent or stopping at the first rejection: either way
    # the window figure must land within sampling error of what was configured.
    expected = [p, sum(p**i for i in range(1, k + 1)) / k]
    assert any(
        abs(t.spec_acceptance_rate - e) <= 5 * math.sqrt(e * (1 - e) / n) + 0.01 for e in expected
    ), (t.spec_acceptance_rate, expected, n)


class LlamaLike:
    """Just enough of llama-server: streamed chat with usage and timings, and /metrics as
    llama.cpp prints it (no labels, %g with 6 significant digits, counted at request end)."""

    def __init__(self, *, metrics: bool = True) -> None:
        # Large starting values, so the 6 printed digits lose precision over the window.
        self.counters = {
            "prompt_tokens_total": 4_321_001,
            "prompt_tokens_cached_total": 12_345_678,
            "tokens_predicted_total": 777_777,
            "spec_decode_num_drafts_total": 0,
            "spec_decode_num_draft_tokens_total": 0,
            "spec_decode_num_accepted_tokens_total": 0,
        }
        self.app = web.Application()
        self.app.router.add_get("/v1/models", self.models)
        self.app.router.add_post("/v1/chat/completions", self.chat)
        if metrics:
            self.app.router.add_get("/metrics", self.metrics)

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "llama-fake"}]})

    async def metrics(self, request: web.Request) -> web.Response:
        lines = []
        for name, value in self.counters.items():
            lines += [f"# TYPE llamacpp:{name} counter", f"llamacpp:{name} {value:g}"]
        lines += ["# TYPE llamacpp:requests_processing gauge", "llamacpp:requests_processing 0"]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        messages = body["messages"]
        prompt = 10 + sum(len(str(m.get("content", ""))) for m in messages) // 4
        cached = prompt // 2 if any(m["role"] == "assistant" for m in messages) else 0
        n = body["max_tokens"]
        drafts, draft_tokens, accepted = n // 4, n // 2, n // 4
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        async def send(obj: dict) -> None:
            await resp.write(b"data: " + json.dumps(obj).encode() + b"\n\n")

        base = {
            "id": "chatcmpl-x",
            "object": "chat.completion.chunk",
            "model": "llama-fake",
            "system_fingerprint": "b9876-0c1e5709",
        }
        await send(
            {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]}
        )
        for _ in range(n):
            await send(
                {
                    **base,
                    "choices": [{"index": 0, "delta": {"content": "tok "}, "finish_reason": None}],
                }
            )
        await send({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
        c = self.counters
        c["prompt_tokens_total"] += prompt - cached
        c["prompt_tokens_cached_total"] += cached
        c["tokens_predicted_total"] += n
        c["spec_decode_num_drafts_total"] += drafts
        c["spec_decode_num_draft_tokens_total"] += draft_tokens
        c["spec_decode_num_accepted_tokens_total"] += accepted
        await send(
            {
                **base,
                "choices": [],
                "usage": {
                    "completion_tokens": n,
                    "prompt_tokens": prompt,
                    "total_tokens": prompt + n,
                    "prompt_tokens_details": {"cached_tokens": cached},
                },
                "timings": {
                    "cache_n": cached,
                    "prompt_n": prompt - cached,
                    "prompt_ms": 21.5,
                    "predicted_n": n,
                    "predicted_ms": 290.4,
                    "predicted_per_second": 88.2,
                    "draft_n": draft_tokens,
                    "draft_n_accepted": accepted,
                },
            }
        )
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


async def test_llamacpp_timings_land_in_records_and_its_counters_reconcile(
    serve_app, tiny_scenario
):
    server = LlamaLike()
    async with serve_app(server.app) as root:
        result = await workloads.run_async(
            tiny_scenario, workloads.Target(root + "/v1"), telemetry=NO_ENERGY
        )
    measured = [r for r in result.records if not r.warmup]
    for r in result.records:
        assert r.timings is not None and r.timings["prompt_n"] == r.prompt_tokens - r.cached_tokens
        assert r.timings["cache_n"] == r.cached_tokens
        assert {"prompt_ms", "predicted_per_second", "draft_n", "draft_n_accepted"} <= set(
            r.timings
        )
    t = result.window.server
    assert t.server == "llama.cpp"
    rows = {r.figure: r for r in t.reconciliation}
    assert set(rows) == {
        "uncached_prompt_tokens",
        "cached_prompt_tokens",
        "generation_tokens",
        "spec_draft_tokens",
        "spec_accepted_tokens",
    }
    assert all(r.verdict == "reconciles" for r in rows.values()), rows
    assert rows["uncached_prompt_tokens"].client == sum(
        r.prompt_tokens - r.cached_tokens for r in measured
    )
    assert rows["cached_prompt_tokens"].tolerance == 100  # 1.23457e+07: ±50 at each edge
    assert t.spec_acceptance_rate == pytest.approx(0.5, abs=0.01)
    assert t.preemptions is None and t.kv_usage_peak is None  # llama.cpp exports neither
    text = rendered(result)
    assert "reconciles (±100)" in text and "differs" not in text
    assert "not reported (llama.cpp stopped exporting KV usage in 2025)" in text
    assert "not reported (llama.cpp has fixed slots: requests queue instead)" in text


async def test_a_server_without_metrics_completes_with_not_reported_and_a_warning(
    serve_app, tiny_scenario
):
    server = LlamaLike(metrics=False)
    async with serve_app(server.app) as root:
        result = await workloads.run_async(
            tiny_scenario, workloads.Target(root + "/v1"), telemetry=NO_ENERGY
        )
    assert result.complete and result.summary.run.valid == result.summary.run.records
    t = result.window.server
    assert t is not None and t.server is None and t.prompt_tokens is None
    warning = next(w for w in result.warnings if "server metrics not reported" in w)
    assert "/metrics answered HTTP 404" in warning
    text = rendered(result)
    assert "not reported: no readable metrics at" in text
    assert "server metrics not reported" in text
    # without /metrics, llama.cpp's per-response timings still give the acceptance
    assert "acceptance 0.5000 (" in text and "from per-response timings" in text


@pytest.mark.slow
def test_cli_metrics_off_and_energy_off_read_nothing(simulated_server, tmp_path, capsys):
    out = tmp_path / "off"
    code = main(
        [
            "run",
            "five-user-coding",
            "--target",
            simulated_server.base_url,
            "--out",
            str(out),
            "--quiet",
            "--metrics-url",
            "off",
            "--energy",
            "off",
            "--no-plots",
            "--set",
            "users=1",
            "--set",
            "turns=1",
            "--set",
            "output_tokens=8",
            "--set",
            "opening_tokens=300",
            "--set",
            "repetitions.measured=1",
        ]
    )
    assert code == 0
    saved = json.loads((out / "result.json").read_text())
    assert saved["window"]["server"] is None
    assert saved["window"]["energy"]["joules"] is None
    assert saved["window"]["energy"]["not_available"] == "energy reading is off"
    printed = capsys.readouterr().out
    assert "metrics not read" in printed and "energy reading is off" in printed


@pytest.mark.slow
def test_cli_metrics_url_points_at_the_metrics_elsewhere(simulated_server, tmp_path):
    out = tmp_path / "url"
    root = simulated_server.base_url.removesuffix("/v1")
    code = main(
        [
            "run",
            "five-user-coding",
            "--target",
            simulated_server.base_url + "/",
            "--out",
            str(out),
            "--quiet",
            "--metrics-url",
            root + "/metrics",
            "--no-plots",
            "--set",
            "users=1",
            "--set",
            "turns=2",
            "--set",
            "output_tokens=8",
            "--set",
            "opening_tokens=300",
            "--set",
            "repetitions.measured=1",
        ]
    )
    assert code == 0
    result = workloads.load_result(out)
    assert result.window.server.metrics_url == root + "/metrics"
    assert result.window.server.reconciles is True
