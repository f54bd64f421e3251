"""Sending the correctness gate (:mod:`workloads.core.gate`): each case once, greedily
(temperature 0, top_p 1, no penalties, no forced length), one after another, outside every
measured window so no window counter or energy reading includes it."""

from __future__ import annotations

from typing import Any, Literal

from workloads.core.gate import CASES, judge
from workloads.model.gate import GateOutput
from workloads.model.scenario import Scenario
from workloads.wire.client import ChatClient

__all__ = ["send_gate"]

# Request fields the gate sets itself: greedy and free to stop (a forced length would make a
# right answer run on into text the judge has to see past).
_GATE_OWNS = {"temperature", "top_p", "top_k", "presence_penalty", "frequency_penalty",
              "repetition_penalty", "seed", "ignore_eos", "min_tokens", "max_tokens",
              "max_completion_tokens", "n"}


def gate_body(scenario: Scenario, model: str, messages: list[dict[str, str]],
              max_tokens: int) -> dict[str, Any]:
    """The request body of one gate case: greedy, with the scenario's server-specific fields
    (e.g. a chat-template switch) but none that touch sampling or length."""
    body: dict[str, Any] = {k: v for k, v in scenario.extra_body.items() if k not in _GATE_OWNS}
    body.update({
        "model": model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "top_p": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
    })
    return body


async def send_gate(
    client: ChatClient, model: str, scenario: Scenario, phase: Literal["before", "after"]
) -> list[GateOutput]:
    """Send every gate case once and judge it. A failed request is a failed case (with its
    error), never an exception, and is not re-sent."""
    out = []
    for case in CASES:
        response = await client.stream_chat(
            gate_body(scenario, model, case.chat(), case.max_tokens)
        )
        completion = response.usage.completion_tokens if response.usage else None
        if not response.ok:
            out.append(GateOutput(
                case=case.name, phase=phase, passed=False, output=response.text,
                why=f"the request failed ({response.error_kind}): "
                    f"{response.error_message or 'no message'}",
                error_kind=response.error_kind, finish_reason=response.finish_reason,
                completion_tokens=completion,
            ))
            continue
        verdict = judge(case, response.text)
        out.append(GateOutput(
            case=case.name, phase=phase, passed=verdict.passed, why=verdict.why,
            output=response.text, finish_reason=response.finish_reason,
            completion_tokens=completion,
        ))
    return out
