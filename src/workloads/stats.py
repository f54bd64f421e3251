"""Small, pure statistics: medians, percentiles and min–max bands. None in, None out."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["Band", "band", "median", "percentile"]


@dataclass(frozen=True, slots=True)
class Band:
    """A median with the min–max range it came from, and how many values it summarises."""

    median: float
    low: float
    high: float
    n: int


def _clean(values: Iterable[float | None]) -> list[float]:
    return sorted(v for v in values if v is not None and not math.isnan(v))


def percentile(values: Iterable[float | None], q: float) -> float | None:
    """Linear-interpolated percentile, q in [0, 100]; None when there are no values."""
    data = _clean(values)
    if not data:
        return None
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be in [0, 100], got {q}")
    pos = (len(data) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def median(values: Iterable[float | None]) -> float | None:
    return percentile(values, 50)


def band(values: Sequence[float | None] | Iterable[float | None]) -> Band | None:
    data = _clean(values)
    if not data:
        return None
    mid = percentile(data, 50)
    assert mid is not None
    return Band(median=mid, low=data[0], high=data[-1], n=len(data))
