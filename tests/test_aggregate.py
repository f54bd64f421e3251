"""Summaries from hand-built records with small integer nanoseconds: exact expectations."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workloads import stats
from workloads.aggregate import summarize
from workloads.records import TurnRecord

S = 1_000_000_000  # ns per second


def rec(*, rep=1, session=0, turn=1, warmup=False, sent=0, first=S // 2, last=S // 2 + 2 * S,
        completion=11, prompt=1000, cached=0, shareable=0, valid=True, status="ok"):
    return TurnRecord(
        repetition=rep, warmup=warmup, session=session, turn=turn, status=status,
        finish_reason="length" if valid else "stop", valid=valid, prompt_tokens=prompt,
        completion_tokens=completion, cached_tokens=cached, shareable_tokens=shareable,
        configured_prior_tokens=900, ttft_ns=first - sent, started_ns=sent, sent_ns=sent,
        first_content_ns=first, last_content_ns=last,
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
    assert turn.aggregate_rate is not None and turn.aggregate_rate.median == pytest.approx(5.0)
    assert (turn.valid, turn.invalid, turn.errors) == (1, 1, 0)
    assert summary.run.warmup_records == 1 and summary.run.records == 2


def test_cache_effectiveness_and_uncached_prefill():
    records = [rec(turn=2, cached=900, shareable=1000), rec(turn=2, session=1, cached=1000,
                                                            shareable=1000)]
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


def test_run_line_is_users_times_per_user_median():
    records = [rec(session=s, last=S // 2 + (s + 1) * S) for s in range(3)]  # 10, 5, 3.33
    run = summarize(records, users=3).run
    assert run.per_user_rate == pytest.approx(5.0) and run.aggregate_rate == pytest.approx(15.0)


@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=50),
       st.floats(0, 100))
def test_percentiles_stay_within_min_and_max(values, q):
    p = stats.percentile(values, q)
    assert p is not None and min(values) <= p <= max(values)


def test_empty_is_none_not_zero():
    assert stats.median([]) is None and stats.band([None]) is None
