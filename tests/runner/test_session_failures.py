"""Failed turns against the real simulated server: records, not crashes, and the next turn's
shareable prefix counts only what reached the server."""

from __future__ import annotations

import pytest

import workloads
from workloads.cli import main


def test_a_rejected_turn_adds_nothing_to_the_next_turns_shareable_prefix():
    scenario = workloads.load_scenario("five-user-coding").with_overrides(
        [
            "users=3",
            "turns=4",
            "opening_tokens=600",
            "turn_tokens=120",
            "output_tokens=8",
            "repetitions.warmup=0",
            "repetitions.measured=2",
        ]
    )
    result = workloads.run(scenario, sim={"faults.rate_429": 0.35})
    records = result.records
    assert any(r.http_status == 429 for r in records), "the fault knob should have fired"
    assert any(r.valid for r in records)
    for r in records:
        if r.status == "error":
            assert r.error_kind == "http_429" and r.retry_after_s is not None
        elif r.valid and r.turn > 1 and r.shareable_tokens:
            # Ample KV: the server caches exactly the shareable prefix, rounded down to blocks.
            assert r.shareable_exact
            assert r.cached_tokens == 16 * ((r.shareable_tokens - 1) // 16), r


def test_a_new_run_refuses_a_directory_a_killed_run_left(tmp_path):
    (tmp_path / "records.jsonl").write_text("")
    with pytest.raises(FileExistsError, match=r"records\.jsonl"):
        workloads.run("five-user-coding", out_dir=tmp_path)
    assert main(["run", "five-user-coding", "--out", str(tmp_path), "--quiet"]) == 2


def test_runs_through_the_plugin_know_their_target_is_simulated(run_scenario):
    result = run_scenario(
        "five-user-coding",
        set=[
            "users=1",
            "turns=1",
            "opening_tokens=300",
            "output_tokens=4",
            "repetitions.measured=1",
        ],
    )
    assert result.target.simulated and result.target.simulator_profile is not None
    assert result.window.energy is None or result.window.energy.joules is None
