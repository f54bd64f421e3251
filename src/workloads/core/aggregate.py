"""From TurnRecords to the figures people read: per turn, per repetition and per run. Pure.

Definitions (see docs/architecture.md; the seed records use the same):

* per-turn aggregate rate — Σ over sessions of their post-first rates in that turn, taken per
  repetition of a cell; the summary is the median over measured repetitions with the min–max
  band. A repetition counts only when every one of the cell's ``users`` streams was valid:
  a Σ over fewer streams is not the same figure, so such a repetition is *excluded* from the
  aggregate (and wall aggregate) band and counted in ``partial_repetitions``; ``streams``
  bands how many streams each repetition summed (min–max), so the exclusion is visible. No
  known rate is None, never 0;
* wall aggregate rate — Σ completion tokens / (last content − first send) of the turn, per
  repetition (same exclusion);
* per-user rate — median over sessions (per repetition, then banded over repetitions);
* prefill rate — prompt_tokens / TTFT; uncached prefill — (prompt − cached) / TTFT;
* cache effectiveness — Σ cached_tokens / Σ shareable_tokens over the valid records where
  *both* are known (None when there are none, or nothing was shareable);
* hit rate — Σ cached_tokens / Σ prompt_tokens over the valid records with cached known
  (what vLLM's prefix-cache counters call the hit rate);
* latency distributions (p50/p90/p99/max) over the valid records: TTFT, inter-token latency
  (every gap between consecutive content chunks, from ``chunk_gaps_us``) and end-to-end
  latency (sent → end of stream);
* request rate — finished requests / (last stream end − first send) per (cell, repetition),
  banded over repetitions.
* decode overlap — per (cell, repetition, turn): the mean over its streams of the share of
  each one's decode time during which every other stream decoded too, with the mean streams
  decoding at a time (:mod:`workloads.core.concurrency`); banded over the repetitions the
  aggregate sums, and for the run the median over the (repetition, turn)s it takes. The
  aggregate presumes the streams decoded together: below ``LOW_DECODE_OVERLAP`` it
  overstates (a queued stream decodes faster once admitted, so the Σ rises while the server
  delivers less), and the report says so and leads with the wall throughput.

Run figures (the report's headline): the aggregate is the median of the per-turn aggregates
(Σ over one turn's concurrent streams) over every (repetition, turn) in which all the cell's
streams were valid — never a Σ over survivors, never users × a per-user median; with no such
(repetition, turn) it is None and ``partial_turns`` says why. Per-user median over every valid
measured record; wall aggregate = Σ completion tokens of a repetition's valid turns / its span
(first send → last content), per repetition, banded over the repetitions in which every
measured turn was valid. :func:`repetitions` gives the same figures for each repetition alone
and :func:`turn_repetitions` each (repetition, turn)'s: what ``compare`` tests.

Records are grouped by (cell, repetition): every cell of a sweep numbers its repetitions from
0. A summary over records of several cells (a sweep's pooled ``RunResult.summary``) has no
aggregate or wall aggregate figures (None): a Σ over streams of different concurrencies means
nothing; read each cell's summary instead.

Free and arrivals pacing (``lockstep=False``): a turn's streams need not overlap in time, so
the Σ of their rates overstates throughput. It is no aggregate there: the per-turn Σ is
``streams_sum_rate`` ("Σ streams tok/s †" in the report) and every aggregate field is None;
the wall throughput is the figure to lead with.

Sub-agents: the per-turn summaries, the aggregate (its "all ``users`` streams valid" rule),
the streams counts and the per-user median count the users' own sessions only (records with
``parent_session`` None); a sub-agent's steps have turn numbers of its own session, which are
not the users' turns. Totals over all requests count them: records, valid, errors, request
rate, latency distributions, wall throughput. :func:`kinds` summarises every step kind,
sub-agents' included, sessions' first steps apart from their later steps;
:func:`cache_cliff` the hit rate right after compactions, and :func:`pause_pressure` what
other sessions wrote into the KV before each human request after a pause
(:mod:`workloads.core.pressure`).

Only valid turns enter the rates; invalid and failed turns are counted and shown. A turn
cancelled in flight by a stop (``error_kind`` "cancelled") is counted apart, as
``cancelled``: it did not fail, the run ended. Warm-up turns never enter any figure here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from workloads.core import goodput, pressure, stats
from workloads.core.concurrency import decode_overlap, streams_decoding
from workloads.core.gate import rejudged
from workloads.model.goodput import Goodput
from workloads.model.records import StepKind, TurnRecord
from workloads.model.results import RunResult
from workloads.model.slo import Slo
from workloads.model.summary import (
    BandSummary,
    CacheCliff,
    KindSummary,
    PausePressure,
    Percentiles,
    RunSummary,
    Summary,
    TurnSummary,
)

__all__ = [
    "RepetitionFigures",
    "TurnRepetitionFigures",
    "cache_cliff",
    "cancelled",
    "cell_figures",
    "e2e_s",
    "generation_rate",
    "itl_gaps_s",
    "judged_goodput",
    "kinds",
    "pause_pressure",
    "repetitions",
    "summarize",
    "summarized",
    "turn_repetitions",
    "users_own",
]


@dataclass(frozen=True, slots=True)
class RepetitionFigures:
    """The run figures of one measured repetition of one cell (what ``compare`` bands)."""

    cell: int
    repetition: int
    records: int
    valid: int
    per_user_rate: float | None  # median over the valid records of its users' own sessions
    aggregate_rate: float | None  # median over its turns whose streams were all valid of Σ
    wall_aggregate_rate: float | None  # None unless every measured turn was valid
    ttft_s: float | None  # median over the repetition's valid records


@dataclass(frozen=True, slots=True)
class TurnRepetitionFigures:
    """The figures of one turn of one measured repetition of one cell: ``compare``'s
    per-turn values, one per repetition."""

    cell: int
    repetition: int
    turn: int
    streams: int  # valid streams with a post-first rate
    aggregate_rate: float | None  # Σ of the streams' rates; None unless all users' were valid
    per_user_rate: float | None
    ttft_s: float | None  # median over the valid records
    prefill_rate: float | None  # median prompt / TTFT over the valid records
    cache_effectiveness: float | None  # Σ cached / Σ shareable where both known
    spec_acceptance: float | None = None  # Σ accepted / Σ drafted (llama.cpp timings)
    # Did the streams decode together (core/concurrency.py)? None with one stream.
    decode_overlap: float | None = None
    streams_decoding: float | None = None


Key = tuple[int, int]  # (cell, repetition)


def _ttft_s(r: TurnRecord) -> float | None:
    return None if r.ttft_ns is None or r.ttft_ns <= 0 else r.ttft_ns / 1e9


def users_own(records: Iterable[TurnRecord]) -> list[TurnRecord]:
    """The records of the users' own sessions: a sub-agent's steps (``parent_session`` set)
    left out. What per-turn figures and the aggregate count."""
    return [r for r in records if r.parent_session is None]


def _hit_rate(records: Iterable[TurnRecord]) -> float | None:
    """Σ cached / Σ prompt over the valid records with cached known (None: none, or no
    prompt tokens)."""
    known = [
        r
        for r in records
        if r.valid and r.cached_tokens is not None and r.prompt_tokens is not None
    ]
    prompt = sum(r.prompt_tokens or 0 for r in known)
    return sum(r.cached_tokens or 0 for r in known) / prompt if prompt > 0 else None


def _per_rep(records: Iterable[TurnRecord]) -> dict[Key, list[TurnRecord]]:
    """Records grouped by (cell, repetition), in key order."""
    groups: dict[Key, list[TurnRecord]] = defaultdict(list)
    for r in records:
        groups[(r.cell, r.repetition)].append(r)
    return dict(sorted(groups.items()))


def one_clock(records: Iterable[TurnRecord]) -> bool:
    """Whether every record's stamps are one host's clock (a span across records means
    something only then: a Ray run's hosts each have their own monotonic clock)."""
    return len({r.host for r in records}) <= 1


def _wall_rate(records: Sequence[TurnRecord]) -> float | None:
    if not one_clock(records):
        return None
    ends = [r.last_content_ns for r in records if r.last_content_ns is not None]
    starts = [r.sent_ns for r in records if r.sent_ns is not None]
    tokens = sum(r.completion_tokens or 0 for r in records)
    if not ends or not starts or max(ends) <= min(starts):
        return None
    return tokens / ((max(ends) - min(starts)) / 1e9)


def e2e_s(r: TurnRecord) -> float | None:
    """A request's E2E latency, s: sent → end of stream (None when a stamp is missing)."""
    end = r.done_ns if r.done_ns is not None else r.last_content_ns
    if r.sent_ns is None or end is None or end <= r.sent_ns:
        return None
    return (end - r.sent_ns) / 1e9


def _itl_percentiles(records: Iterable[TurnRecord]) -> Percentiles | None:
    """The pooled ITL distribution's percentiles, s: :func:`itl_gaps_s`'s values counted by
    their whole µs (the same figures; a float object per streamed token held the summaries'
    memory peak: benchmarks/RESULTS.md, "Memory at the peak"), with bounds that treat each
    request's gaps as one cluster (:func:`~workloads.core.stats.clustered_percentiles`: the
    gaps of one stream are no independent draws)."""
    return stats.clustered_percentiles([r.chunk_gaps_us or () for r in records], 1e6)


def itl_gaps_s(records: Iterable[TurnRecord]) -> Iterator[float]:
    """Every chunk gap of ``records``, s: the values of the pooled ITL distribution."""
    for r in records:
        for gap in r.chunk_gaps_us or ():
            yield gap / 1e6


def _request_rate(records: Sequence[TurnRecord]) -> float | None:
    """Finished requests per second over the records' span: first send → last stream end."""
    if not one_clock(records):
        return None
    finished = [r for r in records if r.status == "ok"]
    ends = [e for r in finished if (e := r.done_ns or r.last_content_ns) is not None]
    starts = [r.sent_ns for r in records if r.sent_ns is not None]
    if not ends or not starts or max(ends) <= min(starts):
        return None
    return len(finished) / ((max(ends) - min(starts)) / 1e9)


def cancelled(records: Iterable[TurnRecord]) -> int:
    """How many of ``records`` were cut off in flight by the end of the run (a stop)."""
    return sum(1 for r in records if r.error_kind == "cancelled")


def _rates(records: Iterable[TurnRecord]) -> list[float]:
    return [r.decode_tokens_per_s for r in records if r.valid and r.decode_tokens_per_s is not None]


def generation_rate(records: Iterable[TurnRecord]) -> BandSummary | None:
    """Post-first streaming rate of every valid measured record: median with min–max."""
    return stats.band(_rates(r for r in records if not r.warmup))


def _spec_counts(records: Iterable[TurnRecord]) -> tuple[int | None, int | None]:
    """(Σ drafted, Σ accepted) tokens over the responses that report both in their
    per-response timings (llama.cpp's draft_n, draft_n_accepted); (None, None) when none
    does: not reported, which is not zero."""
    pairs = [
        (d, a)
        for r in records
        if r.timings is not None
        and isinstance(d := r.timings.get("draft_n"), int | float)
        and isinstance(a := r.timings.get("draft_n_accepted"), int | float)
    ]
    if not pairs:
        return None, None
    return int(sum(d for d, _ in pairs)), int(sum(a for _, a in pairs))


def _turn_summary(
    turn: int, records: Sequence[TurnRecord], *, users: int, pooled: bool, lockstep: bool
) -> TurnSummary:
    valid = [r for r in records if r.valid]
    finished = [r for r in records if r.status == "ok"]
    aggregate: list[float] = []
    wall: list[float | None] = []
    per_user: list[float | None] = []
    streams: list[float] = []
    overlap: list[float | None] = []
    decoding: list[float | None] = []
    partial = 0
    for reps in _per_rep(records).values():
        rates = _rates(reps)
        streams.append(len(rates))
        per_user.append(stats.median(rates))
        if pooled:
            continue
        if len(rates) < users:
            partial += 1
            continue
        aggregate.append(sum(rates))
        wall.append(_wall_rate([r for r in reps if r.valid]))
        overlap.append(decode_overlap(reps))
        decoding.append(streams_decoding(reps))
    prefill = [
        r.prompt_tokens / t for r in valid if (t := _ttft_s(r)) and r.prompt_tokens is not None
    ]
    uncached = [
        (r.prompt_tokens - r.cached_tokens) / t
        for r in valid
        if (t := _ttft_s(r)) and r.prompt_tokens is not None and r.cached_tokens is not None
    ]
    cached_known = [r for r in valid if r.cached_tokens is not None]
    both = [r for r in cached_known if r.shareable_tokens is not None]
    shareable_sum = sum(r.shareable_tokens or 0 for r in both)
    effectiveness = (
        sum(r.cached_tokens or 0 for r in both) / shareable_sum if shareable_sum > 0 else None
    )
    prompt_sum = sum(r.prompt_tokens or 0 for r in cached_known)
    hit_rate = (
        sum(r.cached_tokens or 0 for r in cached_known if r.prompt_tokens) / prompt_sum
        if prompt_sum > 0
        else None
    )
    drafted, accepted = _spec_counts(records)
    # The tokens table shows prompt, shareable and cached medians side by side: over the same
    # records (each figure known; cached only where any is), so no median reads above
    # another that bounds it record by record. Over their own records, after compactions
    # "shareable" read above "prompt" (issue 35).
    counted = [
        r
        for r in valid
        if r.prompt_tokens is not None
        and r.shareable_tokens is not None
        and (r.cached_tokens is not None or not cached_known)
    ]
    # Each record's own (a trace's requests, drawn sizes): the median, not the first's.
    configured = stats.median(r.configured_prompt_tokens for r in records)
    return TurnSummary(
        turn=turn,
        configured_prior_tokens=round(
            stats.median(r.configured_prior_tokens for r in records) or 0
        ),
        configured_prompt_tokens=None if configured is None else round(configured),
        records=len(records),
        valid=len(valid),
        invalid=len(finished) - len(valid),
        errors=len(records) - len(finished) - cancelled(records),
        cancelled=cancelled(records),
        aggregate_rate=stats.band(aggregate) if lockstep else None,
        streams_sum_rate=None if lockstep else stats.band(aggregate),
        wall_aggregate_rate=stats.band(wall),
        per_user_rate=stats.band(per_user),
        ttft_s=stats.band(_ttft_s(r) for r in valid),
        prefill_rate=stats.band(prefill),
        uncached_prefill_rate=stats.band(uncached),
        prompt_tokens=stats.band(r.prompt_tokens for r in counted or valid),
        completion_tokens=stats.band(r.completion_tokens for r in valid),
        cached_tokens=stats.band(r.cached_tokens for r in counted or cached_known),
        shareable_tokens=stats.band(r.shareable_tokens for r in counted or valid),
        shareable_exact=bool(valid) and all(r.shareable_exact for r in valid),
        cache_effectiveness=effectiveness,
        resends=sum(r.resends for r in records),
        streams=stats.band(streams),
        partial_repetitions=partial,
        hit_rate=hit_rate,
        ttft_percentiles=stats.percentiles(_ttft_s(r) for r in valid),
        itl_percentiles=_itl_percentiles(valid),
        e2e_percentiles=stats.percentiles(e2e_s(r) for r in valid),
        spec_draft_tokens=drafted,
        spec_accepted_tokens=accepted,
        decode_overlap=stats.band(overlap),
        streams_decoding=stats.band(decoding),
    )


def repetitions(records: Iterable[TurnRecord], *, users: int) -> list[RepetitionFigures]:
    """The run figures of each measured (cell, repetition), in order. ``users`` is the
    cell's concurrency (pass one cell's records)."""
    out = []
    for (cell, rep), group in _per_rep(r for r in records if not r.warmup).items():
        valid = [r for r in group if r.valid]
        per_user = stats.median(_rates(users_own(valid)))
        full = [t.aggregate_rate for t in turn_repetitions(group, users=users)]
        out.append(
            RepetitionFigures(
                cell=cell,
                repetition=rep,
                records=len(group),
                valid=len(valid),
                per_user_rate=per_user,
                aggregate_rate=stats.median(full),
                wall_aggregate_rate=_wall_rate(valid) if len(valid) == len(group) else None,
                ttft_s=stats.median(_ttft_s(r) for r in valid),
            )
        )
    return out


def _effectiveness(records: Iterable[TurnRecord]) -> float | None:
    both = [
        r
        for r in records
        if r.valid and r.cached_tokens is not None and r.shareable_tokens is not None
    ]
    shareable = sum(r.shareable_tokens or 0 for r in both)
    return sum(r.cached_tokens or 0 for r in both) / shareable if shareable > 0 else None


def turn_repetitions(records: Iterable[TurnRecord], *, users: int) -> list[TurnRepetitionFigures]:
    """The figures of each measured (cell, repetition, turn) of the users' own sessions, in
    order. ``users``: the cell's concurrency; the aggregate is None unless that many streams
    were valid."""
    groups: dict[tuple[int, int, int], list[TurnRecord]] = defaultdict(list)
    for r in users_own(records):
        if not r.warmup:
            groups[(r.cell, r.repetition, r.turn)].append(r)
    out = []
    for (cell, rep, turn), group in sorted(groups.items()):
        rates = _rates(group)
        valid = [r for r in group if r.valid]
        out.append(
            TurnRepetitionFigures(
                cell=cell,
                repetition=rep,
                turn=turn,
                streams=len(rates),
                aggregate_rate=sum(rates) if rates and len(rates) >= users else None,
                per_user_rate=stats.median(rates),
                ttft_s=stats.median(_ttft_s(r) for r in valid),
                prefill_rate=stats.median(
                    r.prompt_tokens / t
                    for r in valid
                    if (t := _ttft_s(r)) and r.prompt_tokens is not None
                ),
                cache_effectiveness=_effectiveness(group),
                spec_acceptance=spec_acceptance(group),
                decode_overlap=decode_overlap(group),
                streams_decoding=streams_decoding(group),
            )
        )
    return out


def spec_acceptance(records: Iterable[TurnRecord]) -> float | None:
    """Accepted / drafted tokens over the responses that report both (llama.cpp's
    timings.draft_n_accepted / draft_n); None when none does or nothing was drafted."""
    drafted, accepted = _spec_counts(records)
    return None if not drafted or accepted is None else accepted / drafted


def summarize(
    records: Iterable[TurnRecord],
    *,
    users: int,
    lockstep: bool = True,
    kv_capacity_tokens: int | None = None,
    kv_usage: float | None = None,
) -> Summary:
    """The summary of ``records``: per turn, per run and per step kind, computed the one way
    a run computes what it saves and ``show`` what it prints. Warm-up records are counted
    (``warmup_records``), never summarized.

        result = workloads.load_result("runs/today")
        first = [r for r in result.records if r.repetition < 3]  # the first repetitions
        print(workloads.summarize(first, users=result.scenario.users).run.aggregate_rate)

    ``users`` is the concurrency the records ran at (the scenario's ``users``; in a sweep,
    the cell's ``concurrency``): a turn's aggregate rate needs that many valid streams.
    ``lockstep``: False under free or arrivals pacing (no aggregate: see the module's doc).
    ``kv_capacity_tokens``: the server's KV capacity, and ``kv_usage`` the mean fraction of
    it running requests held over the window: the pause pressure is compared with the rest
    (None: not known; the pressure is still given in tokens). Summarize one cell at a time;
    records of several cells pool, without aggregate figures. A run's records come from
    :func:`workloads.load_result` (records.jsonl, also of a killed run) or ``on_record``.
    """
    everything = list(records)
    measured = [r for r in everything if not r.warmup]
    pooled = len({r.cell for r in measured}) > 1
    by_turn: dict[int, list[TurnRecord]] = defaultdict(list)
    for r in users_own(measured):
        by_turn[r.turn].append(r)
    turns = [
        _turn_summary(t, by_turn[t], users=users, pooled=pooled, lockstep=lockstep)
        for t in sorted(by_turn)
    ]
    valid = [r for r in measured if r.valid]
    finished = [r for r in measured if r.status == "ok"]
    per_user = stats.median(r.decode_tokens_per_s for r in users_own(valid))
    by_rep_turn = [] if pooled else turn_repetitions(measured, users=users)
    full = [t for t in by_rep_turn if t.aggregate_rate is not None]  # what the aggregate takes
    reps_per_cell: dict[int, set[int]] = defaultdict(set)
    for r in measured:
        reps_per_cell[r.cell].add(r.repetition)
    run = RunSummary(
        users=users,
        measured_repetitions=max((len(v) for v in reps_per_cell.values()), default=0),
        records=len(measured),
        valid=len(valid),
        invalid=len(finished) - len(valid),
        errors=len(measured) - len(finished) - cancelled(measured),
        cancelled=cancelled(measured),
        warmup_records=len(everything) - len(measured),
        per_user_rate=per_user,
        aggregate_rate=None
        if pooled or not lockstep
        else stats.median(t.aggregate_rate for t in by_rep_turn),
        turn_aggregate_rate=stats.band(
            t.aggregate_rate.median if t.aggregate_rate else None for t in turns
        ),
        ttft_s=stats.band(_ttft_s(r) for r in valid),
        completion_tokens=sum(r.completion_tokens or 0 for r in measured),
        wall_aggregate_rate=None
        if pooled
        else stats.band(f.wall_aggregate_rate for f in repetitions(measured, users=users)),
        full_turns=sum(t.aggregate_rate is not None for t in by_rep_turn),
        partial_turns=sum(t.aggregate_rate is None for t in by_rep_turn),
        ttft_percentiles=stats.percentiles(_ttft_s(r) for r in valid),
        itl_percentiles=_itl_percentiles(valid),
        e2e_percentiles=stats.percentiles(e2e_s(r) for r in valid),
        request_rate=None
        if pooled
        else stats.band(_request_rate(group) for group in _per_rep(measured).values()),
        decode_overlap=stats.median(t.decode_overlap for t in full),
        streams_decoding=stats.median(t.streams_decoding for t in full),
    )
    return Summary(
        turns=turns,
        run=run,
        kinds=kinds(measured),
        cache_cliff=cache_cliff(measured),
        pause_pressure=pause_pressure(
            everything, kv_capacity_tokens=kv_capacity_tokens, kv_usage=kv_usage
        ),
    )


_KINDS: tuple[StepKind, ...] = ("human", "tool", "subagent", "compaction")


def kinds(records: Iterable[TurnRecord]) -> list[KindSummary] | None:
    """Per step kind present, in the order human, tool, subagent, compaction, and within a
    kind its sessions' first steps (``first_step`` True) before its later ones: the figures
    of :class:`~workloads.model.summary.KindSummary` over the measured records of that kind
    (sub-agents' steps included). None when no measured record carries a step kind."""
    measured = [r for r in records if not r.warmup and r.step_kind is not None]
    if not measured:
        return None
    out = []
    for kind in _KINDS:
        for first in (True, False):
            mine = [r for r in measured if r.step_kind == kind and pressure.first_step(r) == first]
            if mine:
                out.append(_kind_summary(kind, first, mine))
    return out


def _kind_summary(kind: StepKind, first: bool, mine: Sequence[TurnRecord]) -> KindSummary:
    valid = [r for r in mine if r.valid]
    offered = [r.tool_calls for r in mine if r.tool_calls is not None]
    return KindSummary(
        kind=kind,
        first_step=first,
        records=len(mine),
        valid=len(valid),
        hit_rate=_hit_rate(valid),
        cache_effectiveness=_effectiveness(valid),
        shareable_exact=bool(valid) and all(r.shareable_exact for r in valid),
        ttft_percentiles=stats.percentiles(_ttft_s(r) for r in valid),
        ttft_content_percentiles=stats.percentiles(
            r.ttft_content_ns / 1e9 for r in valid if r.ttft_content_ns
        ),
        per_user_rate=stats.median(_rates(valid)),
        prompt_tokens=stats.median(r.prompt_tokens for r in valid),
        new_tokens=stats.percentiles(r.new_tokens for r in mine),
        output_tokens=stats.percentiles(r.output_tokens for r in mine),
        pause_s=stats.percentiles(r.pause_s for r in mine),
        tool_calls=sum(offered) if offered else None,
    )


def pause_pressure(
    records: Sequence[TurnRecord],
    *,
    kv_capacity_tokens: int | None = None,
    kv_usage: float | None = None,
) -> PausePressure | None:
    """The pause pressure of the valid measured steps after a pause (human requests past a
    session's first step; :mod:`workloads.core.pressure`), and their hit rate within and
    past the KV's room for idle prefixes: ``kv_capacity_tokens`` × (1 − ``kv_usage``, the
    mean fraction running requests held), or the whole capacity when the usage is not
    known. ``records``: every request of the run or cell, warm-ups included (their writes
    count). None without such steps."""
    steps = pressure.step_pressures(records)
    if not steps:
        return None
    known = [(r, p) for r, p in steps if p is not None]
    room = pressure.kv_room_tokens(kv_capacity_tokens, kv_usage)
    below = [r for r, p in known if room is not None and p < room]
    above = [r for r, p in known if room is not None and p >= room]
    return PausePressure(
        steps=len(steps),
        known=len(known),
        pressure_tokens=stats.percentiles(p for _, p in known),
        kv_capacity_tokens=kv_capacity_tokens,
        kv_usage=kv_usage if kv_capacity_tokens is not None else None,
        room_tokens=room,
        below=len(below),
        below_hit_rate=_hit_rate(below),
        above=len(above),
        above_hit_rate=_hit_rate(above),
    )


def cache_cliff(records: Iterable[TurnRecord]) -> CacheCliff | None:
    """The hit rate of the first step after each measured compaction (the next turn of the
    same session) beside that of the other valid human and tool steps past each session's
    first (which is cold but for a shared system prefix). None without compactions."""
    measured = [r for r in records if not r.warmup]
    compactions = {
        (r.cell, r.repetition, r.session, r.turn + 1)
        for r in measured
        if r.step_kind == "compaction"
    }
    if not compactions:
        return None
    steps = [
        r
        for r in measured
        if r.valid and r.cached_tokens is not None and r.step_kind in ("human", "tool")
    ]
    after = [r for r in steps if (r.cell, r.repetition, r.session, r.turn) in compactions]
    # A session's first step is cold but for a shared system prefix: not the comparison.
    other = [
        r
        for r in steps
        if r.turn > 1 and (r.cell, r.repetition, r.session, r.turn) not in compactions
    ]
    return CacheCliff(
        compactions=len(compactions),
        after=len(after),
        after_hit_rate=_hit_rate(after),
        other=len(other),
        other_hit_rate=_hit_rate(other),
    )


def cell_figures(
    records: Sequence[TurnRecord],
    *,
    users: int,
    lockstep: bool = True,
    kv_capacity_tokens: int | None = None,
    kv_usage: float | None = None,
) -> dict[str, object]:
    """One sweep cell's computed figures: its summary and its generation-rate band (the
    fields of :class:`~workloads.model.results.CellSummary` that come from records)."""
    return {
        "summary": summarize(
            records,
            users=users,
            lockstep=lockstep,
            kv_capacity_tokens=kv_capacity_tokens,
            kv_usage=kv_usage,
        ),
        "generation_rate": generation_rate(records),
    }


def summarized(result: RunResult) -> RunResult:
    """``result`` with its summary and every cell's figures computed from its records: the
    one summary path, used by a run when it builds its result and by ``show`` when it loads
    one (a file's summaries are a cache). Unchanged when it has no records."""
    if not result.records:
        return result
    lockstep = result.scenario.pacing.mode == "lockstep"
    update: dict[str, object] = {
        "summary": summarize(
            result.records,
            users=result.scenario.users,
            lockstep=lockstep,
            **pressure.kv_figures(result.window.server, result.target),
        )
    }
    if result.gate is not None:
        update["gate"] = rejudged(result.gate)
    slo = result.scenario.slo
    update["goodput"] = judged_goodput(result.records, slo)
    if result.cells is not None:
        update["cells"] = [
            cell.model_copy(
                update={
                    **cell_figures(
                        cell_records,
                        users=cell.concurrency,
                        lockstep=lockstep,
                        **pressure.kv_figures(cell.window.server, result.target),
                    ),
                    "goodput": judged_goodput(cell_records, slo),
                }
            )
            for cell in result.cells
            for cell_records in [[r for r in result.records if r.cell == cell.cell]]
        ]
    return result.model_copy(update=update)


def judged_goodput(records: Sequence[TurnRecord], slo: Slo | None) -> Goodput | None:
    """``records`` against ``slo`` (:func:`workloads.core.goodput.judge`); None without an
    SLO, or when the records lack a figure it limits (``missing_figure`` says which)."""
    if slo is None or goodput.missing_figure(records, slo) is not None:
        return None
    return goodput.judge(records, slo)
