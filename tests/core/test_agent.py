"""core/agent.py: the plans sessions play, and the coding-agents preset against the published
coding-agent traces it is calibrated on (the figures and their sources are in the comments of
scenarios/coding-agents.toml)."""

from __future__ import annotations

import itertools
import math
import random
import statistics
from statistics import NormalDist

import pytest

import workloads
from workloads.core.agent import (
    MAX_CHILDREN,
    TOOL_CALL_MIN_OUTPUT,
    Step,
    child_session,
    draw_plan,
    fleet_plan,
    plan_steps,
    scaled,
    session_plan,
)
from workloads.core.draws import draw_seconds, draw_tokens
from workloads.core.flow import planned_steps_per_request

TOLERANCE = 0.05  # every published figure is checked to within 5% (relative)


def rngs(seed: object, session: int) -> tuple[random.Random, random.Random]:
    return random.Random(f"sizes:{seed}:{session}"), random.Random(f"pauses:{seed}:{session}")


def percentile(values, q):
    """The q-quantile of ``values``, linear between order statistics."""
    return statistics.quantiles(values, n=1000, method="inclusive")[round(q * 1000) - 1]


def near(value, published):
    return abs(value - published) <= TOLERANCE * published


# --- calibration: 230 sessions of 1,000 steps (230,000 steps, ~26,000 human requests) -------

SESSIONS, TURNS = 230, 1000


class AtQuantile(random.Random):
    """A generator whose one uniform draw is ``q``: a quantile table's draw is then its value
    at ``q``, through the same code as a random draw. A second draw is an error (a
    distribution drawn otherwise, as a lognormal's rejection loop, is not a table's)."""

    def __init__(self, q: float) -> None:
        super().__init__(0)
        self.q: float | None = q

    def random(self) -> float:
        q, self.q = self.q, None
        assert q is not None, "drawn twice: not a quantile table"
        return q


def coding_agents(overrides: list[str]) -> workloads.Scenario:
    """The preset with ``overrides``, every session playing all its ``turns`` (no drawn
    session length): the calibration of the per-step figures needs long sessions."""
    s = workloads.load_scenario("coding-agents").with_overrides(overrides)
    assert s.agent is not None
    return s.model_copy(update={"agent": s.agent.model_copy(update={"steps_per_session": None})})


def test_played_sessions_have_median_15_p90_135_steps_and_whole_loops():
    # Fixed step sizes, no pauses and no sub-agents leave every length and every loop the
    # preset's own draws (the length is the sizes generator's second draw, each loop's
    # length drawn when its human request starts) and make 5,000 plans cheap to draw.
    s = workloads.load_scenario("coding-agents").with_overrides(
        [
            "output_tokens=100",
            "turn_tokens=100",
            "agent.request_tokens=100",
            'pacing.think_time={kind="constant", median=0}',
            'pacing.tool_time={kind="constant", median=0}',
            "agent.subagents.share=0",
        ]
    )
    plans = [draw_plan(s, *rngs("length", i)) for i in range(5_000)]
    lengths = [len(plan) for plan in plans]
    assert near(statistics.median(lengths), 15)
    assert near(percentile(lengths, 0.9), 135)
    assert max(lengths) <= s.turns
    # Every request's loop plays to its end (a session ends only before a human request),
    # so steps per request keep the published mean of 8.8 (within 15%).
    loops = []
    for plan in plans:
        starts = [i for i, step in enumerate(plan) if step.kind == "human"]
        assert starts[0] == 0
        loops += [b - a for a, b in zip(starts, [*starts[1:], len(plan)], strict=True)]
    assert abs(statistics.mean(loops) - 8.8) < 0.15 * 8.8


def test_a_steady_fleet_starts_where_a_long_running_one_would_be():
    # 400 slots, each playing W steps from the start: its first session caught in mid-life
    # (fleet_plan), then fresh ones. Steps per human request over those windows read the
    # plans' own mean, as in a fleet's steady state; a fresh start reads it low (each slot
    # begins at a request, and the run's end cuts the longest loops).
    s = workloads.load_scenario("coding-agents").with_overrides(["users=400"])
    fresh = [session_plan(s, 0, 0, 400 + i) for i in range(2_000)]
    mean = planned_steps_per_request(fresh)
    assert mean is not None

    def windows(first: list[tuple[Step, ...]], width: int) -> list[list[Step]]:
        more = itertools.cycle(fresh)
        out = []
        for plan in first:
            steps = list(plan)
            while len(steps) < width:
                steps += next(more)
            out.append(steps[:width])
        return out

    steady = [fleet_plan(s, 0, i) for i in range(400)]
    assert fleet_plan(s, 0, 400) == session_plan(s, 0, 0, 400)  # a later session: fresh
    fresh_start = s.with_overrides(["fleet.start=fresh"])
    assert fleet_plan(fresh_start, 0, 3) == session_plan(s, 0, 0, 3)
    for width in (10, 40):
        read = planned_steps_per_request(windows(steady, width))
        assert read is not None and abs(read - mean) < 0.15 * mean
        cut = planned_steps_per_request(windows(fresh[:400], width))
        assert cut is not None and cut < 0.8 * mean
    # the history a caught session's first step carries is deeper than an opening
    assert statistics.median(p[0].prior_tokens for p in steady) > 1.5 * statistics.median(
        p[0].prior_tokens for p in fresh
    )


def test_a_reply_that_must_call_a_tool_is_long_enough_for_one():
    s = workloads.load_scenario("coding-agents").with_overrides(["output_tokens.min=8"])
    for i in range(300):
        plan = draw_plan(s, *rngs("floor", i))
        for step, following in itertools.pairwise(plan):
            assert step.prior_tokens >= 0
            if following.kind == "tool":
                assert step.output_tokens >= TOOL_CALL_MIN_OUTPUT
            if following.kind in ("tool", "human") and step.kind != "compaction":
                assert following.prior_tokens == (
                    step.prior_tokens + step.new_tokens + step.output_tokens
                )


@pytest.fixture(scope="module")
def preset():
    # no compaction: its steps would take the place of requests in the 1,000 steps
    return coding_agents(
        ["pacing.time_scale=1", f"turns={TURNS}", "agent.compaction.at_tokens=2000000"]
    )


@pytest.fixture(scope="module")
def plans(preset):
    return [draw_plan(preset, *rngs("calibration", i)) for i in range(SESSIONS)]


@pytest.fixture(scope="module")
def steps(plans):
    return [s for plan in plans for s in plan]


def test_the_calibration_draws_enough_steps(steps):
    assert len(steps) >= 10_000


def test_output_tokens_median_214_p90_under_1700(steps):
    # Compaction replies are summaries (their own distribution), not agent steps' replies.
    out = [s.output_tokens for s in steps if s.kind != "compaction"]
    assert near(statistics.median(out), 214)
    p90 = percentile(out, 0.9)
    assert p90 < 1700
    # The preset's lognormal(214, sigma 1.3) has p90 = 214 · e^(1.2816 · 1.3) ≈ 1.13K.
    assert near(p90, 214 * math.exp(NormalDist().inv_cdf(0.9) * 1.3))


def test_tool_results_median_400(steps):
    new = [s.new_tokens for s in steps if s.kind == "tool"]
    assert near(statistics.median(new), 400)


FIRST_REQUESTS = 45  # every session of the calibration completes this many


def request_lengths(plans):
    """Steps per human request (compactions are not steps of a request): each session's
    first 45 requests. Picked by their index, not by where they end, they are independent
    draws; keeping every request that ends inside the session would favour short ones, and
    every request that starts early enough, the long ones (the inspection paradox: the
    request a cut falls in is length-biased, which moves the p99 by ~13%)."""
    lengths = []
    for plan in plans:
        kinds = [s.kind for s in plan if s.kind != "compaction"]
        starts = [i for i, k in enumerate(kinds) if k == "human"]
        assert len(starts) > FIRST_REQUESTS, "a session ended before its 45th request did"
        lengths += [b - a for a, b in itertools.pairwise(starts[: FIRST_REQUESTS + 1])]
    return lengths


@pytest.fixture(scope="module")
def requests(plans):
    return request_lengths(plans)


def test_steps_per_request_match_the_published_distribution(requests):
    assert len(requests) >= 10_000
    assert statistics.median(requests) == 2  # median 2 ± 5% admits only 2
    assert near(statistics.mean(requests), 8.8)
    assert near(percentile(requests, 0.9), 21)


def test_steps_per_request_p99_87(preset, requests):
    # The p99 sits where the table's tail steepens (87 at q = 0.99, 200 at 1: the value grows
    # 8.3% per 0.001 of q), so 10,000 requests place it only to about ±8% (one standard error
    # of q is 0.001). The plans' share of requests up to 87 steps is checked to ±0.3 points
    # (3 standard errors); the value itself, to 5%, drawn at q = 0.99 exactly (a table's draw
    # is its value at a uniform q: 400,000 draws placed it to ±1.3%, for 2 s of CPU).
    assert abs(sum(n <= 87 for n in requests) / len(requests) - 0.99) <= 0.003
    table = preset.agent.steps_per_request
    assert near(max(1, draw_tokens(table, AtQuantile(0.99))), 87)


def test_tool_time_median_0_3_s_p90_13_6_s(steps):
    # A tool step that spawned sub-agents waits for them, not a drawn tool time.
    tool = [s.pause_s for s in steps if s.kind == "tool" and not s.children]
    assert near(statistics.median(tool), 0.3)
    assert near(percentile(tool, 0.9), 13.6)
    # also published: 61% under 1 s, 4% over 1 min
    assert near(sum(t < 1.0 for t in tool) / len(tool), 0.61)
    assert near(sum(t > 60.0 for t in tool) / len(tool), 0.04)


def human_pauses(plans):
    """Think times before human requests; turn 1's pause only staggers the starts."""
    return [s.pause_s for plan in plans for s in plan[1:] if s.kind == "human"]


def test_think_time_median_86_s_and_20_to_30_percent_over_5_min(plans):
    think = human_pauses(plans)
    assert len(think) >= 10_000
    assert near(statistics.median(think), 86)
    assert 0.20 <= sum(t > 300 for t in think) / len(think) <= 0.30


def test_think_time_p90_21_min(plans):
    # The p90 sits where the table's tail steepens (1,260 s at q = 0.9 to 50,400 s at 0.99:
    # the value grows 4.1% per 0.001 of q), so 19,000 think times place it only to ±9%
    # (one standard error of q is 0.0022). The plans' share under 21 min is checked to
    # ±1 point (4.5 standard errors); the value itself, to 5%, drawn at q = 0.9 exactly.
    think = human_pauses(plans)
    assert abs(sum(t <= 1260 for t in think) / len(think) - 0.90) <= 0.01
    preset = coding_agents([])
    assert near(draw_seconds(preset.pacing.think_time, AtQuantile(0.9)), 1260)


def test_think_time_is_capped_at_one_hour(plans):
    assert max(human_pauses(plans)) == 3600.0


def test_subagents_spawn_on_1_2_percent_of_tool_steps(steps):
    tool = [s for s in steps if s.kind == "tool"]
    assert near(sum(bool(s.children) for s in tool) / len(tool), 0.012)


def test_openings_between_20k_and_32k_median_24k(preset):
    one = preset.with_overrides(["turns=1"])
    openings = [draw_plan(one, *rngs("openings", i))[0].prior_tokens for i in range(10_000)]
    assert min(openings) >= 20_000 and max(openings) <= 32_000
    assert near(statistics.median(openings), 24_000)


# --- plans -------------------------------------------------------------------------------


def test_without_agent_every_step_after_the_first_is_a_tool_step_of_fixed_sizes():
    s = workloads.load_scenario("five-user-coding").with_overrides(["turns=6"])
    assert s.agent is None
    plan = draw_plan(s, *rngs("fixed", 0))
    assert [p.kind for p in plan] == ["human"] + ["tool"] * 5
    assert [p.turn for p in plan] == [1, 2, 3, 4, 5, 6]
    assert all((p.new_tokens, p.output_tokens) == (1000, 512) for p in plan)
    context = 8192
    for p in plan:
        assert p.prior_tokens == context == s.configured_prior_tokens(p.turn)
        context += p.new_tokens + p.output_tokens


@pytest.fixture(scope="module")
def compacting():
    return coding_agents(["turns=60", "agent.compaction.at_tokens=40000"])


def test_compaction_comes_once_the_context_passes_at_tokens(compacting):
    at = 40_000
    system = compacting.shared_prefix_tokens
    seen = 0
    for i in range(5):
        plan = draw_plan(compacting, *rngs("compaction", i))
        for step, after in itertools.pairwise(plan):
            if step.kind == "compaction":
                seen += 1
                assert step.prior_tokens > at and step.pause_s == 0.0
                # the context is the system message and the summary (and its framing)
                assert system + step.output_tokens <= after.prior_tokens
                assert after.prior_tokens < system + step.output_tokens + 64
                assert after.prior_tokens < step.prior_tokens
                assert after.kind != "compaction"
            else:
                grown = step.prior_tokens + step.new_tokens + step.output_tokens
                assert after.prior_tokens == grown
                if after.kind != "compaction":
                    assert after.prior_tokens <= at  # it would have compacted
                else:
                    assert after.prior_tokens > at
    assert seen >= 5


def test_the_summary_length_is_drawn_from_summary_tokens(compacting):
    summaries = [
        s.output_tokens
        for i in range(20)
        for s in draw_plan(compacting, *rngs("summary", i))
        if s.kind == "compaction"
    ]
    assert len(set(summaries)) > 1 and all(1500 <= n <= 6000 for n in summaries)


def test_subagents_have_their_own_plans_and_unique_session_numbers():
    s = coding_agents(["turns=30", "agent.subagents.share=0.5"])
    numbers = []
    for session in range(s.users):
        plan = draw_plan(s, *rngs("subagents", session))
        kids = [c for step in plan for c in step.children]
        assert kids and len(kids) <= MAX_CHILDREN
        for child in kids:
            assert [c.kind for c in child] == ["subagent"] * len(child)
            assert [c.turn for c in child] == list(range(1, len(child) + 1))
            assert 2 <= len(child) <= 30  # steps: min 2, and turns bounds them
            # a sub-agent starts from the parent's system message alone
            assert child[0].prior_tokens == s.shared_prefix_tokens
            assert not any(c.children for c in child)
        for step in plan:
            if step.children:
                assert step.kind == "tool" and step.pause_s == 0.0
        numbers += [child_session(s.users, session, k) for k in range(len(kids))]
        assert plan_steps(plan) == len(plan) + sum(len(c) for c in kids)
    assert len(set(numbers)) == len(numbers)
    assert min(numbers) >= s.users


def test_turns_bound_the_steps():
    s = coding_agents(["turns=5", "agent.subagents.share=1.0", "agent.compaction.at_tokens=256"])
    for i in range(10):
        plan = draw_plan(s, *rngs("turns", i))
        assert len(plan) == 5
        assert all(len(c) <= 5 for step in plan for c in step.children)


def test_scaled_multiplies_every_pause_children_included():
    s = coding_agents(["turns=40", "pacing.time_scale=1", "agent.subagents.share=0.3"])
    plan = draw_plan(s, *rngs("scaled", 0))
    assert any(step.children for step in plan)
    assert scaled(plan, 1.0) == plan
    half = scaled(plan, 0.5)
    # the same as drawing with time_scale = 0.5
    drawn = draw_plan(s.with_overrides(["pacing.time_scale=0.5"]), *rngs("scaled", 0))

    def pauses(p):
        return [(x.pause_s, [pauses(c) for c in x.children]) for x in p]

    def flat(p):
        return [x.pause_s for x in p] + [y for x in p for c in x.children for y in flat(c)]

    assert flat(half) == pytest.approx(flat(drawn))
    assert flat(half) == pytest.approx([x / 2 for x in flat(plan)])
    assert sum(flat(plan)) > 0 and len(flat(half)) > len(half)  # children's pauses counted
