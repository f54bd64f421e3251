"""The streamed response's HTTP/1.1 framing (wire/http1.py under wire/stream.py): raw
loopback servers write every byte, split where the test says, and the client must read the
same stream whatever the split; plus the pure parser at every split of every shape (of the
40-round bulk responses: every offset class of a round, see ``cuts``)."""

from __future__ import annotations

import asyncio
import json
import time
import zlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

from fakes import KERNEL_STAMP_SLACK_NS
from workloads.model.scenario import Timeouts
from workloads.wire import stream
from workloads.wire.client import HttpChatClient
from workloads.wire.http1 import MAX_HEAD_BYTES, MalformedHTTP, ResponseParser


def event(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def delta(text: str) -> bytes:
    return event(
        {"id": "c1", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
    )


EVENTS = [
    event({"id": "c1", "choices": [{"index": 0, "delta": {"role": "assistant"}}]}),
    delta("Hel"),
    delta("lo"),
    delta(" wor"),
    delta("ld"),
    event({"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}),
    event({"id": "c1", "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 4}}),
    b"data: [DONE]\n\n",
]
SSE = b"".join(EVENTS)
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"


def chunked(*payloads: bytes, ext: bytes = b"", trailer: bytes = b"") -> bytes:
    body = b"".join(b"%x%s\r\n%s\r\n" % (len(p), ext, p) for p in payloads)
    return HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + body + b"0\r\n" + trailer + b"\r\n"


def with_length(body: bytes) -> bytes:
    return HEAD + b"Content-Length: %d\r\n\r\n" % len(body) + body


def until_close(body: bytes) -> bytes:
    return HEAD + b"\r\n" + body


# --- the pure parser, split at every offset ---------------------------------------------------


def parse(pieces: list[bytes]) -> tuple[bytes, ResponseParser]:
    parser, body = ResponseParser(), b""
    for piece in pieces:
        body += parser.feed(piece)
    return body, parser


@pytest.mark.parametrize(
    "response",
    [
        chunked(*EVENTS),
        chunked(SSE),
        chunked(*EVENTS, ext=b' ;name=value;q="x y"'),
        chunked(*EVENTS, trailer=b"X-Checksum: 1\r\nX-Other: 2\r\n"),
        with_length(SSE),
        HEAD
        + b"Transfer-Encoding: chunked\r\n\r\n"
        + b"".join(b"%X\r\n%s\r\n" % (len(e), e) for e in EVENTS * 40)
        + b"0\r\n\r\n",  # bulk path
        HEAD
        + b"Transfer-Encoding: chunked\r\n\r\n"
        + b"".join(  # bulk, broken by a new size
            b"%x%s\r\n%s\r\n" % (len(e), b";x" if i == 150 else b"", e)
            for i, e in enumerate(EVENTS * 40)
        )
        + b"0\r\n\r\n",
    ],
)
def test_every_split_of_a_response_gives_the_same_body(response):
    whole, parser = parse([response])
    assert parser.complete and parser.head is not None and parser.head.status == 200
    expected = whole
    assert SSE in expected or expected == SSE * 40
    for cut in cuts(response):
        body, parser = parse([response[:cut], response[cut:]])
        assert body == expected and parser.complete and not parser.extra, cut
    for cut in cuts(response, step=7):  # three pieces: a size line split twice
        body, _ = parse([response[:cut], response[cut : cut + 3], response[cut + 3 :]])
        assert body == expected, cut


# One round of EVENTS as chunks: the bulk responses above repeat it 40 times.
ROUND = sum(len(b"%x\r\n%s\r\n" % (len(e), e)) for e in EVENTS)


def cuts(response: bytes, step: int = 1) -> list[int]:
    """Offsets to split ``response`` at (every ``step``-th). A response of a few rounds of
    EVENTS: all of them. A bulk one (40 rounds): all of them in its head and first two
    rounds, in the two rounds around a chunk whose size line differs, and in its last two
    rounds and end; every 31st elsewhere. Its rounds repeat byte for byte, so each offset
    within a round is still a cut; splitting a 30 KB response at all 30 K offsets re-parses
    it 30 K times (most of this file's time, for no offset class more)."""
    everywhere = range(0, len(response) + 1, step)
    if len(response) <= 4 * ROUND:
        return list(everywhere)
    body = response.index(b"\r\n\r\n") + 4
    windows = [(0, body + 2 * ROUND), (len(response) - 2 * ROUND, len(response) + 1)]
    odd = response.find(b";x\r\n")
    if odd >= 0:
        windows.append((odd - ROUND, odd + ROUND))
    return [
        cut
        for cut in everywhere
        if cut % 31 == 0 or any(start <= cut < end for start, end in windows)
    ]


def test_a_body_until_close_ends_with_the_connection():
    body, parser = parse([until_close(SSE)[:50], until_close(SSE)[50:]])
    assert body == SSE and not parser.complete
    assert parser.eof() and parser.complete
    assert parser.head is not None and not parser.head.keep_alive


@pytest.mark.parametrize("size_line", [b"zz", b"0x5", b"+5", b"5_0", b" 5", b"", b"1" * 17])
def test_a_malformed_chunk_size_is_malformed(size_line):
    response = HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + size_line + b"\r\nhello\r\n"
    with pytest.raises(MalformedHTTP, match=r"(?i)chunk size"):
        parse([response])


def test_a_chunk_without_its_crlf_is_malformed_after_the_body_before_it():
    body, parser = parse([HEAD + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n"])
    assert body == b"hello" and parser.error is not None
    assert "after chunk data" in str(parser.error)
    with pytest.raises(MalformedHTTP, match="after chunk data"):
        parser.feed(b"0\r\n\r\n")


def test_informational_responses_are_skipped_and_heads_checked():
    body, parser = parse([b"HTTP/1.1 100 Continue\r\n\r\n" + with_length(b"data: x\n\n")])
    assert body == b"data: x\n\n" and parser.informational == 1
    for bad in (
        b"HTTP/2 200 OK\r\n\r\n",
        b"HTTP/1.1 20 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
        b"ICY 200 OK\r\n\r\n",
        b"HTTP/2.0 200 OK\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX: " + b"x" * MAX_HEAD_BYTES,
    ):
        with pytest.raises(MalformedHTTP):
            parse([bad])
    with pytest.raises(MalformedHTTP, match="Content-Length"):
        parse([b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"])


def test_a_folded_header_is_one_value_and_a_nul_is_malformed():
    # obs-fold (RFC 9112 5.2): aiohttp and httpx read it; a server behind an old proxy sends it
    folded = b"HTTP/1.1 200 OK\r\nX-Note: first\r\n  second\r\n\tthird\r\n"
    for cut in range(1, len(folded) + 1):  # the fold split across reads, anywhere
        body, parser = parse(
            [
                folded[:cut],
                folded[cut:] + b"Content-Type: text/event-stream\r\n"
                b"Content-Length: 9\r\n\r\ndata: x\n\n",
            ]
        )
        assert parser.head is not None and parser.complete, cut
        assert parser.head.header("x-note") == "first second third"
        assert parser.head.header("content-type") == "text/event-stream"
        assert body == b"data: x\n\n"
    with pytest.raises(MalformedHTTP, match="NUL"):
        parse([b"HTTP/1.1 200 OK\r\nX: a\x00b\r\n\r\n"])


def test_both_framings_read_by_transfer_encoding_and_the_connection_not_reused():
    body, parser = parse(
        [HEAD + b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n5\r\nhello\r\n0\r\n\r\n"]
    )
    assert body == b"hello" and parser.complete
    assert parser.head is not None and not parser.head.keep_alive


def test_bytes_after_the_end_are_extra_not_body():
    for after in (b"HTTP/1.1 200 OK\r\n\r\n", b"garbage"):
        body, parser = parse([with_length(b"data: x\n\n") + after])
        assert body == b"data: x\n\n" and parser.complete and parser.extra
        assert parser.feed(b"more") == b""


def test_keep_alive_follows_the_version_and_connection_header():
    def head(raw: bytes) -> bool:
        _, parser = parse([raw + b"Content-Length: 0\r\n\r\n"])
        assert parser.head is not None
        return parser.head.keep_alive

    assert head(b"HTTP/1.1 200 OK\r\n")
    assert not head(b"HTTP/1.1 200 OK\r\nConnection: close\r\n")
    assert not head(b"HTTP/1.0 200 OK\r\n")
    assert head(b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\n")


# --- the client, against raw loopback servers -----------------------------------------------


@asynccontextmanager
async def raw_server(
    pieces_for: Callable[[int], list[bytes]],
    *,
    close: bool = False,
    heads: list[bytes] | None = None,
    written: list[int] | None = None,
) -> AsyncIterator[tuple[str, list[int]]]:
    """Answer request i of a connection with ``pieces_for(i)``, each piece a write of its
    own with a pause before the next (so each is a read of its own); ``close`` closes the
    connection after every response. Yields the base URL and a list of connections per
    request; keeps the request heads in ``heads`` and each piece's write time in
    ``written``."""
    served: list[int] = []
    connections = 0
    handlers: set[asyncio.Task[None]] = set()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        try:
            for _ in range(1000):  # bounded
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                served.append(connections)
                if heads is not None:
                    heads.append(head)
                pieces = pieces_for(len(served) - 1)
                for n, piece in enumerate(pieces, 1):
                    if written is not None:
                        written.append(time.perf_counter_ns())
                    writer.write(piece)
                    await writer.drain()
                    if n < len(pieces):  # the next piece a read of its own
                        await asyncio.sleep(0.002)
                if close:
                    return
        except asyncio.CancelledError:
            return  # the test is over: its server stops mid-response
        finally:
            writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1", served
    finally:
        server.close()
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers)
        await server.wait_closed()


BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def assert_whole(r) -> None:
    assert r.ok, r.error_message
    assert r.text == "Hello world" and r.content_events == 4 and r.saw_done
    assert r.finish_reason == "length" and r.usage is not None and r.usage.prompt_tokens == 7


async def test_chunked_stream_split_at_every_byte_offset_on_one_kept_alive_connection(
    monkeypatch,
):
    # ~800 requests back to back: without the pool's settle pause before a connection that
    # just came back is reused (5 ms, for servers that close after a stream; not what this
    # test is about), they take ~2 s, not 6.
    monkeypatch.setattr(stream, "SETTLE_S", 0.0)
    response = chunked(*EVENTS)

    def pieces(i: int) -> list[bytes]:
        return [response[:i], response[i:]] if 0 < i < len(response) else [response]

    async with raw_server(pieces) as (url, served), HttpChatClient(url) as client:
        for _ in range(len(response)):
            assert_whole(await client.stream_chat(BODY))
    # Every response is read to its end and its connection reused; a cut after [DONE] ends
    # the turn before the body's last bytes came, so the next request opens another.
    done = response.index(b"data: [DONE]") + len(b"data: [DONE]\n\n")
    assert served[:done] == [1] * done
    assert max(served) <= 1 + len(response) - done


async def test_chunk_extensions_trailers_and_size_lines_split_across_reads():
    response = chunked(*EVENTS, ext=b";ext=1", trailer=b"X-Trailer: yes\r\n")
    at = response.index(b";ext=1") - 1  # inside the first size line

    def pieces(i: int) -> list[bytes]:
        return [response[:at], response[at : at + 2], response[at + 2 :]]

    async with raw_server(pieces) as (url, served), HttpChatClient(url) as client:
        for _ in range(3):
            assert_whole(await client.stream_chat(BODY))
    assert served == [1, 1, 1]


async def test_content_length_body_and_the_connection_is_reused():
    response = with_length(SSE)
    async with (
        raw_server(lambda i: [response[:40], response[40:]]) as (url, served),
        HttpChatClient(url) as client,
    ):
        for _ in range(3):
            assert_whole(await client.stream_chat(BODY))
    assert served == [1, 1, 1]


async def test_body_until_close_is_whole_and_the_next_request_gets_a_new_connection():
    response = until_close(SSE)
    async with (
        raw_server(lambda i: [response[:90], response[90:]], close=True) as (url, served),
        HttpChatClient(url) as client,
    ):
        for _ in range(3):
            assert_whole(await client.stream_chat(BODY))
    assert served == [1, 2, 3]


async def test_done_before_the_end_of_the_body_then_the_connection_is_reused():
    # [DONE] arrives, the terminating chunk a moment later (uvicorn writes it on its own):
    # the turn ends at [DONE] and the connection, read to the body's end, is reused.
    response = chunked(*EVENTS)
    end = len(response) - len(b"0\r\n\r\n")
    async with (
        raw_server(lambda i: [response[:end], response[end:]]) as (url, served),
        HttpChatClient(url) as client,
    ):
        first = await client.stream_chat(BODY)
        await asyncio.sleep(0.05)
        second = await client.stream_chat(BODY)
    assert_whole(first)
    assert_whole(second)
    assert first.done_ns is not None and served == [1, 1]


@pytest.mark.parametrize("size_line", [b"zz", b"0x1f", b"-1"])
async def test_malformed_chunk_size_is_malformed(size_line):
    response = (
        HEAD
        + b"Transfer-Encoding: chunked\r\n\r\n"
        + (b"%x\r\n%s\r\n" % (len(EVENTS[1]), EVENTS[1]) + size_line + b"\r\n" + EVENTS[2])
    )
    async with raw_server(lambda i: [response]) as (url, _), HttpChatClient(url) as client:
        r = await client.stream_chat(BODY)
    assert r.error_kind == "malformed" and "chunk size" in (r.error_message or "").lower()
    assert r.text == "Hel" and r.content_events == 1  # what came before is kept


def compressed(wbits: int) -> list[bytes]:
    """The event stream compressed as one body, flushed after every event: each piece is
    a read that decodes to whole events."""
    encoder = zlib.compressobj(wbits=wbits)
    pieces = [encoder.compress(e) + encoder.flush(zlib.Z_SYNC_FLUSH) for e in EVENTS]
    pieces[-1] += encoder.flush()
    return pieces


@pytest.mark.parametrize(
    ("coding", "wbits"),
    [
        ("gzip", 16 + zlib.MAX_WBITS),
        ("deflate", zlib.MAX_WBITS),
        ("deflate", -zlib.MAX_WBITS),
    ],
)
async def test_a_compressed_event_stream_is_decoded_read_by_read(coding, wbits):
    pieces = compressed(wbits)
    response = [
        HEAD + b"Content-Encoding: %s\r\nTransfer-Encoding: chunked\r\n\r\n" % (coding.encode())
    ] + [b"%x\r\n%s\r\n" % (len(p), p) for p in pieces]
    response[-1] += b"0\r\n\r\n"
    heads: list[bytes] = []
    written: list[int] = []
    async with (
        raw_server(lambda i: response, heads=heads, written=written) as (url, served),
        HttpChatClient(url) as client,
    ):
        for _ in range(2):
            assert_whole(await client.stream_chat(BODY))
        r = await client.stream_chat(BODY)
    assert served == [1, 1, 1]  # read to its end, and reused
    assert all(b"\r\naccept-encoding: identity\r\n" in h.lower() for h in heads)
    # Each content chunk is stamped at its own read's arrival, after the server wrote it (but
    # for the kernel stamp's slack), not at the end of the body: pieces 1-4 of the third
    # response carry the four content deltas.
    third = [w - KERNEL_STAMP_SLACK_NS for w in written[-len(response) :]]
    assert r.content_ns is not None
    assert [t >= w for t, w in zip(r.content_ns, third[2:6], strict=True)] == [True] * 4
    assert r.done_ns is not None and r.done_ns >= third[8]


async def test_the_request_target_is_percent_encoded():
    heads: list[bytes] = []
    async with (
        raw_server(lambda i: [chunked(*EVENTS)], heads=heads) as (url, _),
        HttpChatClient(url + "/a dir/é") as client,
    ):
        assert_whole(await client.stream_chat(BODY))
    assert heads[0].startswith(b"POST /v1/a%20dir/%C3%A9/chat/completions")


async def test_a_body_in_a_coding_the_client_does_not_decode_is_malformed():
    response = HEAD + b"Content-Encoding: br\r\nContent-Length: 3\r\n\r\n\x1f\x8b\x08"
    async with raw_server(lambda i: [response]) as (url, _), HttpChatClient(url) as client:
        r = await client.stream_chat(BODY)
    assert r.error_kind == "malformed" and "'br'" in (r.error_message or "")


async def test_an_error_status_in_a_coding_the_client_does_not_decode_keeps_its_status():
    response = (
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Encoding: br\r\nContent-Length: 3\r\n\r\nabc"
    )
    async with raw_server(lambda i: [response]) as (url, _), HttpChatClient(url) as client:
        r = await client.stream_chat(BODY)
    assert r.error_kind == "http_5xx" and r.http_status == 503
    assert "'br'" in (r.error_message or "")


async def test_a_compressed_body_that_does_not_decode_is_malformed():
    response = HEAD + b"Content-Encoding: gzip\r\nContent-Length: 9\r\n\r\nnot gzip!"
    async with raw_server(lambda i: [response]) as (url, _), HttpChatClient(url) as client:
        r = await client.stream_chat(BODY)
    assert r.error_kind == "malformed" and "does not decode" in (r.error_message or "")


ERROR_JSON = json.dumps(
    {
        "error": {
            "message": "model 'm' is loading, retry later",
            "type": "ServiceUnavailable",
            "pad": "x" * 3000,
        }
    }
).encode()


@pytest.mark.parametrize("content_type", [b"", b"Content-Type: application/json\r\n"])
async def test_a_200_that_is_not_an_event_stream_keeps_its_text(content_type):
    response = (
        b"HTTP/1.1 200 OK\r\n"
        + content_type
        + b"Content-Length: %d\r\n\r\n" % len(ERROR_JSON)
        + ERROR_JSON
    )
    # The body in several reads: what the message keeps is not only the first read's.
    pieces = [response[:60], response[60:200], response[200:]]
    async with raw_server(lambda i: pieces) as (url, served), HttpChatClient(url) as client:
        first = await client.stream_chat(BODY)
        second = await client.stream_chat(BODY)
    for r in (first, second):
        assert r.error_kind == "not_event_stream" and r.http_status == 200
        message = r.error_message or ""
        assert "model 'm' is loading, retry later" in message and "ServiceUnavailable" in message
        assert 2048 <= len(message) < 2048 + 300  # bounded
    assert served == [1, 2]  # a body left unread (past the bound) closes its connection


async def test_a_stream_with_a_folded_header_is_read():
    response = HEAD + b"X-Served-By: edge-1\r\n edge-2\r\n" + chunked(*EVENTS)[len(HEAD) :]
    async with raw_server(lambda i: [response]) as (url, _), HttpChatClient(url) as client:
        assert_whole(await client.stream_chat(BODY))


async def test_a_json_error_labelled_an_event_stream_keeps_its_text():
    error = b'{"error": {"message": "context length exceeded", "code": 400}}'
    response = HEAD + b"Content-Length: %d\r\n\r\n" % len(error) + error
    async with raw_server(lambda i: [response]) as (url, _), HttpChatClient(url) as client:
        r = await client.stream_chat(BODY)
    assert r.error_kind == "not_event_stream" and r.http_status == 200
    message = r.error_message or ""
    assert "Content-Type 'text/event-stream'" in message
    assert "context length exceeded" in message


async def test_an_event_stream_without_content_type_is_still_read():
    response = b"HTTP/1.1 200 OK\r\n" + chunked(*EVENTS)[len(HEAD) :]
    assert b"content-type" not in response.lower()
    async with (
        raw_server(lambda i: [response[:80], response[80:]]) as (url, _),
        HttpChatClient(url) as client,
    ):
        assert_whole(await client.stream_chat(BODY))


async def test_a_body_that_never_ends_after_done_is_dropped_after_the_read_gap():
    # [DONE] arrives, the terminating chunk never does: the turn is whole, and the connection
    # is closed once the read gap passes instead of being reused or kept forever.
    response = chunked(*EVENTS)
    unended = response[: len(response) - len(b"0\r\n\r\n")]
    timeouts = Timeouts(read_gap_s=0.2)
    async with (
        raw_server(lambda i: [unended]) as (url, served),
        HttpChatClient(url, timeouts=timeouts) as client,
    ):
        first = await client.stream_chat(BODY)
        await asyncio.sleep(0.5)
        second = await client.stream_chat(BODY)
    assert_whole(first)
    assert_whole(second)
    assert served == [1, 2]


async def test_an_error_status_read_to_its_end_keeps_the_connection():
    def pieces(i: int) -> list[bytes]:
        if i == 0:
            return [
                b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 0\r\nContent-Length: 4\r\n\r\nbusy"
            ]
        return [chunked(*EVENTS)]

    async with raw_server(pieces) as (url, served), HttpChatClient(url, retry_on={"429"}) as client:
        r = await client.stream_chat(BODY)
    assert_whole(r)
    assert r.retries == 1 and [a.error_kind for a in r.attempts] == ["http_429"]
    assert served == [1, 1]
