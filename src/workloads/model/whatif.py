"""What the what-if cache oracle (:mod:`workloads.core.whatif`) saves in a result."""

from __future__ import annotations

from workloads.model.base import Frozen

__all__ = ["OracleTurn", "WhatIfTurn"]


class OracleTurn(Frozen):
    """Ideal prefix-cache figures for one turn under one capacity."""

    turn: int
    requests: int
    prompt_tokens: int
    hit_tokens: int
    capacity_tokens: int | None  # None = unlimited

    @property
    def hit_rate(self) -> float | None:
        """hit tokens / prompt tokens (vLLM's prefix-cache hit rate)."""
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else None


class WhatIfTurn(Frozen):
    """One turn under a given capacity and under unlimited capacity, side by side."""

    turn: int
    requests: int
    prompt_tokens: int
    capacity_tokens: int
    lru_hit_tokens: int
    unlimited_hit_tokens: int

    @property
    def lru_hit_rate(self) -> float | None:
        """What an LRU cache of ``capacity_tokens`` would serve, over prompt tokens."""
        return self.lru_hit_tokens / self.prompt_tokens if self.prompt_tokens else None

    @property
    def unlimited_hit_rate(self) -> float | None:
        """What an unlimited cache would serve, over prompt tokens."""
        return self.unlimited_hit_tokens / self.prompt_tokens if self.prompt_tokens else None

    @property
    def lru_effectiveness(self) -> float | None:
        """The capacity-limited hits as a fraction of the unlimited ones (the ideal cache
        effectiveness at this capacity)."""
        if not self.unlimited_hit_tokens:
            return None
        return self.lru_hit_tokens / self.unlimited_hit_tokens
