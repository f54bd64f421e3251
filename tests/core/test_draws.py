"""core/draws.py and the generators a plan is drawn with: quantile tables, clamped token
counts, seeds."""

from __future__ import annotations

import math
import random

import pytest

import workloads
from workloads.core.agent import draw_plan
from workloads.core.draws import draw_seconds, draw_tokens, quantile
from workloads.model.scenario import Distribution, Sizes

TABLE = [(0.0, 1.0), (0.5, 2.0), (0.75, 5.0), (0.9, 21.0), (0.99, 87.0), (1.0, 200.0)]


def rngs(seed: object, repetition: int, session: int) -> tuple[random.Random, random.Random]:
    """Two generators per (seed, repetition, session), one for sizes and one for pauses, as
    the runner derives them."""
    key = f"{seed}:{repetition}:{session}"
    return random.Random(f"sizes:{key}"), random.Random(f"pauses:{key}")


@pytest.mark.parametrize(("q", "value"), TABLE)
def test_quantile_hits_the_tables_points(q, value):
    assert quantile(TABLE, q) == pytest.approx(value, rel=1e-12)


def test_quantile_is_log_linear_between_positive_points():
    # Halfway between (0.5, 2) and (0.75, 5) in q is the geometric mean of 2 and 5, not 3.5.
    assert quantile(TABLE, 0.625) == pytest.approx(math.sqrt(2 * 5))
    # A tenth of the way from (0.9, 21) to (0.99, 87): 21 × (87/21)^0.1.
    assert quantile(TABLE, 0.909) == pytest.approx(21 * (87 / 21) ** 0.1)


def test_quantile_is_linear_from_a_zero_value():
    assert quantile([(0.0, 0.0), (1.0, 10.0)], 0.3) == pytest.approx(3.0)


def test_quantile_never_leaves_the_tables_range():
    for i in range(1001):
        assert 1.0 <= quantile(TABLE, i / 1000) <= 200.0 * (1 + 1e-12)


def test_draw_tokens_clamps_to_min_and_max():
    sizes = Sizes(kind="lognormal", median=100, sigma=3.0, min=50, max=150)
    rng = random.Random(1)
    drawn = [draw_tokens(sizes, rng) for _ in range(2000)]
    assert min(drawn) == 50 and max(drawn) == 150  # sigma 3: both bounds are hit often
    assert all(isinstance(d, int) for d in drawn)


def test_draw_tokens_clamps_a_table_to_its_bounds():
    sizes = Sizes(kind="quantiles", points=[(0.0, 1.0), (1.0, 1000.0)], min=10, max=20)
    rng = random.Random(2)
    assert {draw_tokens(sizes, rng) for _ in range(500)} <= set(range(10, 21))


def test_a_fixed_count_never_consumes_the_generator():
    rng = random.Random(3)
    before = rng.getstate()
    assert draw_tokens(1234, rng) == 1234
    assert rng.getstate() == before


def test_draw_seconds_caps_at_max_s():
    dist = Distribution(kind="lognormal", median=10.0, sigma=3.0, max_s=20.0)
    rng = random.Random(4)
    drawn = [draw_seconds(dist, rng) for _ in range(1000)]
    assert max(drawn) == 20.0 and min(drawn) > 0


def test_a_zero_median_duration_draws_nothing():
    rng = random.Random(5)
    before = rng.getstate()
    assert draw_seconds(Distribution(kind="lognormal", median=0.0), rng) == 0.0
    assert rng.getstate() == before


@pytest.fixture(scope="module")
def agents():
    return workloads.load_scenario("coding-agents").with_overrides(
        ["turns=200", "agent.subagents.share=0.2"]
    )


def sizes_of(plan):
    """Everything of a plan but its pauses (children included)."""
    return [
        (
            s.turn,
            s.kind,
            s.new_tokens,
            s.output_tokens,
            s.prior_tokens,
            [sizes_of(c) for c in s.children],
        )
        for s in plan
    ]


def pauses_of(plan):
    return [(s.pause_s, [pauses_of(c) for c in s.children]) for s in plan]


def test_the_same_seeds_draw_the_same_plan(agents):
    assert draw_plan(agents, *rngs(0, 1, 2)) == draw_plan(agents, *rngs(0, 1, 2))


@pytest.mark.parametrize("other", [(0, 2, 2), (0, 1, 3), (1, 1, 2)])
def test_other_repetition_session_or_seed_draws_another_plan(agents, other):
    plan = draw_plan(agents, *rngs(0, 1, 2))
    again = draw_plan(agents, *rngs(*other))
    assert sizes_of(plan) != sizes_of(again)
    assert pauses_of(plan) != pauses_of(again)


def test_changing_pauses_never_changes_sizes(agents):
    slower = agents.with_overrides(
        [
            'pacing.think_time={ kind = "lognormal", median = 5.0, sigma = 2.0 }',
            'pacing.tool_time={ kind = "exponential", median = 3.0 }',
        ]
    )
    plan = draw_plan(agents, *rngs(0, 0, 0))
    other = draw_plan(slower, *rngs(0, 0, 0))
    assert any(s.children for s in plan)  # sub-agents' plans are compared too
    assert sizes_of(plan) == sizes_of(other)
    assert pauses_of(plan) != pauses_of(other)
