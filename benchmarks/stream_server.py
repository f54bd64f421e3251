"""A raw streaming OpenAI-compatible server that records its own truth. Stdlib only.

It serves ``GET /v1/models`` and ``POST /v1/chat/completions`` with ``stream=true`` over
HTTP/1.1 keep-alive (chunked transfer encoding), and answers 404 to everything else (the
library's ``/version``, ``/tokenize``, ``/apply-template`` and ``/metrics`` look-ups). A
stream is a role chunk, ``max_tokens`` content chunks of one token each, a finish chunk
(``finish_reason: "length"``, as with ``ignore_eos``), a usage chunk and ``data: [DONE]``;
each content chunk is a socket write of its own (the last three go in one). Every response
has a unique ``id``.

One engine task writes the content chunks, like an inference engine's step loop: each step
writes one chunk to every stream that is due and whose transport is not paused (the server
honours flow control, as real servers do), then yields to the event loop.

- zero delay (``--ttft-ms 0 --itl-ms 0``): every active stream is due at every step; the
  server writes as fast as the client reads (what the client has not read yet waits in the
  kernel's socket buffers; past asyncio's high-water mark the stream pauses). ``--burst N``
  writes N content chunks per stream per step in one write, for a client that outruns one
  write per chunk.
- paced (e.g. ``--ttft-ms 100 --itl-ms 10``): a stream's first content chunk is due
  ``ttft`` after its request was read, token k ``k·itl`` after that (an absolute schedule: a
  late step does not shift the tokens after it); one step serves every stream due within
  the next 0.5 ms.

Truth: for every request one JSONL line in ``--truth`` with ``time.perf_counter_ns()`` stamps
(CLOCK_MONOTONIC on Linux, the clock the library stamps with, shared by all processes of the
host): ``headers_ns`` (the request's headers were fully read), ``received_ns`` (its body was
fully read), ``first_ns`` / ``last_ns`` (right before the first / last content chunk was handed
to the kernel), ``chunk_ns`` (every content chunk, same stamp) and ``done_ns`` (``[DONE]``).

    python benchmarks/stream_server.py --truth /tmp/truth.jsonl              # zero delay
    python benchmarks/stream_server.py --ttft-ms 100 --itl-ms 10 --port 8000  # paced

It prints ``listening on http://127.0.0.1:PORT/v1`` when ready, and stops on SIGTERM or
SIGINT, flushing the truth file.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import heapq
import json
import os
import signal
import sys
import time
from typing import IO, Any

MODEL = "bench-model"
# Content tokens, cycled: plain words (no JSON escaping), one token each in common tokenizers.
WORDS = (" the", " of", " and", " to", " in", " is", " for", " on")
MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_TOKENS_CAP = 1_000_000


def _frame(payload: bytes) -> bytes:
    """One chunk of HTTP/1.1 chunked transfer encoding."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _sse(obj: dict[str, Any] | str) -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
    return _frame(b"data: " + data.encode() + b"\n\n")


def _plain(status: str, body: dict[str, Any], *, close: bool) -> bytes:
    payload = json.dumps(body).encode()
    connection = b"close" if close else b"keep-alive"
    return (
        b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
        b"Connection: %s\r\n\r\n%s" % (status.encode(), len(payload), connection, payload)
    )


STREAM_HEADERS = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)


class Stream:
    """One streamed completion: its pre-encoded chunks, schedule and truth stamps."""

    __slots__ = (
        "chunk_ns",
        "conn",
        "done_ns",
        "due_ns",
        "frames",
        "headers_ns",
        "id",
        "max_tokens",
        "prompt_tokens",
        "received_ns",
        "sent",
    )

    def __init__(
        self,
        conn: Connection,
        request_id: str,
        max_tokens: int,
        prompt_tokens: int,
        headers_ns: int,
        received_ns: int,
        due_ns: int,
    ) -> None:
        self.conn = conn
        self.id = request_id
        self.max_tokens = max_tokens
        self.prompt_tokens = prompt_tokens
        self.headers_ns = headers_ns
        self.received_ns = received_ns
        self.due_ns = due_ns
        self.sent = 0
        self.chunk_ns: list[int] = []
        self.done_ns = 0
        head = (
            f'{{"id":"{request_id}","object":"chat.completion.chunk",'
            f'"created":{int(time.time())},"model":"{MODEL}","choices":'
        ).encode()
        self.frames = [
            _frame(
                b"data: "
                + head
                + b'[{"index":0,"delta":{"content":"'
                + word.encode()
                + b'"},"logprobs":null,"finish_reason":null}]}\n\n'
            )
            for word in WORDS
        ]

    def opening(self) -> bytes:
        """Response headers and the role-only chunk (which does not count as content)."""
        return STREAM_HEADERS + self._chunk(
            '[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,'
            '"finish_reason":null}]'
        )

    def closing(self) -> bytes:
        """Finish chunk, usage chunk, [DONE] and the end of the chunked body."""
        usage = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.sent,
            "total_tokens": self.prompt_tokens + self.sent,
            "prompt_tokens_details": {"cached_tokens": 0},
        }
        return (
            self._chunk('[{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}]')
            + self._chunk("[]", usage=json.dumps(usage, separators=(",", ":")))
            + _sse("[DONE]")
            + b"0\r\n\r\n"
        )

    def _chunk(self, choices: str, usage: str | None = None) -> bytes:
        tail = f',"usage":{usage}' if usage is not None else ""
        return _sse(
            f'{{"id":"{self.id}","object":"chat.completion.chunk","created":{int(time.time())},'
            f'"model":"{MODEL}","choices":{choices}{tail}}}'
        )

    def truth(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "max_tokens": self.max_tokens,
            "tokens": self.sent,
            "headers_ns": self.headers_ns,
            "received_ns": self.received_ns,
            "first_ns": self.chunk_ns[0] if self.chunk_ns else None,
            "last_ns": self.chunk_ns[-1] if self.chunk_ns else None,
            "done_ns": self.done_ns,
            "chunk_ns": self.chunk_ns,
        }


class Engine:
    """The step loop: writes content chunks to due streams, one per stream per step."""

    def __init__(self, ttft_ns: int, itl_ns: int, truth: IO[str] | None, burst: int = 1) -> None:
        self.ttft_ns = ttft_ns
        self.itl_ns = itl_ns
        self.burst = burst  # content chunks per stream per step, in one write (zero delay)
        # Paced: one step serves every stream due within the next half millisecond (the event
        # loop's timers are no finer than a millisecond anyway), so a thousand streams cost a
        # step per ~0.5 ms, not a wake-up per chunk. Truth stamps are the real write times.
        self.slack_ns = 500_000 if itl_ns or ttft_ns else 0
        self.truth = truth
        self.heap: list[tuple[int, int, Stream]] = []  # (due, sequence, stream)
        self.paused: dict[Connection, Stream] = {}
        self.sequence = 0
        self.requests = 0
        self.wake = asyncio.Event()
        self.pid = os.getpid()

    def new_id(self) -> str:
        self.requests += 1
        return f"chatcmpl-bench-{self.pid}-{self.requests}"

    def add(self, stream: Stream) -> None:
        self._push(stream)
        self.wake.set()

    def resume(self, conn: Connection) -> None:
        stream = self.paused.pop(conn, None)
        if stream is not None:
            self._push(stream)
            self.wake.set()

    def drop(self, conn: Connection) -> None:
        self.paused.pop(conn, None)  # a stream in the heap is dropped when it comes due

    def _push(self, stream: Stream) -> None:
        self.sequence += 1
        heapq.heappush(self.heap, (stream.due_ns, self.sequence, stream))

    async def run(self) -> None:
        heap = self.heap
        itl = self.itl_ns
        burst = self.burst
        clock = time.perf_counter_ns
        while True:  # ends when the server task is cancelled
            if not heap:
                self.wake.clear()
                await self.wake.wait()
                continue
            now = clock() + self.slack_ns
            due: list[Stream] = []
            while heap and heap[0][0] <= now:
                due.append(heapq.heappop(heap)[2])
            for stream in due:
                conn = stream.conn
                if conn.closed:
                    continue
                if conn.paused:
                    self.paused[conn] = stream
                    continue
                sent = stream.sent
                if burst == 1:
                    stamp = clock()
                    conn.transport.write(stream.frames[sent % len(WORDS)])
                    stream.chunk_ns.append(stamp)
                    stream.sent = sent + 1
                else:
                    n = min(burst, stream.max_tokens - sent)
                    frames = b"".join(stream.frames[(sent + i) % len(WORDS)] for i in range(n))
                    stamp = clock()
                    conn.transport.write(frames)
                    stream.chunk_ns.extend([stamp] * n)
                    stream.sent = sent + n
                if stream.sent >= stream.max_tokens:
                    self._finish(stream)
                else:
                    stream.due_ns += itl
                    self._push(stream)
            if heap and heap[0][0] > clock():
                self.wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), (heap[0][0] - clock()) / 1e9)
            else:
                await asyncio.sleep(0)

    def _finish(self, stream: Stream) -> None:
        stream.done_ns = time.perf_counter_ns()
        stream.conn.transport.write(stream.closing())
        stream.conn.stream_ended()
        if self.truth is not None:
            self.truth.write(json.dumps(stream.truth(), separators=(",", ":")) + "\n")


class Connection(asyncio.Protocol):
    """One HTTP/1.1 connection: reads requests one at a time, keep-alive."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.transport: asyncio.Transport
        self.buffer = b""
        self.headers_ns = 0
        self.busy = False  # a stream is being written
        self.paused = False
        self.closed = False
        self.close_after = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.engine.drop(self)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self.engine.resume(self)

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter_ns()
        self.buffer += data
        if not self.busy:
            self._handle(now)

    def stream_ended(self) -> None:
        self.busy = False
        if self.close_after:
            self.transport.close()
        elif self.buffer:
            self._handle(time.perf_counter_ns())

    def _handle(self, now: int) -> None:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > MAX_HEADER_BYTES:
                self._reply("431 Request Header Fields Too Large", {"error": "headers"}, True)
            return
        if not self.headers_ns:
            self.headers_ns = now
        head = self.buffer[:end].decode("latin-1").split("\r\n")
        method, _, rest = head[0].partition(" ")
        path = rest.partition(" ")[0]
        fields = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        length = int(fields.get("content-length", "0") or 0)
        if length > MAX_BODY_BYTES or "chunked" in fields.get("transfer-encoding", ""):
            self._reply("413 Content Too Large", {"error": "body"}, True)
            return
        if len(self.buffer) < end + 4 + length:
            return  # the body is still arriving
        body = self.buffer[end + 4 : end + 4 + length]
        self.buffer = self.buffer[end + 4 + length :]
        headers_ns, self.headers_ns = self.headers_ns, 0
        self.close_after = fields.get("connection", "").lower() == "close"
        if method == "GET" and path == "/v1/models":
            listing = {
                "object": "list",
                "data": [{"id": MODEL, "object": "model", "owned_by": "benchmarks"}],
            }
            self._reply("200 OK", listing, self.close_after)
        elif method == "POST" and path == "/v1/chat/completions":
            self._chat(body, headers_ns, now)
        else:
            self._reply("404 Not Found", {"error": f"no route {method} {path}"}, self.close_after)

    def _reply(self, status: str, body: dict[str, Any], close: bool) -> None:
        self.transport.write(_plain(status, body, close=close))
        if close:
            self.transport.close()
        elif self.buffer:
            self._handle(time.perf_counter_ns())

    def _chat(self, raw: bytes, headers_ns: int, received_ns: int) -> None:
        try:
            request = json.loads(raw)
            max_tokens = int(
                request.get("max_completion_tokens") or request.get("max_tokens") or 16
            )
            messages = request.get("messages") or []
            stream = request.get("stream") is True
        except (ValueError, TypeError, AttributeError) as err:
            self._reply("400 Bad Request", {"error": f"bad request: {err}"}, self.close_after)
            return
        if not stream or not 1 <= max_tokens <= MAX_TOKENS_CAP:
            self._reply(
                "400 Bad Request",
                {"error": "stream=true and 1 <= max_tokens needed"},
                self.close_after,
            )
            return
        chars = sum(len(m.get("content") or "") for m in messages if isinstance(m, dict))
        engine = self.engine
        item = Stream(
            self,
            engine.new_id(),
            max_tokens,
            1 + chars // 4,
            headers_ns,
            received_ns,
            received_ns + engine.ttft_ns,
        )
        self.busy = True
        self.transport.write(item.opening())
        engine.add(item)


async def serve(
    host: str,
    port: int,
    ttft_ms: float,
    itl_ms: float,
    truth: str | None,
    burst: int = 1,
    reuse_port: bool = False,
) -> None:
    out = open(truth, "a", buffering=1 << 20) if truth else None  # noqa: SIM115
    try:
        engine = Engine(round(ttft_ms * 1e6), round(itl_ms * 1e6), out, burst)
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: Connection(engine), host, port, backlog=4096, reuse_port=reuse_port or None
        )
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        bound = server.sockets[0].getsockname()[1]
        print(f"listening on http://{host}:{bound}/v1", flush=True)
        async with server:
            steps = asyncio.create_task(engine.run())
            await stop.wait()
            steps.cancel()
    finally:
        if out is not None:
            out.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port (printed)")
    parser.add_argument("--ttft-ms", type=float, default=0.0, help="request read → first token")
    parser.add_argument("--itl-ms", type=float, default=0.0, help="between content chunks")
    parser.add_argument("--truth", help="append one JSONL line of stamps per request here")
    parser.add_argument(
        "--burst",
        type=int,
        default=1,
        help="zero delay only: content chunks per stream per step, written "
        "at once (for a client faster than one write per chunk)",
    )
    parser.add_argument("--cpu", type=int, help="pin this process to that CPU core")
    parser.add_argument(
        "--reuse-port",
        action="store_true",
        help="SO_REUSEPORT: several server processes on one --port, the kernel "
        "spreading the connections (for more streams than one core writes)",
    )
    args = parser.parse_args(argv)
    if args.burst < 1 or (args.burst > 1 and (args.ttft_ms or args.itl_ms)):
        parser.error("--burst N needs N >= 1, and N > 1 only at zero delay")
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    try:
        asyncio.run(
            serve(
                args.host,
                args.port,
                args.ttft_ms,
                args.itl_ms,
                args.truth,
                args.burst,
                args.reuse_port,
            )
        )
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
