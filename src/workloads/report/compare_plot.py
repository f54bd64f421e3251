"""The compare plot: every figure of a comparison as B/A with its interval, one row each
under the compare table's names, on a log axis around 1 (no change), the smallest effect
called significant shaded. What ``compare A B --plot FILE`` writes. Pure apart from the
file; matplotlib from the ``plots`` extra.

    from workloads.report.compare import compare
    from workloads.report.compare_plot import compare_plot
    compare_plot(compare(a, b), "ab.png", name_a="baseline", name_b="candidate")
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from workloads.report.compare import Comparison, Outcome

__all__ = ["PlotRow", "compare_plot", "plot_rows"]

_COLORS = {"better": "tab:green", "worse": "tab:red"}  # every other outcome: gray


@dataclass(frozen=True)
class PlotRow:
    """One figure of the plot: the table's name (with its unit), B/A and its interval (None
    under 3 repetitions a side: a ratio of medians, drawn without one), the verdict."""

    label: str
    ratio: float | None  # None: an arm has no value, or A is 0
    low: float | None
    high: float | None
    outcome: Outcome


def plot_rows(result: Comparison) -> list[PlotRow]:
    """The rows of :func:`compare_plot`, in the compare table's order (pure)."""
    rows = []
    for m in result.metrics:
        t = m.test
        rows.append(
            PlotRow(
                f"{m.name} ({m.unit})" if m.unit else m.name,
                m.ratio,
                t.low if t is not None else None,
                t.high if t is not None else None,
                m.outcome,
            )
        )
    return rows


def compare_plot(
    result: Comparison,
    path: str | Path,
    *,
    name_a: str = "A",
    name_b: str = "B",
    min_effect: float | None = None,
) -> Path | None:
    """Write the plot to ``path``; None without matplotlib (the plots extra).
    ``min_effect``: the band shaded around 1 (default: the comparison's own)."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only; never a window
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = plot_rows(result)
    effect = (
        min_effect
        if min_effect is not None
        else (result.metrics[0].min_effect if result.metrics else 0.0)
    )
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.32 * max(len(rows), 1)), layout="constrained")
    try:
        ys = list(range(len(rows)))[::-1]  # the table's first row at the top
        for y, row in zip(ys, rows, strict=True):
            color = _COLORS.get(row.outcome, "tab:gray")
            if row.ratio is None:
                ax.text(1.0, y, "no value", ha="center", va="center", fontsize=8, color="tab:gray")
                continue
            if row.low is not None and row.high is not None:
                ax.plot([row.low, row.high], [y, y], color=color, linewidth=2)
            ax.plot([row.ratio], [y], "o" if row.low is not None else "x", color=color)
        ax.axvline(1.0, color="black", linewidth=0.8)
        if effect > 0:
            ax.axvspan(1 - effect, 1 + effect, color="tab:gray", alpha=0.15)
        ax.set_xscale("log")
        from matplotlib.ticker import FuncFormatter

        for axis in (ax.xaxis.set_major_formatter, ax.xaxis.set_minor_formatter):
            axis(FuncFormatter(lambda v, _: f"{v:.3g}x"))
        ax.tick_params(axis="x", which="both", labelsize=7)
        ax.set_yticks(ys, [r.label for r in rows], fontsize=8)
        ax.set_ylim(-0.7, len(rows) - 0.3)
        shaded = f"; shaded: under {effect:.0%} apart, never significant" if effect > 0 else ""
        ax.set_xlabel(
            f"B/A ({name_b} / {name_a}, log scale): ratio of geometric means with its "
            f"interval{shaded}\ngreen better, red worse, gray no verdict; × a ratio "
            "of medians (too few repetitions for an interval)",
            fontsize=8,
        )
        ax.grid(alpha=0.3, axis="x")
        ax.set_title(f"A = {name_a}, B = {name_b}: {result.headline}", fontsize=9)
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=110, format="png")
    finally:
        plt.close(fig)
    return out
