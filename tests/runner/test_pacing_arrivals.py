"""Open-loop agent fleets (pacing.mode = "arrivals") and concurrency over time."""

from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

import workloads
from workloads.core.concurrency import concurrency, in_flight
from workloads.model.records import TurnRecord
from workloads.model.scenario import Arrivals
from workloads.runner.pacing import arrival_times


def test_arrivals_are_bounded_by_count_and_by_duration_and_repeatable():
    rng = lambda: random.Random(7)  # noqa: E731
    times = arrival_times(Arrivals(rate_per_s=10.0), 50, rng())
    assert len(times) == 50 and times == sorted(times) and times[0] > 0
    assert times == arrival_times(Arrivals(rate_per_s=10.0), 50, rng())
    bounded = arrival_times(Arrivals(rate_per_s=10.0, duration_s=1.0), 50, rng())
    assert bounded == [t for t in times if t <= 1.0]
    # mean gap ~ 1/rate: 2000 draws at 10/s average 0.1 s within 10%
    many = arrival_times(Arrivals(rate_per_s=10.0), 2000, rng())
    assert many[-1] / 2000 == pytest.approx(0.1, rel=0.1)


def test_arrivals_and_its_settings_go_together():
    base = {"name": "a", "users": 2, "turns": 1, "turn_tokens": 10, "output_tokens": 4}
    with pytest.raises(ValidationError, match="go together"):
        workloads.Scenario.model_validate({**base, "pacing": {"mode": "arrivals"}})
    with pytest.raises(ValidationError, match="outcome of the arrival rate"):
        workloads.Scenario.model_validate(
            {
                **base,
                "concurrency": [1, 2],
                "pacing": {"mode": "arrivals", "arrivals": {"rate_per_s": 1}},
            }
        )


def _rec(sent: int, done: int | None, *, warmup: bool = False) -> TurnRecord:
    return TurnRecord(
        repetition=0,
        warmup=warmup,
        session=0,
        turn=1,
        status="ok",
        configured_prior_tokens=0,
        started_ns=sent,
        sent_ns=sent,
        done_ns=done,
    )


def test_concurrency_is_the_time_weighted_count_of_requests_in_flight():
    records = [_rec(0, 100), _rec(50, 150), _rec(100, 200), _rec(0, 10, warmup=True)]
    assert in_flight(records[:3]) == [(0, 1), (50, 2), (100, 2), (150, 1), (200, 0)]
    c = concurrency(records, points=5)
    assert c is not None
    assert c.max == 2 and c.mean == pytest.approx((50 * 1 + 100 * 2 + 50 * 1) / 200)
    assert c.samples[0] == (0.0, 1) and c.samples[-1][1] == 0
    assert concurrency([_rec(0, None)]) is None  # unknown end: no span, not zero


def test_an_arrivals_run_on_the_simulator_reports_concurrency_as_an_outcome(simulated_server):
    scenario = workloads.Scenario.model_validate(
        {
            "name": "fleet",
            "users": 6,
            "turns": 2,
            "opening_tokens": 400,
            "turn_tokens": 60,
            "output_tokens": 16,
            "repetitions": {"warmup": 0, "measured": 1},
            "pacing": {
                "mode": "arrivals",
                "arrivals": {"rate_per_s": 40.0, "duration_s": 30.0},
                "tool_time": {"median": 0.05},
            },
        }
    )
    result = workloads.run(scenario, simulated_server.target)
    measured = [r for r in result.records if not r.warmup]
    assert len(measured) == 12 and all(r.valid for r in measured)
    starts = sorted(min(r.sent_ns or 0 for r in measured if r.session == s) for s in range(6))
    assert starts == sorted(set(starts))  # sessions arrived one by one, not together
    assert result.concurrency is not None and 1 <= result.concurrency.max <= 6
    assert 0 < result.concurrency.mean <= result.concurrency.max
