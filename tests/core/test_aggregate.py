"""Summaries from hand-built records with small integer nanoseconds: exact expectations."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workloads.core import stats
from workloads.core.aggregate import (
    generation_rate,
    repetitions,
    summarize,
    turn_repetitions,
)
from workloads.model.records import TurnRecord
from workloads.model.summary import BandSummary

S = 1_000_000_000  # ns per second


def rec(
    *,
    rep=1,
    session=0,
    turn=1,
    warmup=False,
    sent=0,
    first=S // 2,
    last=S // 2 + 2 * S,
    completion=11,
    prompt=1000,
    cached=0,
    shareable=0,
    valid=True,
    status="ok",
    cell=0,
):
    return TurnRecord(
        cell=cell,
        repetition=rep,
        warmup=warmup,
        session=session,
        turn=turn,
        status=status,
        finish_reason="length" if valid else "stop",
        valid=valid,
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached_tokens=cached,
        shareable_tokens=shareable,
        configured_prior_tokens=900,
        ttft_ns=first - sent,
        started_ns=sent,
        sent_ns=sent,
        first_content_ns=first,
        last_content_ns=last,
        decode_tokens_per_s=(completion - 1) / ((last - first) / S),
    )


def test_aggregate_rate_is_the_sum_of_per_stream_rates():
    # Two sessions: 10 tokens over 2 s = 5 tok/s, and 10 over 1 s = 10 tok/s.
    records = [rec(session=0), rec(session=1, last=S // 2 + S)]
    turn = summarize(records, users=2).turns[0]
    assert turn.aggregate_rate is not None and turn.aggregate_rate.median == pytest.approx(15.0)
    assert turn.per_user_rate is not None and turn.per_user_rate.median == pytest.approx(7.5)
    assert turn.ttft_s is not None and turn.ttft_s.median == pytest.approx(0.5)
    assert turn.prefill_rate is not None and turn.prefill_rate.median == pytest.approx(2000)
    # Wall aggregate: 22 tokens between the first send (0) and the last content (2.5 s).
    assert turn.wall_aggregate_rate is not None
    assert turn.wall_aggregate_rate.median == pytest.approx(22 / 2.5)


def test_repetitions_are_banded_median_low_high():
    records = [rec(rep=r, last=S // 2 + d * S) for r, d in ((1, 1), (2, 2), (3, 5))]
    band = summarize(records, users=1).turns[0].aggregate_rate
    assert band is not None
    assert (band.median, band.low, band.high, band.n) == pytest.approx((5.0, 2.0, 10.0, 3))


def test_warmup_and_invalid_turns_never_enter_rates():
    records = [
        rec(session=0),
        rec(session=1, warmup=True, last=S // 2 + S // 100),
        rec(session=2, valid=False, last=S // 2 + S // 100),
    ]
    summary = summarize(records, users=3)
    turn = summary.turns[0]
    assert turn.per_user_rate is not None and turn.per_user_rate.median == pytest.approx(5.0)
    assert (turn.valid, turn.invalid, turn.errors) == (1, 1, 0)
    assert summary.run.warmup_records == 1 and summary.run.records == 2


def test_cache_effectiveness_and_uncached_prefill():
    records = [
        rec(turn=2, cached=900, shareable=1000),
        rec(turn=2, session=1, cached=1000, shareable=1000),
    ]
    turn = summarize(records, users=2).turns[0]
    assert turn.cache_effectiveness == pytest.approx(0.95)
    assert turn.uncached_prefill_rate is not None
    assert turn.uncached_prefill_rate.low == pytest.approx(0.0)
    assert turn.uncached_prefill_rate.high == pytest.approx(200.0)


def test_unreported_cached_tokens_stay_unknown():
    records = [rec(turn=2, cached=None, shareable=1000)]  # type: ignore[arg-type]
    turn = summarize(records, users=1).turns[0]
    assert turn.cached_tokens is None and turn.cache_effectiveness is None
    assert turn.uncached_prefill_rate is None


def test_the_run_aggregate_is_the_median_turn_sum_not_users_times_per_user():
    records = [rec(session=s, last=S // 2 + (s + 1) * S) for s in range(3)]  # 10, 5, 3.33
    run = summarize(records, users=3).run
    assert run.per_user_rate == pytest.approx(5.0)
    assert run.aggregate_rate == pytest.approx(10 + 5 + 10 / 3)  # not 3 × 5
    assert (run.full_turns, run.partial_turns) == (1, 0)


def test_no_run_aggregate_from_turns_whose_streams_were_not_all_valid():
    records = [rec(session=0), rec(session=1, valid=False, status="error")]
    run = summarize(records, users=2).run
    assert run.aggregate_rate is None and run.per_user_rate == pytest.approx(5.0)
    assert (run.full_turns, run.partial_turns) == (0, 1)


@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=50), st.floats(0, 100))
def test_percentiles_stay_within_min_and_max(values, q):
    p = stats.percentile(values, q)
    assert p is not None and min(values) <= p <= max(values)


def test_empty_is_none_not_zero():
    assert stats.median([]) is None and stats.band([None]) is None


def test_cells_of_a_sweep_are_never_summed_together():
    # Two cells, each numbering its repetitions from 0: 5 tok/s in cell 0, 10 tok/s in cell 1.
    records = [rec(cell=0, rep=0), rec(cell=1, rep=0, last=S // 2 + S)]
    one = summarize([r for r in records if r.cell == 1], users=1).turns[0]
    assert one.aggregate_rate is not None and one.aggregate_rate.median == pytest.approx(10.0)
    pooled = summarize(records, users=1)
    turn = pooled.turns[0]
    # Not 15 (= 5 + 10): a Σ over streams of different cells has no meaning.
    assert turn.aggregate_rate is None and turn.wall_aggregate_rate is None
    assert turn.per_user_rate is not None and turn.per_user_rate.n == 2
    assert pooled.run.aggregate_rate is None and pooled.run.measured_repetitions == 1


def test_unknown_aggregate_rate_is_none_and_short_repetitions_are_excluded():
    # Two users. Rep 1: both streams valid (5 + 10). Rep 2: one failed → only 5 known.
    records = [
        rec(rep=1, session=0),
        rec(rep=1, session=1, last=S // 2 + S),
        rec(rep=2, session=0),
        rec(rep=2, session=1, valid=False, status="error"),
    ]
    turn = summarize(records, users=2).turns[0]
    assert turn.aggregate_rate is not None
    assert (turn.aggregate_rate.median, turn.aggregate_rate.n) == pytest.approx((15.0, 1))
    assert turn.partial_repetitions == 1
    assert turn.streams is not None and (turn.streams.low, turn.streams.high) == (1, 2)
    # No valid stream at all: None, not 0.
    failed = [rec(session=0, valid=False, status="error")]
    nothing = summarize(failed, users=1).turns[0]
    assert nothing.aggregate_rate is None and nothing.partial_repetitions == 1


def test_cache_effectiveness_counts_only_records_with_both_known():
    records = [
        rec(turn=2, cached=1000, shareable=None),  # type: ignore[arg-type]
        rec(turn=2, session=1, cached=500, shareable=1000),
    ]
    turn = summarize(records, users=2).turns[0]
    assert turn.cache_effectiveness == pytest.approx(0.5)  # not 1500 / 1000
    assert summarize(records[:1], users=1).turns[0].cache_effectiveness is None


def test_hit_rate_is_cached_over_prompt_per_turn():
    records = [
        rec(turn=2, cached=900, prompt=1000),
        rec(turn=2, session=1, cached=None, prompt=1000),  # type: ignore[arg-type]
        rec(turn=2, session=2, cached=100, prompt=1000),
    ]
    assert summarize(records, users=3).turns[0].hit_rate == pytest.approx(0.5)
    assert summarize(records[1:2], users=1).turns[0].hit_rate is None


def test_repetitions_give_the_run_figures_of_each_repetition():
    records = [rec(rep=r, session=s, last=S // 2 + (s + r) * S) for r in (1, 2) for s in (0, 1)]
    reps = repetitions(records, users=2)
    assert [(f.cell, f.repetition) for f in reps] == [(0, 1), (0, 2)]
    # rep 1: rates 10, 5 → median 7.5 → 2 × 7.5; rep 2: 5, 3.33 → 4.17
    assert reps[0].per_user_rate == pytest.approx(7.5)
    assert reps[0].aggregate_rate == pytest.approx(15.0)  # Σ 10 + 5 of its one turn
    assert reps[0].wall_aggregate_rate == pytest.approx(22 / 2.5)
    assert reps[1].per_user_rate == pytest.approx((5 + 10 / 3) / 2)
    run = summarize(records, users=2).run
    assert run.wall_aggregate_rate is not None and run.wall_aggregate_rate.n == 2


def test_generation_rate_is_every_valid_measured_rate():
    records = [
        rec(),
        rec(session=1, last=S // 2 + S),
        rec(session=2, warmup=True),
        rec(session=3, valid=False),
    ]
    band = generation_rate(records)
    assert band is not None and (band.low, band.high, band.n) == pytest.approx((5.0, 10.0, 2))


def test_band_summary_is_the_one_band_type():
    assert isinstance(stats.band([1.0, 2.0]), BandSummary)


def test_turn_repetitions_give_each_repetitions_turn_figures():
    records = [
        rec(rep=r, session=s, turn=t, last=S // 2 + (s + 1) * S, cached=900, shareable=1000)
        for r in (1, 2)
        for s in (0, 1)
        for t in (1, 2)
    ]
    records.append(rec(rep=3, session=0, turn=1))  # rep 3: one of two streams
    figures = turn_repetitions(records, users=2)
    assert [(f.repetition, f.turn) for f in figures] == [(1, 1), (1, 2), (2, 1), (2, 2), (3, 1)]
    assert figures[0].aggregate_rate == pytest.approx(15.0)
    assert figures[0].cache_effectiveness == pytest.approx(0.9)
    assert figures[-1].aggregate_rate is None and figures[-1].streams == 1


def step(
    kind,
    *,
    session=0,
    turn=1,
    parent=None,
    prompt=1000,
    cached=0,
    shareable=None,
    new=100,
    output=11,
    pause=0.0,
    valid=True,
    rep=1,
    first=S // 2,
):
    r = rec(
        session=session,
        turn=turn,
        prompt=prompt,
        cached=cached,
        valid=valid,
        rep=rep,
        first=first,
        shareable=shareable if shareable is not None else cached,
    )
    return r.model_copy(
        update={
            "step_kind": kind,
            "parent_session": parent,
            "new_tokens": new,
            "output_tokens": output,
            "pause_s": pause,
        }
    )


def test_sub_agents_steps_stay_out_of_the_per_turn_figures_and_the_aggregate():
    # Two users, turn 1: user 1's stream failed; a sub-agent of user 0 (session 2) has a
    # valid turn 1 of its own. Counting it would make two valid streams: a "full" turn.
    records = [
        step("human", session=0),
        step("human", session=1, valid=False),
        step("subagent", session=2, parent=0),
    ]
    summary = summarize(records, users=2)
    turn = summary.turns[0]
    assert (turn.records, turn.valid) == (2, 1)
    assert turn.aggregate_rate is None and turn.partial_repetitions == 1
    assert turn.streams is not None and turn.streams.median == 1
    assert summary.run.aggregate_rate is None
    assert (summary.run.full_turns, summary.run.partial_turns) == (0, 1)
    assert [t.streams for t in turn_repetitions(records, users=2)] == [1]
    # Totals over all requests count it.
    assert (summary.run.records, summary.run.valid) == (3, 2)
    assert summary.run.ttft_percentiles is not None and summary.run.ttft_percentiles.n == 2


def test_kinds_summarise_each_step_kind_present_sub_agents_included():
    records = [
        step("human", session=0, prompt=1000, cached=0, new=150, pause=2.0),
        step(
            "tool",
            session=0,
            turn=2,
            prompt=2000,
            cached=1500,
            shareable=1600,
            new=400,
            output=40,
            pause=0.5,
        ),
        step(
            "tool",
            session=0,
            turn=3,
            prompt=3000,
            cached=2900,
            shareable=2950,
            new=50,
            output=20,
            pause=0.1,
            valid=False,
        ),
        step("subagent", session=2, parent=0, prompt=800, cached=600, new=300),
        step("human", session=0, turn=9, prompt=500, cached=100, rep=0, new=7).model_copy(
            update={"warmup": True}
        ),
    ]
    kinds = {k.kind: k for k in summarize(records, users=1).kinds or []}
    assert list(kinds) == ["human", "tool", "subagent"]  # no compaction: none present
    tool = kinds["tool"]
    assert (tool.records, tool.valid) == (2, 1)
    assert tool.hit_rate == pytest.approx(1500 / 2000)  # the invalid step is left out
    assert tool.cache_effectiveness == pytest.approx(1500 / 1600)
    assert tool.prompt_tokens == 2000
    # Drawn sizes count every measured step of the kind, valid or not (what was drawn).
    assert tool.new_tokens is not None and (tool.new_tokens.n, tool.new_tokens.max) == (2, 400)
    assert tool.output_tokens is not None and tool.output_tokens.p50 == pytest.approx(30)
    assert tool.pause_s is not None and tool.pause_s.max == pytest.approx(0.5)
    human = kinds["human"]
    assert human.records == 1 and human.hit_rate == 0.0  # the warm-up step never counts
    assert human.new_tokens is not None and human.new_tokens.max == 150
    assert kinds["subagent"].hit_rate == pytest.approx(600 / 800)
    assert tool.tool_calls is None  # no request offered tools: unknown, not 0
    assert tool.ttft_percentiles is not None and tool.ttft_percentiles.p50 == pytest.approx(0.5)


def test_no_step_kinds_no_kinds_summary():
    summary = summarize([rec(), rec(session=1)], users=2)
    assert summary.kinds is None and summary.cache_cliff is None


def test_the_cache_cliff_is_the_step_right_after_each_compaction():
    records = [
        step("human", session=0, turn=1, prompt=1000, cached=0),  # cold: not compared
        step("tool", session=0, turn=2, prompt=2000, cached=1900),
        step("compaction", session=0, turn=3, prompt=2100, cached=2000),
        step("tool", session=0, turn=4, prompt=1200, cached=600),  # after the compaction
        step("human", session=0, turn=5, prompt=1500, cached=1400),
        step("tool", session=1, turn=4, prompt=1000, cached=900),  # other session: not after
    ]
    summary = summarize(records, users=2)
    cliff = summary.cache_cliff
    assert cliff is not None
    assert (cliff.compactions, cliff.after, cliff.other) == (1, 1, 3)
    assert cliff.after_hit_rate == pytest.approx(600 / 1200)
    assert cliff.other_hit_rate == pytest.approx((1900 + 1400 + 900) / (2000 + 1500 + 1000))


def test_spec_acceptance_per_turn_sums_the_responses_own_draft_counts():
    """llama.cpp's per-response timings: Σ accepted / Σ drafted per turn, each turn its own;
    a turn whose responses carry no draft counts is not reported (None), not zero."""

    def drafted(record: TurnRecord, timings: dict[str, int] | None) -> TurnRecord:
        return record.model_copy(update={"timings": timings})

    records = [
        drafted(rec(session=0, turn=1), {"draft_n": 30, "draft_n_accepted": 27}),
        drafted(rec(session=1, turn=1), {"draft_n": 10, "draft_n_accepted": 1}),
        drafted(rec(session=0, turn=1, warmup=True), {"draft_n": 50, "draft_n_accepted": 0}),
        drafted(rec(session=0, turn=2), {"draft_n": 0, "draft_n_accepted": 0}),
        drafted(rec(session=1, turn=2), {"predicted_n": 11}),  # timings without drafts
        drafted(rec(session=0, turn=3), None),
        drafted(rec(session=1, turn=3), {"predicted_n": 11}),
    ]
    one, two, three = summarize(records, users=2).turns
    assert (one.spec_draft_tokens, one.spec_accepted_tokens) == (40, 28)  # warm-up left out
    assert one.spec_acceptance == pytest.approx(28 / 40)
    assert (two.spec_draft_tokens, two.spec_accepted_tokens, two.spec_acceptance) == (0, 0, None)
    assert (three.spec_draft_tokens, three.spec_accepted_tokens) == (None, None)
    assert three.spec_acceptance is None
    figures = {f.turn: f.spec_acceptance for f in turn_repetitions(records, users=2)}
    assert figures == {1: pytest.approx(28 / 40), 2: None, 3: None}


def test_the_tokens_medians_are_over_the_same_records():
    # After a compaction the estimate of the shareable prefix is unknown (None) for the
    # compacted session's small prompt: over their own records, "shareable" (5,400) read
    # above "prompt" (5,000) in the same row.
    records = [
        rec(session=0, turn=2, prompt=1000, cached=0, shareable=None),
        rec(session=1, turn=2, prompt=5000, cached=4896, shareable=4900),
        rec(session=2, turn=2, prompt=6000, cached=5888, shareable=5900),
    ]
    turn = summarize(records, users=3).turns[0]
    assert turn.prompt_tokens is not None and turn.prompt_tokens.median == 5500
    assert turn.shareable_tokens is not None and turn.shareable_tokens.median == 5400
    assert turn.cached_tokens is not None and turn.cached_tokens.median == 5392


def test_a_turns_configured_prompt_is_the_median_of_its_records():
    # A trace replay's requests each have their own input length: it was the first one's.
    records = [
        rec(session=s, prompt=p).model_copy(update={"configured_prompt_tokens": p})
        for s, p in enumerate([9000, 1000, 2000])
    ]
    assert summarize(records, users=3).turns[0].configured_prompt_tokens == 2000
