"""Pause pressure from hand-built records with small integer nanoseconds: exact tokens."""

from __future__ import annotations

import pytest

from workloads.core.aggregate import pause_pressure, summarize
from workloads.core.pressure import kv_capacity_tokens, kv_figures, step_pressures
from workloads.model.figures import GaugeSummary, ServerTelemetry
from workloads.model.records import TurnRecord
from workloads.model.results import TargetInfo


def req(
    session,
    turn,
    *,
    sent,
    first,
    last,
    kind="tool",
    prompt=1000,
    cached=0,
    completion=10,
    rep=1,
    host=None,
):
    """A valid request of ``session`` sent at ``sent``, first content at ``first``, done at
    ``last``."""
    return TurnRecord(
        repetition=rep,
        warmup=False,
        session=session,
        turn=turn,
        status="ok",
        finish_reason="length",
        valid=True,
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached_tokens=cached,
        configured_prior_tokens=0,
        started_ns=sent,
        sent_ns=sent,
        first_content_ns=first,
        last_content_ns=last,
        done_ns=last,
        step_kind=kind,
        host=host,
    )


def paused_session(*, before_end=100, sent=200, cached=3000):
    """Session 0: a tool step ending at ``before_end``, then a human request after a pause,
    sent at ``sent``."""
    return [
        req(0, 1, sent=0, first=10, last=before_end, kind="human"),
        req(
            0,
            2,
            sent=sent,
            first=sent + 10,
            last=sent + 20,
            kind="human",
            prompt=4000,
            cached=cached,
        ),
    ]


def pressures(records):
    return [p for _, p in step_pressures(records)]


def test_the_pressure_is_other_sessions_uncached_prompt_and_completion_over_the_pause():
    records = [
        *paused_session(),
        # All inside the pause (100, 200]: 1000 − 200 uncached + 50 completion.
        req(1, 3, sent=120, first=140, last=180, prompt=1000, cached=200, completion=50),
        # Prefill 150 → 250, half inside: 500 of 1000 uncached; its decode is after.
        req(2, 3, sent=150, first=250, last=300, prompt=1100, cached=100, completion=30),
        # Before the pause: nothing.
        req(3, 2, sent=20, first=40, last=90, prompt=9000, completion=900),
    ]
    assert pressures(records) == [800 + 50 + 500]


def test_a_reply_streaming_through_the_pause_counts_the_part_written_during_it():
    # Sent before the pause, decoding 80 → 180: 80 of its 100 completion tokens fall in
    # (100, 200]; counted by send time it would count 0.
    records = [*paused_session(), req(1, 2, sent=0, first=80, last=180, completion=100)]
    assert pressures(records) == [80]


def test_the_sessions_own_requests_are_not_pressure():
    # Session 0's own turn 3 and a later turn of the session never count; another
    # repetition's session 0 does (it is another session).
    records = [
        *paused_session(),
        req(0, 3, sent=300, first=310, last=320),
        req(0, 5, sent=120, first=130, last=140, rep=2, prompt=600, completion=0),
    ]
    assert pressures(records) == [600]


def test_unknown_usage_overlapping_the_pause_makes_its_pressure_unknown():
    unreported = req(1, 2, sent=120, first=140, last=180).model_copy(update={"cached_tokens": None})
    assert pressures([*paused_session(), unreported]) == [None]
    # The same request outside the pause leaves it known.
    late = req(1, 2, sent=400, first=410, last=420).model_copy(update={"cached_tokens": None})
    assert pressures([*paused_session(), late]) == [0]
    # Answered 200, then cut off before any usage came: the server computed something.
    cut = req(1, 2, sent=120, first=140, last=180).model_copy(
        update={
            "status": "incomplete",
            "prompt_tokens": None,
            "completion_tokens": None,
            "cached_tokens": None,
            "valid": False,
            "http_status": 200,
        }
    )
    assert pressures([*paused_session(), cut]) == [None]


def test_a_refused_request_wrote_nothing():
    refused = req(1, 2, sent=120, first=140, last=180).model_copy(
        update={
            "status": "error",
            "error_kind": "http_429",
            "http_status": 429,
            "prompt_tokens": None,
            "completion_tokens": None,
            "cached_tokens": None,
            "valid": False,
            "first_content_ns": None,
            "last_content_ns": None,
            "done_ns": None,
            "error_ns": 130,
        }
    )
    assert pressures([*paused_session(), refused]) == [0]


def test_no_pressure_without_the_previous_steps_end_or_across_hosts():
    first, second = paused_session()
    assert pressures([second]) == [None]  # its previous step is not in the records
    other = req(1, 2, sent=120, first=140, last=180, host="b")
    assert pressures([first, second, other]) == [None]  # two hosts' clocks


def test_only_valid_human_steps_past_the_first_are_steps_after_a_pause():
    first, second = paused_session()
    tool = req(0, 3, sent=300, first=310, last=320, kind="tool")
    invalid = req(0, 4, sent=400, first=410, last=420, kind="human").model_copy(
        update={"valid": False}
    )
    assert [r.turn for r, _ in step_pressures([first, second, tool, invalid])] == [2]


def test_pause_pressure_splits_the_hit_rate_at_one_kv_of_pressure():
    # Session 0 pauses through 1,350 tokens of others' writes, session 5 through none.
    busy = [
        *paused_session(cached=1000),
        req(1, 3, sent=120, first=140, last=180, prompt=1000, cached=200, completion=50),
        req(2, 3, sent=150, first=160, last=190, prompt=600, cached=100, completion=0),
    ]
    quiet = [
        req(5, 1, sent=1000, first=1010, last=1100, kind="human"),
        req(5, 2, sent=1200, first=1210, last=1220, kind="human", prompt=4000, cached=3900),
    ]
    pp = pause_pressure([*busy, *quiet], kv_capacity_tokens=1000)
    assert pp is not None
    assert (pp.steps, pp.known, pp.kv_capacity_tokens, pp.room_tokens) == (2, 2, 1000, 1000)
    assert pp.pressure_tokens is not None and pp.pressure_tokens.max == 1350
    assert (pp.below, pp.above) == (1, 1)
    assert pp.below_hit_rate == pytest.approx(3900 / 4000)
    assert pp.above_hit_rate == pytest.approx(1000 / 4000)
    # Running requests held 40% of the KV on average: idle prefixes had 600 tokens of room,
    # the same split; at 10,000 tokens of capacity both pauses are within the room.
    held = pause_pressure([*busy, *quiet], kv_capacity_tokens=1000, kv_usage=0.4)
    assert held is not None and (held.room_tokens, held.kv_usage) == (600, 0.4)
    roomy = pause_pressure([*busy, *quiet], kv_capacity_tokens=10_000, kv_usage=0.4)
    assert roomy is not None and (roomy.below, roomy.above) == (2, 0)
    # Without a capacity: the pressure in tokens, no split.
    unknown = pause_pressure([*busy, *quiet])
    assert unknown is not None and unknown.kv_capacity_tokens is None
    assert (unknown.below, unknown.above, unknown.above_hit_rate) == (0, 0, None)


def test_the_kinds_keep_first_steps_apart_from_steps_after_a_pause():
    records = [
        *paused_session(cached=3000),
        req(0, 3, sent=300, first=310, last=320, prompt=5000, cached=4900),
        req(7, 1, sent=0, first=10, last=20, kind="subagent", prompt=800, cached=400),
    ]
    rows = [(k.kind, k.first_step, k.hit_rate) for k in summarize(records, users=1).kinds or []]
    assert rows == [
        ("human", True, 0.0),
        ("human", False, pytest.approx(3000 / 4000)),
        ("tool", False, pytest.approx(4900 / 5000)),
        ("subagent", True, pytest.approx(400 / 800)),
    ]


def test_the_kv_capacity_comes_from_the_servers_metrics_then_the_user_then_the_profile():
    sim = TargetInfo(
        base_url="http://x",
        model="m",
        simulated=True,
        simulator_profile={"kv_capacity_tokens": 100_000},
    )
    exported = ServerTelemetry(
        server="vLLM",
        metrics_url="u",
        kv_capacity_tokens=99_984,
        gauges={"kv_usage": GaugeSummary(peak=1.0, mean=0.75, last=0.0, samples=9, inside=7)},
    )
    assert kv_capacity_tokens(exported, sim) == 99_984
    assert kv_figures(exported, sim) == {"kv_capacity_tokens": 99_984, "kv_usage": 0.75}
    edges_only = exported.model_copy(
        update={"gauges": {"kv_usage": GaugeSummary(peak=0, mean=0, last=0, samples=2)}}
    )
    assert kv_figures(edges_only, sim)["kv_usage"] is None  # no sample inside the window
    assert kv_capacity_tokens(None, sim) == 100_000
    given = sim.model_copy(update={"kv_capacity_tokens": 5_000})
    assert kv_capacity_tokens(ServerTelemetry(server=None, metrics_url="u"), given) == 5_000
    real = TargetInfo(base_url="http://x", model="m", simulated=False)
    assert kv_capacity_tokens(None, real) is None
