"""Sending the correctness gate (:mod:`workloads.core.gate`): each case once, greedily
(temperature 0, top_p 1, no penalties, no forced length), outside every measured window so no
window counter or energy reading includes it.

The cases of one pass go out together (at most :data:`GATE_CONCURRENCY` in flight), each
capped at :func:`gate_deadline_s` through its own client (:func:`gate_client`), so a stalling
server costs the gate one deadline per pass, not a read gap per case: sent one after another,
12 requests that each waited out the default 120 s read gap kept a run 24 minutes outside
its windows. The outputs are judged as before and kept in case order, whatever order they
finish in.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from workloads.core.gate import CASES, GateCase, judge
from workloads.model.gate import GateOutput
from workloads.model.scenario import Scenario, Timeouts
from workloads.model.target import Target
from workloads.wire.client import ChatClient, ChatResponse, HttpChatClient
from workloads.wire.transport import Transport, transport_for

__all__ = ["GATE_CONCURRENCY", "gate_client", "gate_deadline_s", "send_gate"]

# Gate requests in flight at once: all six cases of a pass. The gate runs when nothing else
# is sent, so six short requests together are a light load, and a pass takes as long as its
# slowest case instead of the sum of all six.
GATE_CONCURRENCY = 6

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


def gate_deadline_s(timeouts: Timeouts) -> float:
    """The most one gate request may take, connecting and waiting for a connection
    included: ``timeouts.gate_s``, never more than the read gap or the turn cap."""
    return min(timeouts.gate_s, timeouts.read_gap_s, timeouts.turn_s)


def gate_client(
    target: Target, timeouts: Timeouts, transport: Transport | None = None
) -> HttpChatClient:
    """The client the gate sends through: :data:`GATE_CONCURRENCY` connections of its own
    (the run's client has as many as there are sessions, one for a single user, which would
    queue the cases one after another) and each request capped at :func:`gate_deadline_s`
    (a request past it fails ``turn_deadline``); ``transport``: the run's proxy, TLS and
    credentials (default: the target's). Enter it with ``async with``."""
    return HttpChatClient(
        target.base_url, connections=GATE_CONCURRENCY,
        transport=transport if transport is not None else transport_for(target),
        timeouts=timeouts.model_copy(update={"turn_s": gate_deadline_s(timeouts)}),
    )


async def send_gate(
    client: ChatClient, model: str, scenario: Scenario, phase: Literal["before", "after"]
) -> list[GateOutput]:
    """Send every gate case once, together (at most :data:`GATE_CONCURRENCY` at a time), and
    judge each; the outputs come in case order. A failed request, one past the gate's
    deadline included, is a failed case (with its error kind), never an exception, and is
    not re-sent. ``client`` bounds each request: :func:`gate_client` makes one that does.

        async with gate_client(target, scenario.timeouts) as client:
            outputs = await send_gate(client, model, scenario, "before")
    """
    slots = asyncio.Semaphore(GATE_CONCURRENCY)
    deadline = gate_deadline_s(scenario.timeouts)

    async def one(case: GateCase) -> GateOutput:
        async with slots:
            response = await client.stream_chat(
                gate_body(scenario, model, case.chat(), case.max_tokens)
            )
        return _output(case, phase, response, deadline)

    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(one(case)) for case in CASES]
    return [task.result() for task in tasks]


def _output(case: GateCase, phase: Literal["before", "after"], response: ChatResponse,
            deadline: float) -> GateOutput:
    """One case's output, judged; a failed request is a failed case with its error."""
    completion = response.usage.completion_tokens if response.usage else None
    if not response.ok:
        message = response.error_message or "no message"
        if response.error_kind == "turn_deadline":
            message += f" (the gate's deadline, {deadline:g} s: timeouts.gate_s)"
        return GateOutput(
            case=case.name, phase=phase, passed=False, output=response.text,
            why=f"the request failed ({response.error_kind}): {message}",
            error_kind=response.error_kind, finish_reason=response.finish_reason,
            completion_tokens=completion,
        )
    verdict = judge(case, response.text)
    return GateOutput(
        case=case.name, phase=phase, passed=verdict.passed, why=verdict.why,
        output=response.text, finish_reason=response.finish_reason,
        completion_tokens=completion,
    )
