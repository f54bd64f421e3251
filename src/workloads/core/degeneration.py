"""The degeneration detector: does a completion loop, or has its vocabulary collapsed? Pure.

Forced-length outputs loop (``ignore_eos`` asks a model to go on after it is done), and a
broken stack emits repetition at full speed (seed 000's graph replay with speculation
"produced incoherent output"). A looping completion fed back into the history also inflates
prefix-cache and n-gram acceptance figures, so such turns are flagged in their records and
counted in the report; they stay in the rates (the server did generate them).

Four signals, each for the texts it can judge:

* repeated n-gram share — of the word 4-grams, the share that repeat an earlier one; real
  prose and code stay well under half (a diff or a table repeats some lines, not most);
* collapsed token set — distinct words / words;
* compressibility — zlib-compressed size / size, which also catches loops without spaces
  ("391391391…"); source code compresses to about a third, a loop to a few percent;
* for a short output (under :data:`MIN_WORDS` words, too few for the word signals, and
  usually too short for zlib, whose header outweighs a 100-byte loop): one unit of
  characters repeated back to back at least 3 times over most of the text. A 32-token
  corrupt reply (the simulator's ``rate_corrupt``: "Here is theHere is theHere is the…")
  has 22 words and 121 characters, and slipped past the other three; a sentence never
  repeats itself three times over 80 % of its length.
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
# A short output: one unit repeated back to back at least LOOP_REPEATS times, over at least
# LOOP_SHARE of its characters, loops; under MIN_LOOP_CHARS ("ok ok ok") it is too short.
LOOP_REPEATS = 3
LOOP_SHARE = 0.8
MIN_LOOP_CHARS = 16


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
    if len(words) < MIN_WORDS and (loop := _loop(text.strip())) is not None:
        unit, share, length = loop
        return (
            f"a {unit}-character unit repeated back to back over {share:.0%} of "
            f"{length:,} characters"
        )
    return None


def _loop(text: str) -> tuple[int, float, int] | None:
    """(unit length, share of the text, text length) of the smallest unit repeated back to
    back at least :data:`LOOP_REPEATS` times over at least :data:`LOOP_SHARE` of ``text``;
    None when there is none.

    Such a run holds the text's middle half, so a period ``p`` is tried by one slice
    comparison there (C speed: no per-character loop for the periods that fail) and only a
    period that passes is grown to its run's edges. Units of whitespace alone (indentation)
    do not count."""
    n = len(text)
    if n < MIN_LOOP_CHARS:
        return None
    lo, hi = n // 4, n - n // 4
    for p in range(1, n // LOOP_REPEATS + 1):
        if text[lo : hi - p] != text[lo + p : hi]:
            continue
        start, end = lo, hi  # text[i] == text[i + p] for i in [start, end - p)
        while start > 0 and text[start - 1] == text[start - 1 + p]:
            start -= 1
        while end < n and text[end] == text[end - p]:
            end += 1
        length = end - start
        if (
            length >= LOOP_REPEATS * p
            and length >= LOOP_SHARE * n
            and text[start : start + p].strip()
        ):
            return p, length / n, n
    return None
