"""The streaming chat client: POST with ``stream=true``, stamp every read, decode, map errors.

This is the only module that knows aiohttp's exceptions; they are translated here into the
closed set of :data:`workloads.model.errors.ErrorKind` and returned as data on the
:class:`ChatResponse` (a failed request never raises out of :meth:`ChatClient.stream_chat`;
cancellation propagates, with the partial response on the exception: :func:`partial_response`).

A request is never sent twice without a record of it. It is sent again only when (a) a pooled
connection was found dead before any byte of the request was written (a *resend*, counted), or
(b) the caller asked for it with ``retry_on`` (a *retry*, counted); every earlier attempt is
kept in :attr:`ChatResponse.attempts`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Protocol

import aiohttp

from workloads.core.chat_stream import ChatStream, Usage, parse_chunk
from workloads.model.errors import ErrorKind, RequestError
from workloads.model.records import AttemptRecord
from workloads.model.scenario import Timeouts
from workloads.wire.failures import (
    connect_kind,
    retry_after,
    retry_kinds,
    status_kind,
    unwritten,
)

__all__ = [
    "AiohttpChatClient", "ChatClient", "ChatResponse", "Usage", "parse_chunk", "partial_response",
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


@dataclass(slots=True)
class ChatResponse:
    """Everything one streamed request produced, success or not. Times are perf_counter_ns."""

    started_ns: int  # the client began this attempt (before waiting for a connection)
    sent_ns: int | None = None  # the request was written
    headers_ns: int | None = None  # response headers arrived
    first_content_ns: int | None = None  # first chunk with generated content
    last_content_ns: int | None = None  # last chunk with generated content
    done_ns: int | None = None  # the stream ended ([DONE] or EOF)
    http_status: int | None = None
    text: str = ""  # generated content, in order (what goes back into the history)
    content_events: int = 0  # chunks that carried generated content
    content_ns: Sequence[int] | None = None  # each content chunk's arrival (perf_counter_ns)
    finish_reason: str | None = None
    usage: Usage | None = None
    timings: dict[str, Any] | None = None  # llama.cpp's per-response timings, when sent
    system_fingerprint: str | None = None
    model: str | None = None
    request_id: str | None = None  # the chunks' "id", to match server logs
    saw_done: bool = False
    resends: int = 0  # times re-sent because a pooled connection was dead before any byte
    error_kind: ErrorKind | None = None
    error_message: str | None = None
    retry_after_s: float | None = None
    error_ns: int | None = None  # when the failure arrived
    retries: int = 0  # times re-sent by the retry_on policy
    attempts: list[AttemptRecord] = field(default_factory=list)  # earlier failed attempts

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


def partial_response(err: BaseException) -> ChatResponse | None:
    """What a cancelled :meth:`AiohttpChatClient.stream_chat` measured before it was
    cancelled (``error_kind="cancelled"``), or None when the client kept nothing."""
    response = getattr(err, _ATTR, None)
    return response if isinstance(response, ChatResponse) else None


class AiohttpChatClient:
    """Streams ``POST {base_url}/chat/completions`` over one pooled aiohttp session.

        async with AiohttpChatClient("http://127.0.0.1:8000/v1", connections=5) as client:
            response = await client.stream_chat({"model": "m", "messages": [...]})

    ``connections`` should be at least the number of concurrent sessions, so no request
    waits for a connection (that wait would be counted in TTFT). ``retry_on`` (e.g.
    ``{"429", "5xx"}``) sends a failed request again, up to ``max_retries`` times, after the
    server's Retry-After or an exponential backoff; off by default, because a retried request
    is a second request the server counts. ``reuse_connections=False`` opens a connection per
    request (for servers that close kept-alive connections without saying so).
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
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self._connections = connections
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._timeout = aiohttp.ClientTimeout(
            total=None, connect=timeouts.connect_s, sock_read=timeouts.read_gap_s
        )
        self._request_timeout_s = timeouts.turn_s
        self._retry_on = retry_kinds(retry_on)
        self._max_retries = max(0, max_retries)
        self._reuse = reuse_connections
        self._keepalive_s = keepalive_s
        self._retired: list[aiohttp.ClientSession] = []  # pools left by _stop_reusing
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> AiohttpChatClient:
        self._session = self._new_session(reuse=self._reuse)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for session in (*self._retired, self._session):
            if session is not None:
                await session.close()
        self._session = None
        self._retired = []

    def _new_session(self, *, reuse: bool) -> aiohttp.ClientSession:
        trace = aiohttp.TraceConfig()
        trace.on_request_headers_sent.append(self._on_sent)
        trace.on_request_chunk_sent.append(self._on_chunk)
        trace.on_connection_reuseconn.append(self._on_reuse)
        connector = aiohttp.TCPConnector(
            limit=self._connections, limit_per_host=0, force_close=not reuse,
            keepalive_timeout=self._keepalive_s if reuse else None,
        )
        return aiohttp.ClientSession(
            connector=connector, timeout=self._timeout, headers=self._headers,
            trace_configs=[trace],
        )

    def _stop_reusing(self) -> None:
        """The server dropped a kept-alive connection under a request: it closes idle
        connections sooner than we expect. From now on every request gets its own connection,
        so no further request is lost this way (requests in flight finish on the old pool)."""
        if self._reuse and self._session is not None:
            self._reuse = False
            self._retired.append(self._session)
            self._session = self._new_session(reuse=False)

    # aiohttp calls these just *before* it hands the bytes to the transport (3.10+ buffers
    # the headers and writes them with the body), so "sent" is conservative: set a moment
    # early, never late. sent_ns is the last such moment, right before the body goes out.
    @staticmethod
    async def _on_sent(
        session: aiohttp.ClientSession, ctx: SimpleNamespace, params: object
    ) -> None:
        ctx.trace_request_ctx["sent_ns"] = time.perf_counter_ns()

    @staticmethod
    async def _on_chunk(
        session: aiohttp.ClientSession, ctx: SimpleNamespace, params: object
    ) -> None:
        trace = ctx.trace_request_ctx
        trace["sent_ns"] = time.perf_counter_ns()
        trace["chunks"] = trace.get("chunks", 0) + 1

    @staticmethod
    async def _on_reuse(
        session: aiohttp.ClientSession, ctx: SimpleNamespace, params: object
    ) -> None:
        ctx.trace_request_ctx["reused"] = True

    async def stream_chat(self, body: dict[str, Any]) -> ChatResponse:
        """Stream one chat completion; failures come back as data on the response."""
        if self._session is None:
            raise RuntimeError("use 'async with AiohttpChatClient(...)' before stream_chat")
        payload = json.dumps(body).encode()  # encoded once: every attempt sends the same bytes
        attempts: list[AttemptRecord] = []
        resends = retries = 0
        for _ in range(MAX_RESENDS + self._max_retries + 1):  # bounded: each pass counts one
            response = ChatResponse(
                started_ns=time.perf_counter_ns(), resends=resends, retries=retries,
                attempts=attempts,
            )
            unwritten = await self._attempt(payload, response)
            kind = response.error_kind
            if kind is None:
                return response
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
                        started_ns=time.perf_counter_ns(), resends=resends, retries=retries,
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

    async def _attempt(self, payload: bytes, out: ChatResponse) -> bool:
        """One attempt, filling ``out``; True when it failed before any byte was written on
        a reused connection (safe to send again)."""
        trace: dict[str, Any] = {}
        try:
            async with asyncio.timeout(self._request_timeout_s):
                await self._exchange(payload, out, trace)
        except RequestError as err:
            out.fail(err.kind, str(err))
            if err.http_status is not None:
                out.http_status = err.http_status
            out.retry_after_s = err.retry_after_s
            return not err.sent
        except TimeoutError:
            out.fail("turn_deadline", f"request exceeded {self._request_timeout_s:g} s")
        except asyncio.CancelledError as err:
            out.fail("cancelled", "the run ended while this turn was in flight")
            setattr(err, _ATTR, out)
            raise
        except Exception as err:  # a server's odd stream must cost a record, not the run
            out.fail("malformed", f"unexpected {type(err).__name__} reading the stream: {err}")
        finally:
            if out.sent_ns is None:
                out.sent_ns = trace.get("sent_ns")
        return False

    async def _exchange(self, payload: bytes, out: ChatResponse, trace: dict[str, Any]) -> None:
        assert self._session is not None
        got_response = False
        # One pass of the event loop before taking a pooled connection: a server that closes
        # the connection right after a response (llama.cpp's pattern) has its FIN read by then,
        # so the pool drops that connection instead of handing it to this request.
        await asyncio.sleep(0)
        try:
            async with self._session.post(
                self.url, data=payload, trace_request_ctx=trace, allow_redirects=False
            ) as resp:
                out.headers_ns = time.perf_counter_ns()
                out.sent_ns = trace.get("sent_ns", out.started_ns)
                out.http_status = resp.status
                got_response = True
                if resp.status != 200:
                    detail = (await resp.content.read(2048)).decode("utf-8", "replace")
                    raise RequestError(
                        status_kind(resp.status),
                        f"HTTP {resp.status}: {detail.strip()[:300]}",
                        http_status=resp.status,
                        retry_after_s=retry_after(resp.headers.get("Retry-After")),
                    )
                content_type = resp.headers.get("Content-Type")
                if content_type is not None and resp.content_type != "text/event-stream":
                    detail = (await resp.content.read(200)).decode("utf-8", "replace")
                    raise RequestError(
                        "not_event_stream",
                        f"HTTP 200 with Content-Type {content_type!r}, not text/event-stream "
                        f"(a proxy's page, or a server that ignored stream=true): "
                        f"{detail.strip()[:120]!r}",
                    )
                await _read_stream(resp, out)
        except RequestError:
            raise
        except aiohttp.ClientConnectorError as err:  # a ClientOSError: catch it first
            raise RequestError(connect_kind(err), f"cannot connect to {self.url}: {err}") \
                from err
        except aiohttp.ConnectionTimeoutError as err:
            raise RequestError("connect_timeout", f"cannot connect to {self.url}: {err}") \
                from err
        except aiohttp.ServerTimeoutError as err:  # SocketTimeoutError: the read gap
            raise RequestError("read_stall", f"no data for too long: {err}") from err
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError,
                aiohttp.ClientPayloadError) as err:
            safe = not got_response and unwritten(err, trace)
            if not got_response and trace.get("reused"):
                self._stop_reusing()
            where = "after the response began" if got_response else "before any response"
            message = f"connection closed {where}: {type(err).__name__}: {err}"
            raise RequestError("disconnected", message, sent=not safe) from err
        except aiohttp.ClientResponseError as err:  # HTTP the parser could not read
            raise RequestError("malformed", f"bad HTTP response: {err}") from err
        except (aiohttp.ClientError, ValueError) as err:
            raise RequestError("malformed", f"{type(err).__name__}: {err}") from err


async def _read_stream(resp: aiohttp.ClientResponse, out: ChatResponse) -> None:
    """Read the event stream into ``out``; every read is stamped as soon as it returns and
    holds all the bytes buffered by then (one wake-up, one pass)."""
    stream = ChatStream()
    content = resp.content
    clock = time.perf_counter_ns
    try:
        for _ in range(1 << 40):  # bounded by the read gap and the turn deadline
            raw = await content.readany()
            now = clock()
            if not raw:
                if not stream.close(now):
                    raise RequestError(
                        "truncated", "the stream ended without data: [DONE]"
                        + ("" if stream.finish_reason else " and without a finish_reason")
                    )
                break
            if stream.feed(raw, now):
                break
    finally:
        out.text = stream.text
        out.first_content_ns = stream.first_content_ns
        out.last_content_ns = stream.last_content_ns
        out.content_events = stream.content_events
        out.content_ns = stream.content_ns
        out.finish_reason = stream.finish_reason
        out.usage = stream.usage
        out.timings = stream.timings
        out.system_fingerprint = stream.system_fingerprint
        out.model = stream.model
        out.request_id = stream.request_id
        out.saw_done = stream.saw_done
        out.done_ns = stream.done_ns if stream.done_ns is not None else clock()


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
