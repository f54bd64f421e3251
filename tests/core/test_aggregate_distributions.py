"""Latency distributions and request rate from hand-built records (exact expectations)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workloads.core import stats
from workloads.core.aggregate import summarize
from workloads.model.records import TurnRecord

S = 1_000_000_000
MS = 1_000_000


def rec(
    *,
    rep=1,
    session=0,
    turn=1,
    sent=0,
    ttft=100 * MS,
    gaps_ms=(10, 10, 30),
    done=None,
    valid=True,
    status="ok",
    cell=0,
):
    first = sent + ttft
    last = first + sum(gaps_ms) * MS
    return TurnRecord(
        cell=cell,
        repetition=rep,
        warmup=False,
        session=session,
        turn=turn,
        status=status,
        finish_reason="length" if valid else "stop",
        valid=valid,
        prompt_tokens=1000,
        completion_tokens=len(gaps_ms) + 1,
        cached_tokens=0,
        shareable_tokens=0,
        configured_prior_tokens=900,
        ttft_ns=ttft,
        started_ns=sent,
        sent_ns=sent,
        first_content_ns=first,
        last_content_ns=last,
        done_ns=done if done else last,
        decode_tokens_per_s=len(gaps_ms) / (sum(gaps_ms) / 1000),
        chunk_gaps_us=[g * 1000 for g in gaps_ms],
    )


def test_chunk_gaps_are_whole_microseconds_between_arrivals():
    gaps = stats.chunk_gaps_us([1_000, 11_400, 11_400, 51_499])
    assert gaps is not None and list(gaps) == [10, 0, 40]
    one = stats.chunk_gaps_us([5])
    assert one is not None and list(one) == []
    assert stats.chunk_gaps_us(None) is None


def test_percentiles_interpolate_between_order_statistics():
    p = stats.percentiles(range(1, 102))  # 1..101
    assert p is not None
    assert (p.p50, p.p90, p.p99, p.max, p.n) == (51, 91, 100, 101, 101)
    assert stats.percentiles([None]) is None


@given(st.lists(st.floats(min_value=0, max_value=1e6), min_size=1))
def test_percentiles_are_ordered_and_within_min_and_max(values):
    p = stats.percentiles(values)
    assert p is not None
    assert min(values) <= p.p50 <= p.p90 <= p.p99 <= p.max == max(values)


def test_itl_pools_every_chunk_gap_of_the_valid_records():
    records = [
        rec(session=0, gaps_ms=(10, 10, 30)),
        rec(session=1, gaps_ms=(20, 20)),
        rec(session=2, gaps_ms=(500, 500), valid=False),  # invalid: left out
    ]
    turn = summarize(records, users=3).turns[0]
    assert turn.itl_percentiles is not None
    assert turn.itl_percentiles.n == 5
    assert turn.itl_percentiles.p50 == pytest.approx(0.020)
    assert turn.itl_percentiles.max == pytest.approx(0.030)


def test_records_without_chunk_gaps_give_no_itl_not_zero():
    record = rec().model_copy(update={"chunk_gaps_us": None})
    summary = summarize([record], users=1)
    assert summary.turns[0].itl_percentiles is None and summary.run.itl_percentiles is None
    assert summary.run.ttft_percentiles is not None


def test_end_to_end_latency_is_sent_to_stream_end():
    records = [rec(session=0, sent=0, done=2 * S), rec(session=1, sent=S, done=2 * S)]
    e2e = summarize(records, users=2).run.e2e_percentiles
    assert e2e is not None and (e2e.p50, e2e.max, e2e.n) == pytest.approx((1.5, 2.0, 2))


def test_request_rate_is_finished_requests_over_each_repetitions_span():
    # Repetition 1: 2 requests from 0 to 2 s = 1/s; repetition 2: 2 requests in 0.5 s = 4/s.
    records = [
        rec(rep=1, session=0, sent=0, done=S),
        rec(rep=1, session=1, sent=0, done=2 * S),
        rec(rep=2, session=0, sent=10 * S, done=10 * S + S // 4),
        rec(rep=2, session=1, sent=10 * S, done=10 * S + S // 2),
    ]
    rate = summarize(records, users=2).run.request_rate
    assert rate is not None
    assert (rate.low, rate.median, rate.high, rate.n) == pytest.approx((1.0, 2.5, 4.0, 2))


def test_a_sweeps_pooled_summary_has_no_request_rate():
    records = [rec(cell=0, session=0), rec(cell=1, session=0)]
    assert summarize(records, users=1).run.request_rate is None
