"""Sending the correctness gate (:mod:`workloads.core.gate`): each case once, greedily
(temperature 0, top_p 1, no penalties, no forced length), outside every measured window so no
window counter or energy reading includes it.

The cases of one pass go out together (at most :data:`GATE_CONCURRENCY` in flight), each
capped at :func:`gate_deadline_s` through its own client (:func:`gate_client`), so a stalling
server costs the gate one deadline per pass, not a read gap per case: sent one after another,
12 requests that each waited out the default 120 s read gap kept a run 24 minutes outside
its windows. The outputs are judged as before and kept in case order, whatever order they
finish in.

A model that echoes most chat cases back (:data:`~workloads.core.gate.ECHO_MAJORITY`: a base
model, never tuned for chat) gets the text form of the cases through ``/v1/completions`` right
after, and the text form again after the windows; its verdict is the text form's
(:class:`~workloads.model.gate.GateResult`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Literal

from workloads.core.gate import (
    CASES,
    ECHO_MAJORITY,
    TEXT_CASES,
    GateCase,
    TextCase,
    echoes,
    judge,
    judge_text,
)
from workloads.model.errors import TargetError
from workloads.model.gate import ECHOED, TEXT_PREFIX, GateOutput
from workloads.model.scenario import Scenario, Timeouts
from workloads.model.target import Target
from workloads.wire.client import ChatClient, ChatResponse, HttpChatClient
from workloads.wire.completion import TextAnswer, complete
from workloads.wire.transport import Transport, transport_for

__all__ = [
    "GATE_CONCURRENCY",
    "NOT_SERVED",
    "GateClient",
    "gate_client",
    "gate_deadline_s",
    "not_served",
    "send_gate",
]

# Gate requests in flight at once: all six cases of a pass. The gate runs when nothing else
# is sent, so six short requests together are a light load, and a pass takes as long as its
# slowest case instead of the sum of all six.
GATE_CONCURRENCY = 6

# Statuses that say the URL serves no chat completions at all (Not Implemented; Method Not
# Allowed), whatever the request: every turn would get the same. Not 404, which vLLM and
# SGLang answer for a model they do not serve (a request's problem, not the URL's).
NOT_SERVED = frozenset({405, 501})
_REASONS = {405: "Method Not Allowed", 501: "Not Implemented"}


def not_served(statuses: Sequence[int | None], url: str, what: str) -> TargetError | None:
    """The error to stop the run with when every one of ``statuses`` (the HTTP statuses of
    ``what``: the gate's first pass, the first repetition's turns) says ``url`` serves no
    chat completions; None otherwise. One line: the body (an HTML page) is left out. A target
    that listed its models and answered 501 to every request ran to its end (exit 3) and
    pasted six HTML pages into the correctness line (issue 35)."""
    if not statuses or not all(s in NOT_SERVED for s in statuses):
        return None
    status = statuses[0]
    assert status is not None
    return TargetError(
        f"{url} answered HTTP {status} {_REASONS.get(status, '')} to {what}: the target lists "
        "its models but serves no chat completions at that URL; nothing was measured (is "
        "the base URL its OpenAI-compatible API, e.g. http://HOST:PORT/v1?)"
    )


# Request fields the gate sets itself: greedy and free to stop (a forced length would make a
# right answer run on into text the judge has to see past).
_GATE_OWNS = {
    "temperature",
    "top_p",
    "top_k",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "seed",
    "ignore_eos",
    "min_tokens",
    "max_tokens",
    "max_completion_tokens",
    "n",
}


def gate_body(
    scenario: Scenario, model: str, messages: list[dict[str, str]], max_tokens: int
) -> dict[str, Any]:
    """The request body of one gate case: greedy, with the scenario's server-specific fields
    (e.g. a chat-template switch) but none that touch sampling or length."""
    body: dict[str, Any] = {k: v for k, v in scenario.extra_body.items() if k not in _GATE_OWNS}
    body.update(
        {
            "model": model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "top_p": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
        }
    )
    return body


def gate_deadline_s(timeouts: Timeouts) -> float:
    """The most one gate request may take, connecting and waiting for a connection
    included: ``timeouts.gate_s``, never more than the read gap or the turn cap."""
    return min(timeouts.gate_s, timeouts.read_gap_s, timeouts.turn_s)


def gate_deadline_text(timeouts: Timeouts) -> str:
    """`` (the gate's deadline, 5 s: timeouts.read_gap_s)``: the deadline and the field that
    set it (the lowest of the three), for a gate request that ran out of time."""
    deadline = gate_deadline_s(timeouts)
    field = next(
        name for name in ("gate_s", "read_gap_s", "turn_s") if getattr(timeouts, name) == deadline
    )
    below = "" if field == "gate_s" else f", below timeouts.gate_s {timeouts.gate_s:g} s"
    return f" (the gate's deadline, {deadline:g} s: timeouts.{field}{below})"


class GateClient(HttpChatClient):
    """The gate's client: the chat cases stream as every request does; the text form goes
    to ``/v1/completions`` (:func:`~workloads.wire.completion.complete`) through the same
    transport and deadline."""

    def __init__(self, base_url: str, *, transport: Transport, timeouts: Timeouts) -> None:
        super().__init__(
            base_url, connections=GATE_CONCURRENCY, transport=transport, timeouts=timeouts
        )
        self.base_url = base_url
        self.transport = transport
        self.deadline_s = timeouts.turn_s

    async def complete(self, body: dict[str, Any]) -> TextAnswer:
        return await complete(
            self.base_url, body, transport=self.transport, timeout_s=self.deadline_s
        )


def gate_client(
    target: Target, timeouts: Timeouts, transport: Transport | None = None
) -> GateClient:
    """The client the gate sends through: :data:`GATE_CONCURRENCY` connections of its own
    (the run's client has as many as there are sessions, one for a single user, which would
    queue the cases one after another) and each request capped at :func:`gate_deadline_s`
    (a request past it fails ``turn_deadline``); ``transport``: the run's proxy, TLS and
    credentials (default: the target's). Enter it with ``async with``."""
    return GateClient(
        target.base_url,
        transport=transport if transport is not None else transport_for(target),
        timeouts=timeouts.model_copy(update={"turn_s": gate_deadline_s(timeouts)}),
    )


async def send_gate(
    client: ChatClient,
    model: str,
    scenario: Scenario,
    phase: Literal["before", "after"],
    earlier: Sequence[GateOutput] = (),
    *,
    url: str | None = None,  # the chat URL: stop (TargetError) when it serves no chat
) -> list[GateOutput]:
    """Send every gate case once, together (at most :data:`GATE_CONCURRENCY` at a time), and
    judge each; the outputs come in case order. A failed request, one past the gate's
    deadline included, is a failed case (with its error kind), never an exception, and is
    not re-sent. ``client`` bounds each request: :func:`gate_client` makes one that does.

    Before the windows, a model that echoed :data:`~workloads.core.gate.ECHO_MAJORITY` chat
    cases also gets the text form (with a :class:`GateClient`); ``earlier`` (the outputs of
    the phase before) decides the form after the windows: the text form alone when it was
    sent. With ``url``, a pass whose every request was answered :data:`NOT_SERVED` raises
    :class:`~workloads.TargetError` (:func:`not_served`).

        async with gate_client(target, scenario.timeouts) as client:
            outputs = await send_gate(client, model, scenario, "before")
    """
    if any(o.case.startswith(TEXT_PREFIX) for o in earlier) and isinstance(client, GateClient):
        return await _send_text(client, model, scenario, phase)
    slots = asyncio.Semaphore(GATE_CONCURRENCY)
    deadline = gate_deadline_text(scenario.timeouts)
    statuses: list[int | None] = []

    async def one(case: GateCase) -> GateOutput:
        async with slots:
            response = await client.stream_chat(
                gate_body(scenario, model, case.chat(), case.max_tokens)
            )
        statuses.append(response.http_status)
        return _output(case, phase, response, deadline)

    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(one(case)) for case in CASES]
    outputs = [task.result() for task in tasks]
    if url is not None and (
        err := not_served(statuses, url, f"each of the {len(CASES)} correctness-gate requests")
    ):
        raise err
    # A request cut short (the gate's deadline on a slow machine) that had echoed its request
    # counts: the echo is what tells a base model.
    echoed = sum(1 for case, o in zip(CASES, outputs, strict=True) if echoes(case, o.output))
    if phase == "before" and echoed >= ECHO_MAJORITY and isinstance(client, GateClient):
        outputs += await _send_text(client, model, scenario, phase)
    return outputs


def text_body(scenario: Scenario, model: str, case: TextCase) -> dict[str, Any]:
    """The request body of one text case: greedy, as :func:`gate_body`, with a prompt."""
    body: dict[str, Any] = {
        k: v
        for k, v in scenario.extra_body.items()
        if k not in _GATE_OWNS and k != "chat_template_kwargs"
    }
    body.update(
        {
            "model": model,
            "prompt": case.prompt,
            "max_tokens": case.max_tokens,
            "temperature": 0.0,
            "top_p": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
        }
    )
    return body


async def _send_text(
    client: GateClient, model: str, scenario: Scenario, phase: Literal["before", "after"]
) -> list[GateOutput]:
    """The text form of the cases, together, judged; in case order."""

    async def one(case: TextCase) -> GateOutput:
        answer = await client.complete(text_body(scenario, model, case))
        if not answer.ok:
            message = answer.error_message or "no message"
            if answer.error_kind == "turn_deadline":
                message += gate_deadline_text(scenario.timeouts)
            return GateOutput(
                case=case.name,
                phase=phase,
                passed=False,
                output=answer.text,
                why=f"the request failed ({answer.error_kind}): {message}",
                error_kind=answer.error_kind,
            )
        verdict = judge_text(case, answer.text)
        return GateOutput(
            case=case.name,
            phase=phase,
            passed=verdict.passed,
            why=verdict.why,
            output=answer.text,
            finish_reason=answer.finish_reason,
            completion_tokens=answer.completion_tokens,
        )

    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(one(case)) for case in TEXT_CASES]
    return [task.result() for task in tasks]


def _output(
    case: GateCase, phase: Literal["before", "after"], response: ChatResponse, deadline: str
) -> GateOutput:
    """One case's output, judged; a failed request is a failed case with its error."""
    completion = response.usage.completion_tokens if response.usage else None
    if not response.ok:
        message = response.error_message or "no message"
        if response.error_kind == "turn_deadline":
            message += deadline
        echoed = f" ({ECHOED} first)" if echoes(case, response.text) else ""
        return GateOutput(
            case=case.name,
            phase=phase,
            passed=False,
            output=response.text,
            why=f"the request failed ({response.error_kind}){echoed}: {message}",
            error_kind=response.error_kind,
            finish_reason=response.finish_reason,
            completion_tokens=completion,
        )
    verdict = judge(case, response.text)
    return GateOutput(
        case=case.name,
        phase=phase,
        passed=verdict.passed,
        why=verdict.why,
        output=response.text,
        finish_reason=response.finish_reason,
        completion_tokens=completion,
    )
