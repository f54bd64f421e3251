"""Random draws from a scenario's distributions: durations in seconds and token counts.
Pure given the generator: the runner seeds one per (cell, repetition, session) and purpose,
so the same scenario draws the same values in every run, arm and replay.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Sequence

from workloads.model.scenario import Distribution, Sizes, TokenCount

__all__ = ["draw_seconds", "draw_tokens", "quantile"]


def quantile(points: Sequence[tuple[float, float]], u: float) -> float:
    """The value at quantile ``u`` of a table ``[[q, value], ...]`` (q from 0 to 1): log-linear
    between points whose values are both positive (a heavy tail stays heavy between its
    published quantiles), linear otherwise. Pure."""
    qs = [q for q, _ in points]
    i = min(max(bisect.bisect_right(qs, u), 1), len(points) - 1)
    (q0, v0), (q1, v1) = points[i - 1], points[i]
    f = 0.0 if q1 == q0 else min(max((u - q0) / (q1 - q0), 0.0), 1.0)
    if v0 > 0 and v1 > 0:
        return math.exp(math.log(v0) + f * (math.log(v1) - math.log(v0)))
    return v0 + f * (v1 - v0)


def draw_seconds(dist: Distribution, rng: random.Random) -> float:
    """One duration in seconds from ``dist``, capped at ``dist.max_s``. A distribution whose
    median is 0 (and that is not a table) gives 0 without drawing."""
    if dist.kind == "quantiles" and dist.points:
        value = quantile(dist.points, rng.random())
    elif dist.median <= 0:
        return 0.0
    elif dist.kind == "constant":
        value = dist.median
    elif dist.kind == "lognormal":
        value = rng.lognormvariate(math.log(dist.median), dist.sigma)
    else:  # exponential with the given median: mean = median / ln 2
        value = rng.expovariate(math.log(2) / dist.median)
    return min(value, dist.max_s)


def draw_tokens(value: TokenCount, rng: random.Random) -> int:
    """One token count: a fixed integer as it is (no draw); from a distribution, rounded and
    clamped to [min, max]."""
    if isinstance(value, int):
        return value
    return _draw_sizes(value, rng)


def _draw_sizes(sizes: Sizes, rng: random.Random) -> int:
    if sizes.kind == "constant":
        drawn = sizes.median
    elif sizes.kind == "lognormal":
        drawn = rng.lognormvariate(math.log(sizes.median), sizes.sigma)
    else:
        assert sizes.points is not None  # validated
        drawn = quantile(sizes.points, rng.random())
    return min(max(round(drawn), sizes.min), sizes.max)
