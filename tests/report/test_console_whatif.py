"""The what-if cache oracle wired into a run against the simulated server."""

from __future__ import annotations

import pytest
from rich.console import Console

import workloads
from workloads.report.console import render, what_if_table

SMALL = [
    "users=4",
    "turns=3",
    "opening_tokens=2000",
    "turn_tokens=300",
    "output_tokens=16",
    "repetitions.warmup=0",
    "repetitions.measured=1",
    "gate=off",  # the oracle replays the measured requests
]


def run(kv: int) -> workloads.RunResult:
    scenario = workloads.load_scenario("five-user-coding").with_overrides(SMALL)
    return workloads.run(scenario, sim={"kv_capacity_tokens": kv})


def test_with_ample_kv_the_lru_replay_equals_unlimited_and_the_observation():
    result = run(4_000_000)
    rows = {w.turn: w for w in result.cache_what_if or []}
    assert sorted(rows) == [1, 2, 3]
    for turn in (2, 3):
        w = rows[turn]
        assert w.lru_hit_tokens == w.unlimited_hit_tokens > 0
        observed = sum(r.cached_tokens or 0 for r in result.records if r.turn == turn)
        assert observed == w.unlimited_hit_tokens  # no eviction: contention changes nothing
    assert what_if_table(result) is None  # nothing to explain: the report leaves it out


def test_a_cache_smaller_than_the_working_set_loses_hits_even_without_contention():
    result = run(6_000)  # four sessions of ~2.6K tokens do not fit
    rows = {w.turn: w for w in result.cache_what_if or []}
    assert rows[2].lru_hit_tokens < rows[2].unlimited_hit_tokens
    assert rows[2].capacity_tokens == 6_000
    console = Console(width=140, record=True)
    console.print(render(result))
    assert "LRU of 6,000 tokens" in console.export_text()


def test_requests_not_in_the_observed_rate_are_replayed_but_not_counted():
    from workloads.core.whatif import OracleRequest, replay

    shared = list(range(64))
    failed = OracleRequest([*shared, 900], turn=2, counted=False)  # reached, then invalid
    later = OracleRequest([*shared, 901], turn=2)
    rows = replay([failed, later], capacity_tokens=None)
    assert len(rows) == 1 and rows[0].requests == 1
    assert rows[0].hit_tokens == 64  # the uncounted request still warmed the cache


@pytest.mark.slow
def test_with_nonce_run_the_first_session_to_send_turn_1_has_nothing_shareable():
    scenario = workloads.load_scenario("shared-repo-team").with_overrides(
        [
            "users=4",
            "shared_prefix_tokens=1024",
            "opening_tokens=1500",
            "turn_tokens=100",
            "output_tokens=16",
            "turns=1",
            "repetitions.measured=2",
            "gate=off",
            # Pauses a tenth of the preset's: the sessions still send turn 1 hundreds of
            # milliseconds apart (the shared prefix computes in milliseconds), and who sent
            # first is counted, not timed.
            "pacing.time_scale=0.1",
        ]
    )
    result = workloads.run(scenario, telemetry=workloads.TelemetryOptions(energy="off"))
    for rep in (1, 2):
        turn1 = sorted(
            (r for r in result.records if r.repetition == rep), key=lambda r: r.started_ns
        )
        assert [r.shareable_tokens == 0 for r in turn1] == [True, False, False, False]
    effectiveness = result.summary.turns[0].cache_effectiveness
    assert effectiveness is not None and effectiveness > 0.99  # was 75%: 3 of 4 credited


def test_a_real_servers_kv_capacity_given_by_the_user_feeds_the_oracle(simulated_server):
    # A Target without the simulator's profile is a "real" server to the run: the oracle
    # learns the capacity only from the user.
    target = workloads.Target(
        simulated_server.base_url,
        simulated_server.model,
        kv_capacity_tokens=5_000,
        kv_block_tokens=1,
    )
    scenario = workloads.load_scenario("five-user-coding").with_overrides(
        [
            "users=2",
            "turns=2",
            "opening_tokens=600",
            "turn_tokens=100",
            "output_tokens=8",
            "repetitions.warmup=0",
            "repetitions.measured=1",
            "gate=off",
        ]
    )
    result = workloads.run(scenario, target, telemetry=workloads.TelemetryOptions(energy="off"))
    assert not result.target.simulated
    assert result.target.kv_capacity_tokens == 5_000 and result.target.kv_block_tokens == 1
    assert result.cache_what_if is not None
    assert {row.capacity_tokens for row in result.cache_what_if} == {5_000}


def test_kv_capacity_must_hold_a_block_and_needs_a_target(capsys):
    from workloads.cli import main

    with pytest.raises(workloads.TargetError, match="at least one block"):
        workloads.Target("http://127.0.0.1:9/v1", kv_capacity_tokens=8, kv_block_tokens=16)
    assert main(["run", "five-user-coding", "--kv-capacity", "5000"]) == 2
    assert "--kv-capacity describes a --target server" in capsys.readouterr().err


def test_an_unlimited_cache_never_serves_less_than_the_simulator_did():
    """Replies with tool calls (whose text lacks the calls the server cached), sub-agents
    (replayed, not counted: the observed per-turn rate is the users' own sessions') and
    compactions, on the simulator: per turn, "unlimited" is an upper bound of the observed
    hit rate. It read below it in 5 of 6 turns of a run with tools, 11 of 40 of a fleet."""
    from fakes import TIMELESS_ENGINE

    scenario = workloads.load_scenario("coding-agents").with_overrides(
        [
            "fleet=none",
            "users=3",
            "turns=8",
            "shared_prefix_tokens=2048",
            'opening_tokens={kind="quantiles", points=[[0.0, 3000], [0.5, 3500], [1.0, 4000]]}',
            "output_tokens.median=60",
            "output_tokens.max=300",
            "agent.subagents.share=0.5",
            "agent.subagents.steps=2",
            "agent.compaction.at_tokens=6000",
            "agent.compaction.summary_tokens=300",
            "pacing.time_scale=0.00005",
            "repetitions.warmup=0",
            "repetitions.measured=1",
            "gate=off",
        ]
    )
    result = workloads.run(scenario, sim=TIMELESS_ENGINE)
    kinds = {r.step_kind for r in result.records}
    assert {"tool", "subagent", "compaction"} <= kinds
    assert any(r.tool_calls for r in result.records)
    observed = {t.turn: t.hit_rate for t in result.summary.turns}
    rows = result.cache_what_if or []
    assert len(rows) == len(observed) > 3
    for w in rows:
        seen = observed[w.turn]
        assert seen is not None and w.unlimited_hit_rate is not None
        assert w.unlimited_hit_rate >= seen, (w.turn, seen, w.unlimited_hit_rate)
