"""Formatting shared by every report: numbers to about three significant figures, bands,
"not reported", percentiles with their bounds, table frames. Pure: strings and empty rich
tables."""

from __future__ import annotations

from workloads.core.stats import CONFIDENCE, needed_for_bound
from workloads.model.summary import BandSummary, Percentiles

__all__ = [
    "BOUNDS_NOTE",
    "NOT_REPORTED",
    "NO_VALID",
    "count",
    "format_band",
    "num",
    "percentile_text",
    "plural",
    "span",
]

NOT_REPORTED = "not reported"
NO_VALID = "— (no valid turns)"
BOUNDS_NOTE = (
    f"[low–high]: distribution-free bounds from order statistics, each end {CONFIDENCE:.0%} "
    f"one-sided ({2 * CONFIDENCE - 1:.0%} together); needs ≥ N: too few values for a "
    f"{CONFIDENCE:.0%} upper bound of that percentile (n says how many there are)"
)


def num(value: float | None, digits: int | None = None, *, compact: bool = False) -> str:
    """Three significant figures or so: 1,236, 247.2, 0.11 — no false precision.
    ``compact``: 1,000 and above as thousands, 48.7k, 166k (narrow columns of prefill)."""
    if value is None:
        return "—"
    if compact and abs(value) >= 1000:
        return f"{value / 1000:,.{0 if abs(value) >= 100_000 else 1}f}k"
    if digits is None:
        digits = 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2
    return f"{value:,.{digits}f}"


def format_band(
    b: BandSummary | None,
    digits: int | None = None,
    *,
    missing: str = "—",
    compact: bool = False,
) -> str:
    """ "median (low–high)", or the median alone when the band is one value as printed."""
    if b is None:
        return missing
    median, low, high = (num(v, digits, compact=compact) for v in (b.median, b.low, b.high))
    if b.n == 1 or low == high:
        return median
    return f"{median} ({low}–{high})"


def count(value: float | None) -> str:
    return NOT_REPORTED if value is None else f"{value:,.0f}"


def span(b: BandSummary | None) -> str:
    if b is None:
        return "—"
    if b.low == b.high:
        return f"{b.low:,.0f}"
    return f"{b.low:,.0f}–{b.high:,.0f}"


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def percentile_text(p: Percentiles, q: float, scale: float = 1.0, digits: int | None = None) -> str:
    """The ``q``-th percentile of ``p`` with its bounds, "1.23 [1.10–1.41]"; "needs ≥ 299"
    where ``p.n`` is too small to bound it from above (no number: with too few values the
    high percentiles are the maximum, not the percentile); the value alone from a file that
    predates bounds."""
    value = {50.0: p.p50, 90.0: p.p90, 99.0: p.p99}[q]
    bounds = next((b for b in p.bounds or () if b.q == q), None)
    if p.bounds is None or bounds is None:
        return num(value * scale, digits)
    if bounds.high is None:
        return f"needs ≥ {needed_for_bound(q):,}"
    low = "—" if bounds.low is None else num(bounds.low * scale, digits)
    return f"{num(value * scale, digits)} [{low}–{num(bounds.high * scale, digits)}]"
