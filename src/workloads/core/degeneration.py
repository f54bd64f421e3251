"""The degeneration detector: does a completion loop, or has its vocabulary collapsed? Pure.

Forced-length outputs loop (``ignore_eos`` asks a model to go on after it is done), and a
broken stack emits repetition at full speed (seed 000's graph replay with speculation
"produced incoherent output"). A looping completion fed back into the history also inflates
prefix-cache and n-gram acceptance figures, so such turns are flagged in their records and
counted in the report; they stay in the rates (the server did generate them).

Three signals, each with a floor below which a text is too short to judge:

* repeated n-gram share — of the word 4-grams, the share that repeat an earlier one; real
  prose and code stay well under half (a diff or a table repeats some lines, not most);
* collapsed token set — distinct words / words;
* compressibility — zlib-compressed size / size, which also catches loops without spaces
  ("391391391…"); source code compresses to about a third, a loop to a few percent.
"""

from __future__ import annotations

import zlib

__all__ = ["degeneration"]

NGRAM = 4
MIN_WORDS = 32  # fewer words: too short to judge by words
MIN_CHARS = 256  # fewer characters: too short to judge by compression
REPEATED_SHARE = 0.6  # more of the 4-grams repeat an earlier one: looping
DISTINCT_SHARE = 0.1  # fewer distinct words per word: collapsed
COMPRESSED_SHARE = 0.08  # compresses smaller than this: looping


def degeneration(text: str) -> str | None:
    """Why ``text`` looks degenerate, or None when it does not (or is too short to tell).

        degeneration("the cat sat. " * 40)  # "repeated 4-grams: 97% of 117"
    """
    words = text.split()
    if len(words) >= MIN_WORDS:
        grams = list(zip(*(words[i:] for i in range(NGRAM)), strict=False))
        repeats = len(grams) - len(set(grams))  # each gram equal to an earlier one
        if repeats / len(grams) > REPEATED_SHARE:
            return f"repeated {NGRAM}-grams: {repeats / len(grams):.0%} of {len(grams)}"
        distinct = len(set(words)) / len(words)
        if distinct < DISTINCT_SHARE:
            return f"collapsed vocabulary: {len(set(words))} distinct of {len(words)} words"
    raw = text.encode()
    if len(raw) >= MIN_CHARS:
        ratio = len(zlib.compress(raw, 9)) / len(raw)
        if ratio < COMPRESSED_SHARE:
            return f"compresses to {ratio:.1%} of {len(raw):,} bytes (a loop)"
    return None
