"""Decode overlap from hand-built records with small integer nanoseconds: did a turn's streams
decode together (core/concurrency.py)?"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workloads.core.aggregate import summarize
from workloads.core.concurrency import decode_overlap, streams_decoding
from workloads.model.records import TurnRecord


def rec(first: int, last: int, *, session: int = 0, turn: int = 1, rep: int = 0, **kw: object):
    """A valid stream of 11 tokens decoding from ``first`` to ``last`` (ns)."""
    fields: dict[str, object] = {
        "cell": 0,
        "repetition": rep,
        "warmup": False,
        "session": session,
        "turn": turn,
        "status": "ok",
        "finish_reason": "length",
        "valid": True,
        "prompt_tokens": 100,
        "completion_tokens": 11,
        "configured_prior_tokens": 90,
        "sent_ns": 0,
        "started_ns": 0,
        "ttft_ns": first,
        "first_content_ns": first,
        "last_content_ns": last,
        "decode_tokens_per_s": 10 / ((last - first) / 1e9),
    }
    return TurnRecord(**(fields | kw))


def test_streams_decoding_over_one_interval_overlap_fully():
    streams = [rec(10, 110, session=0), rec(10, 110, session=1)]
    assert decode_overlap(streams) == 1.0
    assert streams_decoding(streams) == 2.0


def test_streams_a_server_ran_one_after_another_never_decode_together():
    # The second waited in the queue until the first finished: in flight together, never
    # decoding together.
    streams = [rec(10, 110, session=0), rec(110, 210, session=1)]
    assert decode_overlap(streams) == 0.0
    assert streams_decoding(streams) == 1.0


def test_the_share_is_each_streams_own_time_with_every_peer_decoding():
    # All three decode together over [50, 100]: half of the first two's decode time, all of
    # the third's.
    streams = [rec(0, 100, session=0), rec(0, 100, session=1), rec(50, 100, session=2)]
    assert decode_overlap(streams) == pytest.approx((0.5 + 0.5 + 1.0) / 3)
    # 2 streams over [0, 50), 3 over [50, 100]: 250 stream-ns over 100 ns.
    assert streams_decoding(streams) == pytest.approx(2.5)


def test_one_stream_a_failed_peer_or_two_clocks_give_no_overlap():
    assert decode_overlap([rec(0, 100)]) is None
    failed = rec(0, 50, session=1, valid=False, status="error", decode_tokens_per_s=None)
    assert decode_overlap([rec(0, 100), failed]) is None
    two_hosts = [rec(0, 100, session=0, host="a"), rec(0, 100, session=1, host="b")]
    assert decode_overlap(two_hosts) is None and streams_decoding(two_hosts) is None


def test_the_summary_carries_the_overlap_of_each_turn_and_the_run():
    together = [rec(0, 100, session=s, turn=1, rep=r) for r in range(3) for s in range(2)]
    queued = [
        rec(100 * s, 100 * s + 100, session=s, turn=2, rep=r) for r in range(3) for s in (0, 1)
    ]
    summary = summarize(together + queued, users=2)
    turn1, turn2 = summary.turns
    assert turn1.decode_overlap is not None and turn1.decode_overlap.median == 1.0
    assert turn2.decode_overlap is not None and turn2.decode_overlap.median == 0.0
    assert turn2.streams_decoding is not None and turn2.streams_decoding.median == 1.0
    assert summary.run.decode_overlap == 0.5  # the median over the 6 (repetition, turn)s
    assert summary.run.streams_decoding == 1.5


@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(1, 1000)), min_size=2, max_size=8))
def test_the_overlap_is_a_share_and_the_streams_decoding_a_count(spans):
    streams = [rec(s, s + d, session=i) for i, (s, d) in enumerate(spans)]
    overlap = decode_overlap(streams)
    decoding = streams_decoding(streams)
    assert overlap is not None and 0.0 <= overlap <= 1.0
    assert decoding is not None and 1.0 <= decoding <= len(streams) + 1e-9
