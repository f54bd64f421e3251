"""A replay's cache state, from turn 1 of both runs (:class:`workloads.model.replay.Replay`).
Pure.

The replay re-sends the recorded run's prompts byte for byte. Its turn 1 is where a warm
target shows: the recorded run's turn-1 prompts carried fresh nonces, so what it found
cached there is what any run finds (shared system text, at most), while a target that still
holds the recorded prompts serves the replay's turn 1 almost whole from cache (seen: 9,184
of 9,192 tokens, TTFT 0.022 s against the recorded 0.106 s). The replay's cache is
**warm** when its turn-1 hit rate covers at least half of what the recorded run's missed:
``replay ≥ recorded + WARM_SHARE × (1 − recorded)``; else **cold**. Both hit rates are Σ
cached / Σ prompt over the valid measured turn-1 records, so the two runs' own prompt counts
(equal on one target; a different tokenizer elsewhere) do not matter.
"""

from __future__ import annotations

from collections.abc import Iterable

from workloads.model.records import TurnRecord
from workloads.model.replay import CacheState, Replay, Turn1Cache

__all__ = ["WARM_SHARE", "cache_state", "judged", "turn1_cache"]

WARM_SHARE = 0.5  # of what the recorded run's turn 1 computed afresh, found cached


def turn1_cache(records: Iterable[TurnRecord]) -> Turn1Cache | None:
    """Turn 1 of the measured repetitions (valid, the users' own sessions); None when there
    is no such record."""
    ones = [
        r
        for r in records
        if r.turn == 1
        and not r.warmup
        and r.valid
        and r.parent_session is None
        and r.prompt_tokens is not None
    ]
    if not ones:
        return None
    cached = (
        None
        if any(r.cached_tokens is None for r in ones)
        else sum(r.cached_tokens or 0 for r in ones)
    )
    return Turn1Cache(
        records=len(ones),
        prompt_tokens=sum(r.prompt_tokens or 0 for r in ones),
        cached_tokens=cached,
    )


def cache_state(recorded: Turn1Cache | None, replayed: Turn1Cache | None) -> CacheState | None:
    """ "warm" or "cold" (module doc); None when either hit rate is not known."""
    before = recorded.hit_rate if recorded is not None else None
    now = replayed.hit_rate if replayed is not None else None
    if before is None or now is None:
        return None
    return "warm" if now > before and now >= before + WARM_SHARE * (1 - before) else "cold"


def judged(replay: Replay, records: Iterable[TurnRecord]) -> Replay:
    """``replay`` with this run's turn 1 and the cache state, from its ``records``."""
    mine = turn1_cache(records)
    return replay.model_copy(
        update={"turn1": mine, "cache": cache_state(replay.recorded_turn1, mine)}
    )
