from __future__ import annotations

import asyncio
import itertools
import random
import re
import time

from hypothesis import given
from hypothesis import strategies as st

import workloads
from fakes import FakeChatClient
from workloads.core.agent import draw_plan
from workloads.core.clock import sleep_until
from workloads.core.draws import draw_seconds as draw
from workloads.model.scenario import Distribution, Pacing


@given(
    kind=st.sampled_from(["constant", "lognormal", "exponential"]),
    median=st.floats(0.0, 100.0),
    sigma=st.floats(0.1, 3.0),
    cap=st.floats(0.01, 50.0),
    seed=st.integers(0, 2**32),
)
def test_draws_are_non_negative_and_capped(kind, median, sigma, cap, seed):
    dist = Distribution(kind=kind, median=median, sigma=sigma, max_s=cap)
    value = draw(dist, random.Random(seed))
    assert 0.0 <= value <= cap
    if median == 0:
        assert value == 0.0
    elif kind == "constant":
        assert value == min(median, cap)


def test_a_lognormal_draw_has_the_configured_median():
    dist = Distribution(kind="lognormal", median=0.3, sigma=1.2, max_s=30)
    rng = random.Random(1)
    values = sorted(draw(dist, rng) for _ in range(4001))
    assert 0.27 < values[2000] < 0.33
    assert values[-40] > 10 * values[2000]  # the heavy tail


def test_think_time_comes_before_every_turn_and_tool_time_after_the_first():
    pacing = Pacing(
        mode="free",
        think_time=Distribution(kind="constant", median=2.0),
        tool_time=Distribution(kind="constant", median=0.5),
    )
    scenario = workloads.load_scenario("five-user-coding").model_copy(
        update={"pacing": pacing, "agent": None, "turns": 3}
    )
    plan = draw_plan(scenario, random.Random(0), random.Random(1))
    assert [step.pause_s for step in plan] == [2.0, 2.5, 2.5]


def test_sleeping_until_a_past_deadline_returns_at_once():
    late = asyncio.run(sleep_until(time.perf_counter() - 1.0))
    assert late >= 1.0


def session_of(body) -> int:
    return int(re.search(r"#\d+\.\d+\.(\d+)", body["messages"][0]["content"]).group(1))


def fake():
    """Session s takes s × 50 ms per turn: without a barrier, session 0 runs ahead (by more
    than a busy machine's sizing of a turn takes)."""
    return FakeChatClient(
        lambda body: (len(str(body["messages"])) // 4, "done"),
        delay=lambda body: 0.05 * session_of(body),
    )


def small(**fields) -> workloads.Scenario:
    s = workloads.load_scenario("five-user-coding").with_overrides(
        [
            "users=3",
            "turns=3",
            "opening_tokens=300",
            "turn_tokens=60",
            "output_tokens=4",
            "repetitions.warmup=0",
            "repetitions.measured=1",
        ]
    )
    return s.model_copy(update=fields)


def test_lockstep_sends_no_turn_before_every_session_finished_the_previous_one():
    client = fake()
    workloads.run(small(), client=client)
    turns = [sum(m["role"] == "user" for m in body["messages"]) for body in client.bodies]
    assert turns == sorted(turns) == [1, 1, 1, 2, 2, 2, 3, 3, 3]
    client = fake()
    workloads.run(small(pacing=Pacing(mode="free")), client=client)
    turns = [sum(m["role"] == "user" for m in body["messages"]) for body in client.bodies]
    assert turns != sorted(turns)  # the control: free-running sessions do not wait


def test_free_running_sessions_wait_their_own_think_and_tool_time():
    pacing = Pacing(
        mode="free",
        think_time=Distribution(kind="constant", median=0.04),
        tool_time=Distribution(kind="constant", median=0.03),
    )
    client = fake()
    start = time.perf_counter()
    workloads.run(small(pacing=pacing), client=client)
    sends: dict[int, list[float]] = {}
    for body, at in zip(client.bodies, client.sent_at, strict=True):
        sends.setdefault(session_of(body), []).append(at)
    for times in sends.values():
        assert times[0] - start >= 0.04
        assert all(b - a >= 0.07 for a, b in itertools.pairwise(times))


def test_every_paced_turn_records_how_late_it_was_sent():
    result = workloads.run(small(), client=fake())
    lags = [r.pacing_lag_ns for r in result.records]
    assert all(lag is not None and lag >= 0 for lag in lags)
    assert not any("sent more than 100 ms after" in w for w in result.warnings)
