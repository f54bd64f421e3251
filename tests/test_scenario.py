from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import workloads
from workloads.model.scenario import Scenario


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
    bad.write_text("users = 2\nturns = 1\nopening_tokens = 10\nturn_tokens = 1\n"
                   "output_tokens = 4\nuserz = 3\n")
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
        name="x", users=users, turns=turns, opening_tokens=opening, turn_tokens=10,
        output_tokens=output, nonce=nonce,
    )
    assert Scenario.model_validate_json(s.model_dump_json()) == s
