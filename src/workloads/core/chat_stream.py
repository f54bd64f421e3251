"""One chat completion stream folded into what a turn needs: raw bytes in, stamps, text,
tool calls, finish_reason, usage out. Pure: the caller passes the arrival time of every read.

Tool calls arrive as ``delta.tool_calls`` pieces (OpenAI's and vLLM's shape): the first piece
of a call has its ``index``, ``id`` and ``function.name``, later pieces of the same ``index``
carry more of ``function.arguments``, which are joined in order.

This is the client's hot path, run once per read of the socket. The common event (a content
delta or a finish: ``_CommonChunk``) is decoded by msgspec into a typed struct and folded
with no dict of ours and one stamp call per read; an event of any other shape fails that
decode and is parsed again by orjson and read by the general rules (:func:`generated`), which
also read the first chunk (the completion's ``id`` and ``model``).
Failures the stream itself shows (a malformed event, an error object) raise
:class:`~workloads.model.errors.RequestError` with the partial state kept on the instance.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from json import dumps
from typing import Any

try:  # orjson parses a chunk ~4x faster than json (benchmarks in the commit); same results
    from orjson import loads
except ImportError:  # a platform without an orjson wheel: the standard library
    from json import loads  # type: ignore[assignment]

from msgspec import UNSET, Struct, UnsetType
from msgspec.json import Decoder

from workloads.core.sse import SSEDecoder
from workloads.model.errors import RequestError

__all__ = ["ChatStream", "Usage", "generated"]

DONE = b"[DONE]"


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts as the server reported them. None = not reported (never 0)."""

    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None


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
        return "".join(
            p["text"] for p in value if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _usage(raw: dict[str, Any]) -> Usage:
    details = raw.get("prompt_tokens_details")
    return Usage(
        prompt_tokens=_count(raw.get("prompt_tokens")),
        completion_tokens=_count(raw.get("completion_tokens")),
        cached_tokens=_count(details.get("cached_tokens")) if isinstance(details, dict) else None,
    )


def _load(data: bytes | str) -> dict[str, Any]:
    """The event's JSON object; RequestError ``malformed`` or ``error_event`` otherwise."""
    try:
        obj = loads(data)
    except (ValueError, RecursionError) as err:  # JSONDecodeError, bad UTF-8, deep nesting
        raise RequestError(
            "malformed", f"malformed JSON in stream: {err} in {data[:80]!r}"
        ) from err
    if type(obj) is not dict:
        raise RequestError("malformed", f"stream chunk is not an object: {data[:80]!r}")
    if "error" in obj:
        error = obj["error"]
        message = error.get("message", error) if isinstance(error, dict) else error
        raise RequestError("error_event", f"error in stream: {message}")
    return obj


def generated(delta: dict[str, Any]) -> tuple[str, str, list[Any] | None]:
    """What one chunk's ``delta`` generated: (content text, reasoning text, tool-call pieces).

    The one rule for a **content chunk** (what TTFT, ITL and the decode rate are measured
    from): a chunk whose delta generated any of the three. Content is ``content`` (a string,
    or OpenAI's content parts); reasoning is ``reasoning_content`` (vLLM, SGLang, DeepSeek)
    or else ``reasoning`` (vLLM's newer name); tool calls are a non-empty ``tool_calls``
    list. A role-only delta, ``"content": ""`` and SGLang's null fields generate nothing.

        content, reasoning, calls = generated({"content": "Hel"})   # ("Hel", "", None)
        is_content_chunk = any(generated(delta))
    """
    content = delta.get("content")
    if type(content) is not str:  # content parts, or absent
        content = "" if content is None else _text(content)
    if content and len(delta) == 1:  # the common delta, {"content": ...}: nothing else
        return content, "", None
    reasoning = delta.get("reasoning_content")
    if type(reasoning) is not str:
        reasoning = "" if reasoning is None else _text(reasoning)
    if not reasoning:
        reasoning = delta.get("reasoning")
        if type(reasoning) is not str:
            reasoning = "" if reasoning is None else _text(reasoning)
    calls = delta.get("tool_calls")
    return content, reasoning, calls if calls and type(calls) is list else None


class _CommonDelta(Struct, gc=False):
    """The common delta: content text, and reasoning and tool calls null or absent."""

    content: str = ""
    reasoning_content: None = None
    reasoning: None = None
    tool_calls: None = None


class _CommonChoice(Struct, gc=False):
    delta: _CommonDelta
    finish_reason: str | None = None


class _CommonChunk(Struct, gc=False):
    """The common ``chat.completion.chunk``, as a type: what most events of a stream are (a
    content delta, or a finish). A chunk of any other shape (content parts, reasoning, tool
    calls, usage, timings, an ``error`` member, even null) fails to decode as this and goes
    through the general path, which reads it as before. Only an all-ASCII chunk is decoded
    as this (non-ASCII text takes the general path), so bad UTF-8 is malformed in every field,
    as orjson judges the first chunk; fields the client does not read (``id``, ``model``,
    ``logprobs``, ...) are checked for JSON syntax and skipped, so an out-of-range number
    there (``1e999``) is accepted where the general path would call it malformed."""

    choices: list[_CommonChoice]
    usage: None = None
    timings: None = None
    error: UnsetType = UNSET  # present at all: the general path (an error event)


# msgspec's typed decoding: ~0.6 µs a chunk against ~1.0 µs for orjson's dict, and no dict
# look-ups after it (issue 20: the per-token path).
_decode_common = Decoder(_CommonChunk).decode

_PARTS_KEPT = 256  # content parts held apart before they are joined (per read)


class ChatStream:
    """The state of one streamed chat completion, fed with every read and its arrival time.

    stream = ChatStream()
    for raw, now in reads:
        if stream.feed(raw, now):   # True once ``data: [DONE]`` arrived
            break
    stream.close(now)               # the body ended: flush an undispatched event
    """

    __slots__ = (
        "_calls",
        "_decoder",
        "_parts",
        "_reasoning",
        "content_events",
        "content_ns",
        "done_ns",
        "finish_reason",
        "first_content_ns",
        "first_text_ns",
        "last_content_ns",
        "merged",
        "model",
        "request_id",
        "saw_done",
        "system_fingerprint",
        "timings",
        "usage",
    )

    def __init__(self) -> None:
        self._decoder = SSEDecoder()
        self._parts: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, _CallParts] = {}
        # The first chunk with generated content of any kind (content, reasoning or a tool
        # call: what TTFT is measured to), and the first with content text.
        self.first_content_ns: int | None = None
        self.first_text_ns: int | None = None
        self.last_content_ns: int | None = None
        # Every content chunk's arrival (one stamp per read: chunks read together share it),
        # for the inter-token latency distribution; 8 bytes a chunk.
        self.content_ns: array[int] = array("q")
        # The content chunks (indices into content_ns) read together with later ones while
        # the client's loop stalled: each carries its read's stamp, the last one's arrival,
        # not its own (:meth:`merge`; wire/arrival.py says why no finer stamp exists).
        self.merged: array[int] = array("q")
        self.done_ns: int | None = None
        self.content_events = 0
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.timings: dict[str, Any] | None = None
        self.system_fingerprint: str | None = None
        self.model: str | None = None
        self.request_id: str | None = None
        self.saw_done = False

    @property
    def text(self) -> str:
        """The generated content so far, in order (joined once: the parts collapse into
        the text, so reading it again costs nothing and later parts still append)."""
        parts = self._parts
        if len(parts) > 1:
            parts[:] = ["".join(parts)]  # in place: feed's bound ``append`` stays valid
        return parts[0] if parts else ""

    @property
    def reasoning_text(self) -> str:
        """The reasoning (``delta.reasoning_content`` or ``delta.reasoning``) so far."""
        return "".join(self._reasoning)

    @property
    def tool_calls(self) -> list[dict[str, Any]] | None:
        """The tool calls assembled so far, in ``index`` order, as an assistant message
        carries them (``{"id", "type": "function", "function": {"name", "arguments"}}``);
        None when no tool-call delta came."""
        if not self._calls:
            return None
        return [self._calls[index].call() for index in sorted(self._calls)]

    def feed(self, raw: bytes, now: int) -> bool:
        """Fold the bytes of one read, which arrived at ``now``; True when the stream is
        over (``[DONE]``)."""
        fields, plain = self._decoder.feed_data(raw)
        for data, name, _, _ in fields:
            if self._event(data, name, now):
                return True
        # The common event, a content delta, here: one typed decode, no dict of ours, no
        # call per event; its stamps are taken once per read. Every other shape (and the
        # first chunk, which names the completion) goes through _event.
        named = self.request_id is not None
        add_part = self._parts.append
        stamps = 0  # content events of this read not stamped yet (all arrived at ``now``)
        for data in plain:
            if named and data.isascii():  # UTF-8 is orjson's to check (the general path)
                try:
                    chunk = _decode_common(data)
                except (ValueError, RecursionError):  # not the common shape: _event decides
                    pass
                else:
                    if chunk.choices:
                        choice = chunk.choices[0]
                        if content := choice.delta.content:
                            add_part(content)
                            stamps += 1
                        if choice.finish_reason is not None:
                            self.finish_reason = choice.finish_reason
                    continue
            if stamps:
                self._stamp(now, stamps)
                stamps = 0
            if self._event(data, None, now):
                return True
            named = self.request_id is not None
        if stamps:
            self._stamp(now, stamps)
        if len(self._parts) > _PARTS_KEPT:  # a string a token is ~60 bytes: join them
            self._parts[:] = ["".join(self._parts)]  # in place, as ``text`` does
        return False

    def _stamp(self, now: int, events: int) -> None:
        """``events`` content chunks with content text arrived at ``now``."""
        if self.first_text_ns is None:
            self.first_text_ns = now
            if self.first_content_ns is None:
                self.first_content_ns = now
        self.last_content_ns = now
        if events == 1:
            self.content_ns.append(now)
        else:
            self.content_ns.extend([now] * events)
        self.content_events += events

    def merge(self, first: int) -> None:
        """The content chunks from index ``first`` on (those of the last read) arrived at
        times the read cannot tell apart: mark them merged."""
        self.merged.extend(range(first, self.content_events))

    def close(self, now: int) -> bool:
        """The body ended at ``now``: fold an event left without its blank line."""
        return any(self._event(e.raw, e.event, now) for e in self._decoder.close())

    def _event(self, data: bytes, name: str | None, now: int) -> bool:
        # Written for the common event, a content delta: one parse, a few dict lookups, no
        # objects of our own. The rare shapes go through the general helpers.
        if name is not None and name == "error":
            message = data.decode("utf-8", "replace")[:300]
            raise RequestError("error_event", f"error event in stream: {message}")
        if data[:1] != b"{" and (data == DONE or (len(data) < 16 and data.strip() == DONE)):
            self.saw_done = True
            self.done_ns = now
            return True
        obj = _load(data)
        choices = obj.get("choices")
        if choices and type(choices) is list and type(choice := choices[0]) is dict:
            delta = choice.get("delta")
            if type(delta) is dict:
                content, reasoning, calls = generated(delta)
                if content or calls or reasoning:
                    if self.first_content_ns is None:
                        self.first_content_ns = now
                    self.last_content_ns = now
                    self.content_ns.append(now)
                    self.content_events += 1
                    if content:
                        if self.first_text_ns is None:
                            self.first_text_ns = now
                        self._parts.append(content)
                    if reasoning:
                        self._reasoning.append(reasoning)
                    if calls:
                        self._merge(calls)
            reason = choice.get("finish_reason")
            if reason is not None and type(reason) is str:
                self.finish_reason = reason
        if self.request_id is None:  # the first chunk names the completion and the model
            self.request_id = _str(obj.get("id"))
            self.model = _str(obj.get("model"))
            self.system_fingerprint = _str(obj.get("system_fingerprint"))
        if (raw_usage := obj.get("usage")) is not None and type(raw_usage) is dict:
            self.usage = _usage(raw_usage)
        if (timings := obj.get("timings")) is not None and type(timings) is dict:
            self.timings = timings
        return False

    def _merge(self, pieces: list[Any]) -> None:
        """Fold ``delta.tool_calls`` pieces into the calls, by ``index`` (a piece without
        one continues the last call, or starts a new one when it brings an ``id``)."""
        for piece in pieces:
            if type(piece) is not dict:
                continue
            index = piece.get("index")
            if type(index) is not int:
                last = max(self._calls, default=-1)
                index = last if last >= 0 and not piece.get("id") else last + 1
            parts = self._calls.get(index)
            if parts is None:
                parts = self._calls[index] = _CallParts()
            if parts.id is None:
                parts.id = _str(piece.get("id"))
            if (kind := _str(piece.get("type"))) is not None:
                parts.type = kind
            function = piece.get("function")
            if type(function) is dict:
                if parts.name is None:  # sent once, with the call's first piece
                    parts.name = _str(function.get("name"))
                arguments = function.get("arguments")
                if type(arguments) is str and arguments:
                    parts.arguments.append(arguments)
                elif type(arguments) is dict:  # an object instead of its JSON text
                    parts.arguments.append(dumps(arguments))


class _CallParts:
    """One tool call as its pieces arrive."""

    __slots__ = ("arguments", "id", "name", "type")

    def __init__(self) -> None:
        self.id: str | None = None
        self.type = "function"
        self.name: str | None = None
        self.arguments: list[str] = []

    def call(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type,
            "function": {"name": self.name or "", "arguments": "".join(self.arguments)},
        }
