"""Tool calls on the wire: how templates render them, how a stream's pieces are assembled, and
the simulated server's replies that call tools (exact lengths, exact prefix caching)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fakes import post
from workloads.core import tokens
from workloads.core.chat_stream import ChatStream
from workloads.core.corpus import load_corpus
from workloads.model.scenario import Timeouts
from workloads.servers.simulated import SimulatedServer, get_profile, tokenizer
from workloads.servers.simulated.tools import MIN_TOOL_REPLY_TOKENS, plan_tool_reply
from workloads.wire.client import ChatResponse, HttpChatClient


def root(server: SimulatedServer) -> str:
    return server.base_url[: -len("/v1")]


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    },
]
MESSAGES = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the failing test in parser.py, please."},
]
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "read_file", "arguments": '{"path": "parser.py"}'},
}


# --- what a template renders -----------------------------------------------------------------


def test_assistant_text_renders_content_then_each_call_in_hermes_markup():
    message = {"role": "assistant", "content": "Let me look.", "tool_calls": [CALL, CALL]}
    one = '\n<tool_call>\n{"name": "read_file", "arguments": {"path": "parser.py"}}\n</tool_call>'
    assert tokens.assistant_text(message) == "Let me look." + one + one
    assert tokens.assistant_text({"role": "assistant", "content": None}) == ""
    assert tokens.message_text({"role": "assistant", "content": None, "tool_calls": [CALL]}) == one
    tool = {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "x"}]}
    assert tokens.message_text(tool) == "x"
    assert tokens.tools_text(None) == tokens.tools_text([]) == ""
    assert tokens.tools_text(TOOLS) == "\n\n# Tools\n" + json.dumps(TOOLS, separators=(",", ":"))


HISTORY = [
    *MESSAGES,
    {"role": "assistant", "content": "Reading it.", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "def parse(): ...\n"},
    {"role": "user", "content": "And now?"},
]


@pytest.mark.parametrize("messages", [HISTORY, HISTORY[1:]], ids=["system", "no-system"])
@pytest.mark.parametrize("tools", [None, TOOLS], ids=["no-tools", "tools"])
def test_the_estimate_renders_as_many_ids_as_the_simulated_template(messages, tools):
    estimate = tokens.EstimateTokenizer()
    estimate.tools = tools
    ids = asyncio.run(estimate.render(messages, "generate"))
    assert len(ids) == len(tokenizer.render(messages, tools=tools))
    # the tool calls and the schemas are counted: dropping either changes the count
    bare = [{k: v for k, v in m.items() if k != "tool_calls"} for m in messages]
    assert len(asyncio.run(estimate.render(bare, "generate"))) < len(ids)
    if tools:
        estimate.tools = None
        assert len(asyncio.run(estimate.render(messages, "generate"))) < len(ids)


def grown(system: str) -> int:
    """Tokens the tools add to a system message's text (they can merge with its end)."""
    return len(tokenizer.encode(system + tokens.tools_text(TOOLS))) - len(tokenizer.encode(system))


def test_the_simulated_template_puts_the_tools_in_the_system_block():
    schema = len(tokenizer.encode(tokens.tools_text(TOOLS)))
    with_system = tokenizer.render(MESSAGES, tools=TOOLS)
    assert len(with_system) == len(tokenizer.render(MESSAGES)) + grown(MESSAGES[0]["content"])
    # no system message first: a system block of the tools alone (5 tokens of framing)
    alone = tokenizer.render(MESSAGES[1:], tools=TOOLS)
    assert len(alone) == len(tokenizer.render(MESSAGES[1:])) + schema + 5
    assert tokenizer.decode(alone).startswith("<|im_start|>system\n\n\n# Tools\n[{")


# --- assembling a stream ---------------------------------------------------------------------


def sse(*deltas: dict[str, Any], finish: str = "tool_calls") -> bytes:
    chunks = [
        {"id": "c1", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    ]
    chunks += [{"id": "c1", "choices": [{"index": 0, "delta": d}]} for d in deltas]
    chunks.append({"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
    return body + b"data: [DONE]\n\n"


def header(index: int, call_id: str, name: str) -> dict[str, Any]:
    return {
        "tool_calls": [
            {
                "index": index,
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
        ]
    }


def args(index: int, text: str) -> dict[str, Any]:
    return {"tool_calls": [{"index": index, "function": {"arguments": text}}]}


PARALLEL = sse(
    {"content": "Two reads."},
    header(0, "call_a", "read_file"),
    args(0, '{"path": '),
    header(1, "call_b", "bash"),
    args(1, '{"command": "ls"}'),
    args(0, '"a.py"}'),
)
EXPECTED = [
    {
        "id": "call_a",
        "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
    },
    {
        "id": "call_b",
        "type": "function",
        "function": {"name": "bash", "arguments": '{"command": "ls"}'},
    },
]


def test_parallel_calls_are_assembled_by_index_however_the_bytes_are_cut():
    for cut in range(len(PARALLEL) + 1):  # every offset: a read boundary anywhere
        stream = ChatStream()
        done = stream.feed(PARALLEL[:cut], 1) or stream.feed(PARALLEL[cut:], 2)
        assert done, cut
        assert stream.tool_calls == EXPECTED, cut
        assert stream.text == "Two reads."
        assert stream.finish_reason == "tool_calls"
        assert stream.content_events == 6


def test_a_stream_without_calls_has_none():
    stream = ChatStream()
    assert stream.feed(sse({"content": "hi"}, finish="length"), 1)
    assert stream.tool_calls is None and stream.text == "hi"


def test_a_call_in_the_same_delta_as_content_is_not_lost():
    stream = ChatStream()
    both = {"content": "x", **header(0, "call_a", "bash")}
    assert stream.feed(sse(both, args(0, "{}")), 1)
    assert stream.text == "x"
    assert stream.tool_calls == [
        {"id": "call_a", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    ]


def test_reasoning_and_calls_count_for_ttft_but_not_for_the_first_text():
    wire = sse({"reasoning_content": "thinking"}, header(0, "call_a", "bash"), {"content": "ok"})
    events = wire.split(b"\n\n")
    stream = ChatStream()
    for now, event in enumerate(events, 1):  # one event a read, stamped 1, 2, 3, ...
        if stream.feed(event + b"\n\n", now):
            break
    assert stream.first_content_ns == 2  # the reasoning (event 1 is the role chunk)
    assert stream.first_text_ns == 4
    assert stream.reasoning_text == "thinking" and stream.text == "ok"
    assert list(stream.content_ns) == [2, 3, 4]


# --- the simulator's replies that call tools -------------------------------------------------


def test_tool_replies_are_exactly_as_long_as_asked_and_render_back_to_themselves():
    corpus = load_corpus("stdlib")
    profile = get_profile("fast", {"parallel_tool_call_share": 0.5})
    body = {"tools": TOOLS, "tool_choice": "required"}
    several = 0
    for n in [MIN_TOOL_REPLY_TOKENS, 49, 50, 64, 97, 128, 300, 1000]:
        for seed in range(6):
            reply = plan_tool_reply(corpus, profile, body, seed=seed, n_tokens=n, request_id="r")
            assert reply is not None, (n, seed)
            assert len(tokenizer.encode(reply.text)) == n
            message = {
                "role": "assistant",
                "content": reply.content,
                "tool_calls": reply.tool_calls(),
            }
            assert tokens.assistant_text(message) == reply.text
            several += len(reply.calls) > 1
    assert several > 0
    assert (
        plan_tool_reply(
            corpus, profile, body, seed=0, n_tokens=MIN_TOOL_REPLY_TOKENS - 1, request_id="r"
        )
        is None
    )
    assert (
        plan_tool_reply(
            corpus,
            profile,
            {"tools": TOOLS, "tool_choice": "none"},
            seed=0,
            n_tokens=200,
            request_id="r",
        )
        is None
    )


async def send(
    server: SimulatedServer, messages: list[dict[str, Any]], n: int, **body: Any
) -> ChatResponse:
    async with HttpChatClient(
        server.base_url, connections=1, timeouts=Timeouts(read_gap_s=30)
    ) as client:
        return await client.stream_chat(
            {
                "model": server.model,
                "messages": messages,
                "stream": True,
                "stream_options": {"include_usage": True},
                "tools": TOOLS,
                "max_tokens": n,
                "min_tokens": n,
                "ignore_eos": True,
                **body,
            }
        )


@pytest.mark.parametrize("n", [8, 47, 48, 64, 200, 600])
async def test_a_streamed_tool_reply_has_exactly_n_tokens(n):
    with SimulatedServer("fast", sim={"parallel_tool_call_share": 0.5}) as server:
        responses = await asyncio.gather(
            *(  # together: the engine batches them
                send(server, MESSAGES, n, seed=seed, tool_choice=choice)
                for seed in range(4)
                for choice in ("auto", "required")
            )
        )
    called = 0
    for r in responses:
        assert r.ok and r.usage is not None, r.error_message
        assert r.usage.completion_tokens == n
        if r.tool_calls is None:
            assert r.finish_reason == "length"
            assert len(tokenizer.encode(r.text)) == n
            continue
        called += 1
        assert r.finish_reason == "tool_calls"
        ids = [c["id"] for c in r.tool_calls]
        assert len(set(ids)) == len(ids) and all(i.startswith("call_") for i in ids)
        for call in r.tool_calls:
            assert call["function"]["name"] in ("read_file", "bash")
            assert isinstance(json.loads(call["function"]["arguments"]), dict)
        message = {"role": "assistant", "content": r.text, "tool_calls": r.tool_calls}
        assert len(tokenizer.encode(tokens.assistant_text(message))) == n
        assert r.first_text_ns is not None and r.first_content_ns == r.first_text_ns
    # "required" always calls once a call fits (4 of the 8); "auto" with the profile's share
    if n < MIN_TOOL_REPLY_TOKENS:
        assert called == 0
    else:
        assert called >= 4


async def test_sending_the_calls_back_is_cached_exactly(simulated_server):
    server = simulated_server
    n = 200
    first = await send(server, MESSAGES, n, tool_choice="required", seed=7)
    assert first.ok and first.tool_calls and first.usage is not None
    status, tokenized = post(root(server) + "/tokenize", {"messages": MESSAGES, "tools": TOOLS})
    assert status == 200
    assert tokenized["count"] == first.usage.prompt_tokens
    history = [
        *MESSAGES,
        {"role": "assistant", "content": first.text, "tool_calls": first.tool_calls},
        *(
            {"role": "tool", "tool_call_id": call["id"], "content": "ok\n"}
            for call in first.tool_calls
        ),
        {"role": "user", "content": "Go on."},
    ]
    second = await send(server, history, 32)
    assert second.ok and second.usage is not None
    shareable = tokenized["count"] + first.usage.completion_tokens
    assert second.usage.cached_tokens == (shareable - 1) // 16 * 16
    # and the next prompt is what the template says: tools, calls and tool answers counted
    _, again = post(root(server) + "/tokenize", {"messages": history, "tools": TOOLS})
    assert second.usage.prompt_tokens == again["count"]
    assert again["count"] == len(tokenizer.render(history, tools=TOOLS))


def test_tokenize_counts_the_tools(simulated_server):
    url = root(simulated_server) + "/tokenize"
    _, bare = post(url, {"messages": MESSAGES})
    _, with_tools = post(url, {"messages": MESSAGES, "tools": TOOLS})
    assert with_tools["count"] == bare["count"] + grown(MESSAGES[0]["content"])
    assert grown(MESSAGES[0]["content"]) > 50  # the schemas, not a token or two


async def test_reasoning_streams_apart_and_counts_in_the_completion():
    with SimulatedServer("fast", sim={"reasoning_tokens": 10}) as server:
        plain = await send(server, MESSAGES, 64, tools=None)
        off = await send(
            server, MESSAGES, 64, tools=None, chat_template_kwargs={"enable_thinking": False}
        )
    with SimulatedServer("fast") as server:
        asked = await send(
            server, MESSAGES, 100, tools=None, chat_template_kwargs={"enable_thinking": True}
        )
    for response, n, thinking in [(plain, 64, 10), (off, 64, 0), (asked, 100, 64)]:
        assert response.ok and response.usage is not None
        assert response.usage.completion_tokens == n
        assert len(tokenizer.encode(response.text)) == n - thinking
        assert response.first_content_ns is not None and response.first_text_ns is not None
        assert response.first_content_ns <= response.first_text_ns


def test_a_whole_response_carries_the_calls(simulated_server):
    status, reply = post(
        simulated_server.base_url + "/chat/completions",
        {
            "model": simulated_server.model,
            "messages": MESSAGES,
            "tools": TOOLS,
            "tool_choice": {"type": "function", "function": {"name": "bash"}},
            "max_tokens": 120,
            "ignore_eos": True,
        },
    )
    assert status == 200
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    calls = choice["message"]["tool_calls"]
    assert calls and {c["function"]["name"] for c in calls} == {"bash"}
    assert reply["usage"]["completion_tokens"] == 120
    assert len(tokenizer.encode(tokens.assistant_text(choice["message"]))) == 120


@settings(deadline=None, max_examples=60)
@given(
    pieces=st.lists(st.tuples(st.integers(0, 2), st.text(max_size=6)), max_size=12),
    cuts=st.lists(st.integers(0, 10**5), max_size=8),
)
def test_argument_pieces_join_by_index_whatever_their_order_and_cuts(pieces, cuts):
    deltas = [header(i, f"call_{i}", f"tool{i}") for i in range(3)]
    deltas += [args(index, piece) for index, piece in pieces]
    wire = sse(*deltas)
    points = sorted({c % (len(wire) + 1) for c in cuts})
    reads = [wire[a:b] for a, b in zip([0, *points], [*points, len(wire)], strict=True)]
    stream = ChatStream()
    assert any(stream.feed(read, now) for now, read in enumerate(reads, 1))
    assert stream.tool_calls == [
        {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": f"tool{i}", "arguments": "".join(p for j, p in pieces if j == i)},
        }
        for i in range(3)
    ]
