"""PNG plots of a RunResult (matplotlib, from the ``plots`` extra). Files in, files out: the
library writes them where asked and returns their paths; it never shows a window.

* ``rates.png`` — per turn: aggregate rate and per-user rate, median with min–max bars; for
  a sweep, per cell instead (never pooled over cells): the aggregate (users × per-user
  median, per repetition) and the post-first rate of every valid turn;
* ``ttft.png`` — per turn (per cell for a sweep): every measured request's TTFT, with the
  median;
* ``timeline.png`` — every measured request as a bar from send to last token, split at the
  first token (waiting + prefill, then decode), one row per cell, repetition and session:
  the lock-step barriers, queueing and stragglers are visible at a glance. Every failed
  request (errors, cancelled and invalid turns) is one bar from send (or, never sent, from
  when the client began it) to the error, coloured by kind.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workloads.core import aggregate, stats
from workloads.model.records import TurnRecord
from workloads.model.results import RunResult
from workloads.model.summary import BandSummary

__all__ = ["TimelineBar", "available", "timeline_bars", "write_plots"]


def available() -> bool:
    """True when matplotlib is installed (``pip install 'workloads[plots]'``)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only; never a window
    import matplotlib.pyplot as plt

    return plt


def _title(result: RunResult) -> str:
    where = "simulated server" if result.target.simulated else result.target.base_url
    label = f" [{result.label}]" if result.label else ""
    return f"{result.scenario.name}{label} — {result.target.model} @ {where}"


def _errorbars(ax: Any, xs: list[int], bands: list[BandSummary | None], label: str) -> None:
    points = [(x, b) for x, b in zip(xs, bands, strict=True) if b is not None]
    ys = [b.median for _, b in points]
    lo = [b.median - b.low for _, b in points]
    hi = [b.high - b.median for _, b in points]
    ax.errorbar([x for x, _ in points], ys, yerr=[lo, hi], fmt="o-", capsize=4)
    ax.set_ylabel(label)
    ax.set_ylim(0, max((y + h for y, h in zip(ys, hi, strict=True)), default=1) * 1.15)
    ax.grid(alpha=0.3)


def _cell_label(concurrency: int, prior: int) -> str:
    return f"C{concurrency}\n{prior:,}"


def _sweep_rates(result: RunResult, path: Path) -> None:
    plt = _pyplot()
    cells = result.cells or []
    xs = list(range(len(cells)))
    aggregates, rates = [], []
    for c in cells:
        mine = [r for r in result.records if r.cell == c.cell]
        reps = aggregate.repetitions(mine, users=c.concurrency)
        aggregates.append(stats.band(f.aggregate_rate for f in reps))
        rates.append(aggregate.generation_rate(mine) if mine else c.generation_rate)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    for ax, bands, label in (
        (axes[0], aggregates, "aggregate tok/s (users × per-user median)"),
        (axes[1], rates, "per-stream tok/s (every valid turn)"),
    ):
        _errorbars(ax, xs, bands, label)
        ax.set_xticks(xs, [_cell_label(c.concurrency, c.prior_tokens) for c in cells])
        ax.set_xlabel("cell: concurrency, prior tokens")
    fig.suptitle(_title(result) + "\nper cell: median, bars = min–max")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _rates(result: RunResult, path: Path) -> None:
    if result.cells is not None:
        _sweep_rates(result, path)
        return
    plt = _pyplot()
    turns = result.summary.turns
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    for ax, attr, label in (
        (axes[0], "aggregate_rate", "aggregate tok/s (Σ per-stream rates)"),
        (axes[1], "per_user_rate", "per-user tok/s (median over sessions)"),
    ):
        xs = [t.turn for t in turns]
        _errorbars(ax, xs, [getattr(t, attr) for t in turns], label)
        ax.set_xlabel("turn")
        ax.set_xticks(xs)
    fig.suptitle(_title(result) + "\nmedian over measured repetitions, bars = min–max")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _ttft(result: RunResult, path: Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4), constrained_layout=True)
    measured = [r for r in result.records if not r.warmup and r.ttft_ns is not None]
    if result.cells is not None:
        cells = result.cells
        for x, c in enumerate(cells):
            values = [r.ttft_ns / 1e9 for r in measured if r.cell == c.cell and r.ttft_ns]
            ax.scatter([x] * len(values), values, alpha=0.5, s=18)
            if c.summary.run.ttft_s is not None:
                ax.hlines(c.summary.run.ttft_s.median, x - 0.25, x + 0.25, colors="black")
        ax.set_xticks(range(len(cells)), [_cell_label(c.concurrency, c.prior_tokens)
                                          for c in cells])
        ax.set_xlabel("cell: concurrency, prior tokens")
    for t in [] if result.cells is not None else result.summary.turns:
        values = [r.ttft_ns / 1e9 for r in measured if r.turn == t.turn and r.ttft_ns]
        ax.scatter([t.turn] * len(values), values, alpha=0.5, s=18)
        if t.ttft_s is not None:
            ax.hlines(t.ttft_s.median, t.turn - 0.25, t.turn + 0.25, colors="black")
    if result.cells is None:
        ax.set_xlabel("turn")
        ax.set_xticks([t.turn for t in result.summary.turns])
    ax.set_ylabel("TTFT (s)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.set_title(_title(result) + "\nmeasured requests; line = median", fontsize=9)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# Failed requests are coloured by kind, in colours the two phases of a good one never use.
_FAILURE_COLOURS = ("tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan",
                    "tab:gray", "black", "gold", "darkred", "lime", "navy")


def _failure_kind(r: TurnRecord) -> str | None:
    """None for a valid request; else its error kind, or "invalid" (finished, but of the
    wrong length or finish reason: an early stop looks like a good decode bar otherwise)."""
    if r.valid:
        return None
    return r.error_kind or ("invalid" if r.status == "ok" else r.status)


def _failure_end_ns(r: TurnRecord) -> int:
    """When a failed request's error arrived: its ``error_ns``, else (older records, invalid
    turns) the latest time it knows (an HTTP error has no content times; a connect error not
    even a send time)."""
    if r.error_ns is not None:
        return r.error_ns
    known = (r.done_ns, r.last_content_ns, r.first_content_ns, r.headers_ns, r.sent_ns,
             r.started_ns)
    return max(t for t in known if t is not None)


@dataclass(frozen=True)
class TimelineBar:
    """One measured request on the timeline, in seconds since the first measured request:
    a good one from send through first token to last token; a failed one (``kind`` set) from
    send (or, never sent, from when the client began it) to the error."""

    row: tuple[int, int, int]  # (cell, repetition, session)
    start_s: float
    first_s: float | None  # first content (good requests)
    end_s: float
    kind: str | None = None  # None: valid


def timeline_bars(result: RunResult) -> list[TimelineBar]:
    """Every measured request's bar (pure; :func:`write_plots` draws them). An instant
    failure (a 429) still gets a sliver of width, so no failure is invisible."""
    measured = [r for r in result.records if not r.warmup]
    if not measured:
        return []

    def begin(r: TurnRecord) -> int:
        return r.sent_ns if r.sent_ns is not None else r.started_ns

    origin = min(begin(r) for r in measured)
    span_s = max(max(_failure_end_ns(r), r.done_ns or 0) - origin for r in measured) / 1e9
    least = max(span_s, 1e-3) * 0.004
    bars = []
    for r in measured:
        row = (r.cell, r.repetition, r.session)
        start = (begin(r) - origin) / 1e9
        kind = _failure_kind(r)
        if kind is not None:
            end = max((_failure_end_ns(r) - origin) / 1e9, start + least)
            bars.append(TimelineBar(row, start, None, end, kind))
            continue
        first = (r.first_content_ns - origin) / 1e9 if r.first_content_ns else start
        end = ((r.last_content_ns or r.done_ns or begin(r)) - origin) / 1e9
        bars.append(TimelineBar(row, start, first, end))
    return bars


def _timeline(result: RunResult, path: Path) -> None:
    plt = _pyplot()
    bars = timeline_bars(result)
    if not bars:
        return
    rows = sorted({b.row for b in bars})
    index = {row: i for i, row in enumerate(rows)}
    kinds = sorted({b.kind for b in bars if b.kind is not None})
    colour = {k: _FAILURE_COLOURS[i % len(_FAILURE_COLOURS)] for i, k in enumerate(kinds)}
    counts = collections.Counter(b.kind for b in bars if b.kind is not None)
    fig, ax = plt.subplots(figsize=(11, max(3.0, 0.28 * len(rows) + 1.5)), constrained_layout=True)
    for b in bars:
        y = index[b.row]
        if b.kind is not None:  # from send to the error, in the kind's colour
            ax.barh(y, b.end_s - b.start_s, left=b.start_s, color=colour[b.kind], height=0.7,
                    edgecolor="black", linewidth=0.4)
            continue
        first = b.first_s if b.first_s is not None else b.start_s
        ax.barh(y, first - b.start_s, left=b.start_s, color="tab:orange", height=0.7)
        ax.barh(y, b.end_s - first, left=first, color="tab:blue", height=0.7)
    ax.set_yticks(range(len(rows)))
    swept = result.cells is not None
    ax.set_yticklabels(
        [(f"cell {cell} · " if swept else "") + f"rep {rep} · s{session}"
         for cell, rep, session in rows],
        fontsize=7,
    )
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the first measured request")
    ax.grid(axis="x", alpha=0.3)
    from matplotlib.patches import Patch

    handles = [
        Patch(color="tab:orange", label="sent → first token (queue + prefill)"),
        Patch(color="tab:blue", label="first → last token (decode)"),
        *(Patch(facecolor=colour[k], edgecolor="black", linewidth=0.4,
                label=f"failed: {k} ({counts[k]}), sent → error") for k in kinds),
    ]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.12),
              ncol=min(3, len(handles)), fontsize=8)
    ax.set_title(_title(result), fontsize=9)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_plots(result: RunResult, directory: str | Path) -> list[Path]:
    """Write rates.png, ttft.png and timeline.png into ``directory``; return their paths."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, draw in (("rates.png", _rates), ("ttft.png", _ttft), ("timeline.png", _timeline)):
        path = out / name
        draw(result, path)
        if path.exists():
            written.append(path)
    return written
