"""The simulated server for real on 127.0.0.1: its vLLM-shaped surfaces, exact lengths,
replies, ground truth, and the cache collapse the seed record saw."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import workloads
from fakes import post
from workloads.model.scenario import Timeouts
from workloads.servers.simulated import PROFILES, SimulatedServer, get_profile
from workloads.wire.client import AiohttpChatClient


def root(server: SimulatedServer) -> str:
    return server.base_url[: -len("/v1")]


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def scrape(server: SimulatedServer) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics, parsed by prometheus_client."""
    status, text = get(root(server) + "/metrics")
    assert status == 200
    samples = {}
    for family in text_string_to_metric_families(text.decode()):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def total(samples: dict, name: str, **labels: str) -> float:
    return sum(
        v
        for (n, ls), v in samples.items()
        if n == name and all((k, want) in ls for k, want in labels.items())
    )


MESSAGES = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the failing test in parser.py, please."},
]


def chat(server: SimulatedServer, **body: Any) -> tuple[int, dict[str, Any]]:
    return post(
        server.base_url + "/chat/completions", {"model": server.model, "messages": MESSAGES, **body}
    )


async def stream(server: SimulatedServer, **body: Any):
    timeouts = Timeouts(read_gap_s=body.pop("read_gap_s", 30))
    async with AiohttpChatClient(server.base_url, connections=2, timeouts=timeouts) as client:
        return await client.stream_chat(
            {
                "model": server.model,
                "messages": MESSAGES,
                "stream": True,
                "stream_options": {"include_usage": True},
                **body,
            }
        )


# --- surfaces -----------------------------------------------------------------------------


def test_metrics_parse_and_their_deltas_equal_the_sums_of_usage(simulated_server, tmp_path):
    before = scrape(simulated_server)
    scenario = workloads.load_scenario("five-user-coding").with_overrides(
        [
            "users=3",
            "turns=2",
            "opening_tokens=900",
            "turn_tokens=150",
            "output_tokens=24",
            "repetitions.warmup=0",
            "repetitions.measured=1",
            "gate=off",
        ]  # only these records
    )
    result = workloads.run(scenario, simulated_server.target, out_dir=tmp_path / "m")
    after = scrape(simulated_server)
    records = result.records
    assert len(records) == 6 and all(r.status == "ok" for r in records)

    def delta(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    prompt = sum(r.prompt_tokens or 0 for r in records)
    cached = sum(r.cached_tokens or 0 for r in records)
    assert cached > 0
    assert delta("vllm:prompt_tokens_total") == prompt
    assert delta("vllm:prefix_cache_queries_total") == prompt
    assert delta("vllm:prefix_cache_hits_total") == cached
    assert delta("vllm:prompt_tokens_cached_total") == cached
    assert delta("vllm:prompt_tokens_by_source_total", source="local_cache_hit") == cached
    assert delta("vllm:prompt_tokens_by_source_total", source="local_compute") == prompt - cached
    assert delta("vllm:generation_tokens_total") == sum(r.completion_tokens or 0 for r in records)
    assert delta("vllm:request_success_total", finished_reason="length") == len(records)
    assert delta("vllm:num_preemptions_total") == 0
    info = [ls for (n, ls) in after if n == "vllm:cache_config_info"]
    assert dict(info[0])["kv_cache_size_tokens"] == str(16 * (4_000_000 // 16))
    assert 0.0 <= total(after, "vllm:kv_cache_usage_perc") <= 1.0
    assert not any(n.startswith("vllm:spec_decode") for n, _ in after)  # spec is off


def test_tokenize_counts_what_usage_reports(simulated_server):
    status, tokenized = post(root(simulated_server) + "/tokenize", {"messages": MESSAGES})
    assert status == 200
    _, reply = chat(simulated_server, max_tokens=5)
    assert tokenized["count"] == len(tokenized["tokens"]) == reply["usage"]["prompt_tokens"]
    status, plain = post(root(simulated_server) + "/tokenize", {"prompt": "def f(x): pass"})
    assert status == 200 and plain["count"] == len(plain["tokens"]) > 0
    status, back = post(root(simulated_server) + "/detokenize", {"tokens": plain["tokens"]})
    assert back["prompt"] == "def f(x): pass"


def test_health_version_models_and_fingerprint(simulated_server):
    assert get(root(simulated_server) + "/health") == (200, b"")
    status, body = get(root(simulated_server) + "/version")
    assert status == 200 and json.loads(body)["version"].startswith("workloads-sim-")
    status, body = get(simulated_server.base_url + "/models")
    assert json.loads(body)["data"][0]["id"] == simulated_server.model
    _, reply = chat(simulated_server, max_tokens=3)
    assert reply["system_fingerprint"].startswith("workloads-sim-")


def test_ground_truth_endpoint_is_off_unless_enabled():
    with SimulatedServer("fast") as server:
        status, _ = get(root(server) + "/debug/requests")
        assert status == 404
    with SimulatedServer("fast", debug=True) as server:
        chat(server, max_tokens=4)
        status, body = get(root(server) + "/debug/requests")
        (row,) = json.loads(body)["requests"]
        assert row["completion_tokens"] == 4 and row["preempted"] is False
        assert row["arrival_ns"] <= row["first_token_ns"] <= row["last_written_ns"]


# --- lengths and replies --------------------------------------------------------------------


@pytest.mark.parametrize("max_tokens", [1, 7, 100])
def test_ignore_eos_gives_exactly_max_tokens(simulated_server, max_tokens):
    status, reply = chat(simulated_server, max_tokens=max_tokens, ignore_eos=True)
    assert status == 200
    assert reply["usage"]["completion_tokens"] == max_tokens
    assert reply["choices"][0]["finish_reason"] == "length"


def test_without_ignore_eos_the_reply_ends_between_min_tokens_and_max_tokens(simulated_server):
    lengths = set()
    for seed in range(12):
        _, reply = chat(simulated_server, max_tokens=40, min_tokens=30, seed=seed)
        n = reply["usage"]["completion_tokens"]
        assert 30 <= n <= 40
        assert reply["choices"][0]["finish_reason"] == ("length" if n == 40 else "stop")
        lengths.add(n)
    assert len(lengths) > 1


def test_max_completion_tokens_wins_and_bad_limits_are_refused(simulated_server):
    _, reply = chat(simulated_server, max_tokens=50, max_completion_tokens=6, ignore_eos=True)
    assert reply["usage"]["completion_tokens"] == 6
    assert chat(simulated_server, max_tokens=5, min_tokens=6)[0] == 400
    assert chat(simulated_server, max_tokens=0)[0] == 400
    assert chat(simulated_server, max_tokens="many")[0] == 400


def test_a_request_that_cannot_fit_in_the_kv_cache_is_refused():
    with SimulatedServer("fast", sim={"kv_capacity_tokens": 64}) as server:
        status, body = chat(server, max_tokens=64)
        assert status == 400 and "KV cache" in body["error"]["message"]


def test_replies_read_like_an_agent_and_repeat_per_seed(simulated_server):
    _, a = chat(simulated_server, max_tokens=200, ignore_eos=True, seed=3)
    _, b = chat(simulated_server, max_tokens=200, ignore_eos=True, seed=3)
    _, c = chat(simulated_server, max_tokens=200, ignore_eos=True, seed=4)
    text = a["choices"][0]["message"]["content"]
    assert text == b["choices"][0]["message"]["content"] != c["choices"][0]["message"]["content"]
    assert any(marker in text for marker in ("```", ".py", '"name"'))


async def test_streamed_text_reencodes_to_exactly_the_reported_tokens(simulated_server):
    response = await stream(simulated_server, max_tokens=64, ignore_eos=True, seed=1)
    assert response.ok and response.usage is not None
    _, tokenized = post(root(simulated_server) + "/tokenize", {"prompt": response.text})
    assert tokenized["count"] == response.usage.completion_tokens == 64


async def test_continuous_usage_rides_on_every_chunk(simulated_server):
    async with AiohttpChatClient(simulated_server.base_url) as client:
        response = await client.stream_chat(
            {
                "model": simulated_server.model,
                "messages": MESSAGES,
                "stream": True,
                "max_tokens": 5,
                "ignore_eos": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            }
        )
    assert response.ok and response.usage is not None
    assert response.usage.completion_tokens == 5 and response.usage.cached_tokens is not None


# --- speculative decoding ---------------------------------------------------------------------


def test_spec_decode_counters_are_exported_when_speculation_is_on():
    with SimulatedServer("fast", sim={"spec_tokens": 3, "spec_acceptance": 0.5}) as server:
        _, reply = chat(server, max_tokens=60, ignore_eos=True)
        samples = scrape(server)
    assert reply["usage"]["completion_tokens"] == 60
    drafts = total(samples, "vllm:spec_decode_num_drafts_total")
    accepted = total(samples, "vllm:spec_decode_num_accepted_tokens_total")
    assert drafts > 0 and total(samples, "vllm:spec_decode_num_draft_tokens_total") > accepted
    per_pos = total(samples, "vllm:spec_decode_num_accepted_tokens_per_pos_total")
    assert per_pos == accepted
    # the prefill emits the first token, each draft step its accepted drafts + 1, and at most
    # one last step has nothing left to draft
    assert 1 + drafts + accepted <= 60 <= 2 + drafts + accepted


def test_acceptance_over_a_run_matches_the_configured_probability(tmp_path):
    p = 0.6
    with SimulatedServer("fast", sim={"spec_tokens": 1, "spec_acceptance": p}) as server:
        before = scrape(server)
        scenario = workloads.load_scenario("five-user-coding").with_overrides(
            [
                "users=2",
                "turns=2",
                "opening_tokens=300",
                "turn_tokens=50",
                "output_tokens=200",
                "repetitions.warmup=0",
                "repetitions.measured=1",
            ]
        )
        workloads.run(scenario, server.target, out_dir=tmp_path / "spec")
        after = scrape(server)
    drafts = total(after, "vllm:spec_decode_num_draft_tokens_total") - total(
        before, "vllm:spec_decode_num_draft_tokens_total"
    )
    accepted = total(after, "vllm:spec_decode_num_accepted_tokens_total") - total(
        before, "vllm:spec_decode_num_accepted_tokens_total"
    )
    assert drafts > 300
    # Δaccepted / Δdraft tokens, the seeds' acceptance: binomial, so within 4 sigma of p
    assert abs(accepted / drafts - p) < 4 * (p * (1 - p) / drafts) ** 0.5


# --- faults -----------------------------------------------------------------------------------


def faulty(kind: str, **extra: Any) -> SimulatedServer:
    return SimulatedServer("fast", sim={f"faults.rate_{kind}": 1.0, **extra}, debug=True)


async def test_fault_429_carries_retry_after():
    with faulty("429", **{"faults.retry_after_s": 2.5}) as server:
        response = await stream(server, max_tokens=5)
        assert server.truths()[0].http_status == 429
    assert response.error_kind == "http_429" and response.http_status == 429
    assert response.retry_after_s == 2.5


async def test_fault_500():
    with faulty("500") as server:
        response = await stream(server, max_tokens=5)
    assert response.error_kind == "http_5xx" and response.http_status == 500


async def test_fault_disconnect_after_k_tokens():
    with faulty("disconnect", **{"faults.after_tokens": 4}) as server:
        response = await stream(server, max_tokens=50, ignore_eos=True)
        truth = server.truths()[0]
    assert response.error_kind == "disconnected"
    assert response.usage is None and len(response.text) > 0
    assert truth.fault == "disconnect" and truth.finish_reason == "abort"


async def test_fault_malformed_sse_line():
    with faulty("malformed") as server:
        response = await stream(server, max_tokens=30, ignore_eos=True)
    assert response.error_kind == "malformed" and "malformed" in (response.error_message or "")


async def test_fault_error_object_inside_a_200_stream():
    with faulty("error_in_stream") as server:
        response = await stream(server, max_tokens=30, ignore_eos=True)
        truth = server.truths()[0]
    assert response.http_status == 200 and response.error_kind == "error_event"
    assert "error in stream" in (response.error_message or "")
    assert truth.finish_reason == "error"


async def test_fault_early_stop_ends_with_stop_despite_ignore_eos():
    with faulty("early_stop", **{"faults.after_tokens": 5}) as server:
        response = await stream(server, max_tokens=30, ignore_eos=True)
    assert response.ok and response.finish_reason == "stop"
    assert response.usage is not None and response.usage.completion_tokens == 5


async def test_fault_stall_pauses_the_stream():
    with faulty("stall", **{"faults.stall_s": 0.3, "faults.after_tokens": 3}) as server:
        response = await stream(server, max_tokens=20, ignore_eos=True)
        truth = server.truths()[0]
    assert response.ok and response.usage is not None
    assert response.usage.completion_tokens == 20
    # a lower bound only: the stall is at least as long as configured
    assert truth.last_written_ns - truth.first_written_ns >= 0.3e9


def test_faults_are_off_by_default_and_rates_are_validated():
    assert all(rate == 0 for _, rate in get_profile("fast").faults.rates())
    with pytest.raises(workloads.ScenarioError, match="add up"):
        get_profile("fast", {"faults.rate_429": 0.7, "faults.rate_500": 0.7})
    with pytest.raises(workloads.ScenarioError, match="no such profile field"):
        get_profile("fast", {"faults.rate_418": 0.1})


# --- profiles, serve ----------------------------------------------------------------------------


def test_arc_profile_reproduces_its_seed_figures():
    p = get_profile("arc-b70-27b")
    assert p.kv_capacity_tokens == 46_202 and p.token_budget == 8192 and p.spec_tokens == 0
    # C1 decode at ~6.4K context: about 27 tok/s
    step = p.step_fixed_s + p.decode_s_per_seq + p.attend_s_per_token * 6402
    assert 1 / step == pytest.approx(27.0, rel=0.01)
    # an 8,190-token cold prefill is one step: TTFT about 4.74 s, ~1,730 tok/s
    ttft = p.step_fixed_s + p.prefill_s_per_token * 8190
    assert ttft == pytest.approx(4.738, rel=0.01)


def test_a_run_can_pick_the_profile_through_its_sim_overrides(tmp_path):
    scenario = workloads.load_scenario("five-user-coding").with_overrides(
        [
            "users=1",
            "turns=1",
            "opening_tokens=300",
            "output_tokens=8",
            "repetitions.warmup=0",
            "repetitions.measured=1",
        ]
    )
    result = workloads.run(
        scenario, sim={"profile": "h200-8b", "spec_tokens": 2}, out_dir=tmp_path / "h200"
    )
    assert result.target.simulator_profile is not None
    assert result.target.simulator_profile["name"] == "h200-8b"
    assert result.target.simulator_profile["spec_tokens"] == 2
    assert result.target.model == "sim-dense-8b" and result.summary.run.valid == 1


def test_serve_lists_every_profile():
    from workloads.cli import build_parser

    serve = build_parser()._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr]
    profile = next(a for a in serve._actions if a.dest == "profile")
    assert set(profile.choices) == set(PROFILES)


def test_serve_runs_the_simulator_standalone():
    command = [sys.executable, "-m", "workloads", "serve", "--profile", "h200-8b", "--port", "0"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert "h200-8b" in line
            base = line.split(" at ")[1].split()[0]
            assert get(base[: -len("/v1")] + "/health")[0] == 200
        finally:
            proc.terminate()
            proc.wait(timeout=10)


# --- the seed's cache collapse ------------------------------------------------------------------


def _turn2_effectiveness(users: int, tmp_path) -> float:
    # Five sessions of about 10K tokens do not fit in the seed card's 46,202 tokens of KV.
    # Lock-step turns reach the server in session order every turn, the order in which each
    # admission evicts the next session's prefix (tests/servers/test_engine.py shows other orders).
    scenario = workloads.load_scenario("five-user-coding").with_overrides(
        [
            f"users={users}",
            "turns=2",
            "opening_tokens=9500",
            "turn_tokens=1000",
            "output_tokens=64",
            "repetitions.warmup=0",
            "repetitions.measured=1",
        ]
    )
    result = workloads.run(
        scenario, sim={"kv_capacity_tokens": 46202}, out_dir=tmp_path / f"c{users}"
    )
    turn2 = result.summary.turns[1]
    assert turn2.valid == users and turn2.cache_effectiveness is not None
    return turn2.cache_effectiveness


def test_prefix_cache_collapses_at_c5_but_not_at_c1_in_46k_tokens_of_kv(tmp_path):
    assert _turn2_effectiveness(1, tmp_path) > 0.9
    assert _turn2_effectiveness(5, tmp_path) < 0.5


def test_with_ample_kv_cached_tokens_are_exactly_the_block_rounded_shareable_prefix(
    run_scenario, simulated_server
):
    result = run_scenario(
        "five-user-coding",
        set=[
            "users=3",
            "turns=3",
            "opening_tokens=700",
            "turn_tokens=150",
            "output_tokens=33",
            "repetitions.warmup=0",
            "repetitions.measured=1",
        ],
    )
    later = [r for r in result.records if r.turn > 1]
    assert len(later) == 6
    for r in later:
        # shareable = the previous prompt + its reply; the reply's last token never had KV
        assert r.cached_tokens == 16 * ((r.shareable_tokens - 1) // 16), r
