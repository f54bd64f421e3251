from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter

import pytest

import workloads
from fakes import TIMELESS_ENGINE, FakeChatClient, LoopTicks
from workloads.core.chat_stream import ChatStream
from workloads.core.conversation import Conversation, make_nonces
from workloads.core.corpus import load_corpus
from workloads.core.tokens import EstimateTokenizer
from workloads.model.scenario import Pacing
from workloads.runner.options import SessionIO
from workloads.runner.session import Session
from workloads.runner.sizing import CellSizing
from workloads.runner.turn import RecordHead, build_body, record_from_response
from workloads.wire.client import ChatResponse, Usage

SCENARIO = workloads.Scenario(
    name="t", users=1, turns=3, opening_tokens=400, turn_tokens=80, output_tokens=8
)


def response(**fields) -> ChatResponse:
    base = dict(
        started_ns=100,
        sent_ns=100,
        first_content_ns=110,
        last_content_ns=1110,
        done_ns=1120,
        http_status=200,
        text="x",
        finish_reason="length",
        usage=Usage(prompt_tokens=500, completion_tokens=11, cached_tokens=480),
    )
    return ChatResponse(**{**base, **fields})


def record(resp: ChatResponse, **fields):
    base = dict(output_tokens=11, exact_output=True, shareable_tokens=600, shareable_exact=True)
    head = RecordHead(repetition=0, warmup=False, session=0, turn=2, configured_prior_tokens=488)
    return record_from_response(resp, head, **{**base, **fields})


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


def make_session(client, on_record, model: str = "m") -> Session:
    nonces = make_nonces(b"n" * 16, cell=0, repetition=0, users=1, mode="session")
    conv = Conversation(
        corpus=load_corpus("stdlib"),
        style="agent",
        seed=0,
        session=0,
        nonce=nonces.sessions[0],
        run_nonce=None,
    )
    return Session(
        io=SessionIO(client, model, on_record),
        scenario=SCENARIO,
        conversation=conv,
        sizing=CellSizing(SCENARIO, EstimateTokenizer()),
        repetition=0,
        warmup=False,
    )


def test_a_failed_turn_is_a_record_and_the_session_goes_on():
    records = []
    outcomes = iter(["ok", "fail", "ok"])

    class Flaky(FakeChatClient):
        async def stream_chat(self, body):
            if next(outcomes) == "fail":
                return ChatResponse(
                    started_ns=1,
                    http_status=500,
                    error_kind="http_5xx",
                    error_message="HTTP 500: boom",
                )
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
            session = make_session(client, records.append, server.model)
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


def _fed_stream() -> ChatStream:
    """A stream with every figure a record reads: text in pieces, a tool call in two
    pieces, reasoning, usage, timings, fingerprint, model, id, [DONE]."""
    stream = ChatStream()
    events = [
        {
            "id": "r1",
            "model": "m",
            "system_fingerprint": "fp",
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
        },
        {"id": "r1", "choices": [{"index": 0, "delta": {"reasoning_content": "hm"}}]},
        {"id": "r1", "choices": [{"index": 0, "delta": {"content": "Hel"}}]},
        {"id": "r1", "choices": [{"index": 0, "delta": {"content": "lo"}}]},
        {
            "id": "r1",
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "c0",
                                "function": {"name": "read", "arguments": '{"p"'},
                            }
                        ]
                    },
                }
            ],
        },
        {
            "id": "r1",
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]},
                    "finish_reason": "tool_calls",
                }
            ],
        },
        {
            "id": "r1",
            "choices": [],
            "timings": {"predicted_n": 5},
            "usage": {
                "prompt_tokens": 500,
                "completion_tokens": 11,
                "prompt_tokens_details": {"cached_tokens": 480},
            },
        },
    ]
    for now, event in enumerate(events, start=110):
        stream.feed(b"data: " + json.dumps(event).encode() + b"\n\n", now)
    stream.feed(b"data: [DONE]\n\n", 1110)
    return stream


def test_a_streamed_response_is_recorded_from_its_stream_as_from_copied_values():
    # The response reads its stream's figures through (nothing is copied on the way); its
    # record is field for field the record of a response built from those figures as values.
    stream = _fed_stream()
    attempt = dict(started_ns=100, sent_ns=100, done_ns=1120, http_status=200)
    streamed = ChatResponse(**attempt, stream=stream)
    assert streamed.figures is stream
    copied = ChatResponse(
        **attempt,
        text=stream.text,
        first_content_ns=stream.first_content_ns,
        first_text_ns=stream.first_text_ns,
        last_content_ns=stream.last_content_ns,
        tool_calls=stream.tool_calls,
        content_events=stream.content_events,
        content_ns=stream.content_ns,
        finish_reason=stream.finish_reason,
        usage=stream.usage,
        timings=stream.timings,
        system_fingerprint=stream.system_fingerprint,
        model=stream.model,
        request_id=stream.request_id,
        saw_done=stream.saw_done,
    )
    a = record(streamed, tools_offered=True, exact_output=False)
    b = record(copied, tools_offered=True, exact_output=False)
    assert a.model_dump() == b.model_dump()
    assert a.request_id == "r1" and a.tool_calls == 1 and a.timings == {"predicted_n": 5}
    assert a.finish_reason == "tool_calls" and a.cached_tokens == 480
    assert a.ttft_ns == 11 and a.ttft_content_ns == 12 and a.content_events == 5
    assert streamed.text == "Hello" and streamed.saw_done and streamed.model == "m"
    assert streamed.tool_calls == [
        {"id": "c0", "type": "function", "function": {"name": "read", "arguments": '{"p": 1}'}}
    ]


def test_a_response_takes_a_stream_or_values_not_both():
    with pytest.raises(TypeError):
        ChatResponse(started_ns=1, stream=ChatStream(), text="x")
    empty = ChatResponse(started_ns=1)
    assert empty.text == "" and empty.usage is None and not empty.saw_done


def test_the_stream_text_read_midway_keeps_what_arrives_after():
    stream = ChatStream()
    for now, piece in enumerate(["a", "b", "c"]):
        stream.feed(
            b'data: {"id": "x", "choices": [{"delta": {"content": "%s"}}]}\n\n' % piece.encode(),
            now,
        )
    assert stream.text == "abc" and stream.text == "abc"
    stream.feed(b'data: {"id": "x", "choices": [{"delta": {"content": "d"}}]}\n\n', 9)
    assert stream.text == "abcd"


def free_small(users: int, *, turns: int, warmup: int) -> workloads.Scenario:
    """five-user-coding at ``users``, small (300-token openings, 4-token replies), free
    pacing (every session's turn 1 due at once), no gate, one measured repetition."""
    scenario = workloads.load_scenario("five-user-coding").with_overrides(
        [
            f"users={users}",
            f"turns={turns}",
            "opening_tokens=300",
            "turn_tokens=60",
            "output_tokens=4",
            f"repetitions.warmup={warmup}",
            "repetitions.measured=1",
            "gate=off",
        ]
    )
    return scenario.model_copy(update={"pacing": Pacing(mode="free")})


@pytest.mark.parametrize("fast", [True, False], ids=["uvloop", "asyncio"])
def test_sessions_due_together_send_in_slices_and_every_turn_is_recorded(fast, monkeypatch):
    """A repetition's first turns fall due in one loop iteration (free pacing, no think
    time). With a send slice of no time at all, each loop iteration sends one turn (a ticker
    counts the iterations: an interval between two ticks spans at most two), instead of all
    of them back to back; every turn is still sent, streamed and recorded, against the real
    embedded simulated server."""
    if fast:
        pytest.importorskip("uvloop")
    from workloads.runner import session as session_module
    from workloads.wire.loop import run_loop

    users = 24
    scenario = free_small(users, turns=2, warmup=0)
    gate = session_module.send_slice
    ticker = LoopTicks()
    went: list[int] = []  # the tick at which each send went

    async def no_budget(budget_s: float | None = None) -> None:
        await gate(0.0)
        went.append(ticker.ticks)

    monkeypatch.setattr(session_module, "send_slice", no_budget)

    async def main() -> workloads.RunResult:
        async with ticker:
            return await workloads.run_async(scenario, sim=TIMELESS_ENGINE)

    result = run_loop(main(), fast=fast)
    assert len(went) == 2 * users
    assert max(Counter(went).values()) <= 2  # without the slices: all 24 first turns in one
    assert sorted((r.session, r.turn) for r in result.records) == [
        (s, t) for s in range(users) for t in (1, 2)
    ]
    assert all(r.status == "ok" and r.valid for r in result.records)
    assert all(r.pacing_lag_ns is not None and r.pacing_lag_ns >= 0 for r in result.records)


@pytest.mark.parametrize("fast", [True, False], ids=["uvloop", "asyncio"])
def test_a_repetition_opens_its_sessions_connections_before_the_first_sends(fast):
    """When a repetition opens, a connection per session is opened while nothing streams:
    turn 1 of every session goes on one of them (the client opened them all before its
    first request, and none after), and the next repetition finds them open. The real
    client against the real embedded simulated server."""
    if fast:
        pytest.importorskip("uvloop")
    from workloads.servers.simulated import SimulatedServer
    from workloads.wire.client import AiohttpChatClient
    from workloads.wire.loop import run_loop

    users = 12
    scenario = free_small(users, turns=1, warmup=1)

    class Watched(AiohttpChatClient):
        """The real client; notes how many connections it had opened at its first request."""

        at_first_request: int | None = None

        async def stream_chat(self, body):
            if self.at_first_request is None:
                self.at_first_request = self.connections_opened
            return await super().stream_chat(body)

    async def main() -> tuple[workloads.RunResult, int | None, int]:
        async with (
            SimulatedServer(sim=TIMELESS_ENGINE) as server,
            Watched(server.base_url, connections=users) as client,
        ):
            result = await workloads.run_async(scenario, server.target, client=client)
            return result, client.at_first_request, client.connections_opened

    result, at_first_request, opened = run_loop(main(), fast=fast)
    assert at_first_request == users  # all opened before the first turn was sent
    assert opened == users  # and none by the turns, in either repetition
    assert len(result.records) == 2 * users  # the warm-up repetition's and the measured one's
    assert all(r.status == "ok" and r.valid and r.resends == 0 for r in result.records)
