"""Small, pure statistics: medians, percentiles and min–max bands. None in, None out.

:func:`band` returns the one band type, :class:`~workloads.model.summary.BandSummary`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from itertools import pairwise

from workloads.model.summary import BandSummary, Percentiles

__all__ = ["band", "chunk_gaps_us", "median", "percentile", "percentiles"]


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


def band(values: Iterable[float | None]) -> BandSummary | None:
    """Median, min and max of the known values; None when there are none."""
    data = _clean(values)
    if not data:
        return None
    mid = percentile(data, 50)
    assert mid is not None
    return BandSummary(median=mid, low=data[0], high=data[-1], n=len(data))


def percentiles(values: Iterable[float | None]) -> Percentiles | None:
    """p50, p90, p99 and max of the known values; None when there are none."""
    data = _clean(values)
    if not data:
        return None
    p50, p90, p99 = (percentile(data, q) for q in (50, 90, 99))
    assert p50 is not None and p90 is not None and p99 is not None
    return Percentiles(p50=p50, p90=p90, p99=p99, max=data[-1], n=len(data))


def chunk_gaps_us(arrivals_ns: Sequence[int] | None) -> list[int] | None:
    """Content-chunk arrival times (perf_counter_ns, in order) as the gaps between them in
    whole microseconds: what a TurnRecord keeps of them. Microseconds: inter-token gaps are
    milliseconds, and six digits a gap keep records.jsonl small. None when not recorded."""
    if arrivals_ns is None:
        return None
    return [round((b - a) / 1000) for a, b in pairwise(arrivals_ns)]
