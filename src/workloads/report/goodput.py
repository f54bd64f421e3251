"""The report's goodput: the block of a run with an SLO (request and session goodput, per
turn and step kind, the run-level checks), its CSV columns, and the capacity search's
report and plot. Pure: tables, text and a PNG. (Every percentile's bounds, or "needs ≥ N",
are :func:`workloads.report.text.percentile_text`'s.)
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from pathlib import Path

from workloads.core.goodput import sessions_to_show
from workloads.core.stats import CONFIDENCE, needed_for_bound
from workloads.model.capacity import CapacityResult
from workloads.model.errors import OutputError
from workloads.model.files import replace_file
from workloads.model.goodput import Goodput, SloCheck
from workloads.model.results import RunResult
from workloads.report.agents import KIND_LABELS
from workloads.report.table import Block, Line, ReportTable
from workloads.report.text import format_band, num, plural

__all__ = [
    "ITL_BOUNDS_NOTE",
    "blocks",
    "capacity_blocks",
    "capacity_plot",
    "check_line",
    "csv_columns",
]

# Appended when ITL is shown: its values are every gap of every request, and the gaps of
# one request are no independent draws, so its bounds count requests (core/stats.py,
# clustered_percentiles).
ITL_BOUNDS_NOTE = (
    "; ITL's bounds count each request's gaps as one draw (p50 from 5 requests, p90 "
    "from 29, p99 from 299; a value alone: too few requests to bound it)"
)
_UNITS = {
    "ttft_s": ("TTFT", "s"),
    "tpot_ms": ("TPOT", "ms"),
    "itl_ms": ("ITL", "ms"),
    "e2e_s": ("E2E", "s"),
}


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def _limit(figure: str, value: float) -> str:
    name, unit = _UNITS[figure]
    return f"{name} ≤ {value:g} {unit}"


def check_line(c: SloCheck) -> str:
    """One run-level check: "p90 TTFT ≤ 2 s: holds with 95% confidence (3 of 45 over)";
    "cannot tell yet" names what is missing."""
    unit = _UNITS[c.figure][1]
    whose = "" if c.kind is None else f" ({KIND_LABELS[c.kind]} steps)"
    head = f"p{c.percentile:g} {_limit(c.figure, c.limit)}{whose}"
    over = f"{c.over:,} of {c.n:,} over"
    if c.verdict == "holds":
        return (
            f"{head}: holds with {CONFIDENCE:.0%} confidence ({over}; "
            f"p{c.percentile:g} ≤ {num(c.high)} {unit})"
        )
    if c.verdict == "fails":
        below = f"; p{c.percentile:g} ≥ {num(c.low)} {unit}" if c.low is not None else ""
        return f"{head}: fails with {CONFIDENCE:.0%} confidence ({over}{below})"
    needed = needed_for_bound(c.percentile)
    if c.n < needed:
        why = f"needs ≥ {needed:,} requests for a {CONFIDENCE:.0%} upper bound; have {c.n:,}"
    else:
        why = f"{over}: more requests will tell"
    return f"{head}: cannot tell yet ({why})"


def _headline(g: Goodput) -> str:
    rate = ""
    if g.request_rate is not None:  # median (min–max) over the repetitions, as every band
        rate = f" · goodput {format_band(g.request_rate)} requests/s"
        if g.token_rate is not None:
            rate += f", {format_band(g.token_rate)} tok/s"
    return (
        f"requests meeting the SLO: {g.met:,} of {g.requests:,} ({_pct(g.share)}){rate}"
        f" · session goodput {_pct(g.session_share)} ({g.good_sessions:,} of "
        f"{plural(g.sessions, 'session')} met it at every step)"
    )


def _turn_table(g: Goodput) -> ReportTable | None:
    if len(g.turns) < 2:
        return None
    table = ReportTable(
        "Goodput per turn — requests that met the SLO; sessions good through the turn "
        "(every step so far met it)",
        ["turn", "met", "requests", "sessions good", "sessions"],
        name="goodput_turns",
    )
    for t in g.turns:
        table.add_row(
            str(t.turn),
            f"{t.met:,}/{t.requests:,}",
            _pct(t.met / t.requests if t.requests else None),
            f"{t.good_through:,}/{t.sessions:,}",
            _pct(t.good_through / t.sessions if t.sessions else None),
        )
    return table


def _kind_line(g: Goodput) -> str | None:
    if not g.kinds:
        return None
    parts = [
        f"{KIND_LABELS[k.kind]} {k.met:,}/{k.requests:,} ({_pct(k.met / k.requests)})"
        for k in g.kinds
        if k.requests
    ]
    return "met per step kind: " + " · ".join(parts)


def blocks(result: RunResult) -> list[Block]:
    """The goodput block: the SLO, the headline (request and session goodput, goodput
    rates), per turn, per step kind, the checks; per cell for a sweep. Nothing without an
    SLO; one line saying why when the records cannot be judged by it."""
    slo = result.scenario.slo
    if slo is None:
        return []
    itl = any(
        k == "itl_ms" for kind in (None, *slo.kinds()) for k, _ in slo.limits_for(kind).items()
    )
    parts: list[Block] = [
        Line(
            f"SLO: {slo.describe()} (per request"
            + ("; ITL: a request's p90 chunk gap)" if itl else ")"),
            "bold",
        )
    ]
    g = result.goodput
    if g is None:
        parts.append(
            Line(
                "goodput not judged: the records carry no figure for a limit the "
                "SLO sets (see warnings)"
            )
        )
        return parts
    if result.cells is not None:
        table = ReportTable(
            "Goodput per cell",
            ["C", "prior target", "met", "requests/s", "sessions good", "session goodput"],
            key=2,
            name="goodput_cells",
        )
        for cell in result.cells:
            c = cell.goodput
            if c is None:
                continue
            table.add_row(
                str(cell.concurrency),
                f"{cell.prior_tokens:,}",
                f"{c.met:,}/{c.requests:,} ({_pct(c.share)})",
                num(c.request_rate.median if c.request_rate else None),
                f"{c.good_sessions:,}/{c.sessions:,}",
                _pct(c.session_share),
            )
        parts.append(table)
    else:
        parts.append(Line(_headline(g)))
        if (turns := _turn_table(g)) is not None:
            parts.append(turns)
    if (kinds := _kind_line(g)) is not None:
        parts.append(Line(kinds))
    parts += [Line(check_line(c)) for c in g.checks]
    return parts


def csv_columns(result: RunResult, row: dict[str, object]) -> dict[str, object]:
    """Goodput columns for one CSV row of :func:`workloads.report.export.csv_text` (a
    (cell, turn) row or a (cell, step kind) row); none without an SLO."""
    if result.scenario.slo is None:
        return {}
    cell = row.get("cell", 0)
    g = result.goodput
    if result.cells is not None:
        g = next((c.goodput for c in result.cells if c.cell == cell), None)
    out: dict[str, object] = {
        "goodput_met": None,
        "goodput_share": None,
        "goodput_sessions_good_through": None,
        # the run's (a sweep's: the row's cell's) own goodput, the headline's, on every row
        "goodput_run_met": None,
        "goodput_run_requests": None,
        "goodput_run_share": None,
        "goodput_run_session_share": None,
        **{
            f"goodput_run_{unit}_{side}": None
            for unit in ("requests_per_s", "tok_s")
            for side in ("median", "low", "high")
        },
    }
    if g is None:
        return out
    out.update(
        goodput_run_met=g.met,
        goodput_run_requests=g.requests,
        goodput_run_share=g.share,
        goodput_run_session_share=g.session_share,
    )
    for unit, band in (("requests_per_s", g.request_rate), ("tok_s", g.token_rate)):
        if band is not None:
            for side in ("median", "low", "high"):
                out[f"goodput_run_{unit}_{side}"] = getattr(band, side)
    if row.get("step_kind"):
        kind = next((k for k in g.kinds or () if k.kind == row["step_kind"]), None)
        if kind is not None:
            out.update(
                goodput_met=kind.met,
                goodput_share=kind.met / kind.requests if kind.requests else None,
            )
        return out
    turn = next((t for t in g.turns if t.turn == row.get("turn")), None)
    if turn is not None:
        out.update(
            goodput_met=turn.met,
            goodput_share=turn.met / turn.requests if turn.requests else None,
            goodput_sessions_good_through=(
                turn.good_through / turn.sessions if turn.sessions else None
            ),
        )
    return out


def _load_word(result: CapacityResult) -> tuple[str, str]:
    return ("arrival rate", "sessions/s") if result.axis == "rate" else ("concurrency", "C")


def capacity_blocks(result: CapacityResult) -> list[Block]:
    """The capacity search's report: the answer first, then every point measured."""
    word, unit = _load_word(result)
    goal = f"session goodput ≥ {result.goal:.0%}"
    parts: list[Block] = [
        Line(f"{result.scenario.name} → {result.model} @ {result.target}", "bold")
    ]

    def load(x: float) -> str:
        return f"{x:g} {unit}" if result.axis == "rate" else f"C{x:g}"

    verdicts = {p.load: p.verdict for p in result.points}
    if result.knee is not None:
        answer = f"capacity: {load(result.knee)} — the highest {word} shown to keep {goal}"
        if result.first_failing is not None:
            shown = verdicts.get(result.first_failing) == "fails"
            answer += f"; {load(result.first_failing)} " + (
                "does not" if shown else "could not tell"
            )
    else:
        answer = f"capacity: not found — no {word} measured was shown to keep {goal}"
    parts.append(Line(answer, "bold"))
    if (small := _too_small(result, load)) is not None:
        parts.append(Line(small, "warning"))
    parts.append(
        Line(
            f"SLO: {result.slo.describe()} (per request) · goal: {goal}, a "
            "point judged by its 95% interval"
        )
    )
    table = ReportTable(
        f"Capacity search — {word} against session goodput (95% interval) and per-user rate",
        [
            word,
            "session goodput",
            "interval",
            "verdict",
            "repetitions",
            "requests met",
            "per-user tok/s",
            "goodput tok/s",
        ],
        name="capacity",
        left=(3,),
    )
    for p in sorted(result.points, key=lambda p: p.load):
        mark = " ◀ knee" if result.knee is not None and p.load == result.knee else ""
        table.add_row(
            load(p.load),
            _pct(p.session_share),
            f"{_pct(p.low)}–{_pct(p.high)}",
            p.verdict + mark,
            str(p.repetitions),
            _pct(p.request_share),
            num(p.per_user_rate),
            num(p.goodput_token_rate),
        )
    parts.append(table)
    if result.stopped is not None:
        parts.append(Line(f"search stopped: {result.stopped}", "warning"))
    return parts


def _too_small(result: CapacityResult, load: Callable[[float], str]) -> str | None:
    """ "cannot tell at C1–C2" and why, for the loads whose sessions were too few to show the
    goal even had every one been good, with what the requests there say and what would."""
    need = sessions_to_show(result.goal)
    small = sorted(
        (p for p in result.points if p.verdict == "cannot tell" and p.sessions < need),
        key=lambda p: p.load,
    )
    if not small:
        return None
    loads = [p.load for p in small]
    where = ", ".join(load(x) for x in loads)
    if len(loads) > 1 and loads == [loads[0] + i for i in range(len(loads))]:
        where = f"{load(loads[0])}–{load(loads[-1])}"
    held = sorted({p.sessions for p in small})
    sessions = f"{held[0]:,}" if len(held) == 1 else f"{held[0]:,}–{held[-1]:,}"
    met, requests = sum(p.met for p in small), sum(p.requests for p in small)
    top = small[-1]
    more = ""
    if result.axis == "concurrency":
        more = (
            f"; {load(top.load)} would need {math.ceil(need / top.load):,} repetitions "
            "(--max-repetitions), every session good"
        )
    return (
        f"cannot tell at {where}: a {result.goal:.0%} session goal is shown only by ≥ "
        f"{need:,} sessions, every one good (the exact binomial bound), and the "
        f"repetitions there held {sessions}; their requests met the SLO "
        f"{met:,} of {requests:,} ({_pct(met / requests if requests else None)}){more}"
    )


def capacity_plot(result: CapacityResult, path: Path) -> Path | None:
    """capacity.png: session goodput (with its interval) and per-user rate against load,
    the goal and the knee marked. None without matplotlib (the plots extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    word, _ = _load_word(result)
    points = sorted(result.points, key=lambda p: p.load)
    xs = [p.load for p in points]
    fig, left = plt.subplots(figsize=(7, 4))
    try:
        share = [p.session_share if p.session_share is not None else float("nan") for p in points]
        low = [p.low if p.low is not None else float("nan") for p in points]
        high = [p.high if p.high is not None else float("nan") for p in points]
        left.fill_between(xs, low, high, alpha=0.2, color="tab:blue", label="95% interval")
        left.plot(xs, share, "o-", color="tab:blue", label="session goodput")
        left.axhline(result.goal, color="tab:gray", linestyle="--", label="goal")
        if result.knee is not None:
            left.axvline(result.knee, color="tab:red", linestyle=":", label="knee")
        left.set_ylim(0, 1.05)
        left.set_xlabel(word)
        left.set_ylabel("session goodput")
        right = left.twinx()
        rates = [p.per_user_rate if p.per_user_rate is not None else float("nan") for p in points]
        right.plot(xs, rates, "s--", color="tab:orange", label="per-user tok/s")
        right.set_ylabel("per-user tok/s")
        handles = left.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
        left.legend(handles=handles, loc="lower left", fontsize="small")
        left.set_title(
            f"{result.scenario.name}: capacity at {result.slo.describe()}", fontsize="small"
        )
        fig.tight_layout()
        png = io.BytesIO()
        fig.savefig(png, dpi=120, format="png")
    finally:
        plt.close(fig)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError.writing(path.parent, err) from err
    return replace_file(path, png.getvalue())  # whole or not there (a full disk)
