"""PNG plots of a RunResult (matplotlib, from the ``plots`` extra). Files in, files out: the
library writes them where asked and returns their paths; it never shows a window.

Size: past 400 lines: one function per figure below, each short; they share the axis,
band and jitter helpers, and change together when the report's figures do.

* ``rates.png`` — per turn: the console's rate columns, one panel each, under its names
  (:mod:`workloads.report.rates`): aggregate, wall and per-user in lock-step; wall, the
  Σ streams † (with its footnote) and per-user with free or arrivals pacing; median with
  min–max bands. For a sweep, per cell instead (never pooled over cells), to scale: depth on
  a log2 axis of prompt tokens, concurrency on a linear one: the aggregate (per repetition,
  the median over its turns of the Σ of every stream's post-first rate; with free or
  arrivals pacing the wall throughput instead, Σ tokens / the repetition's span; left out
  when every cell is C1) and the post-first rate of every valid turn;
* ``ttft.png`` — per turn (per cell for a sweep): every valid measured request's TTFT,
  jittered, with the median;
* ``latency.png`` — ITL (every gap between content chunks, ms, log scale) and E2E latency
  (request written → end of stream, s) of every valid measured request as CDFs, p50, p90
  and p99 marked; one line per cell for a sweep;
* ``prefill.png`` — prefill rate (prompt / TTFT, and uncached) of every valid measured
  request against its prompt tokens (log2 when depths vary);
* ``cache.png`` — a sweep's prefix cache per cell: cache effectiveness and hit rate from
  usage beside the server's own hit rate (left out when nothing was cached anywhere);
* ``concurrency.png`` — requests in flight over the measured span, with the mean (what
  arrivals and free pacing produce; a flat line in lock-step);
* ``timeline.png`` — every measured request as a bar from send to last token, split at the
  first token (waiting + prefill, then decode), one row per cell, repetition and session:
  the lock-step barriers, queueing and stragglers are visible at a glance. Every failed
  request (errors, cancelled and invalid turns) is one bar from send (or, never sent, from
  when the client began it) to the error, coloured by kind;
* ``context.png`` — records with step kinds only: context length over time, each request's
  prompt tokens at its send in the first measured repetition, one line per session
  (sub-agents lighter), compactions marked;
* ``sizes.png`` — records with step kinds only: histograms (log x) of what was drawn:
  output tokens, new tokens by kind, pauses (think, tool).
"""

from __future__ import annotations

import collections
import io
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from workloads.core import aggregate, stats
from workloads.model.errors import OutputError
from workloads.model.files import replace_file
from workloads.model.records import TurnRecord
from workloads.model.results import CellSummary, RunResult
from workloads.model.summary import BandSummary
from workloads.report import rates
from workloads.report.console import shown_turns

__all__ = ["TimelineBar", "available", "figures", "timeline_bars", "write_plots"]


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
    if result.predicted is not None:
        where = f"PREDICTED ({result.predicted.profile} profile)"
    label = f" [{result.label}]" if result.label else ""
    return f"{result.scenario.name}{label} — {result.target.model} @ {where}"


def _bands(
    ax: Any,
    xs: list[float],
    bands: list[BandSummary | None],
    label: str,
    *,
    color: str = "tab:blue",
    name: str | None = None,
    widths: list[float] | None = None,
) -> None:
    """Medians joined by a line, each with its min–max band drawn as a translucent bar at
    least a few pixels tall (a band of ±0.2% is still seen to be there), capped whiskers."""
    points = [(x, b) for x, b in zip(xs, bands, strict=True) if b is not None]
    if not points:
        return
    px = [x for x, _ in points]
    ys = [b.median for _, b in points]
    top = max(b.high for _, b in points) * 1.15 or 1.0
    least = top * 0.012  # the thinnest band drawn: about 3 pixels at this figure height
    width = dict(zip(xs, widths, strict=True)) if widths is not None else {}
    for x, b in points:
        low, high = b.low, b.high
        if high - low < least:
            mid = (high + low) / 2
            low, high = mid - least / 2, mid + least / 2
        ax.bar(
            x, high - low, bottom=low, width=width.get(x, 0.3), color=color, alpha=0.25, linewidth=0
        )
    ax.errorbar(
        px,
        ys,
        yerr=[[b.median - b.low for _, b in points], [b.high - b.median for _, b in points]],
        fmt="o-",
        capsize=4,
        color=color,
        label=name,
    )
    ax.set_ylabel(label)
    ax.set_ylim(0, max(ax.get_ylim()[1], top))
    ax.grid(alpha=0.3)


def _compact(value: float) -> str:
    """Tick labels: 6,146 → 6.1K, 67,584 → 68K, 117,452 → 117K (two close depths on a
    log2 axis still get labels that do not run into each other)."""
    if value >= 10_000:
        return f"{value / 1000:.0f}K"
    if value >= 1000:
        return f"{value / 1000:.1f}K".replace(".0K", "K")
    return f"{value:.0f}"


class _Axis:
    """A sweep's x axis, to scale: turn-1 prompt tokens on a log2 axis when depths vary (so
    4K→32K is as wide as 32K→256K, as doublings are), else concurrency on a linear axis; one
    series per concurrency when both vary."""

    def __init__(self, result: RunResult) -> None:
        cells = result.cells or []
        self.by_depth = (
            len({c.prior_tokens for c in cells}) > 1 or len({c.concurrency for c in cells}) == 1
        )
        self.label = "turn-1 prompt tokens (log2 scale)" if self.by_depth else "concurrency (users)"
        self.series = sorted({c.concurrency for c in cells}) if self.by_depth else [0]

    def x(self, cell: CellSummary) -> float:
        if not self.by_depth:
            return float(cell.concurrency)
        first = cell.summary.turns[0] if cell.summary.turns else None
        prompt = first.prompt_tokens.median if first and first.prompt_tokens else None
        return float(prompt or cell.configured_prompt_tokens)

    def members(self, cells: list[CellSummary], series: int) -> list[CellSummary]:
        return [c for c in cells if not self.by_depth or c.concurrency == series]

    def name(self, series: int) -> str | None:
        return f"C{series}" if self.by_depth and len(self.series) > 1 else None

    def apply(self, ax: Any, cells: list[CellSummary]) -> None:
        xs = sorted({self.x(c) for c in cells})
        if self.by_depth:
            ax.set_xscale("log", base=2)
            ax.set_xticks(xs, [_compact(x) for x in xs], fontsize=8)
            ax.minorticks_off()
            if xs:
                ax.set_xlim(xs[0] / 1.25, xs[-1] * 1.25)
        else:
            ax.set_xticks(xs, [f"C{x:.0f}" for x in xs])
            if xs:
                pad = max(0.5, (xs[-1] - xs[0]) * 0.08)
                ax.set_xlim(xs[0] - pad, xs[-1] + pad)
        ax.set_xlabel(self.label)


def _width(axis: _Axis, x: float) -> float:
    """A band's bar width in data units: the same on screen at every x (log2 axis)."""
    return x * 0.12 if axis.by_depth else 0.3


_COLORS = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]
# One colour per session (matplotlib's ten); past ten sessions they repeat.
_SESSION_COLORS = [*_COLORS, "tab:pink", "tab:gray", "tab:olive", "tab:cyan"]


def _sweep_rates(result: RunResult) -> Any:
    plt = _pyplot()
    cells = result.cells or []
    axis = _Axis(result)
    concurrent = any(c.concurrency > 1 for c in cells)
    # As the sweep table: no aggregate where streams need not overlap, the wall throughput.
    # At C1 the aggregate is the per-stream rate: one panel, not the same one twice.
    free = rates.free_pacing(result)
    panels = [
        ("wall", f"{rates.WALL.label} (Σ tokens / span, per repetition)")
        if free
        else ("aggregate", f"{rates.AGGREGATE.label} (Σ of the streams' rates, per repetition)")
    ]
    panels = (panels if concurrent else []) + [
        ("stream", "per-stream tok/s (every valid measured turn)")
    ]
    fig, axes = plt.subplots(
        1,
        len(panels),
        figsize=(5.5 * len(panels) + 0.5, 4.2),
        constrained_layout=True,
        squeeze=False,
    )
    for ax, (kind, label) in zip(axes[0], panels, strict=True):
        for i, series in enumerate(axis.series):
            members = axis.members(cells, series)
            xs = [axis.x(c) for c in members]
            bands: list[BandSummary | None] = []
            for c in members:
                mine = [r for r in result.records if r.cell == c.cell]
                if kind == "aggregate":
                    reps = aggregate.repetitions(mine, users=c.concurrency)
                    bands.append(stats.band(f.aggregate_rate for f in reps))
                elif kind == "wall":
                    bands.append(c.summary.run.wall_aggregate_rate)
                else:
                    bands.append(aggregate.generation_rate(mine) if mine else c.generation_rate)
            order = sorted(range(len(xs)), key=xs.__getitem__)
            _bands(
                ax,
                [xs[j] for j in order],
                [bands[j] for j in order],
                label,
                color=_COLORS[i % len(_COLORS)],
                name=axis.name(series),
                widths=[_width(axis, xs[j]) for j in order],
            )
        axis.apply(ax, cells)
        if len(axis.series) > 1:
            ax.legend(fontsize=8, loc="lower left")
    fig.suptitle(_title(result) + "\nper cell: median, band and whiskers = min–max", fontsize=10)
    return fig


def _rates_figure(result: RunResult) -> Any:
    """rates.png's matplotlib figure (the caller saves and closes it)."""
    if result.cells is not None:
        return _sweep_rates(result)
    plt = _pyplot()
    turns = shown_turns(result)  # a fleet's first turns, as the tables show
    figures = rates.turn_rates(result)  # the console's columns, in its order
    fig, axes = plt.subplots(
        1,
        len(figures),
        figsize=(4.6 * len(figures) + 0.5, 4),
        constrained_layout=True,
        squeeze=False,
    )
    for ax, f in zip(axes[0], figures, strict=True):
        xs = [t.turn for t in turns]
        ax.set_ylabel(f.label)  # also on a panel with nothing to draw
        _bands(ax, [float(x) for x in xs], [f.read(t) for t in turns], f.label)
        ax.set_title(f.meaning, fontsize=9)
        ax.set_xlabel("turn")
        ax.set_xticks(xs)
        if xs:
            ax.set_xlim(xs[0] - 0.5, xs[-1] + 0.5)
    fig.suptitle(
        _title(result) + "\nmedian over measured repetitions, band and whiskers = min–max",
        fontsize=10,
    )
    if (note := rates.dagger_note(result)) is not None:
        fig.supxlabel(note, fontsize=8)  # the † figure's footnote, as under the console table
    return fig


def _rates(result: RunResult, path: Path | IO[bytes]) -> None:
    fig = _rates_figure(result)
    fig.savefig(path, dpi=110, format="png")
    _pyplot().close(fig)


def _jitter(n: int, spread: float) -> list[float]:
    """Deterministic offsets in [-spread, spread]: the same plot from the same result."""
    if n <= 1:
        return [0.0] * n
    return [spread * (2 * ((i * 0.618034) % 1.0) - 1) for i in range(n)]


def _ttft(result: RunResult, path: Path | IO[bytes]) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4), constrained_layout=True)
    measured = [r for r in result.records if not r.warmup and r.ttft_ns is not None and r.valid]
    if result.cells is not None:
        axis = _Axis(result)
        for i, series in enumerate(axis.series):
            for c in axis.members(result.cells, series):
                x = axis.x(c)
                values = [r.ttft_ns / 1e9 for r in measured if r.cell == c.cell and r.ttft_ns]
                spread = _width(axis, x) / 2 if axis.by_depth else 0.15
                xs = [x + d for d in _jitter(len(values), spread)]
                ax.scatter(xs, values, alpha=0.5, s=14, color=_COLORS[i % len(_COLORS)])
                if c.summary.run.ttft_s is not None:
                    ax.hlines(
                        c.summary.run.ttft_s.median,
                        x - spread * 1.3,
                        x + spread * 1.3,
                        colors="black",
                    )
        axis.apply(ax, result.cells)
    else:
        for t in shown_turns(result):
            values = [
                r.ttft_ns / 1e9
                for r in measured
                if r.turn == t.turn and r.ttft_ns and r.parent_session is None
            ]
            xs = [t.turn + d for d in _jitter(len(values), 0.18)]
            ax.scatter(xs, values, alpha=0.5, s=14, color="tab:blue")
            if t.ttft_s is not None:
                ax.hlines(t.ttft_s.median, t.turn - 0.25, t.turn + 0.25, colors="black")
        ax.set_xlabel("turn")
        ax.set_xticks([t.turn for t in shown_turns(result)])
    ax.set_ylabel("TTFT (s)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.set_title(_title(result) + "\nvalid measured requests (jittered); line = median", fontsize=9)
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


def _prefill(result: RunResult, path: Path | IO[bytes]) -> None:
    """Prefill rate (prompt tokens / TTFT) of every valid measured request against its
    prompt tokens, with uncached prefill ((prompt − cached) / TTFT) where cached is known."""
    measured = [
        r for r in result.records if not r.warmup and r.valid and r.ttft_ns and r.prompt_tokens
    ]
    if not measured:
        return
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2), constrained_layout=True)
    xs = [float(r.prompt_tokens or 0) for r in measured]
    ys = [(r.prompt_tokens or 0) / (r.ttft_ns or 1) * 1e9 for r in measured]
    ax.scatter(xs, ys, s=16, alpha=0.6, color="tab:blue", label="prompt / TTFT")
    # Uncached prefill where something was cached; elsewhere it is the same point as above.
    cached = [r for r in measured if r.cached_tokens]
    if cached:
        ax.scatter(
            [float(r.prompt_tokens or 0) for r in cached],
            [
                ((r.prompt_tokens or 0) - (r.cached_tokens or 0)) / (r.ttft_ns or 1) * 1e9
                for r in cached
            ],
            s=16,
            alpha=0.6,
            color="tab:orange",
            marker="s",
            label="(prompt − cached) / TTFT",
        )
    if max(xs) > 2 * min(xs):
        ax.set_xscale("log", base=2)
        ticks = sorted(set(xs))
        if len(ticks) <= 8:
            ax.set_xticks(ticks, [_compact(t) for t in ticks])
            ax.minorticks_off()
        ax.set_xlabel("prompt tokens (server count, log2 scale)")
    else:
        ax.set_xlabel("prompt tokens (server count)")
    ax.set_ylabel("prefill tok/s")
    from matplotlib.ticker import FuncFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _compact(v)))
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    ax.set_title(_title(result) + "\nprefill rate of every valid measured request", fontsize=9)
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


# Failed requests are coloured by kind, in colours the two phases of a good one never use.
_FAILURE_COLOURS = (
    "tab:red",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:olive",
    "tab:cyan",
    "tab:gray",
    "black",
    "gold",
    "darkred",
    "lime",
    "navy",
)


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
    known = (
        r.done_ns,
        r.last_content_ns,
        r.first_content_ns,
        r.headers_ns,
        r.sent_ns,
        r.started_ns,
    )
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
            ax.barh(
                y,
                b.end_s - b.start_s,
                left=b.start_s,
                color=colour[b.kind],
                height=0.7,
                edgecolor="black",
                linewidth=0.4,
            )
            continue
        first = b.first_s if b.first_s is not None else b.start_s
        ax.barh(y, first - b.start_s, left=b.start_s, color="tab:orange", height=0.7)
        ax.barh(y, b.end_s - first, left=first, color="tab:blue", height=0.7)
    ax.set_yticks(range(len(rows)))
    swept = result.cells is not None
    ax.set_yticklabels(
        [
            (f"cell {cell} · " if swept else "") + f"rep {rep} · s{session}"
            for cell, rep, session in rows
        ],
        fontsize=7,
    )
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the first measured request")
    ax.grid(axis="x", alpha=0.3)
    from matplotlib.patches import Patch

    handles = [
        Patch(color="tab:orange", label="sent → first token (queue + prefill)"),
        Patch(color="tab:blue", label="first → last token (decode)"),
        *(
            Patch(
                facecolor=colour[k],
                edgecolor="black",
                linewidth=0.4,
                label=f"failed: {k} ({counts[k]}), sent → error",
            )
            for k in kinds
        ),
    ]
    ax.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.12),
        ncol=min(3, len(handles)),
        fontsize=8,
    )
    ax.set_title(_title(result), fontsize=9)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _sweep_cache(result: RunResult, path: Path | IO[bytes]) -> None:
    """Per cell: cache effectiveness and hit rate from usage, and the server's own
    prefix-cache hit rate over the cell's window. Not drawn when nothing was cached anywhere
    (a cold depth sweep: every figure 0)."""
    cells = result.cells
    if not cells:
        return
    axis = _Axis(result)
    series: dict[str, list[tuple[float, float]]] = {
        "cache effectiveness (cached / shareable)": [],
        "hit rate (cached / prompt, usage)": [],
        "server prefix-cache hit rate (window)": [],
    }
    names = list(series)
    for c in cells:
        x = axis.x(c)
        known = [
            r
            for r in result.records
            if r.cell == c.cell and r.valid and not r.warmup and r.cached_tokens is not None
        ]
        both = [r for r in known if r.shareable_tokens is not None]
        shareable = sum(r.shareable_tokens or 0 for r in both)
        prompt = sum(r.prompt_tokens or 0 for r in known)
        if shareable:
            series[names[0]].append((x, sum(r.cached_tokens or 0 for r in both) / shareable))
        if prompt:
            series[names[1]].append((x, sum(r.cached_tokens or 0 for r in known) / prompt))
        t = c.window.server
        if t is not None and t.prefix_cache_hit_rate is not None:
            series[names[2]].append((x, t.prefix_cache_hit_rate))
    if not any(y > 0 for points in series.values() for _, y in points):
        return
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2), constrained_layout=True)
    for (name, points), marker, color in zip(series.items(), "os^", _COLORS, strict=False):
        if points:
            points.sort()
            ax.plot(
                [x for x, _ in points],
                [y for _, y in points],
                marker=marker,
                color=color,
                label=name,
            )
    axis.apply(ax, cells)
    ax.set_ylim(0, 1.05)
    from matplotlib.ticker import PercentFormatter

    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.grid(alpha=0.3)
    # Below the axes: a legend inside would cover points at 0% or 100%.
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    ax.set_title(_title(result) + "\nprefix cache per cell, valid measured turns", fontsize=9)
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


def _concurrency(result: RunResult, path: Path | IO[bytes]) -> None:
    """Requests in flight over the measured span, as a step plot with its mean."""
    c = result.concurrency
    if c is None or len(c.samples) < 2:
        return
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 3.4), constrained_layout=True)
    ax.step(
        [t for t, _ in c.samples],
        [n for _, n in c.samples],
        where="post",
        color="tab:blue",
        label="in flight",
    )
    ax.axhline(
        c.mean, color="black", linestyle="--", linewidth=1, label=f"time-weighted mean {c.mean:.1f}"
    )
    ax.set_xlabel("seconds since the first measured request")
    ax.set_ylabel("requests in flight")
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(0, c.max * 1.35 + 0.6)  # headroom for the legend above the steps
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper right", ncol=2)
    ax.set_title(_title(result) + f"\nconcurrency over the measured span (max {c.max})", fontsize=9)
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


def _first_repetition(result: RunResult) -> list[TurnRecord]:
    """The measured records of the first measured repetition (of the first cell) whose
    records carry step kinds: the one the context plot draws."""
    if not result.scenario.sizes_vary:
        return []  # a fixed shape: every session alike, nothing an agent's plot would show
    measured = [r for r in result.records if not r.warmup and r.step_kind is not None]
    if not measured:
        return []
    first = min((r.cell, r.repetition) for r in measured)
    return [r for r in measured if (r.cell, r.repetition) == first]


def _context(result: RunResult, path: Path | IO[bytes]) -> None:
    """Context length over time: each request's prompt tokens (server count) at its send,
    one line per session (sub-agents lighter, dashed), compactions marked: the drop after
    one is the context starting anew from the system message and the summary."""
    records = [
        r
        for r in _first_repetition(result)
        if r.prompt_tokens is not None and r.sent_ns is not None
    ]
    if not records:
        return
    plt = _pyplot()
    origin = min(r.sent_ns or 0 for r in records)
    sessions: dict[int, list[TurnRecord]] = collections.defaultdict(list)
    for r in records:
        sessions[r.session].append(r)
    fig, ax = plt.subplots(figsize=(10, 4.6), constrained_layout=True)
    labelled = {"user": False, "sub": False}
    users = sorted(s for s, rs in sessions.items() if rs[0].parent_session is None)
    for session, rs in sorted(sessions.items()):
        rs.sort(key=lambda r: r.turn)
        xs = [((r.sent_ns or 0) - origin) / 1e9 for r in rs]
        ys = [float(r.prompt_tokens or 0) for r in rs]
        if rs[0].parent_session is None:
            color = _SESSION_COLORS[users.index(session) % len(_SESSION_COLORS)]
            name = (
                f"session {session}"
                if len(users) <= 8
                else None
                if labelled["user"]
                else "a user's session"
            )
            ax.plot(
                xs,
                ys,
                "o-",
                color=color,
                markersize=3,
                linewidth=1.4,
                drawstyle="steps-post",
                label=name,
            )
            labelled["user"] = True
        else:
            parent = rs[0].parent_session
            color = (
                _SESSION_COLORS[users.index(parent) % len(_SESSION_COLORS)]
                if parent in users
                else "tab:gray"
            )
            ax.plot(
                xs,
                ys,
                "o--",
                color=color,
                alpha=0.45,
                markersize=2,
                linewidth=1,
                drawstyle="steps-post",
                label=None if labelled["sub"] else "a sub-agent's session (parent's colour)",
            )
            labelled["sub"] = True
    compactions = [r for r in records if r.step_kind == "compaction"]
    if compactions:
        ax.scatter(
            [((r.sent_ns or 0) - origin) / 1e9 for r in compactions],
            [float(r.prompt_tokens or 0) for r in compactions],
            marker="v",
            s=90,
            color="black",
            zorder=5,
            label=f"compaction ({len(compactions)}): the next prompt starts anew",
        )
    from matplotlib.ticker import FuncFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _compact(v)))
    ax.set_ylim(0, max(float(r.prompt_tokens or 0) for r in records) * 1.12)
    ax.set_xlabel("seconds since the repetition's first request")
    ax.set_ylabel("prompt tokens (server count; held until the next request)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    first = records[0]
    where = f"cell {first.cell}, " if result.cells is not None else ""
    ax.set_title(
        _title(result) + f"\ncontext length of every request, {where}measured "
        f"repetition {first.repetition}, one line per session",
        fontsize=9,
    )
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


def _log_hist(ax: Any, series: list[tuple[str, list[float]]], xlabel: str) -> None:
    """Histograms of positive values on a log x axis, shared log-spaced bins, one colour per
    series (with its n), overlaid and translucent."""
    import numpy as np

    values = [v for _, vs in series for v in vs if v > 0]
    if not values:
        ax.set_visible(False)
        return
    low, high = min(values), max(values)
    if high <= low:
        low, high = low / 1.5, high * 1.5
    bins = np.logspace(np.log10(low), np.log10(high), 25)
    for (name, vs), color in zip(series, _COLORS, strict=False):
        positive = [v for v in vs if v > 0]
        if positive:
            ax.hist(
                positive, bins=bins, alpha=0.55, color=color, label=f"{name} (n {len(positive):,})"
            )
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("steps")
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    # The legend in headroom above the tallest bar, at a fixed corner: "best" searches every
    # bar for a place, which takes over a second on a busy machine with many steps (and
    # then matplotlib warns that it did).
    ax.set_ylim(0, ax.get_ylim()[1] * 1.35)
    ax.legend(fontsize=8, loc="upper right")


def _sizes(result: RunResult, path: Path | IO[bytes]) -> None:
    """What the scenario drew for the measured steps: output tokens, new tokens by kind,
    pauses (think before a human request, tool time before a tool step), as histograms on
    log axes (the sizes are right-skewed)."""
    records = [r for r in result.records if not r.warmup and r.step_kind is not None]
    if not records or not result.scenario.sizes_vary:
        return

    def of(kinds: tuple[str, ...], field: str) -> list[float]:
        return [
            float(v)
            for r in records
            if r.step_kind in kinds and (v := getattr(r, field)) is not None
        ]

    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2), constrained_layout=True)
    _log_hist(
        axes[0],
        [
            ("steps", of(("human", "tool", "subagent"), "output_tokens")),
            ("compaction summaries", of(("compaction",), "output_tokens")),
        ],
        "output tokens asked for (log scale)",
    )
    _log_hist(
        axes[1],
        [
            ("human request", of(("human",), "new_tokens")),
            ("tool result", of(("tool",), "new_tokens")),
            ("sub-agent step", of(("subagent",), "new_tokens")),
        ],
        "new tokens of the step (log scale)",
    )
    scale = result.scenario.pacing.time_scale
    played = "" if scale == 1 else f"; as played, time_scale {scale:g}"
    _log_hist(
        axes[2],
        [
            ("think, before a human request", of(("human",), "pause_s")),
            ("tool time, before a tool step", of(("tool",), "pause_s")),
        ],
        f"pause before the step, s (log{played})",
    )
    fig.suptitle(_title(result) + "\nsizes drawn for the measured steps", fontsize=10)
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


def _cdf(ax: Any, series: list[tuple[str | None, list[float]]], xlabel: str, missing: str) -> None:
    """Empirical CDFs, one step line per series (with its n), the p50, p90 and p99 levels
    marked; ``missing`` written in the panel when no series has a value."""
    if not any(values for _, values in series):
        ax.text(
            0.5,
            0.5,
            missing,
            ha="center",
            va="center",
            wrap=True,
            fontsize=9,
            transform=ax.transAxes,
        )
        ax.set_xticks([])
        ax.set_yticks([])
        return
    for number, (name, values) in enumerate(series):
        if not values:
            continue
        color = _SESSION_COLORS[number % len(_SESSION_COLORS)]
        xs = sorted(values)
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        # n of the values, as the latency table counts them (not of the points drawn)
        label = f"{name} (n {len(xs):,})" if name else f"n {len(xs):,}"
        xs, ys = [xs[0], *xs], [0.0, *ys]  # the step up at the least value shows
        ax.step(xs, ys, where="post", color=color, label=label)
    for level in (0.5, 0.9, 0.99):
        ax.axhline(level, color="tab:gray", linewidth=0.8, linestyle=":")
    ax.set_yticks([0, 0.5, 0.9, 0.99], ["0", "p50", "p90", "p99"])
    ax.set_ylabel("share of values at or below")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")


_Series = list[tuple[str | None, list[float]]]


def _latency_series(result: RunResult) -> tuple[_Series, _Series]:
    """(ITL ms, E2E s) of the valid measured requests, one series per cell (one for a run
    that is not a sweep): the values the latency table's percentiles and n count."""
    valid = [r for r in result.records if not r.warmup and r.valid]
    groups: list[tuple[str | None, list[TurnRecord]]]
    if result.cells is not None:
        groups = [
            (f"C{c.concurrency} · prior {c.prior_tokens:,}", [r for r in valid if r.cell == c.cell])
            for c in result.cells
        ]
    else:
        groups = [(None, valid)]
    itl: _Series = [(name, [g * 1000 for g in aggregate.itl_gaps_s(rs)]) for name, rs in groups]
    e2e: _Series = [
        (name, [v for r in rs if (v := aggregate.e2e_s(r)) is not None]) for name, rs in groups
    ]
    return itl, e2e


def _latency(result: RunResult, path: Path | IO[bytes]) -> None:
    """ITL (every chunk gap) and E2E latency of the valid measured requests as CDFs: the
    distributions the latency table's percentiles summarize; one line per cell in a
    sweep (never pooled over cells)."""
    itl, e2e = _latency_series(result)
    if not any(v for _, v in itl) and not any(v for _, v in e2e):
        return
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), constrained_layout=True)
    _cdf(
        axes[0],
        itl,
        "ITL ms (gaps between content chunks, log scale)",
        "ITL not recorded: these records carry no content-chunk arrival times",
    )
    if any(v for _, v in itl):
        axes[0].set_xscale("log")
    _cdf(
        axes[1],
        e2e,
        "E2E s (request written → end of stream)",
        "E2E not recorded: these records carry no send and end stamps",
    )
    fig.suptitle(
        _title(result) + "\nlatency distributions of the valid measured requests", fontsize=10
    )
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


_FIGURES: list[tuple[str, Any]] = [
    ("rates.png", _rates),
    ("ttft.png", _ttft),
    ("latency.png", _latency),
    ("prefill.png", _prefill),
    ("cache.png", _sweep_cache),
    ("concurrency.png", _concurrency),
    ("timeline.png", _timeline),
    ("context.png", _context),
    ("sizes.png", _sizes),
]


# The last result drawn and its figures: a run writes its PNGs and then its HTML report of
# the same RunResult object (frozen), which draws them once (drawing is most of a small run's
# time). Held by a weak reference: a caller's result is not kept alive by this module.
_last_drawn: tuple[weakref.ref[RunResult], list[tuple[str, bytes]]] | None = None


def figures(result: RunResult) -> list[tuple[str, bytes]]:
    """Every plot of ``result`` as (file name, PNG bytes), in report order: what the HTML
    report embeds. A plot with nothing to draw is left out."""
    global _last_drawn
    if _last_drawn is not None and _last_drawn[0]() is result:
        return list(_last_drawn[1])
    out = []
    for name, draw in _FIGURES:
        buffer = io.BytesIO()
        draw(result, buffer)
        if buffer.getvalue():
            out.append((name, buffer.getvalue()))
    _last_drawn = (weakref.ref(result), out)
    return list(out)


def write_plots(result: RunResult, directory: str | Path) -> list[Path]:
    """Write the plots (rates.png, ttft.png, timeline.png, …) into ``directory``; return
    their paths. Each is whole or not there: a failed write (a full disk) leaves no
    truncated PNG and raises :class:`~workloads.model.errors.OutputError` naming the file
    (the plots written before it stay)."""
    out = Path(directory)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError.writing(out, err) from err
    written = []
    for name, png in figures(result):
        written.append(replace_file(out / name, png))
    return written
