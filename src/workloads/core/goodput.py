"""Goodput: the requests and sessions served within the SLO, from TurnRecords. Pure.

Definitions (docs/architecture.md, "SLO and goodput"):

* a request **meets** the SLO when it is valid (a failed or invalid request never does) and
  every limit of its step kind holds for its figures (:func:`request_figures`);
* **request goodput**: the share of measured requests that met; as rates, the requests that
  met and their completion tokens over each repetition's span (first send → last stream
  end), banded over repetitions (DistServe's goodput, vLLM's ``--goodput``);
* **session goodput**: the share of sessions whose every step met, a sub-agent's steps
  counted toward the user's session that spawned it: an agent whose one step stalled was a
  bad session however fast the rest were. Per turn: the share of sessions still good
  through that turn;
* **checks**: each limit at the SLO's percentile over the measured requests (failed ones
  counted as over it), judged "holds", "fails" or "cannot tell" from order statistics
  (:func:`workloads.core.stats.percentile_verdict`);
* :func:`judge_share`: whether session goodput at a load is at or above a goal, from its
  repetitions (what ``capacity`` decides each point by).

Warm-up records never count.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from workloads.core import stats
from workloads.model.goodput import (
    Goodput,
    KindGoodput,
    RepetitionGoodput,
    SloCheck,
    TurnGoodput,
)
from workloads.model.records import StepKind, TurnRecord
from workloads.model.slo import ITL_REQUEST_PERCENTILE, LIMIT_KEYS, STEP_KINDS, Limit, Slo

__all__ = [
    "ShareJudgement",
    "judge",
    "judge_share",
    "meets",
    "missing_figure",
    "request_figures",
    "sessions_to_show",
]


def request_figures(r: TurnRecord) -> dict[Limit, float | None]:
    """A request's figures in the SLO's units: TTFT (s), TPOT (ms; 0 for a reply of one
    token, which has no time per output token), ITL (ms: the p90 of its own chunk gaps; 0
    for a single chunk) and E2E (s). None: not measured (a failed request, or records that
    carry no chunk gaps)."""
    ttft = r.ttft_ns / 1e9 if r.ttft_ns is not None and r.ttft_ns > 0 else None
    tpot: float | None = None
    if r.completion_tokens is not None and r.completion_tokens <= 1:
        tpot = 0.0
    elif (
        r.completion_tokens is not None
        and r.first_content_ns is not None
        and r.last_content_ns is not None
    ):
        tpot = (r.last_content_ns - r.first_content_ns) / 1e6 / (r.completion_tokens - 1)
    itl: float | None = None
    if r.chunk_gaps_us is not None:
        itl = (
            0.0
            if not r.chunk_gaps_us
            else stats.percentile(r.chunk_gaps_us, ITL_REQUEST_PERCENTILE)
        )
        itl = None if itl is None else itl / 1000
    end = r.done_ns if r.done_ns is not None else r.last_content_ns
    e2e = (end - r.sent_ns) / 1e9 if r.sent_ns is not None and end is not None else None
    return {"ttft_s": ttft, "tpot_ms": tpot, "itl_ms": itl, "e2e_s": e2e}


def meets(r: TurnRecord, slo: Slo) -> bool:
    """Whether request ``r`` met the SLO: valid, and each limit of its step kind held (a
    figure not measured does not hold)."""
    if not r.valid:
        return False
    figures = request_figures(r)
    for key, limit in slo.limits_for(r.step_kind).items():
        value = figures[key]
        if value is None or value > limit:
            return False
    return True


def missing_figure(records: Iterable[TurnRecord], slo: Slo) -> str | None:
    """Why ``records`` cannot be judged against ``slo`` (a limited figure the valid
    measured records do not carry: ITL from records without chunk gaps), or None."""
    for r in records:
        if r.warmup or not r.valid:
            continue
        figures = request_figures(r)
        for key, _ in slo.limits_for(r.step_kind).items():
            if figures[key] is None:
                what = (
                    "chunk gaps (records from before ITL was recorded, or from a "
                    "client= that records none)"
                    if key == "itl_ms"
                    else key
                )
                return f"the SLO limits {key}, and valid measured records carry no {what}"
    return None


def _root(session: int, parents: dict[int, int | None]) -> int:
    """The user's session a (sub-agent's) session belongs to, bounded by the sessions."""
    for _ in range(len(parents) + 1):
        parent = parents.get(session)
        if parent is None:
            return session
        session = parent
    return session


def _span_s(records: Sequence[TurnRecord]) -> float | None:
    if len({r.host for r in records}) > 1:  # several hosts' clocks: no span across them
        return None
    starts = [r.sent_ns for r in records if r.sent_ns is not None]
    ends = [e for r in records if (e := r.done_ns or r.last_content_ns) is not None]
    if not starts or not ends or max(ends) <= min(starts):
        return None
    return (max(ends) - min(starts)) / 1e9


def _checks(measured: Sequence[TurnRecord], slo: Slo) -> list[SloCheck]:
    """Each limit over the requests it applies to: a kind's own limit over that kind's
    requests, the top-level one over every other request."""
    out = []
    for key in LIMIT_KEYS:
        own = [k for k in slo.kinds() if getattr(getattr(slo, k), key) is not None]
        groups: list[tuple[StepKind | None, float | None, list[TurnRecord]]] = [
            (None, getattr(slo, key), [r for r in measured if r.step_kind not in own])
        ]
        groups += [
            (k, getattr(getattr(slo, k), key), [r for r in measured if r.step_kind == k])
            for k in own
        ]
        for kind, limit, records in groups:
            if limit is None or not records:
                continue
            values = [math.inf if not r.valid else request_figures(r)[key] for r in records]
            known = [v if v is not None else math.inf for v in values]
            low, high = stats.percentile_bounds(known, slo.percentile)
            out.append(
                SloCheck(
                    figure=key,
                    kind=kind,
                    limit=limit,
                    percentile=slo.percentile,
                    n=len(known),
                    over=sum(v > limit for v in known),
                    low=None if low is None or math.isinf(low) else low,
                    high=None if high is None or math.isinf(high) else high,
                    verdict=stats.percentile_verdict(known, slo.percentile, limit),
                )
            )
    return out


def judge(records: Iterable[TurnRecord], slo: Slo) -> Goodput:
    """The measured ``records`` judged against ``slo`` (see the module doc).

    goodput = judge(result.records, parse_slo("ttft_s=2,itl_ms=50"))
    goodput.session_share  # 0.93
    """
    # A turn cut off in flight by a stop did not miss the SLO: the run ended (the summaries
    # count it apart as cancelled); it is left out here as everywhere.
    measured = [r for r in records if not r.warmup and r.error_kind != "cancelled"]
    ok = {id(r): meets(r, slo) for r in measured}
    by_rep: dict[tuple[int, int], list[TurnRecord]] = defaultdict(list)
    for r in measured:
        by_rep[(r.cell, r.repetition)].append(r)
    repetitions = []
    good_sessions_all: set[tuple[int, int, int]] = set()
    sessions_all: set[tuple[int, int, int]] = set()
    for (cell, rep), group in sorted(by_rep.items()):
        parents = {r.session: r.parent_session for r in group}
        sessions: dict[int, bool] = {}
        for r in group:
            root = _root(r.session, parents)
            sessions[root] = sessions.get(root, True) and ok[id(r)]
        sessions_all |= {(cell, rep, s) for s in sessions}
        good_sessions_all |= {(cell, rep, s) for s, good in sessions.items() if good}
        met = [r for r in group if ok[id(r)]]
        repetitions.append(
            RepetitionGoodput(
                cell=cell,
                repetition=rep,
                requests=len(group),
                met=len(met),
                sessions=len(sessions),
                good_sessions=sum(sessions.values()),
                met_tokens=sum(r.completion_tokens or 0 for r in met),
                span_s=_span_s(group),
            )
        )
    turns = _turns(measured, ok)
    kinds = None
    if any(r.step_kind is not None for r in measured):
        kinds = [
            KindGoodput(kind=k, requests=len(mine), met=sum(ok[id(r)] for r in mine))
            for k in STEP_KINDS
            if (mine := [r for r in measured if r.step_kind == k])
        ]
    return Goodput(
        slo=slo,
        requests=len(measured),
        met=sum(ok.values()),
        sessions=len(sessions_all),
        good_sessions=len(good_sessions_all),
        request_rate=stats.band(g.met / g.span_s for g in repetitions if g.span_s),
        token_rate=stats.band(g.met_tokens / g.span_s for g in repetitions if g.span_s),
        repetitions=repetitions,
        turns=turns,
        kinds=kinds,
        checks=_checks(measured, slo),
    )


def _turns(measured: Sequence[TurnRecord], ok: dict[int, bool]) -> list[TurnGoodput]:
    """Per turn of the users' own sessions: its requests, and the sessions good through it,
    a sub-agent's step counted at the turn it feeds: the user's first turn sent after it
    (sub-agents play before the step whose tool result they make: runner/subagents.py)."""
    own = [r for r in measured if r.parent_session is None]
    by_turn: dict[int, list[TurnRecord]] = defaultdict(list)
    for r in own:
        by_turn[r.turn].append(r)
    bad_from: dict[tuple[int, int, int], float] = {}  # session → its first turn that missed
    sent: dict[tuple[int, int, int], list[tuple[int, int]]] = defaultdict(list)
    parents: dict[tuple[int, int], dict[int, int | None]] = defaultdict(dict)
    for r in measured:
        parents[(r.cell, r.repetition)][r.session] = r.parent_session
        if r.parent_session is None:
            sent[(r.cell, r.repetition, r.session)].append((r.started_ns, r.turn))
    for r in measured:
        if ok[id(r)]:
            continue
        root = _root(r.session, parents[(r.cell, r.repetition)])
        key = (r.cell, r.repetition, root)
        turn: float = r.turn
        if r.parent_session is not None:  # one never followed by its user's turn: none
            turn = min((t for at, t in sent[key] if at >= r.started_ns), default=math.inf)
        bad_from[key] = min(bad_from.get(key, turn), turn)
    out = []
    for turn in sorted(by_turn):
        group = by_turn[turn]
        played = {(r.cell, r.repetition, r.session) for r in group}
        out.append(
            TurnGoodput(
                turn=turn,
                requests=len(group),
                met=sum(ok[id(r)] for r in group),
                sessions=len(played),
                good_through=sum(1 for s in played if bad_from.get(s, turn + 1) > turn),
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class ShareJudgement:
    """Session goodput at one load against a goal: the pooled share, a two-sided (1 −
    alpha) interval, and what it says: "meets" (the interval is at or above the goal),
    "fails" (below it) or "measure more"."""

    share: float
    low: float
    high: float
    repetitions: int
    verdict: Literal["meets", "fails", "measure more"]


def judge_share(
    repetitions: Sequence[tuple[int, int]], goal: float, *, alpha: float = stats.ALPHA
) -> ShareJudgement | None:
    """Whether session goodput is at or above ``goal`` (in (0, 1)), from (good sessions,
    sessions) per measured repetition. The interval is the wider of two: Student's t over
    the per-repetition shares (``compare``'s statistics: repetitions are what vary from run
    to run, and sessions of one repetition share the server's load) and the exact binomial
    interval of the pooled sessions (a share of few sessions is uncertain however steady the
    repetitions look: three repetitions at 100% have no spread at all). Fewer than
    :data:`~workloads.core.stats.MIN_REPETITIONS` repetitions: "measure more". None without
    sessions."""
    if not 0.0 < goal < 1.0:
        raise ValueError(f"goal must be in (0, 1), got {goal}")
    reps = [(good, n) for good, n in repetitions if n > 0]
    good, total = sum(g for g, _ in reps), sum(n for _, n in reps)
    exact = stats.share_interval(good, total, alpha=alpha)
    if exact is None:
        return None
    share = good / total
    low, high = exact
    if len(reps) >= stats.MIN_REPETITIONS:
        shares = [g / n for g, n in reps]
        mean = sum(shares) / len(shares)
        var = sum((s - mean) ** 2 for s in shares) / (len(shares) - 1)
        half = stats.t_quantile(1 - alpha / 2, len(shares) - 1) * math.sqrt(var / len(shares))
        low, high = min(low, mean - half), max(high, mean + half)
    low, high = max(0.0, low), min(1.0, high)
    verdict: Literal["meets", "fails", "measure more"] = "measure more"
    if len(reps) >= stats.MIN_REPETITIONS:
        verdict = "meets" if low >= goal else "fails" if high < goal else "measure more"
    return ShareJudgement(share=share, low=low, high=high, repetitions=len(reps), verdict=verdict)


def sessions_to_show(goal: float, *, alpha: float = stats.ALPHA) -> int:
    """The fewest sessions that can show session goodput at or above ``goal``: all of them
    good, and the exact interval's low end, (alpha/2)^(1/n) for n good of n, at the goal.
    A 95% goal needs 72 (C2's 30 repetitions hold 60: it cannot tell there)."""
    if not 0.0 < goal < 1.0:
        raise ValueError(f"goal must be in (0, 1), got {goal}")
    n = math.ceil(math.log(alpha / 2) / math.log(goal))
    while (alpha / 2) ** (1 / n) < goal:  # the float rounding of the ratio, either way
        n += 1
    while n > 1 and (alpha / 2) ** (1 / (n - 1)) >= goal:
        n -= 1
    return n
