"""The likelihood probe's one request: ``POST {base}/completions`` with the fixed text, asking
for the prompt's log-probabilities (vLLM's ``prompt_logprobs``, and ``echo`` + ``logprobs``),
greedy, one token generated. Failures are "not supported by this server" with what was seen,
never an exception."""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from workloads.core.likelihood import TEXT, mean_nll, prompt_logprobs
from workloads.model.likelihood import Likelihood
from workloads.wire.completion import post_completions
from workloads.wire.transport import Transport

__all__ = ["measure_likelihood"]


async def measure_likelihood(
    base_url: str,
    model: str,
    *,
    transport: Transport | None = None,
    timeout_s: float = 120.0,
) -> Likelihood:
    """The mean NLL of :data:`~workloads.core.likelihood.TEXT` at the target."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": TEXT,
        "max_tokens": 1,
        "temperature": 0.0,
        "echo": True,
        "logprobs": 0,
        "prompt_logprobs": 0,
    }
    url = base_url.rstrip("/") + "/completions"
    try:
        status, raw = await post_completions(
            base_url, body, transport=transport or Transport(), timeout_s=timeout_s
        )
        data = json.loads(raw) if status == 200 else None
    except (aiohttp.ClientError, TimeoutError, ValueError) as err:
        return Likelihood(
            supported=False, reason=f"not supported by this server ({url}: {type(err).__name__})"
        )
    if status != 200:
        return Likelihood(
            supported=False, reason=f"not supported by this server ({url} answered {status})"
        )
    found = prompt_logprobs(data)
    if found is None:
        return Likelihood(
            supported=False,
            reason="not supported by this server (no prompt "
            "log-probabilities in its /completions answer)",
        )
    values, source = found
    return Likelihood(supported=True, source=source, tokens=len(values), mean_nll=mean_nll(values))
