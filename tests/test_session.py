from __future__ import annotations

import asyncio
import contextlib

import workloads
from fakes import FakeChatClient
from workloads.core.conversation import Conversation, make_nonces
from workloads.core.corpus import load_corpus
from workloads.core.tokens import EstimateTokenizer
from workloads.runner.session import Session
from workloads.runner.sizing import CellSizing
from workloads.runner.turn import build_body, record_from_response
from workloads.wire.client import ChatResponse, Usage

SCENARIO = workloads.Scenario(
    name="t", users=1, turns=3, opening_tokens=400, turn_tokens=80, output_tokens=8
)


def response(**fields) -> ChatResponse:
    base = dict(started_ns=100, sent_ns=100, first_content_ns=110, last_content_ns=1110,
                done_ns=1120, http_status=200, text="x", finish_reason="length",
                usage=Usage(prompt_tokens=500, completion_tokens=11, cached_tokens=480))
    return ChatResponse(**{**base, **fields})


def record(resp: ChatResponse, **fields):
    base = dict(repetition=0, warmup=False, session=0, turn=2, configured_prior_tokens=488,
                output_tokens=11, exact_output=True, shareable_tokens=600, shareable_exact=True)
    return record_from_response(resp, **{**base, **fields})


def test_a_record_derives_ttft_and_the_post_first_rate_from_integer_times():
    r = record(response())
    assert r.ttft_ns == 10 and r.decode_tokens_per_s == 10 / 1000e-9
    assert r.valid and r.shareable_tokens == 500  # never more than the prompt


def test_a_short_or_stopped_reply_is_finished_but_invalid_at_exact_length():
    assert not record(response(finish_reason="stop")).valid
    assert record(response(finish_reason="stop"), exact_output=False).valid


def test_the_body_asks_for_exactly_output_tokens_and_keeps_usage():
    body = build_body(SCENARIO, "m", [{"role": "user", "content": "hi"}])
    assert body["stream"] and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == body["min_tokens"] == 8 and body["ignore_eos"]


def make_session(client, on_record) -> Session:
    nonces = make_nonces(b"n" * 16, cell=0, repetition=0, users=1, mode="session")
    conv = Conversation(corpus=load_corpus("stdlib"), style="agent", seed=0, session=0,
                        nonce=nonces.sessions[0], run_nonce=None)
    return Session(client=client, scenario=SCENARIO, model="m", conversation=conv,
                   sizing=CellSizing(SCENARIO, EstimateTokenizer()), repetition=0,
                   warmup=False, on_record=on_record)


def test_a_failed_turn_is_a_record_and_the_session_goes_on():
    records = []
    outcomes = iter(["ok", "fail", "ok"])

    class Flaky(FakeChatClient):
        async def stream_chat(self, body):
            if next(outcomes) == "fail":
                return ChatResponse(started_ns=1, http_status=500, error_kind="http_5xx",
                                    error_message="HTTP 500: boom")
            return await super().stream_chat(body)

    session = make_session(Flaky(lambda body: (123, "reply text")), records.append)

    async def go():
        await session.open(600)
        for turn in (1, 2, 3):
            await session.turn(turn)

    asyncio.run(go())
    assert [r.status for r in records] == ["ok", "error", "ok"]
    assert records[1].error_kind == "http_5xx" and records[1].http_status == 500
    assert records[1].shareable_tokens == 123 + 8 and not records[1].shareable_exact
    assert records[2].shareable_tokens is None  # nothing known after a failed turn
    roles = [m["role"] for m in session.conversation.messages]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert session.conversation.messages[4]["content"] == "(no reply: http_5xx)"
    assert [r.configured_prompt_tokens for r in records] == [480, 568, 656]


def test_a_turn_cut_off_by_the_end_of_the_run_is_recorded_as_incomplete():
    records = []

    class Stalled(FakeChatClient):
        async def stream_chat(self, body):
            await asyncio.sleep(3600)
            raise AssertionError("unreachable")

    session = make_session(Stalled(lambda body: (0, "")), records.append)

    async def go():
        await session.open(600)
        await session.prepare(1)
        task = asyncio.create_task(session.send(1))
        await asyncio.sleep(0.01)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert len(records) == 1 and records[0].status == "incomplete"
    assert records[0].error_kind == "cancelled" and records[0].configured_prompt_tokens == 480


def test_a_cancelled_turn_keeps_what_the_real_client_measured():
    from workloads.servers.simulated import SimulatedServer
    from workloads.wire.client import AiohttpChatClient

    records = []
    sim = {"faults.rate_stall": 1.0, "faults.stall_s": 60.0, "faults.after_tokens": 3}

    async def go(server):
        async with AiohttpChatClient(server.base_url) as client:
            session = make_session(client, records.append)
            session.model = server.model
            await session.open(600)
            await session.prepare(1)
            task = asyncio.create_task(session.send(1))
            for _ in range(3000):  # until the server wrote the first content (bounded)
                await asyncio.sleep(0.01)
                truths = server.truths()
                if truths and truths[0].first_written_ns is not None:
                    break
            await asyncio.sleep(0.05)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    with SimulatedServer("fast", sim=sim, debug=True) as server:
        asyncio.run(go(server))
    (r,) = records
    assert r.status == "incomplete", (r.error_kind, r.error_message)
    assert r.error_kind == "cancelled" and r.http_status == 200
    assert r.sent_ns is not None and r.first_content_ns is not None and r.content_events >= 1
    assert r.error_ns is not None and r.error_ns > r.first_content_ns
