"""The summaries a result saves: per turn, per run, and the one band type (median with
min–max). Computed by :mod:`workloads.core.aggregate`."""

from __future__ import annotations

from workloads.model.base import Frozen
from workloads.model.records import StepKind

__all__ = [
    "BandSummary",
    "Bounds",
    "CacheCliff",
    "ConcurrencySummary",
    "KindSummary",
    "PausePressure",
    "Percentiles",
    "RunSummary",
    "Summary",
    "TurnSummary",
]


class BandSummary(Frozen):
    """Median with min–max, over ``n`` values."""

    median: float
    low: float
    high: float
    n: int


class Bounds(Frozen):
    """Distribution-free bounds of one percentile (``q``, in percent) from order
    statistics (:func:`workloads.core.stats.order_bounds`): ``low`` and ``high`` are each a
    one-sided 95% bound, together a 90% interval. None: too few values to bound that side
    (p99 needs 299 for ``high``)."""

    q: float
    low: float | None
    high: float | None


class Percentiles(Frozen):
    """The distribution of ``n`` values: p50, p90 and p99 (linear interpolation between
    order statistics) and the maximum. With few values the high percentiles sit near the
    maximum: read them with ``n``, and with ``bounds``."""

    p50: float
    p90: float
    p99: float
    max: float
    n: int
    # The bounds of p50, p90 and p99 (format 5.1; None in older files).
    bounds: list[Bounds] | None = None


class TurnSummary(Frozen):
    """The figures of one turn number over all measured repetitions and sessions."""

    turn: int
    configured_prior_tokens: int
    configured_prompt_tokens: int | None = None  # prior + turn_tokens; None in old results
    records: int
    valid: int
    invalid: int  # finished but not valid (wrong length or finish reason)
    errors: int  # failed: status error, or incomplete but not cancelled (format 6 on)
    # tok/s, Σ per-stream post-first rates, over full reps; lock-step only (format 5 on):
    # with free or arrivals pacing the Σ is in streams_sum_rate and this is None
    aggregate_rate: BandSummary | None
    wall_aggregate_rate: BandSummary | None  # tok/s, Σ tokens / the turn's span, over full reps
    per_user_rate: BandSummary | None  # tok/s, median over sessions, banded over reps
    ttft_s: BandSummary | None  # over every valid record of the turn (requests, not reps)
    prefill_rate: BandSummary | None  # prompt tokens / TTFT, over requests
    uncached_prefill_rate: BandSummary | None  # (prompt - cached) / TTFT, over requests
    prompt_tokens: BandSummary | None
    completion_tokens: BandSummary | None
    cached_tokens: BandSummary | None  # None: not reported by the server
    shareable_tokens: BandSummary | None
    shareable_exact: bool
    cache_effectiveness: float | None  # Σ cached / Σ shareable where both known
    resends: int
    # Added later (optional: older result files lack them).
    streams: BandSummary | None = None  # valid streams with a rate, per repetition
    partial_repetitions: int = 0  # repetitions with fewer valid streams than users: excluded
    hit_rate: float | None = None  # Σ cached / Σ prompt over valid records with cached known
    # Latency distributions in seconds over the valid records (added later, optional):
    ttft_percentiles: Percentiles | None = None  # sent → first content chunk
    itl_percentiles: Percentiles | None = None  # every gap between content chunks
    e2e_percentiles: Percentiles | None = None  # sent → end of stream
    # Format 5 (optional): with free or arrivals pacing, the Σ of aggregate_rate's definition
    # over streams that need not overlap: it overstates throughput, so it is never called
    # the aggregate ("Σ streams tok/s †"). None in lock-step.
    streams_sum_rate: BandSummary | None = None
    # Format 5.2 (optional): speculative decoding per turn, from the responses' own counts
    # (llama.cpp's timings.draft_n and draft_n_accepted), summed over the turn's responses
    # that carry them. None: no response reported them, which is not zero drafts.
    spec_draft_tokens: int | None = None
    spec_accepted_tokens: int | None = None

    @property
    def spec_acceptance(self) -> float | None:
        """Per-turn spec acceptance: accepted / drafted tokens over the turn's responses;
        None when not reported or nothing was drafted."""
        if not self.spec_draft_tokens or self.spec_accepted_tokens is None:
            return None
        return self.spec_accepted_tokens / self.spec_draft_tokens

    # Format 6: in flight when the run was stopped (error_kind "cancelled"): neither valid
    # nor failed. None in older results, whose ``errors`` count them.
    cancelled: int | None = None
    # Format 6.5 (optional): did the streams the aggregate sums decode together? Over the
    # repetitions the aggregate sums: the decode overlap (mean over streams of the share of
    # each one's decode time during which every other stream decoded too; 1: together,
    # 0: never all at once) and the mean streams decoding at a time over the time any did
    # (core/concurrency.py). None with one stream, in pooled summaries and older files.
    decode_overlap: BandSummary | None = None
    streams_decoding: BandSummary | None = None


class RunSummary(Frozen):
    """The run's headline: the aggregate (median over every (repetition, turn) whose streams
    were all valid of the Σ of their post-first rates — the one meaning of "aggregate"; lock-step
    only), the per-user median rate over every valid measured turn, and the wall throughput."""

    users: int
    measured_repetitions: int  # per cell (the most any cell measured)
    records: int
    valid: int
    invalid: int
    errors: int  # failed, as in TurnSummary (cancelled turns apart)
    warmup_records: int
    per_user_rate: float | None  # median over every valid measured record
    # Median of per-turn Σ over (repetition, turn)s with every stream valid; None when there
    # is none, when pooled over cells, or (format 5 on) with free or arrivals pacing: no
    # aggregate where streams need not overlap. (Before 2026-12-01: users × per-user median.)
    aggregate_rate: float | None
    turn_aggregate_rate: BandSummary | None  # the per-turn aggregate medians, banded
    ttft_s: BandSummary | None  # over every valid measured request
    completion_tokens: int  # Σ over measured records
    # Added later (optional): Σ tokens / span per fully valid repetition, banded.
    wall_aggregate_rate: BandSummary | None = None
    # (repetition, turn)s whose streams were all valid (they make the aggregate), and those
    # that were not (left out of it). Both 0 in older results and pooled summaries.
    full_turns: int = 0
    partial_turns: int = 0
    # Added later (optional): latency distributions in seconds over every valid measured
    # request (ITL: over every gap between content chunks), as in TurnSummary.
    ttft_percentiles: Percentiles | None = None
    itl_percentiles: Percentiles | None = None
    e2e_percentiles: Percentiles | None = None
    # Finished measured requests / the repetition's span (first send → last stream end),
    # per repetition, banded; None when pooled over cells.
    request_rate: BandSummary | None = None
    # Measured turns cancelled by a stop, as in TurnSummary (None before format 6).
    cancelled: int | None = None
    # Format 6.5 (optional): the median decode overlap and streams decoding at a time over
    # the (repetition, turn)s the aggregate takes its median over (TurnSummary's figures);
    # under LOW_DECODE_OVERLAP the aggregate overstates and wall throughput leads.
    decode_overlap: float | None = None
    streams_decoding: float | None = None


class KindSummary(Frozen):
    """The figures of one step kind (human request, tool result, sub-agent step,
    compaction) over the measured records of that kind: sub-agents' steps included, pooled
    over turns and repetitions. Rates and latencies over the valid records; the drawn sizes
    (new tokens, output tokens asked for, the pause before) over every measured record of
    the kind, valid or not: they are what the scenario drew.

    A kind whose steps include sessions' first steps (human, sub-agent) has two rows: its
    first steps (``first_step`` True: cold but for a shared system prefix, by construction)
    and its later steps (False; a human request's are **after a pause**)."""

    kind: StepKind
    records: int
    valid: int
    hit_rate: float | None  # Σ cached / Σ prompt over valid records with cached known
    cache_effectiveness: float | None  # Σ cached / Σ shareable where both known
    shareable_exact: bool  # every valid record's shareable prefix from the target's tokenizer
    ttft_percentiles: Percentiles | None  # seconds, sent → first generated chunk
    # Seconds, sent → first chunk of content text (TTFT also counts reasoning and tool-call
    # deltas); None when no valid record carried content text.
    ttft_content_percentiles: Percentiles | None
    per_user_rate: float | None  # median post-first rate, tok/s
    prompt_tokens: float | None  # median, server count
    new_tokens: Percentiles | None  # drawn new content of the step
    output_tokens: Percentiles | None  # drawn reply length asked for
    pause_s: Percentiles | None  # think or tool time waited before the step (time_scale'd)
    tool_calls: int | None  # Σ tool calls in the replies; None: no request offered tools
    # Format 6.2: True: the kind's first steps only (turn 1 of a session, a user's or a
    # sub-agent's); False: its steps past the first; None (older files): both together.
    first_step: bool | None = None


class PausePressure(Frozen):
    """What other sessions put into the server's KV cache while a session paused before a
    human request past its first step (a step **after a pause**): per such step, its
    **pause pressure** — the tokens other sessions' requests wrote over the interval from
    the end of the session's previous step's stream to this step's send (their uncached
    prompt tokens spread over the request's prefill, sent → first content; their completion
    tokens over its decode, first → last content) — and the hit rate of the steps whose
    pressure stayed within the KV's room for idle prefixes beside that of those past it
    (:mod:`workloads.core.pressure`). Counts this run's requests only: other traffic on the
    server is not seen."""

    steps: int  # valid after-pause steps with cached tokens known
    known: int  # of them, with a known pressure (every overlapping request's usage known)
    pressure_tokens: Percentiles | None  # per step, tokens; None: no pressure known
    kv_capacity_tokens: int | None  # the server's KV capacity in tokens; None: not known
    # The mean fraction of the KV held by running requests over the window (the kv_usage
    # gauge); None: not sampled. The rest is where idle prefixes stay cached.
    kv_usage: float | None = None
    # The KV's room for idle prefixes: capacity × (1 − kv_usage), or the capacity where the
    # usage is not known; None without a capacity. The split below:
    room_tokens: int | None = None
    below: int = 0  # steps with pressure < room_tokens
    below_hit_rate: float | None = None  # Σ cached / Σ prompt over those steps
    above: int = 0  # steps with pressure ≥ room_tokens
    above_hit_rate: float | None = None


class CacheCliff(Frozen):
    """The prefix cache after a compaction: the hit rate of the first step after each
    compaction of a session (its prompt is the system message and a summary the server has
    never seen as a prefix) beside that of the other human and tool steps past each
    session's first (a first step is cold but for a shared system prefix)."""

    compactions: int  # measured compaction steps
    after: int  # valid first steps after one, with cached known
    after_hit_rate: float | None  # Σ cached / Σ prompt over those steps
    other: int  # the other valid human and tool steps past turn 1, with cached known
    other_hit_rate: float | None


class Summary(Frozen):
    """Per-turn summaries and the run summary; recomputed from records by ``show``. The
    per-turn summaries count the users' own sessions only (sub-agents' steps are in
    ``kinds``)."""

    turns: list[TurnSummary]
    run: RunSummary
    # Added later (optional; None when the records carry no step kinds): per step kind, and
    # the hit rate right after compactions (None without compactions).
    kinds: list[KindSummary] | None = None
    cache_cliff: CacheCliff | None = None
    # Format 6.2 (optional; None without steps after a pause): their pause pressure.
    pause_pressure: PausePressure | None = None


class ConcurrencySummary(Frozen):
    """Requests in flight over the measured span (:mod:`workloads.core.concurrency`)."""

    mean: float  # time-weighted
    max: int
    span_s: float
    samples: list[tuple[float, int]]  # (seconds from the first send, requests in flight)
