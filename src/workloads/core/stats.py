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
from array import array
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate, pairwise
from typing import Literal, overload

from workloads.model.summary import BandSummary, Bounds, Percentiles

__all__ = [
    "ALPHA",
    "CONFIDENCE",
    "MIN_REPETITIONS",
    "MeanTest",
    "RatioTest",
    "Verdict",
    "band",
    "binomial_cdf",
    "chunk_gaps_us",
    "clustered_percentiles",
    "mean_test",
    "median",
    "needed_for_bound",
    "order_bounds",
    "percentile",
    "percentile_bounds",
    "percentile_verdict",
    "percentiles",
    "ratio_test",
    "share_interval",
    "t_cdf",
    "t_quantile",
]

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


def _sorted_percentile(data: Sequence[float], q: float) -> float:
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
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
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


def _welch(xa: list[float], xb: list[float]) -> tuple[float, float, float, float]:
    """Welch's t on two samples (≥ 2 values each): their means, the standard error of the
    difference of means and the Welch–Satterthwaite degrees of freedom."""
    ma, va = _mean_var(xa)
    mb, vb = _mean_var(xb)
    se2 = va / len(xa) + vb / len(xb)
    df = float(len(xa) + len(xb) - 2)
    if se2 > 0.0:
        df = se2 * se2 / ((va / len(xa)) ** 2 / (len(xa) - 1) + (vb / len(xb)) ** 2 / (len(xb) - 1))
    return ma, mb, math.sqrt(se2), df


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
    ma, mb, se, df = _welch(la, lb)
    return RatioTest(ratio=math.exp(mb - ma), se=se, df=df, alpha=alpha, n_a=len(la), n_b=len(lb))


@dataclass(frozen=True, slots=True)
class MeanTest:
    """B against A where an arm has a value of 0 (a cache that stopped hitting): no
    logarithm, so Welch's t on the values themselves, the difference of means B − A with
    its two-sided (1 − alpha) interval. ``ratio`` is of the means (inf when A's is 0)."""

    mean_a: float
    mean_b: float
    se: float  # standard error of the difference of means (0: no spread at all)
    df: float
    alpha: float
    n_a: int
    n_b: int

    @property
    def ratio(self) -> float:
        if self.mean_a == 0.0:
            return 1.0 if self.mean_b == 0.0 else math.inf
        return self.mean_b / self.mean_a

    @property
    def p_value(self) -> float:
        """Two-sided p-value of "no difference"."""
        d = abs(self.mean_b - self.mean_a)
        if self.se == 0.0:
            return 1.0 if d == 0.0 else 0.0
        return 2.0 * (1.0 - t_cdf(d / self.se, self.df))

    @property
    def significant(self) -> bool:
        return self.p_value < self.alpha

    def _half(self) -> float:
        return 0.0 if self.se == 0.0 else t_quantile(1 - self.alpha / 2, self.df) * self.se

    @property
    def low(self) -> float:
        """Lower end of the interval of B − A."""
        return self.mean_b - self.mean_a - self._half()

    @property
    def high(self) -> float:
        return self.mean_b - self.mean_a + self._half()


def mean_test(
    a: Iterable[float | None], b: Iterable[float | None], *, alpha: float = ALPHA
) -> MeanTest | None:
    """Welch's t-test on the values of arm ``a`` and arm ``b`` (non-negative figures, for
    when a 0 rules out :func:`ratio_test`'s logarithms: 0.999 → 0.000 is a difference, not
    "too few repetitions"). None when either arm has fewer than :data:`MIN_REPETITIONS`
    values.

        mean_test([0.999, 0.998, 0.999], [0.0, 0.0, 0.0]).significant  # True
    """
    xa, xb = _clean(a), _clean(b)
    if min(len(xa), len(xb)) < MIN_REPETITIONS:
        return None
    ma, mb, se, df = _welch(xa, xb)
    return MeanTest(ma, mb, se, df, alpha, len(xa), len(xb))


def percentiles(values: Iterable[float | None]) -> Percentiles | None:
    """p50, p90, p99 and max of the known values, with the bounds of each percentile
    (:func:`order_bounds`); None when there are none."""
    data = _clean(values)
    if not data:
        return None
    return _sorted_percentiles(data)


def counted_percentiles(counts: Counter[int], unit: float) -> Percentiles | None:
    """:func:`percentiles` of integer values given as how many times each occurs, each
    divided by ``unit``: the same figures, to the bit, as ``percentiles`` of the values
    themselves, without a float object per value (the pooled ITL gaps: one a streamed token,
    in whole µs, so a few thousand distinct values for 10⁵–10⁶ gaps). None when empty."""
    data = _Counted(counts, unit)
    return _sorted_percentiles(data) if len(data) else None


class _Counted(Sequence[float]):
    """The sorted values that ``counts`` counts, each / ``unit``, indexed by rank."""

    def __init__(self, counts: Counter[int], unit: float) -> None:
        self._values = sorted(v for v, n in counts.items() if n > 0)
        self._ends = list(accumulate(counts[v] for v in self._values))  # ranks past each
        self._unit = unit

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    @overload
    def __getitem__(self, index: int) -> float: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[float]: ...

    def __getitem__(self, index: int | slice) -> float | Sequence[float]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self._values[bisect_right(self._ends, index)] / self._unit


def _sorted_percentiles(data: Sequence[float]) -> Percentiles:
    """:func:`percentiles` of clean, sorted, non-empty ``data``."""
    p50, p90, p99 = (_sorted_percentile(data, q) for q in (50, 90, 99))
    bounds = [
        Bounds(q=q, low=low, high=high)
        for q in (50.0, 90.0, 99.0)
        for low, high in [_sorted_bounds(data, q, CONFIDENCE)]
    ]
    return Percentiles(p50=p50, p90=p90, p99=p99, max=data[-1], n=len(data), bounds=bounds)


def clustered_percentiles(clusters: Sequence[Sequence[int]], unit: float) -> Percentiles | None:
    """:func:`counted_percentiles` of every value of every cluster (each divided by
    ``unit``), with bounds that hold for values clustered by request: the pooled ITL, whose
    gaps of one stream share its batch and its server's state and are no independent draws
    (issue 35: order-statistics bounds on pooled gaps covered the true p50/p90 57–70% of the
    time over 30 identical runs, against 90%). None when there are no values.

    Woodruff's interval with a cluster-robust variance (Woodruff 1952; Francisco & Fuller
    1991, "Quantile estimation with a complex survey design"): at the pooled percentile
    x̂_q, the share of values ≤ x̂_q is a ratio Σcᵢ / Σmᵢ over the n clusters (cᵢ of cluster
    i's mᵢ values), whose standard error comes from the clusters' residuals cᵢ − F̂·mᵢ
    alone, however the values inside a cluster depend on each other; each one-sided 95%
    bound is the pooled percentile at q ∓ t(0.95, n − 1)·se. A percentile is bounded from as
    many clusters as :func:`needed_for_bound` asks values of (p50 5, p90 29, p99 299
    requests): with fewer, the variance of a tail share rests on too few clusters (p90 from
    5 requests: the upper bound held 16% of the time, p99 from 45: 56%), and the percentile
    has no :class:`Bounds` entry. A side past the data is None."""
    counts: Counter[int] = Counter()
    sizes = []
    for values in clusters:
        if values:
            counts.update(values)
            sizes.append(len(values))
    data = _Counted(counts, unit)
    total = len(data)
    if not total:
        return None
    p50, p90, p99 = (_sorted_percentile(data, q) for q in (50, 90, 99))
    n = len(sizes)
    bounds = []
    if n >= needed_for_bound(50.0):
        t = t_quantile(CONFIDENCE, n - 1)
        cuts = [round(p * unit) for p in (p50, p90, p99)]  # the points, in counted units
        below = [[0] * n for _ in cuts]  # cᵢ for each point
        i = 0
        for values in clusters:
            if not values:
                continue
            ordered = sorted(values)
            for row, cut in zip(below, cuts, strict=True):
                row[i] = bisect_right(ordered, cut)
            i += 1
        for q, row in zip((50.0, 90.0, 99.0), below, strict=True):
            if n < needed_for_bound(q):  # too few clusters for this tail: no bounds
                continue
            share = sum(row) / total
            spread = sum((c - share * m) ** 2 for c, m in zip(row, sizes, strict=True))
            se = math.sqrt(n / (n - 1) * spread) / total
            low_rank = math.floor((q / 100 - t * se) * total)  # 1-based order statistics
            high_rank = math.ceil((q / 100 + t * se) * total) + 1
            bounds.append(
                Bounds(
                    q=q,
                    low=data[low_rank - 1] if low_rank >= 1 else None,
                    high=data[high_rank - 1] if high_rank <= total else None,
                )
            )
    return Percentiles(p50=p50, p90=p90, p99=p99, max=data[-1], n=total, bounds=bounds)


def chunk_gaps_us(
    arrivals_ns: Sequence[int] | None, merged: Collection[int] = ()
) -> array[int] | None:
    """Content-chunk arrival times (perf_counter_ns, in order) as the gaps between them in
    whole microseconds: what a TurnRecord keeps of them, a machine integer each (as an
    array, the record keeps it without checking every value again). Microseconds:
    inter-token gaps are milliseconds, and six digits a gap keep records.jsonl small. None
    when not recorded. A gap that ends at a ``merged`` chunk (its index: one read with
    later chunks after a client stall, so its stamp is theirs) is left out: it was not
    measured."""
    if arrivals_ns is None:
        return None
    if merged:
        left_out = set(merged)
        return array(
            "q",
            [
                round((b - a) / 1000)
                for i, (a, b) in enumerate(pairwise(arrivals_ns), 1)
                if i not in left_out
            ],
        )
    return array("q", [round((b - a) / 1000) for a, b in pairwise(arrivals_ns)])


# --- Percentile bounds from order statistics, and SLO checks ----------------------------
#
# Distribution-free: for a percentile ξ_q of any distribution and n independent draws,
# the count of draws at or below ξ_q is Binomial(n, q), so the k-th smallest draw x_(k) lies
# below ξ_q with a probability the binomial gives exactly, whatever the distribution
# (Hahn & Meeker, "Statistical Intervals", ch. 5; the argument MLPerf LoadGen's early
# stopping makes). Each end is a one-sided bound at CONFIDENCE; together they are a
# (2·CONFIDENCE − 1) interval. A side that needs an order statistic past the data has no
# bound: n is too small (p99 needs 299 values for a 95% upper bound).

CONFIDENCE = 0.95  # of each one-sided bound

Verdict = Literal["holds", "fails", "cannot tell"]


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(B ≤ k) for B ~ Binomial(n, p). Sums the pmf from ``k`` into the nearer tail until the
    terms vanish: O(√n) terms for the k a bound needs, so a million values cost little."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    lower = k < n * p  # sum the lower tail from k down; else the upper tail from k + 1 up
    j = k if lower else k + 1
    term = math.exp(
        math.lgamma(n + 1)
        - math.lgamma(j + 1)
        - math.lgamma(n - j + 1)
        + j * math.log(p)
        + (n - j) * math.log1p(-p)
    )
    odds = p / (1.0 - p)
    total = 0.0
    for _ in range(n + 1):  # bounded: at most every term once
        total += term
        # away from the mean the terms only fall: stop once they no longer count
        if term <= 1e-17 * total:
            break
        if lower:
            if j == 0:
                break
            term *= j / ((n - j + 1) * odds)  # pmf(j − 1) / pmf(j)
            j -= 1
        else:
            if j == n:
                break
            term *= (n - j) * odds / (j + 1)  # pmf(j + 1) / pmf(j)
            j += 1
    return min(1.0, total) if lower else max(0.0, 1.0 - total)


def _search(n: int, p: float, ok: Callable[[int], bool]) -> int:
    """The smallest k in [0, n] with ok(k), for ok monotone False → True (n + 1: none),
    looked for within 12 standard deviations of n·p, where every cut a bound needs lies."""
    sd = math.sqrt(n * p * (1.0 - p))
    low = max(0, math.floor(n * p - 12 * sd) - 2)
    high = min(n + 1, math.ceil(n * p + 12 * sd) + 3)
    while low < high:
        mid = (low + high) // 2
        if ok(mid):
            high = mid
        else:
            low = mid + 1
    return low


def order_bounds(n: int, q: float, confidence: float = CONFIDENCE) -> tuple[int | None, int | None]:
    """1-based ranks (l, u) of the order statistics that bound the ``q``-th percentile (q in
    (0, 100)) of ``n`` values from below and from above, each with ``confidence``: P(x_(l) ≤
    ξ_q) ≥ confidence and P(x_(u) ≥ ξ_q) ≥ confidence for any distribution. None for a side
    that n is too small to bound (:func:`needed_for_bound` says how many it needs)."""
    if not 0.0 < q < 100.0:
        raise ValueError(f"percentile q must be in (0, 100), got {q}")
    p = q / 100.0
    # upper: smallest u with P(B ≤ u − 1) ≥ confidence
    k = _search(n, p, lambda k: binomial_cdf(k, n, p) >= confidence)
    upper = k + 1 if k + 1 <= n else None
    # lower: largest l with P(B ≤ l − 1) ≤ 1 − confidence
    k = _search(n, p, lambda k: binomial_cdf(k, n, p) > 1.0 - confidence)  # first k too likely
    lower = k if k >= 1 else None
    return lower, upper


def needed_for_bound(q: float, confidence: float = CONFIDENCE, *, upper: bool = True) -> int:
    """How many values bound the ``q``-th percentile from above (or below) with
    ``confidence``: the smallest n with 1 − (q/100)^n ≥ confidence (below: with
    (1 − q/100)^n ≤ 1 − confidence). 299 for p99 from above at 95%, 29 for p90."""
    p = q / 100.0 if upper else 1.0 - q / 100.0
    n = max(1, math.ceil(math.log(1.0 - confidence) / math.log(p)))
    while n > 1 and p ** (n - 1) <= 1.0 - confidence:  # float log may round up
        n -= 1
    while p**n > 1.0 - confidence:
        n += 1
    return n


def percentile_bounds(
    values: Iterable[float | None], q: float, confidence: float = CONFIDENCE
) -> tuple[float | None, float | None]:
    """(low, high): one-sided ``confidence`` bounds of the ``q``-th percentile of the known
    values, from order statistics; None for a side too few values bound."""
    data = _clean(values)
    return _sorted_bounds(data, q, confidence)


def _sorted_bounds(
    data: Sequence[float], q: float, confidence: float
) -> tuple[float | None, float | None]:
    lower, upper = order_bounds(len(data), q, confidence)
    return (None if lower is None else data[lower - 1], None if upper is None else data[upper - 1])


def percentile_verdict(
    values: Iterable[float | None], q: float, limit: float, confidence: float = CONFIDENCE
) -> Verdict:
    """Whether the ``q``-th percentile of ``values`` is at most ``limit``, judged as
    LoadGen's early stopping judges it: "holds" when its upper bound is within the limit,
    "fails" when its lower bound is past it (each with ``confidence``), else "cannot tell".
    Pass ``math.inf`` for a request that failed: it is over any limit.

        percentile_verdict(ttfts, 90, 2.0)  # "holds": p90 TTFT ≤ 2 s with 95% confidence
    """
    low, high = percentile_bounds(values, q, confidence)
    if high is not None and high <= limit:
        return "holds"
    if low is not None and low > limit:
        return "fails"
    return "cannot tell"


def share_interval(successes: int, n: int, *, alpha: float = ALPHA) -> tuple[float, float] | None:
    """The exact (Clopper–Pearson) two-sided (1 − alpha) interval of a share from
    ``successes`` of ``n`` independent trials; None when n is 0. Bisection on
    :func:`binomial_cdf`, bounded."""
    if n <= 0:
        return None
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, {n}], got {successes}")

    def solve(f: Callable[[float], float], target: float) -> float:
        lo, hi = 0.0, 1.0  # f falls as p rises
        for _ in range(60):
            mid = (lo + hi) / 2
            if f(mid) > target:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    low = (
        0.0
        if successes == 0
        else solve(lambda p: binomial_cdf(successes - 1, n, p), 1.0 - alpha / 2)
    )
    high = 1.0 if successes == n else solve(lambda p: binomial_cdf(successes, n, p), alpha / 2)
    return low, high
