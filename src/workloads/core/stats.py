"""Small, pure statistics: medians, percentiles and min–max bands (None in, None out), and
the A/B significance test :func:`ratio_test`.

:func:`band` returns the one band type, :class:`~workloads.model.summary.BandSummary`.

Significance (what ``compare`` calls a difference): Welch's t-test on the logarithms of the
per-repetition values, two-sided, alpha 0.05, at least 3 repetitions per arm. Why this test:

* Mann-Whitney cannot reach alpha 0.05 at 3 repetitions a side (its smallest two-sided
  p-value there is 2/20 = 0.1), and 3 is what the seed records ran;
* a bootstrap of 3 values resamples at most 10 distinct sets and gives intervals far too
  narrow;
* Welch's t does not assume equal variances (a faster arm is often a steadier one), and on
  logarithms its interval is an interval of the *ratio* B/A of geometric means, which is the
  figure people quote ("1.40x [1.31-1.49]"); significant exactly when that interval
  excludes 1. Rates are positive and multiplicative, so the log scale is their natural one.

The t quantiles come from the regularized incomplete beta function (a continued fraction, as
pyperf also computes its own), so SciPy is not a dependency.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from workloads.model.summary import BandSummary, Percentiles

__all__ = ["ALPHA", "MIN_REPETITIONS", "RatioTest", "band", "chunk_gaps_us", "median",
           "percentile", "percentiles", "ratio_test", "t_cdf", "t_quantile"]

ALPHA = 0.05  # two-sided
MIN_REPETITIONS = 3  # per arm, for any verdict


def _clean(values: Iterable[float | None]) -> list[float]:
    data = [v for v in values if v is not None]
    if any(map(math.isnan, data)):  # one C pass; NaN is rare, so the filter below is too
        data = [v for v in data if not math.isnan(v)]
    data.sort()
    return data


def percentile(values: Iterable[float | None], q: float) -> float | None:
    """Linear-interpolated percentile, q in [0, 100]; None when there are no values."""
    data = _clean(values)
    if not data:
        return None
    return _sorted_percentile(data, q)


def _sorted_percentile(data: list[float], q: float) -> float:
    """:func:`percentile` of clean, sorted, non-empty ``data`` (ITL pools a value per
    streamed token: cleaned and sorted once, not once per percentile)."""
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


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz), bounded."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):  # converges in well under 100 terms for the df used here
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
        + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """Student's t distribution function with ``df`` (> 0, not necessarily whole) degrees."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"quantile p must be in (0, 1), got {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p and high < 1e12:  # bounded: doubling from 1 to 1e12
        high *= 2.0
    for _ in range(200):
        mid = (low + high) / 2.0
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low < 1e-10 * max(1.0, high):
            break
    return (low + high) / 2.0


@dataclass(frozen=True, slots=True)
class RatioTest:
    """B against A over per-repetition values: the ratio of geometric means B/A, its
    two-sided (1 − alpha) interval from Welch's t on logarithms, and the verdict."""

    ratio: float
    se: float  # standard error of the difference of log means (0: no spread at all)
    df: float  # Welch–Satterthwaite degrees of freedom
    alpha: float
    n_a: int
    n_b: int

    @property
    def p_value(self) -> float:
        """Two-sided p-value of "no difference"."""
        t = abs(math.log(self.ratio))
        if self.se == 0.0:
            return 1.0 if t == 0.0 else 0.0
        return 2.0 * (1.0 - t_cdf(t / self.se, self.df))

    @property
    def significant(self) -> bool:
        """The interval excludes 1 (equivalently, p < alpha)."""
        return self.p_value < self.alpha

    def _half(self) -> float:
        return 0.0 if self.se == 0.0 else t_quantile(1 - self.alpha / 2, self.df) * self.se

    @property
    def low(self) -> float:
        return self.ratio * math.exp(-self._half())

    @property
    def high(self) -> float:
        return self.ratio * math.exp(self._half())


def _mean_var(logs: list[float]) -> tuple[float, float]:
    mean = sum(logs) / len(logs)
    return mean, sum((v - mean) ** 2 for v in logs) / (len(logs) - 1)


def ratio_test(
    a: Iterable[float | None], b: Iterable[float | None], *, alpha: float = ALPHA
) -> RatioTest | None:
    """Welch's t-test on log values of arm ``a`` and arm ``b`` (positive per-repetition
    figures). None when either arm has fewer than :data:`MIN_REPETITIONS` positive values:
    no verdict from so little.

        ratio_test([50.1, 52.6, 51.0], [71.9, 73.4, 72.6]).significant  # True
    """
    la = [math.log(v) for v in _clean(a) if v > 0]
    lb = [math.log(v) for v in _clean(b) if v > 0]
    if min(len(la), len(lb)) < MIN_REPETITIONS:
        return None
    ma, va = _mean_var(la)
    mb, vb = _mean_var(lb)
    se2 = va / len(la) + vb / len(lb)
    df = float(len(la) + len(lb) - 2)
    if se2 > 0.0:
        df = se2 * se2 / (
            (va / len(la)) ** 2 / (len(la) - 1) + (vb / len(lb)) ** 2 / (len(lb) - 1)
        )
    return RatioTest(ratio=math.exp(mb - ma), se=math.sqrt(se2), df=df, alpha=alpha,
                     n_a=len(la), n_b=len(lb))
def percentiles(values: Iterable[float | None]) -> Percentiles | None:
    """p50, p90, p99 and max of the known values; None when there are none."""
    data = _clean(values)
    if not data:
        return None
    p50, p90, p99 = (_sorted_percentile(data, q) for q in (50, 90, 99))
    return Percentiles(p50=p50, p90=p90, p99=p99, max=data[-1], n=len(data))


def chunk_gaps_us(arrivals_ns: Sequence[int] | None) -> list[int] | None:
    """Content-chunk arrival times (perf_counter_ns, in order) as the gaps between them in
    whole microseconds: what a TurnRecord keeps of them. Microseconds: inter-token gaps are
    milliseconds, and six digits a gap keep records.jsonl small. None when not recorded."""
    if arrivals_ns is None:
        return None
    return [round((b - a) / 1000) for a, b in pairwise(arrivals_ns)]
