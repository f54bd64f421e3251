"""The likelihood probe's fixed text and how a completions response's prompt log-probabilities
are read. Pure.

Seed 000 compared MTP profiles by the mean negative log-likelihood of a fixed ~209-token text
("a narrow matched likelihood check, not a broad quality result"): a stack that changes the
model's numbers changes it, whatever its speed. A server offers the prompt's log-probabilities
on ``/v1/completions`` either as vLLM's ``prompt_logprobs`` or with ``echo`` + ``logprobs``
(OpenAI's legacy form); elsewhere the probe says "not supported by this server".
"""

from __future__ import annotations

from typing import Any

__all__ = ["TEXT", "mean_nll", "prompt_logprobs"]

# About 200 tokens of plain technical English: no nonce, the same bytes for every arm.
TEXT = (
    "A prefix cache keeps the attention keys and values of text the server has already "
    "processed, so that a later request which begins with the same tokens can skip that "
    "work. Coding agents benefit more than most clients: each turn resends the whole "
    "conversation, the system prompt, the tool descriptions and every file the agent has "
    "read, and only the newest tool result at the end is new. When the cache holds the "
    "earlier turns, the time to the first token depends on the new text alone. When it "
    "does not, because the memory is too small or because other sessions evicted the "
    "blocks, the server computes the full history again, and the user waits for it. "
    "Measuring how much of the reusable prefix was actually served from the cache, turn by "
    "turn and session by session, tells an operator whether to buy memory, limit "
    "concurrency, or change the eviction policy, and it shows whether a change to the "
    "serving stack altered anything besides its speed."
)


def prompt_logprobs(body: Any) -> tuple[list[float], str] | None:
    """The prompt tokens' log-probabilities from a ``/v1/completions`` response body, and
    which form carried them; None when it has neither. The first token has none (nothing
    precedes it) and is left out."""
    try:
        choice = body["choices"][0]
    except (KeyError, IndexError, TypeError):
        return None
    if not isinstance(choice, dict):
        return None
    vllm = choice.get("prompt_logprobs")
    if isinstance(vllm, list) and len(vllm) > 1:
        out = []
        for entry in vllm[1:]:
            if not isinstance(entry, dict) or not entry:
                return None
            # vLLM lists the prompt token itself among the entries; with prompt_logprobs = 0
            # it is the only one.
            best = next(iter(entry.values()))
            value = best.get("logprob") if isinstance(best, dict) else best
            if not isinstance(value, int | float):
                return None
            out.append(float(value))
        return out, "prompt_logprobs"
    legacy = choice.get("logprobs")
    if isinstance(legacy, dict) and isinstance(legacy.get("token_logprobs"), list):
        values = [v for v in legacy["token_logprobs"][1:]]
        if values and all(isinstance(v, int | float) for v in values):
            return [float(v) for v in values], "echo+logprobs"
    return None


def mean_nll(logprobs: list[float]) -> float:
    """Mean negative log-likelihood in nats per token."""
    if not logprobs:
        raise ValueError("no log-probabilities to average")
    return -sum(logprobs) / len(logprobs)
