"""One simulated user: renders each turn, streams it, and turns the response into a
TurnRecord. A failed request is a record, never an exception; the session goes on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from workloads.client import ChatClient, ChatResponse
from workloads.conversation import Conversation
from workloads.records import TurnRecord
from workloads.scenario import Scenario

__all__ = ["Session", "build_body", "record_from_response"]


def build_body(scenario: Scenario, model: str, messages: list[dict[str, str]]) -> dict[str, Any]:
    """The request body for one turn."""
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": scenario.output_tokens,
    }
    if scenario.exact_output:
        # Exactly output_tokens, every turn: vLLM and SGLang honour both, llama.cpp ignore_eos.
        body["ignore_eos"] = True
        body["min_tokens"] = scenario.output_tokens
    body.update(scenario.sampling.model_dump(exclude_none=True))
    body.update(scenario.extra_body)
    return body


def record_from_response(
    response: ChatResponse,
    *,
    repetition: int,
    warmup: bool,
    session: int,
    turn: int,
    configured_prior_tokens: int,
    output_tokens: int,
    exact_output: bool,
    shareable_tokens: int | None,
    shareable_exact: bool,
) -> TurnRecord:
    """Derive a TurnRecord from a ChatResponse. Pure."""
    usage = response.usage
    completion = usage.completion_tokens if usage else None
    ttft = None
    if response.first_content_ns is not None and response.sent_ns is not None:
        ttft = response.first_content_ns - response.sent_ns
    rate = None
    first, last = response.first_content_ns, response.last_content_ns
    if (
        completion is not None
        and completion > 1
        and first is not None
        and last is not None
        and last > first
    ):
        rate = (completion - 1) / ((last - first) / 1e9)
    status = "ok" if response.ok else "error"
    valid = status == "ok" and completion is not None
    if exact_output:
        valid = valid and response.finish_reason == "length" and completion == output_tokens
    prompt = usage.prompt_tokens if usage else None
    if shareable_tokens is not None and prompt is not None:
        shareable_tokens = min(shareable_tokens, prompt)
    return TurnRecord(
        repetition=repetition,
        warmup=warmup,
        session=session,
        turn=turn,
        status=status,
        error_kind=response.error_kind,
        error_message=response.error_message,
        http_status=response.http_status,
        finish_reason=response.finish_reason,
        valid=valid,
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached_tokens=usage.cached_tokens if usage else None,
        shareable_tokens=shareable_tokens,
        shareable_exact=shareable_exact,
        configured_prior_tokens=configured_prior_tokens,
        ttft_ns=ttft,
        decode_tokens_per_s=rate,
        started_ns=response.started_ns,
        sent_ns=response.sent_ns,
        first_content_ns=response.first_content_ns,
        last_content_ns=response.last_content_ns,
        done_ns=response.done_ns,
        content_events=response.content_events,
        resends=response.resends,
        request_id=response.request_id,
        system_fingerprint=response.system_fingerprint,
        timings=response.timings,
    )


class Session:
    """One user's turn loop in one repetition. Call :meth:`turn` for turns 1, 2, ... in order."""

    def __init__(
        self,
        *,
        client: ChatClient,
        scenario: Scenario,
        model: str,
        conversation: Conversation,
        repetition: int,
        warmup: bool,
        on_record: Callable[[TurnRecord], None],
    ) -> None:
        self.client = client
        self.scenario = scenario
        self.model = model
        self.conversation = conversation
        self.repetition = repetition
        self.warmup = warmup
        self.on_record = on_record
        self._previous: TurnRecord | None = None
        self.last_response: ChatResponse | None = None

    def configured_prior_tokens(self, turn: int) -> int:
        s = self.scenario
        return s.opening_tokens + (turn - 1) * (s.turn_tokens + s.output_tokens)

    def _shareable_estimate(self, turn: int) -> int | None:
        """What of this turn's prompt the server has already seen, from its own usage counts:
        the previous turn's prompt + completion (an estimate: the chat template may render
        the reply differently from the generated tokens)."""
        if turn == 1:
            return 0 if self.conversation.run_nonce is None else None
        prev = self._previous
        if prev is None or prev.prompt_tokens is None or prev.completion_tokens is None:
            return None
        return prev.prompt_tokens + prev.completion_tokens

    async def turn(self, turn: int) -> TurnRecord:
        messages = self.conversation.begin_turn(turn)
        body = build_body(self.scenario, self.model, messages)
        common = dict(
            repetition=self.repetition,
            warmup=self.warmup,
            session=self.conversation.session,
            turn=turn,
            configured_prior_tokens=self.configured_prior_tokens(turn),
        )
        started = time.perf_counter_ns()
        try:
            response = await self.client.stream_chat(body)
        except asyncio.CancelledError:
            # The run ended with this turn in flight: keep it as an incomplete record.
            self.on_record(
                TurnRecord(
                    **common,
                    status="incomplete",
                    error_kind="cancelled",
                    error_message="the run ended while this turn was in flight",
                    started_ns=started,
                )
            )
            raise
        record = record_from_response(
            response,
            **common,  # type: ignore[arg-type]
            output_tokens=self.scenario.output_tokens,
            exact_output=self.scenario.exact_output,
            shareable_tokens=self._shareable_estimate(turn),
            shareable_exact=False,
        )
        # The server's real reply goes into the history, even a partial one; a turn with no
        # reply at all keeps the roles alternating with a marker.
        reply = response.text or f"(no reply: {response.error_kind or 'empty'})"
        self.conversation.add_reply(reply)
        self._previous = record
        self.last_response = response
        self.on_record(record)
        return record
