"""Formatting shared by every report: numbers to about three significant figures, bands,
"not reported", table frames. Pure: strings and empty rich tables."""

from __future__ import annotations

from rich import box
from rich.table import Table

from workloads.model.summary import BandSummary

__all__ = [
    "NOT_REPORTED", "NO_VALID", "count", "format_band", "num", "plural", "span", "titled_table",
]

NOT_REPORTED = "not reported"
NO_VALID = "— (no valid turns)"


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
    b: BandSummary | None, digits: int | None = None, *, missing: str = "—",
    compact: bool = False,
) -> str:
    """"median (low–high)", or the median alone when the band is one value as printed."""
    if b is None:
        return missing
    median, low, high = (num(v, digits, compact=compact) for v in (b.median, b.low, b.high))
    if b.n == 1 or low == high:
        return median
    return f"{median} ({low}–{high})"



def titled_table(title: str, columns: list[str]) -> Table:
    table = Table(title=title, title_justify="left", header_style="bold", box=box.SIMPLE_HEAD,
                  pad_edge=False)
    for i, name in enumerate(columns):
        table.add_column(name, justify="right" if i else "left", no_wrap=True)
    return table



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
