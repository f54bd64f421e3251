"""The streaming client against real sockets on 127.0.0.1: a raw asyncio HTTP server whose
every byte and pause we script, so chunk timing and connection behaviour are real."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from fakes import KERNEL_STAMP_SLACK_NS
from workloads.core.chat_stream import ChatStream
from workloads.model.errors import RequestError
from workloads.model.records import TurnRecord
from workloads.model.scenario import Timeouts
from workloads.runner.turn import RecordHead, record_from_response
from workloads.wire.client import AiohttpChatClient, partial_response
from workloads.wire.failures import retry_kinds

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[bool]]


def chunk(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def content(text: str) -> bytes:
    return chunk(
        {"id": "c1", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
    )


ROLE = chunk(
    {
        "id": "c1",
        "choices": [
            {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
        ],
    }
)
FINISH = chunk({"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
USAGE = chunk(
    {
        "id": "c1",
        "choices": [],
        "usage": {
            "prompt_tokens": 100,
            "completion_tokens": 3,
            "total_tokens": 103,
            "prompt_tokens_details": {"cached_tokens": 64},
        },
    }
)
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
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    await writer.drain()


async def send(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(b"%x\r\n%s\r\n" % (len(data), data))
    await writer.drain()


async def end_stream(writer: asyncio.StreamWriter) -> None:
    writer.write(b"0\r\n\r\n")
    await writer.drain()


class Served:
    """What a scripted server saw: its base URL, connections opened, requests read."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.connections = 0
        self.requests = 0
        self.writers: list[asyncio.StreamWriter] = []  # the server's side of each connection

    def __str__(self) -> str:
        return self.url


@asynccontextmanager
async def scripted_server(handler: Handler) -> AsyncIterator[Served]:
    """Serve ``handler(reader, writer, request_index_on_this_connection)``; it returns False
    to close the connection."""
    served = Served("")
    connections = served.writers

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        served.connections += 1
        index = 0
        try:
            for _ in range(100):  # bounded
                if await read_request(reader) is None:
                    break
                served.requests += 1
                if not await handler(reader, writer, index):
                    break
                index += 1
        finally:
            writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    served.url = f"http://127.0.0.1:{port}/v1"
    try:
        yield served
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

    async with scripted_server(handler) as s, AiohttpChatClient(s.url) as client:
        r = await client.stream_chat(BODY)
    assert r.ok and r.text == "abc" and r.finish_reason == "length" and r.saw_done
    assert r.usage is not None and r.usage.cached_tokens == 64
    assert r.first_content_ns - r.sent_ns >= 0.2e9
    assert r.headers_ns < r.first_content_ns
    assert r.last_content_ns - r.first_content_ns >= 0.1e9
    assert r.content_events == 3 and r.request_id == "c1"


async def full_stream(writer: asyncio.StreamWriter, *parts: bytes) -> None:
    await start_stream(writer)
    for part in parts:
        await send(writer, part)
    await end_stream(writer)


async def respond(writer: asyncio.StreamWriter, status: str, headers: str, body: bytes) -> None:
    writer.write(
        f"HTTP/1.1 {status}\r\n{headers}Content-Length: {len(body)}\r\n\r\n".encode() + body
    )
    await writer.drain()


async def one(handler: Handler, **options) -> tuple[Served, object]:
    async with scripted_server(handler) as s, AiohttpChatClient(s.url, **options) as client:
        return s, await client.stream_chat(BODY)


# --- never re-send silently ----------------------------------------------------------------


async def test_request_read_then_dropped_on_a_reused_connection_is_recorded_not_resent():
    # The server reads the second request on the kept-alive connection, then closes without
    # answering: it may have prefilled it, so sending it again would be a silent second request.
    async def handler(reader, writer, index):
        if index > 0:
            return False
        await full_stream(writer, content("x"), FINISH, USAGE, DONE)
        return True

    async with scripted_server(handler) as s, AiohttpChatClient(s.url, connections=1) as client:
        first = await client.stream_chat(BODY)
        second = await client.stream_chat(BODY)
    assert first.ok and first.resends == 0
    assert second.error_kind == "disconnected" and second.resends == 0
    assert "before any response" in (second.error_message or "")
    assert second.sent_ns is not None and second.error_ns is not None
    assert second.error_ns >= second.sent_ns
    assert s.requests == 2  # what the server counted is what the records say


async def test_after_a_dropped_kept_alive_connection_every_request_gets_its_own():
    async def handler(reader, writer, index):
        if index > 0:
            return False  # reads a second request on the connection, then drops it
        await full_stream(writer, content("x"), FINISH, USAGE, DONE)
        return True

    async with scripted_server(handler) as s, AiohttpChatClient(s.url, connections=1) as client:
        responses = [await client.stream_chat(BODY) for _ in range(5)]
    assert [r.error_kind for r in responses] == [None, "disconnected", None, None, None]
    assert s.requests == 5 and s.connections == 4  # one lost, then a connection each


async def test_server_closing_after_every_streamed_response_loses_no_request():
    # llama.cpp's pattern: the connection is closed right after a streamed response, with no
    # "Connection: close" to say so. The next request must find a live connection.
    async def handler(reader, writer, index):
        await full_stream(writer, content("x"), FINISH, USAGE, DONE)
        return False

    async with scripted_server(handler) as s, AiohttpChatClient(s.url, connections=1) as client:
        responses = [await client.stream_chat(BODY) for _ in range(30)]
    assert [r.error_kind for r in responses] == [None] * 30
    assert sum(r.resends for r in responses) == 0
    assert s.requests == 30


async def test_without_reuse_every_request_opens_its_own_connection():
    async def handler(reader, writer, index):
        await full_stream(writer, content("x"), FINISH, USAGE, DONE)
        return True

    async with (
        scripted_server(handler) as s,
        AiohttpChatClient(s.url, reuse_connections=False) as client,
    ):
        assert await client.open_connections(4) == 0  # nothing is opened ahead either
        assert s.connections == 0
        responses = [await client.stream_chat(BODY) for _ in range(3)]
    assert all(r.ok for r in responses) and s.connections == 3


async def test_kept_alive_connection_is_reused():
    async def handler(reader, writer, index):
        await full_stream(writer, content("x"), FINISH, USAGE, DONE)
        return True

    async with scripted_server(handler) as s, AiohttpChatClient(s.url) as client:
        responses = [await client.stream_chat(BODY) for _ in range(3)]
    assert all(r.ok for r in responses) and s.connections == 1


async def test_an_idle_connection_past_keepalive_is_not_reused():
    # Servers close idle connections after their keep-alive timeout (5 s for uvicorn and
    # cpp-httplib); a request sent on one as it closes is lost. We let them go first.
    async def handler(reader, writer, index):
        await full_stream(writer, content("x"), FINISH, USAGE, DONE)
        return True

    async with scripted_server(handler) as s, AiohttpChatClient(s.url, keepalive_s=0.1) as client:
        first = await client.stream_chat(BODY)
        await asyncio.sleep(0.3)
        second = await client.stream_chat(BODY)
    assert first.ok and second.ok and s.connections == 2 and second.resends == 0


# --- connections opened ahead, one address look-up ------------------------------------------


def count_lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The hosts this test's event loop is asked to look up (the real look-up still runs)."""
    loop = asyncio.get_running_loop()
    real = loop.getaddrinfo
    hosts: list[str] = []

    async def counted(host, *args, **kwargs):
        hosts.append(host)
        return await real(host, *args, **kwargs)

    monkeypatch.setattr(loop, "getaddrinfo", counted)
    return hosts


def held_until(count: int) -> tuple[Handler, asyncio.Event]:
    """A handler that answers no request until ``count`` have arrived, so each of ``count``
    concurrent requests needs a connection of its own."""
    arrived = asyncio.Event()
    seen = [0]

    async def handler(reader, writer, index):
        seen[0] += 1
        if seen[0] >= count:
            arrived.set()
        await arrived.wait()
        await full_stream(writer, content("x"), FINISH, USAGE, DONE)
        return True

    return handler, arrived


async def test_connections_opened_together_share_one_address_look_up(monkeypatch):
    lookups = count_lookups(monkeypatch)
    handler, _ = held_until(16)
    async with scripted_server(handler) as s, AiohttpChatClient(s.url, connections=16) as client:
        responses = await asyncio.gather(*(client.stream_chat(BODY) for _ in range(16)))
        later = await client.stream_chat(BODY)  # within the look-up's life: none again
        opened = client.connections_opened
    assert all(r.ok for r in responses) and later.ok
    assert s.connections == 16 and opened == 16
    assert lookups == ["127.0.0.1"]


async def test_open_connections_then_concurrent_requests_open_none(monkeypatch):
    lookups = count_lookups(monkeypatch)
    handler, _ = held_until(8)
    async with scripted_server(handler) as s, AiohttpChatClient(s.url, connections=8) as client:
        assert await client.open_connections(20) == 8  # at most ``connections``
        assert s.connections == 8 and s.requests == 0
        assert await client.open_connections(8) == 8  # topped up already: none more
        responses = await asyncio.gather(*(client.stream_chat(BODY) for _ in range(8)))
        opened = client.connections_opened
    assert all(r.ok and r.resends == 0 for r in responses)
    assert s.connections == 8 and s.requests == 8 and opened == 8
    assert lookups == ["127.0.0.1"]


async def test_a_preopened_connection_the_server_closed_is_not_used():
    # A server closes idle connections (uvicorn after 5 s): one opened ahead and closed
    # before its request is dropped like a kept-alive one, and the turn opens its own.
    async def handler(reader, writer, index):
        await full_stream(writer, content("x"), FINISH, USAGE, DONE)
        return True

    async with scripted_server(handler) as s, AiohttpChatClient(s.url) as client:
        assert await client.open_connections(1) == 1
        (server_side,) = s.writers
        server_side.close()
        for _ in range(10_000):  # passes of the loop until the client has read the close
            if await client.open_connections(0) == 0:
                break
            await asyncio.sleep(0)
        assert await client.open_connections(0) == 0
        response = await client.stream_chat(BODY)
    assert response.ok and response.resends == 0 and response.text == "x"
    assert s.connections == 2 and s.requests == 1  # the turn went on a new connection


async def test_opening_ahead_of_a_refusing_target_is_no_error():
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with AiohttpChatClient(f"http://127.0.0.1:{port}/v1") as client:
        assert await client.open_connections(4) == 0
        r = await client.stream_chat(BODY)  # the turn connects itself and records why not
    assert r.error_kind == "connect_refused", r.error_message


# --- retry_on ------------------------------------------------------------------------------


async def test_retry_on_429_honours_retry_after_and_records_every_attempt():
    async def handler(reader, writer, index):
        if index == 0:
            await respond(writer, "429 Too Many Requests", "Retry-After: 0.2\r\n", b"busy")
            return True
        await full_stream(writer, content("x"), FINISH, USAGE, DONE)
        return True

    s, r = await one(handler, retry_on={"429", "5xx"})
    assert r.ok and r.retries == 1 and s.requests == 2
    (attempt,) = r.attempts
    assert attempt.error_kind == "http_429" and attempt.retry_after_s == 0.2
    assert attempt.http_status == 429 and attempt.sent_ns is not None
    assert r.started_ns - attempt.error_ns >= 0.2e9  # waited as the server asked


async def test_retries_stop_at_max_retries_and_keep_the_last_failure():
    async def handler(reader, writer, index):
        await respond(writer, "503 Service Unavailable", "Retry-After: 0\r\n", b"down")
        return True

    s, r = await one(handler, retry_on={"5xx"}, max_retries=2)
    assert r.error_kind == "http_5xx" and r.retries == 2 and len(r.attempts) == 2
    assert s.requests == 3


async def test_no_retry_unless_asked():
    async def handler(reader, writer, index):
        await respond(writer, "429 Too Many Requests", "Retry-After: 0\r\n", b"busy")
        return True

    s, r = await one(handler)
    assert r.error_kind == "http_429" and r.retries == 0 and s.requests == 1


def test_retry_on_names_are_checked():
    assert retry_kinds({"429", "5xx"}) == {"http_429", "http_5xx"}
    assert retry_kinds(["connect_refused"]) == {"connect_refused"}
    with pytest.raises(ValueError, match="use 429, 4xx, 5xx"):
        retry_kinds({"500"})
    with pytest.raises(ValueError):
        retry_kinds({"cancelled"})


async def test_turn_cancelled_while_waiting_to_retry_keeps_the_attempt():
    async def handler(reader, writer, index):
        await respond(writer, "429 Too Many Requests", "Retry-After: 30\r\n", b"busy")
        return True

    async with scripted_server(handler) as s, AiohttpChatClient(s.url, retry_on={"429"}) as client:
        task = asyncio.create_task(client.stream_chat(BODY))
        for _ in range(200):  # until the 429 arrived
            await asyncio.sleep(0.01)
            if s.requests:
                break
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError) as caught:
            await task
    partial = partial_response(caught.value)
    assert partial is not None and partial.error_kind == "cancelled"
    assert [a.error_kind for a in partial.attempts] == ["http_429"]


# --- the error kinds, each from a real socket --------------------------------------------------


async def test_http_4xx_and_5xx_and_redirects_not_followed():
    async def handler_404(reader, writer, index):
        await respond(writer, "404 Not Found", "", b'{"error":"model not found"}')
        return True

    async def handler_502(reader, writer, index):
        await respond(writer, "502 Bad Gateway", "", b"upstream")
        return True

    async def handler_302(reader, writer, index):
        await respond(writer, "302 Found", "Location: /elsewhere\r\n", b"")
        return True

    _, r = await one(handler_404)
    assert r.error_kind == "http_4xx" and r.http_status == 404
    assert "model not found" in (r.error_message or "") and r.error_ns is not None
    _, r = await one(handler_502)
    assert r.error_kind == "http_5xx" and r.http_status == 502
    s, r = await one(handler_302)
    assert r.error_kind == "http_other" and r.http_status == 302 and s.requests == 1


async def test_a_200_html_page_is_not_an_event_stream():
    async def handler(reader, writer, index):
        await respond(
            writer,
            "200 OK",
            "Content-Type: text/html\r\n",
            b"<html><body>Please log in</body></html>",
        )
        return True

    _, r = await one(handler)
    assert r.error_kind == "not_event_stream" and r.http_status == 200
    assert "text/html" in (r.error_message or "") and "log in" in (r.error_message or "")


async def test_malformed_json_in_the_stream():
    async def handler(reader, writer, index):
        await full_stream(writer, content("a"), b"data: {not json\n\n", DONE)
        return True

    _, r = await one(handler)
    assert r.error_kind == "malformed" and r.text == "a" and r.first_content_ns is not None


async def test_a_response_that_is_not_http_is_malformed():
    async def handler(reader, writer, index):
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        await writer.drain()
        return False

    _, r = await one(handler)
    assert r.error_kind == "malformed"


async def test_error_event_inside_a_200_stream_keeps_what_came_before():
    async def handler(reader, writer, index):
        await start_stream(writer)
        await send(writer, content("par"))
        await send(writer, chunk({"error": {"message": "KV cache exhausted"}}))
        await end_stream(writer)
        return True

    _, r = await one(handler)
    assert r.error_kind == "error_event" and "KV cache exhausted" in (r.error_message or "")
    assert r.text == "par" and r.content_events == 1 and r.http_status == 200


async def test_named_error_event_is_an_error_event():
    async def handler(reader, writer, index):
        await full_stream(writer, content("a"), b"event: error\ndata: overloaded\n\n")
        return True

    _, r = await one(handler)
    assert r.error_kind == "error_event" and "overloaded" in (r.error_message or "")


async def test_stream_ended_without_done_is_truncated_even_after_the_finish_reason():
    async def handler(reader, writer, index):
        await full_stream(writer, content("a"), content("b"), FINISH)
        return True

    _, r = await one(handler)
    assert r.error_kind == "truncated" and not r.saw_done
    assert r.text == "ab" and r.finish_reason == "length" and r.content_events == 2
    record = record_from_response(
        r,
        RecordHead(repetition=0, warmup=False, session=0, turn=1, configured_prior_tokens=0),
        output_tokens=2,
        exact_output=False,
        shareable_tokens=None,
        shareable_exact=False,
    )
    assert record.status == "error" and not record.valid and record.error_kind == "truncated"


async def test_disconnect_mid_stream_keeps_every_stamp_and_the_partial_text():
    async def handler(reader, writer, index):
        await start_stream(writer)
        await send(writer, ROLE)
        await send(writer, content("ha"))
        await asyncio.sleep(0.05)
        await send(writer, content("lf"))
        await asyncio.sleep(0.05)
        return False  # close without finishing the chunked body

    _, r = await one(handler)
    assert r.error_kind == "disconnected" and r.text == "half" and r.resends == 0
    assert "after the response began" in (r.error_message or "")
    assert r.sent_ns <= r.headers_ns <= r.first_content_ns < r.last_content_ns < r.error_ns
    assert r.content_events == 2 and r.request_id == "c1" and r.http_status == 200


async def test_stalled_stream_is_a_read_stall():
    async def handler(reader, writer, index):
        await start_stream(writer)
        await send(writer, content("x"))
        await asyncio.sleep(5)
        return False

    _, r = await one(handler, timeouts=Timeouts(read_gap_s=0.3))
    assert r.error_kind == "read_stall" and r.text == "x"
    # The read gap counts from the last read's stamp; error_ns is stamped when the request's
    # task wakes, a moment after the timer fired.
    assert r.error_ns - r.last_content_ns >= 0.3e9


async def test_a_trickling_stream_meets_the_turn_deadline():
    async def handler(reader, writer, index):
        await start_stream(writer)
        for _ in range(100):
            await send(writer, content("x"))
            await asyncio.sleep(0.05)
        return False

    _, r = await one(handler, timeouts=Timeouts(read_gap_s=5, turn_s=0.5))
    assert r.error_kind == "turn_deadline" and r.content_events >= 2
    assert r.error_ns - r.started_ns >= 0.5e9 and r.first_content_ns is not None


async def test_refused_connection():
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with AiohttpChatClient(f"http://127.0.0.1:{port}/v1") as client:
        r = await client.stream_chat(BODY)
    assert r.error_kind == "connect_refused" and r.sent_ns is None and r.error_ns is not None


async def test_connect_timeout_on_a_full_accept_queue():
    # A listener that never accepts, with its backlog filled: Linux drops further SYNs, so the
    # connection attempt hangs until the connect timeout.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        fillers = []
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))  # in progress: no exception, no wait
            fillers.append(filler)
        try:
            async with AiohttpChatClient(
                f"http://127.0.0.1:{port}/v1", timeouts=Timeouts(connect_s=0.3)
            ) as client:
                r = await client.stream_chat(BODY)
        finally:
            for filler in fillers:
                filler.close()
    assert r.error_kind == "connect_timeout" and r.sent_ns is None


async def test_unresolvable_host_is_name_resolution():
    async with AiohttpChatClient(
        "http://no-such-host.invalid/v1", timeouts=Timeouts(connect_s=5)
    ) as client:
        r = await client.stream_chat(BODY)
    assert r.error_kind == "name_resolution", r.error_message


async def test_tls_to_a_plain_http_server():
    async def handler(reader, writer, index):
        return False

    async def plain(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(100)  # the ClientHello
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(plain, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with AiohttpChatClient(f"https://127.0.0.1:{port}/v1") as client:
            r = await client.stream_chat(BODY)
    finally:
        server.close()
        await server.wait_closed()
    assert r.error_kind == "tls", r.error_message


async def test_cancelled_turn_keeps_what_it_measured():
    async def handler(reader, writer, index):
        await start_stream(writer)
        await send(writer, content("so far"))
        await asyncio.sleep(5)
        return False

    async with scripted_server(handler) as s, AiohttpChatClient(s.url) as client:
        task = asyncio.create_task(client.stream_chat(BODY))
        for _ in range(200):
            await asyncio.sleep(0.01)
            if s.requests:
                break
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError) as caught:
            await task
    r = partial_response(caught.value)
    assert r is not None and r.error_kind == "cancelled" and r.http_status == 200
    assert r.text == "so far" and r.content_events == 1
    assert r.sent_ns <= r.headers_ns <= r.first_content_ns < r.error_ns
    record = record_from_response(
        r,
        RecordHead(repetition=0, warmup=False, session=0, turn=1, configured_prior_tokens=0),
        output_tokens=2,
        exact_output=False,
        shareable_tokens=None,
        shareable_exact=False,
    )
    assert record.status == "incomplete" and record.error_kind == "cancelled"
    assert record.first_content_ns == r.first_content_ns and record.error_ns == r.error_ns


async def test_early_stop_is_ok_but_not_valid_for_an_exact_length_turn():
    stop = chunk({"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    usage = chunk(
        {
            "id": "c1",
            "choices": [],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
        }
    )

    async def handler(reader, writer, index):
        await full_stream(writer, content("a"), content("b"), stop, usage, DONE)
        return True

    _, r = await one(handler)
    assert r.ok and r.finish_reason == "stop"
    record = record_from_response(
        r,
        RecordHead(repetition=0, warmup=False, session=0, turn=1, configured_prior_tokens=0),
        output_tokens=8,
        exact_output=True,
        shareable_tokens=None,
        shareable_exact=False,
    )
    assert record.status == "ok" and record.error_kind is None and not record.valid


def test_records_written_with_the_old_kinds_still_load():
    base = dict(
        repetition=0,
        warmup=False,
        session=0,
        turn=1,
        status="error",
        configured_prior_tokens=0,
        started_ns=0,
    )
    cases = [
        ("http", 429, "HTTP 429: slow", "http_429"),
        ("http", 404, "HTTP 404: nope", "http_4xx"),
        ("http", 500, "HTTP 500: boom", "http_5xx"),
        ("protocol", 200, "error in stream: KV", "error_event"),
        ("protocol", 200, "malformed JSON in stream: x", "malformed"),
        ("timeout", 200, "no data for too long: Timeout on reading data from socket", "read_stall"),
        ("timeout", None, "request exceeded 600 s", "turn_deadline"),
        (
            "connect",
            None,
            "cannot connect to http://h/v1/chat/completions: Cannot connect to "
            "host h:1 ssl:default [Connect call failed ('127.0.0.1', 1)]",
            "connect_refused",
        ),
        ("connect", None, "ServerDisconnectedError: Server disconnected", "disconnected"),
        ("disconnected", 200, "stream broken", "disconnected"),
        ("cancelled", None, None, "cancelled"),
    ]
    for old, status, message, new in cases:
        line = json.dumps(
            {**base, "error_kind": old, "http_status": status, "error_message": message}
        )
        assert TurnRecord.model_validate_json(line).error_kind == new, old


def streamed(data: str) -> ChatStream:
    """A stream fed one event carrying ``data``."""
    stream = ChatStream()
    stream.feed(b"data: " + data.encode() + b"\n\n", 1)
    return stream


def test_request_error_kinds_are_the_closed_set():
    with pytest.raises(RequestError):
        streamed("[1, 2]")


def test_usage_null_on_ordinary_chunks_is_not_usage():
    parsed = streamed('{"choices":[{"delta":{"content":"x"}}],"usage":null}')
    assert parsed.usage is None and parsed.content_events == 1


def test_cached_tokens_absent_is_none_not_zero():
    parsed = streamed('{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}')
    assert parsed.usage is not None and parsed.usage.cached_tokens is None


def test_reasoning_and_tool_call_deltas_count_as_content():
    assert streamed('{"choices":[{"delta":{"reasoning_content":"hm"}}]}').content_events
    assert streamed('{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}').content_events
    assert not streamed('{"choices":[{"delta":{"role":"assistant"}}]}').content_events


def test_odd_but_valid_json_shapes_do_not_raise():
    for data in (
        '{"choices":[{"delta":"x"}]}',
        '{"choices":{"0":{}}}',
        '{"choices":[{"delta":{"content":[{"type":"text","text":"hi"}]}}]}',
        '{"choices":[],"usage":{"prompt_tokens":"n/a","completion_tokens":true}}',
        '{"choices":[{"delta":{"content":5},"finish_reason":7}],"id":3}',
    ):
        streamed(data)
    parts = streamed('{"choices":[{"delta":{"content":[{"type":"text","text":"hi"}]}}]}')
    assert parts.text == "hi" and parts.content_events == 1
    usage = streamed('{"choices":[],"usage":{"prompt_tokens":"n/a"}}').usage
    assert usage is not None
    assert usage.prompt_tokens is None and usage.completion_tokens is None  # unknown, not 0


async def test_no_ttft_is_shorter_than_the_servers_own_read_to_first_token():
    # Client and server in one process (the simulated server runs on a thread): one clock,
    # and one CPU at a time under the GIL, the case where a stamp taken after the write
    # came after the server had already read the request (issue 19: 4-13% of requests).
    # sent_ns is stamped before the write, so it precedes the server's arrival stamp, and
    # every TTFT covers the server's own time from reading the request to its first token.
    from urllib.request import urlopen

    from workloads.servers.simulated import SimulatedServer

    async with SimulatedServer("fast", debug=True) as server:
        body = {
            "model": server.model,
            "stream": True,
            "max_tokens": 4,
            "messages": [{"role": "user", "content": "hi"}],
        }
        async with AiohttpChatClient(server.base_url, connections=8) as client:
            responses = []
            for _ in range(5):  # 5 rounds of 8 at once: new and kept-alive connections
                responses += await asyncio.gather(*(client.stream_chat(body) for _ in range(8)))

        def truths() -> dict[str, dict]:
            with urlopen(f"{server.base_url.removesuffix('/v1')}/debug/requests") as answer:
                return {t["request_id"]: t for t in json.load(answer)["requests"]}

        truth = await asyncio.to_thread(truths)
    assert len(responses) == 40
    for r in responses:
        assert r.ok, r.error_message
        assert r.sent_ns is not None and r.written_ns is not None and r.sent_ns <= r.written_ns
        assert r.first_content_ns is not None and r.request_id is not None
        t = truth[r.request_id]
        # first_token_ns: the engine step that made the first token ended, before its write
        # (first_written_ns is stamped after the write returns: a read can come before it).
        assert r.sent_ns <= t["arrival_ns"]
        assert r.first_content_ns >= t["first_token_ns"] - KERNEL_STAMP_SLACK_NS
        assert (
            r.first_content_ns - r.sent_ns
            >= t["first_token_ns"] - t["arrival_ns"] - KERNEL_STAMP_SLACK_NS
        )
