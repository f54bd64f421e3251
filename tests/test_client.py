"""The streaming client against real sockets on 127.0.0.1: a raw asyncio HTTP server whose
every byte and pause we script, so chunk timing and connection behaviour are real."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from workloads.model.scenario import Timeouts
from workloads.wire.client import AiohttpChatClient, parse_chunk

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[bool]]


def chunk(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def content(text: str) -> bytes:
    return chunk({"id": "c1", "choices": [{"index": 0, "delta": {"content": text},
                                            "finish_reason": None}]})


ROLE = chunk({"id": "c1", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                       "finish_reason": None}]})
FINISH = chunk({"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
USAGE = chunk({"id": "c1", "choices": [], "usage": {
    "prompt_tokens": 100, "completion_tokens": 3, "total_tokens": 103,
    "prompt_tokens_details": {"cached_tokens": 64}}})
DONE = b"data: [DONE]\n\n"


async def read_request(reader: asyncio.StreamReader) -> bytes | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return await reader.readexactly(length)


async def start_stream(writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n")
    await writer.drain()


async def send(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(b"%x\r\n%s\r\n" % (len(data), data))
    await writer.drain()


async def end_stream(writer: asyncio.StreamWriter) -> None:
    writer.write(b"0\r\n\r\n")
    await writer.drain()


@asynccontextmanager
async def scripted_server(handler: Handler) -> AsyncIterator[str]:
    """Serve ``handler(reader, writer, request_index_on_this_connection)``; it returns False
    to close the connection."""
    connections: list[asyncio.StreamWriter] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        index = 0
        try:
            for _ in range(100):  # bounded
                if await read_request(reader) is None:
                    break
                if not await handler(reader, writer, index):
                    break
                index += 1
        finally:
            writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.close()
        for w in connections:
            w.close()
        await server.wait_closed()


BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


async def test_ttft_starts_at_first_content_not_the_role_chunk():
    async def handler(reader, writer, index):
        await start_stream(writer)
        await send(writer, ROLE)
        await asyncio.sleep(0.2)
        for text in ("a", "b", "c"):
            await send(writer, content(text))
            await asyncio.sleep(0.05)
        for part in (FINISH, USAGE, DONE):
            await send(writer, part)
        await end_stream(writer)
        return True

    async with scripted_server(handler) as url, AiohttpChatClient(url) as client:
        r = await client.stream_chat(BODY)
    assert r.ok and r.text == "abc" and r.finish_reason == "length" and r.saw_done
    assert r.usage is not None and r.usage.cached_tokens == 64
    assert r.first_content_ns - r.sent_ns >= 0.2e9
    assert r.headers_ns < r.first_content_ns
    assert r.last_content_ns - r.first_content_ns >= 0.1e9
    assert r.content_events == 3 and r.request_id == "c1"


async def test_dead_pooled_connection_is_resent_not_an_error():
    # Like llama.cpp's server: the connection is kept alive after a streamed response, but
    # the next request on it is dropped before any response byte.
    async def handler(reader, writer, index):
        if index > 0:
            return False
        await start_stream(writer)
        for part in (content("x"), FINISH, USAGE, DONE):
            await send(writer, part)
        await end_stream(writer)
        return True

    async with scripted_server(handler) as url, AiohttpChatClient(url, connections=1) as client:
        first = await client.stream_chat(BODY)
        second = await client.stream_chat(BODY)
    assert first.ok and first.resends == 0
    assert second.ok, second.error_message
    assert second.resends == 1


async def test_http_429_keeps_status_and_retry_after():
    async def handler(reader, writer, index):
        writer.write(b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\n"
                     b"Content-Length: 9\r\n\r\nslow down")
        await writer.drain()
        return True

    async with scripted_server(handler) as url, AiohttpChatClient(url) as client:
        r = await client.stream_chat(BODY)
    assert r.error_kind == "http" and r.http_status == 429 and r.retry_after_s == 3.0
    assert "slow down" in (r.error_message or "")


async def test_error_object_inside_a_200_stream_is_a_protocol_error():
    async def handler(reader, writer, index):
        await start_stream(writer)
        await send(writer, content("par"))
        await send(writer, chunk({"error": {"message": "KV cache exhausted"}}))
        await end_stream(writer)
        return True

    async with scripted_server(handler) as url, AiohttpChatClient(url) as client:
        r = await client.stream_chat(BODY)
    assert r.error_kind == "protocol" and "KV cache exhausted" in (r.error_message or "")
    assert r.text == "par"  # what came before the error is kept


async def test_disconnect_mid_stream_keeps_partial_text():
    async def handler(reader, writer, index):
        await start_stream(writer)
        await send(writer, content("half"))
        return False  # close without finishing the chunked body

    async with scripted_server(handler) as url, AiohttpChatClient(url) as client:
        r = await client.stream_chat(BODY)
    assert r.error_kind == "disconnected" and r.text == "half" and r.resends == 0


async def test_stalled_stream_times_out_on_the_read_gap():
    async def handler(reader, writer, index):
        await start_stream(writer)
        await send(writer, content("x"))
        await asyncio.sleep(5)
        return False

    async with scripted_server(handler) as url, AiohttpChatClient(
        url, timeouts=Timeouts(read_gap_s=0.3)
    ) as client:
        r = await client.stream_chat(BODY)
    assert r.error_kind == "timeout"


async def test_refused_connection_is_a_connect_error():
    async with AiohttpChatClient("http://127.0.0.1:9/v1", timeouts=Timeouts(connect_s=2)) as client:
        r = await client.stream_chat(BODY)
    assert r.error_kind == "connect"


def test_usage_null_on_ordinary_chunks_is_not_usage():
    parsed = parse_chunk('{"choices":[{"delta":{"content":"x"}}],"usage":null}')
    assert parsed.usage is None and parsed.has_content


def test_cached_tokens_absent_is_none_not_zero():
    parsed = parse_chunk('{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}')
    assert parsed.usage is not None and parsed.usage.cached_tokens is None


def test_reasoning_and_tool_call_deltas_count_as_content():
    assert parse_chunk('{"choices":[{"delta":{"reasoning_content":"hm"}}]}').has_content
    assert parse_chunk('{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}').has_content
    assert not parse_chunk('{"choices":[{"delta":{"role":"assistant"}}]}').has_content


def test_odd_but_valid_json_shapes_do_not_raise():
    for data in (
        '{"choices":[{"delta":"x"}]}',
        '{"choices":{"0":{}}}',
        '{"choices":[{"delta":{"content":[{"type":"text","text":"hi"}]}}]}',
        '{"choices":[],"usage":{"prompt_tokens":"n/a","completion_tokens":true}}',
        '{"choices":[{"delta":{"content":5},"finish_reason":7}],"id":3}',
    ):
        chunk = parse_chunk(data)
        assert chunk.error is None
    parts = parse_chunk('{"choices":[{"delta":{"content":[{"type":"text","text":"hi"}]}}]}')
    assert parts.content == "hi" and parts.has_content
    usage = parse_chunk('{"choices":[],"usage":{"prompt_tokens":"n/a"}}').usage
    assert usage is not None
    assert usage.prompt_tokens is None and usage.completion_tokens is None  # unknown, not 0
