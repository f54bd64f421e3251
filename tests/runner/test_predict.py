"""workloads predict: a scenario against the simulated engine on a virtual clock, set beside a
real run of the same scenario on the embedded simulator with the same profile."""

from __future__ import annotations

import hashlib
import json

import pytest

import workloads
from fakes import TINY_RUN
from workloads.cli import main
from workloads.core.load import load_result
from workloads.model.errors import ScenarioError
from workloads.runner.predict import INTAKE_NS, predict

# five-user-coding's shape (5 users, lock-step, 3 turns, cache reuse from turn 2), smaller.
SHAPE = [
    "opening_tokens=2048",
    "turn_tokens=512",
    "output_tokens=8",
    "repetitions.warmup=0",
    "repetitions.measured=1",
    "gate=off",
]
# The fast profile with steps of ~100 ms (fast's are ~4 ms at C5), prefill 4× dearer and a
# token budget of 512, so that the bounds hold on a loaded host: the real run's engine
# keeps its modelled time by absolute deadlines but forgives a host stall over 50 ms, and a
# late wake-up adds to a TTFT; with steps of ~11.5 ms a 2-core host at load 7.5 read turn
# 3's per-user rate 19% under the model and turn 2's TTFT 37% over it. Steps that are full
# whoever has arrived (a 528-token prefill a request from turn 2, the budget 512) make the
# schedule the same however the server's intake spaces the requests: with a budget of
# 8,192 the first step took one, two or three of turn 2's requests, and its median TTFT
# read 26% to 59% off. Three such tests at once on 2 cores: within 0.8% (wall), 1.5% (per
# user) and 5.0% (TTFT), each run ~7 s.
ENGINE = {"profile": "fast", "step_fixed_s": 0.1, "prefill_s_per_token": 2e-5, "token_budget": 512}


def _scenario() -> workloads.Scenario:
    return workloads.load_scenario("five-user-coding").with_overrides(SHAPE)


@pytest.fixture(scope="module")
def measured_and_predicted() -> tuple[workloads.RunResult, workloads.RunResult]:
    scenario = _scenario()
    measured = workloads.run(scenario, sim=ENGINE)
    return measured, predict(scenario, "fast", sim=ENGINE)


@pytest.mark.slow
def test_a_prediction_lands_within_bounds_of_a_run_on_the_simulator(measured_and_predicted):
    measured, predicted = measured_and_predicted
    assert predicted.predicted is not None and measured.predicted is None
    pairs = list(zip(measured.summary.turns, predicted.summary.turns, strict=True))
    assert len(pairs) == 3
    for real, guess in pairs:
        for figure in ("wall_aggregate_rate", "per_user_rate"):
            a, b = getattr(real, figure).median, getattr(guess, figure).median
            assert abs(b - a) / a <= 0.15, (real.turn, figure, a, b)
        a, b = real.ttft_s.median, guess.ttft_s.median
        assert abs(b - a) / a <= 0.25, (real.turn, "ttft", a, b)
        if real.turn > 1:  # the session's own history, cached as the engine caches it
            assert real.cache_effectiveness is not None and guess.cache_effectiveness is not None
            assert abs(guess.cache_effectiveness - real.cache_effectiveness) <= 0.05


@pytest.mark.slow
def test_a_prediction_sends_what_the_run_sent(measured_and_predicted):
    measured, predicted = measured_and_predicted

    def shape(result: workloads.RunResult) -> list[tuple[int, int, int | None, int | None]]:
        return sorted(
            (r.session, r.turn, r.prompt_tokens, r.shareable_tokens) for r in result.records
        )

    assert shape(predicted) == shape(measured)
    # the engine's cache, block by block: turn 2 reuses turn 1's prompt and reply but the
    # reply's last token (never computed), 2,560 + 8 - 1 tokens in whole blocks of 16
    assert {r.cached_tokens for r in predicted.records if r.turn == 2} == {2560}
    assert {r.cached_tokens for r in measured.records if r.turn == 2} == {2560}


def test_lockstep_turns_start_when_every_session_ended_the_turn_before():
    result = predict(_scenario().with_overrides(["repetitions.warmup=1"]), "fast")
    for rep in (0, 1):
        mine = [r for r in result.records if r.repetition == rep]
        assert {r.warmup for r in mine} == {rep == 0}
        for turn in (2, 3):
            ended = max(r.done_ns or 0 for r in mine if r.turn == turn - 1)
            assert {r.sent_ns for r in mine if r.turn == turn} == {ended}


def test_free_sessions_send_their_next_turn_a_pause_after_their_last_one_ended():
    scenario = workloads.load_scenario("chat-short").with_overrides(
        ["users=4", "repetitions.warmup=0"]
    )
    result = predict(scenario, "fast")
    by_turn = {(r.repetition, r.session, r.turn): r for r in result.records}
    assert len(by_turn) == 4 * 2 * 3
    pauses = set()
    for (rep, session, turn), r in by_turn.items():
        if turn == 2:
            before = by_turn[(rep, session, 1)]
            assert r.pause_s is not None and before.done_ns is not None
            assert r.sent_ns == before.done_ns + round(r.pause_s * 1e9)
            pauses.add(r.pause_s)
    assert len(pauses) > 1  # drawn think times, not one constant
    assert result.summary.run.aggregate_rate is None  # free pacing: no aggregate, as a run


def test_the_profile_decides_what_is_cached():
    off = predict(_scenario(), "fast", sim={"prefix_caching": False})
    assert {r.cached_tokens for r in off.records} == {0}


def test_a_fitted_round_trip_is_each_requests_intake(tmp_path):
    fields = (
        'name = "fitted"\nstep_fixed_s = 0.0025\nprefill_s_per_token = 5e-6\n'
        "decode_s_per_seq = 0.0003\nattend_s_per_token = 1e-9\n"
    )
    bare, fitted = tmp_path / "bare.toml", tmp_path / "fitted.toml"
    bare.write_text(fields)
    fitted.write_text(fields + "\n[provenance.overhead_s]\nvalue = 0.05\nrequests = [1]\n")
    alone = _scenario().with_overrides(["users=1"])
    without, with_trip = predict(alone, str(bare)), predict(alone, str(fitted))
    assert without.predicted is not None and without.predicted.round_trip_s is None
    assert with_trip.predicted is not None and with_trip.predicted.round_trip_s == 0.05
    for a, b in zip(without.records, with_trip.records, strict=True):
        assert a.ttft_ns is not None and b.ttft_ns is not None
        assert b.ttft_ns - a.ttft_ns == 50_000_000 - INTAKE_NS  # the intake, 0.2 ms before


def test_the_cli_saves_a_prediction_that_show_and_compare_call_predicted(tmp_path, capsys):
    profile = tmp_path / "server.toml"
    profile.write_text(
        'name = "server"\nstep_fixed_s = 0.0025\nprefill_s_per_token = 5e-6\n'
        "decode_s_per_seq = 0.0003\nattend_s_per_token = 1e-9\n"
    )
    measured, guessed = tmp_path / "measured", tmp_path / "predicted"
    assert main(["run", "five-user-coding", *TINY_RUN, "--out", str(measured), "--quiet"]) == 0
    capsys.readouterr()
    code = main(
        ["predict", "five-user-coding", *TINY_RUN, "--profile", str(profile), "--out", str(guessed)]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert out.startswith("PREDICTED · five-user-coding")
    saved = json.loads((guessed / "result.json").read_text())["predicted"]
    assert saved["profile_sha256"] == hashlib.sha256(profile.read_bytes()).hexdigest()
    assert load_result(guessed).predicted is not None

    assert main(["show", str(guessed)]) == 0
    assert "PREDICTED" in capsys.readouterr().out.splitlines()[0]
    assert main(["compare", str(guessed), str(measured)]) == 0
    shown = capsys.readouterr().out
    assert "A is PREDICTED (workloads predict, profile " in shown
    assert "B is measured (a run on the embedded simulated server)" in shown


def _agents() -> workloads.Scenario:
    """coding-agents' fleet, smaller: 8 slots, 1 + 2 windows of 10 s (virtual: 1 s of CPU),
    which play every step kind: 65 tool steps, 12 human requests, 19 sub-agent steps and 2
    compactions."""
    return workloads.load_scenario("coding-agents").with_overrides(
        ["users=8", "fleet.window_s=10", "repetitions.measured=2"]
    )


def test_a_fleet_of_agents_plays_its_windows_sub_agents_and_compactions():
    s = _agents()
    result = predict(s, "fast")
    records = result.records
    assert {r.step_kind for r in records} == {"human", "tool", "subagent", "compaction"}
    # a step belongs to the window it was sent in; no user step is sent after the last
    start = min(r.sent_ns or 0 for r in records)
    window = round(10 * 1e9)
    mine = [r for r in records if r.parent_session is None]
    assert max(r.sent_ns or 0 for r in mine) < start + 3 * window
    for r in records:
        index = min((r.sent_ns or 0) - start, 3 * window - 1) // window
        assert (r.repetition, r.warmup) == (min(index, 2), index == 0)
    # a step that spawned sub-agents is sent as the last of them ends
    kids: dict[int, list[workloads.TurnRecord]] = {}
    for r in records:
        if r.parent_session is not None:
            assert r.session >= s.fleet.max_sessions  # type: ignore[union-attr]
            kids.setdefault(r.parent_session, []).append(r)
    sent = {r.sent_ns for r in mine}
    ends = {max(k.done_ns or 0 for k in group) for group in kids.values()}
    in_time = {end for end in ends if end < start + 3 * window}
    assert in_time and in_time <= sent


def test_after_a_compaction_only_the_system_message_is_cached():
    # coding-agents' sessions without the fleet, compacting past 40K tokens (100K in the
    # preset): 3 compactions in 4 sessions of 30 steps
    s = workloads.load_scenario("coding-agents").with_overrides(
        ["users=4", "turns=30", "agent.compaction.at_tokens=40000", "repetitions.warmup=0"]
    )
    records = predict(s.model_copy(update={"fleet": None}), "fast").records
    by_step = {(r.repetition, r.session, r.parent_session, r.turn): r for r in records}
    after = [
        by_step[(r.repetition, r.session, r.parent_session, r.turn + 1)]
        for r in records
        if r.step_kind == "compaction"
    ]
    shared = s.shared_prefix_tokens
    assert after and shared
    for r in after:  # the summary is new to the engine, the system message is not
        assert (r.cached_tokens, r.shareable_tokens) == (shared, shared)
        assert r.prompt_tokens == r.configured_prompt_tokens


def test_agent_traces_are_refused_in_one_line(tmp_path):
    s = _agents()
    assert s.agent is not None
    traced = s.model_copy(update={"agent": s.agent.model_copy(update={"trace": "a.jsonl"})})
    with pytest.raises(ScenarioError, match=r"agent trace \(a\.jsonl\).*shrink"):
        predict(traced, "fast")


def test_a_bad_profile_file_names_file_and_field(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("step_fixed_s = -1\n")
    out = tmp_path / "x"
    assert main(["predict", "five-user-coding", "--profile", str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "step_fixed_s" in err
    assert not out.exists()
