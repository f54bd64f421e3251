"""What a replay (``run --replay``) re-sent, and the cache it found: ``RunResult.replay``
and the run header's (format 5).

A replay re-sends prompts byte for byte that the recorded run sent. Against the target that
recorded them, and while its prefix cache still holds them, turn 1 finds its whole prompt
cached where the recorded run computed it afresh: TTFT, prefill and cache figures then
describe a warm cache, not the recorded run's conditions. The result says which it was
(:func:`workloads.core.replay.judged` decides, from both runs' turn-1 records).
"""

from __future__ import annotations

from typing import Literal

from workloads.model.base import Frozen

__all__ = ["CacheState", "Replay", "Turn1Cache"]

# "warm": the target still held the recorded run's prompts; "cold": it did not.
CacheState = Literal["warm", "cold"]


class Turn1Cache(Frozen):
    """Turn 1 of a run's measured repetitions: Σ prompt and Σ cached tokens over its valid
    records (the users' own sessions)."""

    records: int
    prompt_tokens: int
    cached_tokens: int | None  # None: the server reported no cached tokens

    @property
    def hit_rate(self) -> float | None:
        """Σ cached / Σ prompt; None when cached tokens are not reported or no prompt."""
        if self.cached_tokens is None or self.prompt_tokens <= 0:
            return None
        return self.cached_tokens / self.prompt_tokens


class Replay(Frozen):
    """The recorded run a replay re-sent, and turn 1's cache in both runs."""

    recorded: str  # the recorded run's directory, as given to --replay
    recorded_label: str | None = None
    recorded_created_unix: float | None = None
    recorded_turn1: Turn1Cache | None = None  # None: no valid measured turn 1
    turn1: Turn1Cache | None = None  # this run's; None: none measured (yet)
    cache: CacheState | None = None  # None: not known (no cached counts, or no turn 1)
