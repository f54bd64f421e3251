"""The streaming chat client: POST with ``stream=true``, stamp every chunk, decode, map errors.

This is the only module that knows aiohttp's exceptions; they are translated here into the
closed set of :data:`workloads.model.errors.ErrorKind` and returned as data on the
:class:`ChatResponse` (a failed request never raises out of :meth:`ChatClient.stream_chat`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Protocol

import aiohttp

from workloads.core.sse import SSEDecoder
from workloads.model.errors import ErrorKind, RequestError
from workloads.model.scenario import Timeouts

__all__ = [
    "AiohttpChatClient",
    "AttemptHook",
    "ChatClient",
    "ChatResponse",
    "Usage",
    "parse_chunk",
]

# A request whose pooled connection turns out to be dead before any response byte is sent
# again on a fresh connection, at most this many times. Seen on llama.cpp's server: it closes
# a kept-alive connection after each streamed response, and the next request on it fails with
# "Server disconnected" before the server has read it.
MAX_RESENDS = 2
DEFAULT_TIMEOUTS = Timeouts()  # the scenario's defaults: one home for them


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts as the server reported them. None = not reported (never 0)."""

    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None


@dataclass(slots=True)
class ChatResponse:
    """Everything one streamed request produced, success or not. Times are perf_counter_ns."""

    started_ns: int  # the client began the request (before waiting for a connection)
    sent_ns: int | None = None  # the request body was written
    headers_ns: int | None = None  # response headers arrived
    first_content_ns: int | None = None  # first chunk with generated content
    last_content_ns: int | None = None  # last chunk with generated content
    done_ns: int | None = None  # the stream ended ([DONE] or EOF)
    http_status: int | None = None
    text: str = ""  # generated content, in order (what goes back into the history)
    content_events: int = 0  # chunks that carried generated content
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

    @property
    def ok(self) -> bool:
        return self.error_kind is None


# Called with each attempt's ChatResponse as it starts (reliability: cancelled turns keep
# what they measured).
AttemptHook = Callable[[ChatResponse], None]


class ChatClient(Protocol):
    """Anything that can stream one chat completion. Tests use a function-backed fake."""

    async def stream_chat(
        self, body: dict[str, Any], *, on_attempt: AttemptHook | None = None
    ) -> ChatResponse:
        """Stream one chat completion; ``on_attempt`` gets each attempt's ChatResponse as
        it starts, so a caller cancelled mid-request keeps what it measured."""
        ...


@dataclass(frozen=True, slots=True)
class _Chunk:
    content: str = ""
    has_content: bool = False
    finish_reason: str | None = None
    usage: Usage | None = None
    timings: dict[str, Any] | None = None
    system_fingerprint: str | None = None
    model: str | None = None
    request_id: str | None = None
    error: str | None = None


def _count(value: Any) -> int | None:
    """A token count, or None when absent or not a number (bool is not a count)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)


def _text(value: Any) -> str:
    """Delta text: a string, or OpenAI content parts ``[{"type": "text", "text": ...}]``."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(p["text"] for p in value if isinstance(p, dict) and isinstance(
            p.get("text"), str))
    return ""


def _parse_usage(raw: dict[str, Any]) -> Usage:
    details = raw.get("prompt_tokens_details")
    return Usage(
        prompt_tokens=_count(raw.get("prompt_tokens")),
        completion_tokens=_count(raw.get("completion_tokens")),
        cached_tokens=_count(details.get("cached_tokens")) if isinstance(details, dict) else None,
    )


def parse_chunk(data: str) -> _Chunk:
    """Interpret one ``chat.completion.chunk`` JSON payload. Pure."""
    try:
        obj = json.loads(data)
    except json.JSONDecodeError as err:
        return _Chunk(error=f"malformed JSON in stream: {err.msg} in {data[:80]!r}")
    if not isinstance(obj, dict):
        return _Chunk(error=f"stream chunk is not an object: {data[:80]!r}")
    if "error" in obj:
        error = obj["error"]
        message = error.get("message", error) if isinstance(error, dict) else error
        return _Chunk(error=f"error in stream: {message}")
    content = reasoning = ""
    has_content = False
    finish_reason = None
    choices = obj.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        choice = choices[0]
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            delta = {}
        content = _text(delta.get("content"))
        reasoning = _text(delta.get("reasoning_content")) or _text(delta.get("reasoning"))
        has_content = bool(content or reasoning or delta.get("tool_calls"))
        reason = choice.get("finish_reason")
        finish_reason = reason if isinstance(reason, str) else None
    raw_usage = obj.get("usage")  # OpenAI and TGI send "usage": null on ordinary chunks
    timings = obj.get("timings")
    return _Chunk(
        content=content,
        has_content=has_content,
        finish_reason=finish_reason,
        usage=_parse_usage(raw_usage) if isinstance(raw_usage, dict) else None,
        timings=timings if isinstance(timings, dict) else None,
        system_fingerprint=_str(obj.get("system_fingerprint")),
        model=_str(obj.get("model")),
        request_id=_str(obj.get("id")),
    )


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date; rare from inference servers


class AiohttpChatClient:
    """Streams ``POST {base_url}/chat/completions`` over one pooled aiohttp session.

        async with AiohttpChatClient("http://127.0.0.1:8000/v1", connections=5) as client:
            response = await client.stream_chat({"model": "m", "messages": [...]})

    ``connections`` should be at least the number of concurrent sessions, so no request
    waits for a connection (that wait would be counted in TTFT).
    """

    def __init__(
        self,
        base_url: str,
        *,
        connections: int = 100,
        api_key: str | None = None,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,  # connect, read gap, whole request
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self._connections = connections
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = aiohttp.ClientTimeout(
            total=None, connect=timeouts.connect_s, sock_read=timeouts.read_gap_s
        )
        self._request_timeout_s = timeouts.turn_s
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> AiohttpChatClient:
        trace = aiohttp.TraceConfig()
        trace.on_request_headers_sent.append(self._on_sent)
        trace.on_request_chunk_sent.append(self._on_sent)
        trace.on_connection_reuseconn.append(self._on_reuse)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self._connections, limit_per_host=0),
            timeout=self._timeout,
            headers=self._headers,
            trace_configs=[trace],
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @staticmethod
    async def _on_sent(
        session: aiohttp.ClientSession, ctx: SimpleNamespace, params: object
    ) -> None:
        ctx.trace_request_ctx["sent_ns"] = time.perf_counter_ns()

    @staticmethod
    async def _on_reuse(
        session: aiohttp.ClientSession, ctx: SimpleNamespace, params: object
    ) -> None:
        ctx.trace_request_ctx["reused"] = True

    async def stream_chat(
        self, body: dict[str, Any], *, on_attempt: AttemptHook | None = None
    ) -> ChatResponse:
        """Stream one chat completion; failures come back as data on the response.
        ``on_attempt`` is called with each attempt's response as it starts (filled in place:
        what a cancelled request had measured)."""
        if self._session is None:
            raise RuntimeError("use 'async with AiohttpChatClient(...)' before stream_chat")
        started = time.perf_counter_ns()
        resends = 0
        while True:
            response = ChatResponse(started_ns=started, resends=resends)
            if on_attempt is not None:
                on_attempt(response)
            try:
                async with asyncio.timeout(self._request_timeout_s):
                    await self._stream_once(body, response)
                return response
            except RequestError as err:
                if not err.sent and resends < MAX_RESENDS:
                    resends += 1
                    continue
                response.error_kind = err.kind
                response.error_message = str(err)
                response.http_status = err.http_status or response.http_status
                response.retry_after_s = err.retry_after_s
                return response
            except TimeoutError:
                response.error_kind = "timeout"
                response.error_message = f"request exceeded {self._request_timeout_s:g} s"
                return response
            except Exception as err:  # a server's odd stream must cost a record, not the run
                response.error_kind = "protocol"
                name = type(err).__name__
                response.error_message = f"unexpected {name} reading the stream: {err}"
                return response

    async def _stream_once(self, body: dict[str, Any], out: ChatResponse) -> None:
        assert self._session is not None
        trace: dict[str, Any] = {}
        got_bytes = False
        try:
            async with self._session.post(self.url, json=body, trace_request_ctx=trace) as resp:
                out.headers_ns = time.perf_counter_ns()
                out.sent_ns = trace.get("sent_ns", out.started_ns)
                out.http_status = resp.status
                got_bytes = True
                if resp.status != 200:
                    detail = (await resp.content.read(2048)).decode("utf-8", "replace")
                    raise RequestError(
                        "http",
                        f"HTTP {resp.status}: {detail.strip()[:300]}",
                        http_status=resp.status,
                        retry_after_s=_retry_after(resp.headers.get("Retry-After")),
                    )
                await self._read_stream(resp, out)
        except RequestError:
            raise
        except aiohttp.ClientConnectorError as err:  # a ClientOSError: catch it first
            raise RequestError("connect", f"cannot connect to {self.url}: {err}") from err
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as err:
            never_reached = not got_bytes and trace.get("reused", False)
            kind: ErrorKind = "disconnected" if got_bytes or never_reached else "connect"
            message = f"{type(err).__name__}: {err}"
            raise RequestError(kind, message, sent=not never_reached) from err
        except (aiohttp.ServerTimeoutError, TimeoutError) as err:
            raise RequestError("timeout", f"no data for too long: {err}") from err
        except aiohttp.ClientPayloadError as err:
            raise RequestError("disconnected", f"stream broken: {err}") from err
        except aiohttp.ClientError as err:
            raise RequestError("protocol", f"{type(err).__name__}: {err}") from err
        finally:
            # Also when cancelled before the response headers (reliability): the request was
            # written, and a cancelled turn's record says when.
            if out.sent_ns is None and "sent_ns" in trace:
                out.sent_ns = trace["sent_ns"]

    async def _read_stream(self, resp: aiohttp.ClientResponse, out: ChatResponse) -> None:
        decoder = SSEDecoder()
        text: list[str] = []
        try:
            async for raw in resp.content.iter_any():
                now = time.perf_counter_ns()
                for event in decoder.feed(raw):
                    if self._apply(event.data, now, out, text):
                        return
            for event in decoder.close():
                if self._apply(event.data, time.perf_counter_ns(), out, text):
                    return
        finally:
            out.text = "".join(text)
            if out.done_ns is None:
                out.done_ns = time.perf_counter_ns()
        if not out.saw_done and out.finish_reason is None:
            raise RequestError("disconnected", "stream ended before [DONE] or a finish_reason")

    @staticmethod
    def _apply(
        data: str, now: int, out: ChatResponse, text: list[str]
    ) -> bool:
        """Fold one event into ``out``; True when the stream is over."""
        if data.strip() == "[DONE]":
            out.saw_done = True
            out.done_ns = now
            return True
        chunk = parse_chunk(data)
        if chunk.error is not None:
            raise RequestError("protocol", chunk.error)
        if chunk.has_content:
            if out.first_content_ns is None:
                out.first_content_ns = now
            out.last_content_ns = now
            out.content_events += 1
            text.append(chunk.content)
        if chunk.finish_reason is not None:
            out.finish_reason = chunk.finish_reason
        if chunk.usage is not None:
            out.usage = chunk.usage
        if chunk.timings is not None:
            out.timings = chunk.timings
        out.system_fingerprint = chunk.system_fingerprint or out.system_fingerprint
        out.model = chunk.model or out.model
        out.request_id = out.request_id or chunk.request_id
        return False

