"""The likelihood probe: reading prompt log-probabilities (pure), the simulator's
/v1/completions, and a server without them."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from workloads.core.likelihood import TEXT, mean_nll, prompt_logprobs
from workloads.wire.likelihood import measure_likelihood


def test_both_response_forms_are_read_and_the_first_token_is_left_out():
    legacy = {"choices": [{"logprobs": {"token_logprobs": [None, -1.0, -3.0]}}]}
    vllm = {
        "choices": [
            {"prompt_logprobs": [None, {"12": {"logprob": -1.0}}, {"7": {"logprob": -3.0}}]}
        ]
    }
    assert prompt_logprobs(legacy) == ([-1.0, -3.0], "echo+logprobs")
    assert prompt_logprobs(vllm) == ([-1.0, -3.0], "prompt_logprobs")
    assert mean_nll([-1.0, -3.0]) == pytest.approx(2.0)
    assert prompt_logprobs({"choices": [{"text": "x", "logprobs": None}]}) is None


def test_the_simulator_offers_prompt_logprobs_deterministically(simulated_server):
    first = asyncio.run(measure_likelihood(simulated_server.base_url, "sim-coder-8b"))
    again = asyncio.run(measure_likelihood(simulated_server.base_url, "sim-coder-8b"))
    assert first.supported and first.mean_nll == again.mean_nll
    assert first.tokens is not None and 150 <= first.tokens <= 260
    assert first.mean_nll is not None and 0 < first.mean_nll < 4


def test_a_server_without_them_is_not_supported(serve_app):
    async def chat_only(request: web.Request) -> web.Response:
        return web.json_response({"choices": [{"text": " ", "logprobs": None}]})

    app = web.Application()
    app.router.add_post("/v1/completions", chat_only)

    async def probe() -> None:
        async with serve_app(app) as root:
            found = await measure_likelihood(root + "/v1", "m")
            assert not found.supported and found.reason is not None
            assert found.reason.startswith("not supported by this server")
            missing = await measure_likelihood(root + "/nowhere/v1", "m")
            assert not missing.supported and "answered 404" in (missing.reason or "")

    asyncio.run(probe())


def test_the_text_is_about_two_hundred_tokens():
    from workloads.core.tokens import count

    assert 150 <= count(TEXT) <= 260
