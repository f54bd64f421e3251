"""The streaming chat client: POST with ``stream=true``, stamp every read, decode, map errors.

Failures come back as data on the :class:`ChatResponse`, one of the closed set of
:data:`workloads.model.errors.ErrorKind` (a failed request never raises out of
:meth:`ChatClient.stream_chat`; cancellation propagates, with the partial response on the
exception: :func:`partial_response`). The connections, the request write and the response
read are :mod:`workloads.wire.stream`'s, below any HTTP library: aiohttp's ``StreamReader``
cost more per streamed token than everything else the client does (benchmarks/RESULTS.md).

A request is never sent twice without a record of it. It is sent again only when (a) a pooled
connection was found dead before any byte of the request was written (a *resend*, counted), or
(b) the caller asked for it with ``retry_on`` (a *retry*, counted); every earlier attempt is
kept in :attr:`ChatResponse.attempts`.

Connection settings (headers, proxy, TLS, redaction) come from
:class:`~workloads.wire.transport.Transport`, the same seam the aiohttp reads use. A 307 or
308 is followed, method and body kept, at most :data:`~workloads.wire.transport.
MAX_REDIRECTS` hops (the turn's times are the last hop's; a 308 is remembered for later
turns); the Authorization header goes only to the target's own host. A 301/302/303 is a
failed turn whose message names the status and the Location.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict, Unpack, runtime_checkable

import orjson
from yarl import URL

from workloads._version import __version__
from workloads.core.chat_stream import ChatStream, Usage
from workloads.model.errors import ErrorKind, RequestError
from workloads.model.records import AttemptRecord
from workloads.model.scenario import Timeouts
from workloads.wire.failures import retry_kinds
from workloads.wire.stream import Exchange, Pool
from workloads.wire.transport import MAX_REDIRECTS, Transport, followed

__all__ = [
    "AiohttpChatClient",
    "ChatClient",
    "ChatResponse",
    "HttpChatClient",
    "Preopening",
    "StreamFigures",
    "Usage",
    "partial_response",
    "retry_kinds",
]

# A request whose pooled connection turns out to be dead before any byte of it was written is
# sent again on a fresh connection, at most this many times.
MAX_RESENDS = 2
DEFAULT_TIMEOUTS = Timeouts()  # the scenario's defaults: one home for them
# Idle pooled connections older than this are not reused. Below the 5 s idle timeout of
# uvicorn (vLLM, SGLang) and cpp-httplib (llama.cpp: "Keep-Alive: timeout=5, max=100"), so we
# never send on a connection the server is closing at that moment: such a request is written,
# then lost, and may not be re-sent. A fresh connection costs nothing in TTFT (it is opened
# before the request is written, and TTFT starts there).
KEEPALIVE_S = 4.0
MAX_RETRY_WAIT_S = 60.0  # a Retry-After longer than this is cut to it
FIRST_BACKOFF_S = 0.5  # without Retry-After: 0.5, 1, 2, ... s
_ATTR = "workloads_response"  # where a cancelled request's partial response rides


@dataclass(frozen=True, slots=True)
class StreamFigures:
    """What a stream measured, as plain values: a :class:`ChatResponse` built by hand (a
    fake client, a test) carries these; a streamed one reads its :class:`ChatStream`'s."""

    text: str = ""
    first_content_ns: int | None = None
    first_text_ns: int | None = None
    last_content_ns: int | None = None
    tool_calls: list[dict[str, Any]] | None = None
    content_events: int = 0
    content_ns: Sequence[int] | None = None
    merged: Sequence[int] = ()  # content chunks read together after a stall (ChatStream)
    finish_reason: str | None = None
    usage: Usage | None = None
    timings: dict[str, Any] | None = None
    system_fingerprint: str | None = None
    model: str | None = None
    request_id: str | None = None
    saw_done: bool = False


class _Figures(TypedDict, total=False):
    """StreamFigures' fields as keywords of :class:`ChatResponse`."""

    text: str
    first_content_ns: int | None
    first_text_ns: int | None
    last_content_ns: int | None
    tool_calls: list[dict[str, Any]] | None
    content_events: int
    content_ns: Sequence[int] | None
    merged: Sequence[int]
    finish_reason: str | None
    usage: Usage | None
    timings: dict[str, Any] | None
    system_fingerprint: str | None
    model: str | None
    request_id: str | None
    saw_done: bool


_NO_FIGURES = StreamFigures()


@dataclass(slots=True, init=False)
class ChatResponse:
    """Everything one streamed request produced, success or not. Times are perf_counter_ns.

    The attempt's own fields are stored here; what the stream measured (text, stamps, usage,
    tool calls...) is read through from ``figures``: the attempt's :class:`ChatStream`, never
    copied, or :class:`StreamFigures` for a response built from values
    (``ChatResponse(started_ns=0, text="hi", finish_reason="stop")``).
    """

    started_ns: int  # the client began this attempt (before waiting for a connection)
    sent_ns: int | None  # the request was about to be written (TTFT's start)
    written_ns: int | None  # the transport had taken the whole request
    headers_ns: int | None  # response headers arrived
    done_ns: int | None  # the stream ended ([DONE] or EOF)
    http_status: int | None
    resends: int  # times re-sent because a pooled connection was dead before any byte
    error_kind: ErrorKind | None
    error_message: str | None
    retry_after_s: float | None
    error_ns: int | None  # when the failure arrived
    retries: int  # times re-sent by the retry_on policy
    attempts: list[AttemptRecord]  # earlier failed attempts
    location: str | None  # a redirect's Location header, as sent
    figures: ChatStream | StreamFigures  # what the stream measured

    def __init__(
        self,
        started_ns: int,
        *,
        sent_ns: int | None = None,
        written_ns: int | None = None,
        headers_ns: int | None = None,
        done_ns: int | None = None,
        http_status: int | None = None,
        resends: int = 0,
        error_kind: ErrorKind | None = None,
        error_message: str | None = None,
        retry_after_s: float | None = None,
        error_ns: int | None = None,
        retries: int = 0,
        attempts: list[AttemptRecord] | None = None,
        location: str | None = None,
        stream: ChatStream | None = None,
        **figures: Unpack[_Figures],
    ) -> None:
        self.started_ns = started_ns
        self.sent_ns = sent_ns
        self.written_ns = written_ns
        self.headers_ns = headers_ns
        self.done_ns = done_ns
        self.http_status = http_status
        self.resends = resends
        self.error_kind = error_kind
        self.error_message = error_message
        self.retry_after_s = retry_after_s
        self.error_ns = error_ns
        self.retries = retries
        self.attempts = [] if attempts is None else attempts
        self.location = location
        if stream is not None and figures:
            raise TypeError("ChatResponse takes a stream or its figures as values, not both")
        self.figures = (
            stream if stream is not None else (StreamFigures(**figures) if figures else _NO_FIGURES)
        )

    # The stream's figures, read through (read-only: the stream is the one record of them).
    @property
    def text(self) -> str:
        """Generated content, in order (what goes back into the history)."""
        return self.figures.text

    @property
    def first_content_ns(self) -> int | None:
        """First chunk with generated content (TTFT's end)."""
        return self.figures.first_content_ns

    @property
    def first_text_ns(self) -> int | None:
        """First chunk with content text (not reasoning or calls)."""
        return self.figures.first_text_ns

    @property
    def last_content_ns(self) -> int | None:
        """Last chunk with generated content."""
        return self.figures.last_content_ns

    @property
    def tool_calls(self) -> list[dict[str, Any]] | None:
        """The reply's tool calls, assembled from the stream's pieces, in index order, as an
        assistant message carries them; None when the reply called no tool."""
        return self.figures.tool_calls

    @property
    def content_events(self) -> int:
        """Chunks that carried generated content."""
        return self.figures.content_events

    @property
    def content_ns(self) -> Sequence[int] | None:
        """Each content chunk's arrival (perf_counter_ns)."""
        return self.figures.content_ns

    @property
    def finish_reason(self) -> str | None:
        return self.figures.finish_reason

    @property
    def usage(self) -> Usage | None:
        return self.figures.usage

    @property
    def timings(self) -> dict[str, Any] | None:
        """llama.cpp's per-response timings, when sent."""
        return self.figures.timings

    @property
    def system_fingerprint(self) -> str | None:
        return self.figures.system_fingerprint

    @property
    def model(self) -> str | None:
        return self.figures.model

    @property
    def request_id(self) -> str | None:
        """The chunks' "id", to match server logs."""
        return self.figures.request_id

    @property
    def saw_done(self) -> bool:
        return self.figures.saw_done

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    def fail(self, kind: ErrorKind, message: str) -> None:
        """Mark this attempt failed now (the first failure wins: it is the cause)."""
        if self.error_kind is None:
            self.error_kind = kind
            self.error_message = message
            self.error_ns = time.perf_counter_ns()


class ChatClient(Protocol):
    """Anything that can stream one chat completion. Tests use a function-backed fake."""

    async def stream_chat(self, body: dict[str, Any]) -> ChatResponse: ...


@runtime_checkable
class Preopening(Protocol):
    """A chat client that can open its connections before the requests that will use them."""

    async def open_connections(self, count: int) -> int: ...


def partial_response(err: BaseException) -> ChatResponse | None:
    """What a cancelled :meth:`HttpChatClient.stream_chat` measured before it was
    cancelled (``error_kind="cancelled"``), or None when the client kept nothing."""
    response = getattr(err, _ATTR, None)
    return response if isinstance(response, ChatResponse) else None


class HttpChatClient:
    """Streams ``POST {base_url}/chat/completions`` over a pool of kept-alive connections.

        async with HttpChatClient("http://127.0.0.1:8000/v1", connections=5) as client:
            response = await client.stream_chat({"model": "m", "messages": [...]})

    ``connections`` should be at least the number of concurrent sessions, so no request
    waits for a connection (that wait is before ``sent_ns``, outside TTFT, but it delays the
    request). ``retry_on`` (e.g. ``{"429", "5xx"}``) sends a failed request again, up to
    ``max_retries`` times, after the server's Retry-After or an exponential backoff; off by
    default, because a retried request is a second request the server counts.
    ``reuse_connections=False`` opens a connection per request (for servers that close
    kept-alive connections without saying so). http and https; ``transport`` says the
    headers (the API key), proxy and TLS options (default: ``api_key`` alone, certificates
    verified, proxies from the environment).
    """

    def __init__(
        self,
        base_url: str,
        *,
        connections: int = 100,
        api_key: str | None = None,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,  # connect, read gap, whole request
        retry_on: Collection[str] = (),  # measure what the server does: no retries
        max_retries: int = 3,
        reuse_connections: bool = True,  # keep-alive, as every real client does
        keepalive_s: float = KEEPALIVE_S,  # below the server's idle timeout
        transport: Transport | None = None,  # headers, proxy, TLS (overrides api_key)
    ) -> None:
        try:  # percent-encodes the path and query, IDNA-encodes the host
            url = URL(base_url.rstrip("/") + "/chat/completions")
        except ValueError as err:
            raise ValueError(f"target URL {base_url!r}: {err}") from err
        if url.scheme not in ("http", "https") or not url.raw_host or url.port is None:
            raise ValueError(f"target URL {base_url!r}: use http://HOST[:PORT]/v1 or https://...")
        self._url = url.with_user(None)  # credentials are the transport's (Basic auth)
        self.url = str(self._url)
        if transport is None:
            transport = Transport(
                headers={"Authorization": f"Bearer {api_key}"} if api_key else {},
                secrets=(api_key,) if api_key else (),
            )
        self._transport = transport
        self._auth_host = url.raw_host  # the Authorization header goes to this host only
        self._heads: dict[URL, bytes] = {}
        self._pools: dict[tuple[str, str, int], Pool] = {}
        self._connections = max(1, connections)
        self._timeouts = timeouts
        self._request_timeout_s = timeouts.turn_s
        self._retry_on = retry_kinds(retry_on)
        self._max_retries = max(0, max_retries)
        self._reuse = reuse_connections
        self._keepalive_s = keepalive_s
        self._slots: asyncio.Semaphore | None = None

    async def __aenter__(self) -> HttpChatClient:
        self._slots = asyncio.Semaphore(self._connections)
        self._pool_for(self._url)  # bad proxy settings fail here, before any request
        return self

    async def __aexit__(self, *exc: object) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()
        self._slots = None

    async def open_connections(self, count: int) -> int:
        """Top the target's pool up to ``count`` idle connections (at most ``connections``),
        opened together within the connect timeout; returns how many are idle then. The
        runner calls it before a repetition's first sends, while nothing streams, so turn 1
        goes on open connections as later turns do on kept-alive ones: its send delay no
        longer includes the connect (TTFT never did: it starts at the write), the server has
        accepted the connection before the request comes, and no connect holds the loop
        while the first streams are read.
        A connection that does not open is no error here: the request that would have taken
        it opens its own and records any failure. Without reuse (``reuse_connections=False``,
        or after a dropped kept-alive connection) nothing is opened."""
        if self._slots is None:
            raise RuntimeError("use 'async with HttpChatClient(...)' before open_connections")
        return await self._pool_for(self._url).fill(min(count, self._connections))

    @property
    def connections_opened(self) -> int:
        """Connections opened so far, to every origin (pre-opened ones included)."""
        return sum(pool.opened for pool in self._pools.values())

    def _pool_for(self, url: URL) -> Pool:
        """The pool of ``url``'s origin (a redirect may lead to another)."""
        tls = url.scheme == "https"
        host = url.raw_host or ""
        port = url.port or (443 if tls else 80)
        key = (url.scheme, host, port)
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = Pool(
                host,
                port,
                tls=tls,
                connect_s=self._timeouts.connect_s,
                keepalive_s=self._keepalive_s,
                reuse=self._reuse,
                ssl_context=self._transport.ssl_context() if tls else None,
                proxy=self._transport.proxy_for(url),
                redact=self._transport.redact,
            )
        return pool

    def _head(self, url: URL) -> bytes:
        """The request head for ``url``, less its Content-Length (made once per URL; the
        key is in it and never logged)."""
        head = self._heads.get(url)
        if head is not None:
            return head
        pool = self._pool_for(url)
        proxy = pool.proxy if pool.tls is None else None  # http through a proxy: absolute form
        target = str(url.with_fragment(None)) if proxy is not None else url.raw_path_qs
        host = url.raw_host or ""
        host = f"[{host}]" if ":" in host else host
        authority = (
            host if url.explicit_port is None or url.is_default_port() else (f"{host}:{url.port}")
        )
        # identity: a compressed stream would be decoded (wire/stream.py), at a CPU cost.
        lines = [
            f"POST {target} HTTP/1.1",
            f"Host: {authority}",
            f"User-Agent: workloads/{__version__}",
            "Accept: text/event-stream",
            "Accept-Encoding: identity",
            "Content-Type: application/json",
        ]
        for name, value in self._transport.headers.items():
            if name.lower() != "authorization" or url.raw_host == self._auth_host:
                lines.append(f"{name}: {value}")
        if proxy is not None and proxy.authorization is not None:
            lines.append(f"Proxy-Authorization: {proxy.authorization}")
        head = self._heads[url] = ("\r\n".join(lines) + "\r\n").encode("latin-1")
        return head

    async def stream_chat(self, body: dict[str, Any]) -> ChatResponse:
        """Stream one chat completion; failures come back as data on the response."""
        if self._slots is None:
            raise RuntimeError("use 'async with HttpChatClient(...)' before stream_chat")
        # Encoded once (every attempt sends the same bytes), by orjson: a 100K-token history
        # is ~400 KB of JSON, ~3 ms on the loop with the standard library, ~0.3 ms here.
        payload = orjson.dumps(body)
        url = self._url
        request = self._head(url) + b"Content-Length: %d\r\n\r\n" % len(payload) + payload
        # One copy held while the turn streams: orjson's bytes keep its whole growth buffer
        # (tracemalloc: 254 KB for a 20 KB body), and at C256 the bodies in flight held 22 MB
        # of the client's peak with both kept. A redirect cuts the body back out of the request.
        size = len(payload)
        del payload
        attempts: list[AttemptRecord] = []
        resends = retries = hops = 0
        # bounded: each pass counts one resend, retry or redirect
        for _ in range(MAX_RESENDS + self._max_retries + MAX_REDIRECTS + 1):
            response = ChatResponse(
                started_ns=time.perf_counter_ns(),
                resends=resends,
                retries=retries,
                attempts=attempts,
            )
            unwritten = await self._attempt(url, request, response)
            kind = response.error_kind
            if kind is None:
                return response
            status = response.http_status
            if status is not None and 300 <= status < 400 and not unwritten:
                moved = self._redirect(url, response, hops)
                if moved is None:
                    return response
                if status == 308 and url == self._url:
                    self._url = moved  # permanent: later turns go there at once
                url, hops = moved, hops + 1
                payload = request[len(request) - size :]
                request = self._head(url) + b"Content-Length: %d\r\n\r\n" % size + payload
                del payload
                continue
            if unwritten and resends < MAX_RESENDS:
                resends += 1
            elif kind in self._retry_on and retries < self._max_retries:
                retries += 1
                wait = response.retry_after_s
                if wait is None:
                    wait = FIRST_BACKOFF_S * 2 ** (retries - 1)
                attempts.append(_attempt_record(response))
                try:
                    await asyncio.sleep(min(wait, MAX_RETRY_WAIT_S))
                except asyncio.CancelledError as err:  # cancelled between attempts
                    waiting = ChatResponse(
                        started_ns=time.perf_counter_ns(),
                        resends=resends,
                        retries=retries,
                        attempts=attempts,
                    )
                    waiting.fail("cancelled", "the run ended while waiting to retry")
                    setattr(err, _ATTR, waiting)
                    raise
                continue
            else:
                return response
            attempts.append(_attempt_record(response))
        return response

    def _redirect(self, url: URL, response: ChatResponse, hops: int) -> URL | None:
        """Where a 3xx leads (307/308 within the hop limit), or None: then the response's
        message says, in one line, the status, the Location and why it was not followed."""
        status = response.http_status
        location = response.location
        if location is None:
            response.error_message = f"HTTP {status} redirect without a Location header"
            return None
        try:
            moved = url.join(URL(location.strip()))
        except ValueError:
            response.error_message = f"HTTP {status} redirect to a bad Location {location!r}"
            return None
        where = self._transport.redact(str(moved.with_user(None)))
        if status is None or not followed(status):
            response.error_message = (
                f"HTTP {status} redirect to {where}: a POST is not re-sent after {status} (it "
                "would become a GET); point the target URL there"
            )
        elif moved.scheme not in ("http", "https") or not moved.raw_host:
            response.error_message = f"HTTP {status} redirect to {where}: not http(s)"
        elif hops >= MAX_REDIRECTS:
            response.error_message = (
                f"HTTP {status}: more than {MAX_REDIRECTS} redirects, the last to {where}"
            )
        else:
            return moved.with_user(None)
        return None

    async def _attempt(self, url: URL, request: bytes, out: ChatResponse) -> bool:
        """One attempt, filling ``out``; True when it failed before any byte was written on
        a reused connection (safe to send again)."""
        assert self._slots is not None
        exchange: Exchange | None = None
        try:
            async with asyncio.timeout(self._request_timeout_s), self._slots:
                exchange = await self._exchange(url, request)
                if exchange is None:
                    out.fail(
                        "disconnected", "a pooled connection closed before the request was written"
                    )
                    return True
                await exchange.waiter
        except RequestError as err:  # could not connect
            out.fail(err.kind, str(err))
        except TimeoutError:
            out.fail("turn_deadline", f"request exceeded {self._request_timeout_s:g} s")
        except asyncio.CancelledError as err:
            out.fail("cancelled", "the run ended while this turn was in flight")
            setattr(err, _ATTR, out)
            raise
        finally:
            if exchange is not None:
                exchange.abandon()  # a no-op for a finished response
                self._fill(exchange, out)
            if out.error_message is not None:  # a server may echo the key: never recorded
                out.error_message = self._transport.redact(out.error_message)
        return False

    async def _exchange(self, url: URL, request: bytes) -> Exchange | None:
        """Write the request on a pooled or new connection; None when the pooled one was
        found closed at the moment of writing (nothing was written)."""
        pool = self._pool_for(url)
        # One pass of the event loop before taking a pooled connection: the previous
        # response's last reads (its body's end, a FIN right behind it) are folded in by then,
        # so the connection is back in the pool with its idle time, and Pool.acquire lets one
        # that just came back settle (SETTLE_S). Both are needed: without this pass llama.cpp
        # (closing after every streamed response) still lost requests on a busy CPU.
        await asyncio.sleep(0)
        conn, reused = await pool.acquire()
        if conn.closed or conn.transport.is_closing():  # only a reused one can be: no await
            return None  # between the pool's check and here, so this is belt and braces
        return conn.start(request, self._timeouts.read_gap_s, reused=reused)

    def _fill(self, exchange: Exchange, out: ChatResponse) -> None:
        """Put what the exchange measured on the response (its stream, by reference); its
        failure, if any."""
        out.sent_ns = exchange.sent_ns
        out.written_ns = exchange.written_ns
        head = exchange.head
        if head is not None:
            out.headers_ns = exchange.headers_ns
            out.http_status = head.status
            if 300 <= head.status < 400:
                out.location = head.header("location")
        error = exchange.error
        if error is not None:
            out.fail(error.kind, str(error))
            if error.http_status is not None:
                out.http_status = error.http_status
            out.retry_after_s = error.retry_after_s
            if error.kind == "disconnected" and head is None and exchange.reused:
                # The server dropped a kept-alive connection under a request: it closes idle
                # connections sooner than we expect. From now on every request gets its own
                # connection, so no further request is lost this way.
                exchange.conn.pool.stop_reusing()
        stream = exchange.stream
        if stream is None:
            return
        out.figures = stream  # read through, not copied
        out.done_ns = (
            stream.done_ns
            if stream.done_ns is not None
            else (out.error_ns if out.error_ns is not None else time.perf_counter_ns())
        )


# The name the runner and probe know it by (it streamed through aiohttp until the hot path
# moved below it); the same class.
AiohttpChatClient = HttpChatClient


def _attempt_record(response: ChatResponse) -> AttemptRecord:
    assert response.error_kind is not None and response.error_ns is not None
    return AttemptRecord(
        started_ns=response.started_ns,
        sent_ns=response.sent_ns,
        error_ns=response.error_ns,
        error_kind=response.error_kind,
        error_message=response.error_message,
        http_status=response.http_status,
        retry_after_s=response.retry_after_s,
    )
