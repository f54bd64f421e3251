"""Every packaged scenario validates and survives a one-turn run against the real simulated
server, with its first-turn prompt at exactly the configured number of the server's tokens
(pyperf fails when an example has no test; so do we)."""

from __future__ import annotations

import pytest

import workloads

SCENARIOS = sorted(workloads.list_scenarios())


def one_turn(scenario: workloads.Scenario) -> workloads.Scenario:
    """The same scenario, one turn of 8 tokens by at most 2 users, no waiting. Depths and
    content stay as shipped: they are what is being checked."""
    overrides = [
        "turns=1",
        f"users={min(scenario.users, 2)}",
        "output_tokens=8",
        "repetitions.warmup=0",
        "repetitions.measured=1",
        'pacing.think_time={kind="constant", median=0}',  # a table's draws too
        'pacing.tool_time={kind="constant", median=0}',
    ]
    if scenario.fleet is not None:  # each slot's first session, its one turn, and no more
        overrides += ["fleet.window_s=30", f"fleet.max_sessions={min(scenario.users, 2)}"]
    if scenario.concurrency is not None:
        overrides.append("concurrency=[1, 2]")
    if scenario.prior_tokens is not None:
        overrides.append(f"prior_tokens=[{scenario.prior_tokens[0]}]")
    return scenario.with_overrides(overrides)


def test_the_issue_presets_are_all_packaged():
    assert {
        "five-user-coding",
        "depth-sweep",
        "concurrency-sweep",
        "agent-long-horizon",
        "chat-short",
        "shared-repo-team",
    } <= set(SCENARIOS)


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_file_validates_and_says_where_its_numbers_come_from(name):
    path = workloads.list_scenarios()[name]
    scenario = workloads.load_scenario(name)
    assert scenario.name == name and scenario.description
    assert path.read_text().startswith("#"), f"{path.name}: begin with a comment on its sources"


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_survives_a_one_turn_run_at_its_exact_first_turn_depth(name, simulated_server):
    scenario = one_turn(workloads.load_scenario(name))
    result = workloads.run(scenario, simulated_server.target)
    assert result.complete and result.sizing is not None and result.sizing.exact
    assert result.records and all(r.valid for r in result.records)
    for r in result.records:
        assert r.prompt_tokens == r.configured_prompt_tokens == r.tokenized_prompt_tokens
    assert (result.cells is not None) == scenario.swept


def test_the_deepest_depth_sweep_cell_is_exact_too(simulated_server):
    scenario = workloads.load_scenario("depth-sweep").with_overrides(
        [
            "prior_tokens=[115404]",
            "output_tokens=8",
            "repetitions.warmup=0",
            "repetitions.measured=1",
        ]
    )
    (record,) = workloads.run(scenario, simulated_server.target).records
    assert record.prompt_tokens == record.configured_prompt_tokens == 115_404 + 2_048
