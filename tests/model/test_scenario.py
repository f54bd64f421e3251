from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import workloads
from workloads.model.scenario import Scenario, Sizes, describe, high, nominal, varies


def test_packaged_five_user_coding_has_the_seed_shape():
    s = workloads.load_scenario("five-user-coding")
    assert (s.users, s.turns, s.opening_tokens, s.output_tokens) == (5, 3, 8192, 512)
    assert (s.repetitions.warmup, s.repetitions.measured) == (1, 3)
    assert s.pacing.mode == "lockstep" and s.exact_output
    assert s.sampling.presence_penalty == 1.5


def test_every_packaged_scenario_validates():
    names = workloads.list_scenarios()
    assert "five-user-coding" in names
    for name in names:
        assert workloads.load_scenario(name).name == name


def test_typo_names_file_and_field(tmp_path: Path):
    bad = tmp_path / "bad.toml"
    bad.write_text(
        "users = 2\nturns = 1\nopening_tokens = 10\nturn_tokens = 1\noutput_tokens = 4\nuserz = 3\n"
    )
    with pytest.raises(workloads.ScenarioError, match=r"bad\.toml: field 'userz'"):
        workloads.load_scenario(bad)


def test_out_of_range_value_names_the_field(tmp_path: Path):
    bad = tmp_path / "zero.toml"
    bad.write_text(
        "users = 0\nturns = 1\nopening_tokens = 10\nturn_tokens = 1\noutput_tokens = 4\n"
    )
    with pytest.raises(workloads.ScenarioError, match=r"zero\.toml: field 'users'.*got 0"):
        workloads.load_scenario(bad)


def test_unknown_name_lists_packaged_scenarios():
    with pytest.raises(workloads.ScenarioError, match="five-user-coding"):
        workloads.load_scenario("no-such-scenario")


def test_overrides_use_dotted_paths_and_toml_values():
    s = workloads.load_scenario("five-user-coding").with_overrides(
        ["users=2", "repetitions.measured=1", "sampling.temperature=0", "extra_body.top_k=20"]
    )
    assert s.users == 2 and s.repetitions.measured == 1
    assert s.sampling.temperature == 0.0 and s.extra_body == {"top_k": 20}


@pytest.mark.parametrize(
    ("assignment", "message"),
    [("nosuch=1", "no field 'nosuch'"), ("users", "FIELD=VALUE"), ("users=-1", "users")],
)
def test_bad_overrides_are_clear(assignment, message):
    with pytest.raises(workloads.ScenarioError, match=message):
        workloads.load_scenario("five-user-coding").with_overrides([assignment])


def test_extra_body_cannot_replace_the_messages():
    with pytest.raises(workloads.ScenarioError, match="extra_body"):
        workloads.load_scenario("five-user-coding").with_overrides(['extra_body.messages="x"'])


@given(
    users=st.integers(1, 64),
    turns=st.integers(1, 50),
    opening=st.integers(0, 200_000),
    output=st.integers(1, 4096),
    nonce=st.sampled_from(["session", "run"]),
)
def test_scenario_survives_a_json_round_trip(users, turns, opening, output, nonce):
    s = Scenario(
        name="x",
        users=users,
        turns=turns,
        opening_tokens=opening,
        turn_tokens=10,
        output_tokens=output,
        nonce=nonce,
    )
    assert Scenario.model_validate_json(s.model_dump_json()) == s


# --- sizes drawn from distributions ------------------------------------------------------

BASE = "users = 2\nturns = 1\nopening_tokens = 100\nturn_tokens = 1\n"
BAD_SIZES = {
    "zero-median": ('output_tokens = { kind = "lognormal", median = 0 }', "median above 0"),
    "points-not-from-0": (
        'output_tokens = { kind = "quantiles", points = [[0.1, 5], [1, 10]] }',
        "q = 0",
    ),
    "falling-values": (
        'output_tokens = { kind = "quantiles", points = [[0, 50], [1, 10]] }',
        "must not fall",
    ),
    "min-above-max": (
        'output_tokens = { kind = "lognormal", median = 10, min = 50, max = 20 }',
        r"min \(50\) is above max \(20\)",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_SIZES))
def test_a_bad_size_names_the_file_the_field_and_the_reason(tmp_path: Path, case):
    line, reason = BAD_SIZES[case]
    bad = tmp_path / f"{case}.toml"
    bad.write_text(BASE + line + "\n")
    with pytest.raises(workloads.ScenarioError) as err:
        workloads.load_scenario(bad)
    message = str(err.value)
    assert str(bad) in message and "field 'output_tokens" in message
    assert re.search(reason, message)


@pytest.mark.parametrize("case", sorted(BAD_SIZES))
def test_a_bad_size_is_one_line_naming_the_field_plainly(tmp_path: Path, case):
    line, _ = BAD_SIZES[case]
    bad = tmp_path / f"{case}.toml"
    bad.write_text(BASE + line + "\n")
    with pytest.raises(workloads.ScenarioError) as err:
        workloads.load_scenario(bad)
    message = str(err.value)
    assert "\n" not in message
    assert "field 'output_tokens'" in message


def test_a_falling_duration_table_names_the_field(tmp_path: Path):
    bad = tmp_path / "think.toml"
    bad.write_text(
        BASE + 'output_tokens = 5\n[pacing.think_time]\nkind = "quantiles"\n'
        "points = [[0, 5], [0.5, 1], [1, 10]]\n"
    )
    with pytest.raises(
        workloads.ScenarioError,
        match=r"think\.toml: field 'pacing\.think_time'"
        r".*must not fall",
    ):
        workloads.load_scenario(bad)


def test_shared_prefix_must_fit_the_smallest_drawn_opening(tmp_path: Path):
    text = (
        'users = 2\nturns = 1\nnonce = "run"\nturn_tokens = 1\noutput_tokens = 5\n'
        'shared_prefix_tokens = {prefix}\n[opening_tokens]\nkind = "quantiles"\n'
        "points = [[0, 20000], [0.5, 24000], [1, 32000]]\n"
    )
    bad = tmp_path / "prefix.toml"
    bad.write_text(text.format(prefix=21000))  # above the table's lowest value, below its median
    with pytest.raises(workloads.ScenarioError) as err:
        workloads.load_scenario(bad)
    assert str(bad) in str(err.value) and "shared_prefix_tokens (21000)" in str(err.value)
    good = tmp_path / "fits.toml"
    good.write_text(text.format(prefix=20000))
    assert workloads.load_scenario(good).shared_prefix_tokens == 20000


def test_set_changes_one_field_of_a_distribution():
    s = workloads.load_scenario("coding-agents").with_overrides(["output_tokens.median=300"])
    assert isinstance(s.output_tokens, Sizes)
    assert (s.output_tokens.kind, s.output_tokens.median) == ("lognormal", 300)
    assert (s.output_tokens.sigma, s.output_tokens.max) == (1.3, 4096)  # the rest is kept
    assert nominal(s.output_tokens) == 300


def test_set_replaces_a_distribution_by_an_integer():
    s = workloads.load_scenario("coding-agents").with_overrides(
        ["output_tokens=100", "agent.subagents.steps=2"]
    )
    assert s.output_tokens == 100 and not varies(s.output_tokens)
    assert s.agent is not None and s.agent.subagents is not None
    assert s.agent.subagents.steps == 2
    assert describe(s.output_tokens) == "100"


def test_nominal_high_and_describe_of_the_presets_sizes():
    s = workloads.load_scenario("coding-agents")
    assert nominal(s.opening_tokens) == 24000 and high(s.opening_tokens) == 32000
    assert describe(s.output_tokens) == "~214"
    # lognormal(214, 1.3)'s p99 is 214 · e^(2.326 · 1.3) ≈ 4.4K: the 4,096 cap
    assert high(s.output_tokens) == 4096
    assert high(s.turn_tokens) == 10000  # 250 · e^(2.326 · 1.7) ≈ 13K, capped
    assert s.sizes_vary
    assert not workloads.load_scenario("five-user-coding").sizes_vary


def test_a_constant_size_does_not_vary():
    fixed = Sizes(kind="constant", median=64)
    assert not varies(fixed) and fixed.low == 64 and nominal(fixed) == 64
    assert not varies(Sizes(kind="lognormal", median=64, min=10, max=10))
