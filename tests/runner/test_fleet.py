"""A fleet (scenario ``fleet``) played for real against the embedded simulated server on
127.0.0.1: slots that replace ended sessions, records in the window they were sent in, the
measured window opened once the warm-up's windows end, steps that follow the replies they
need (tool_choice by the plan), and what a fleet refuses."""

from __future__ import annotations

import itertools

import pytest

import workloads
from fakes import TIMELESS_ENGINE
from workloads.core.agent import fleet_plan, session_plan, top_sessions
from workloads.core.flow import session_flow
from workloads.live import _Tally, progress_line
from workloads.model.transcripts import read_transcripts
from workloads.report.export import plain_text

WINDOW_S = 1.5
FLEET = [
    "shared_prefix_tokens=2048",
    'opening_tokens={kind="quantiles", points=[[0.0, 3000], [0.5, 3500], [1.0, 4000]]}',
    "output_tokens.median=60",
    "output_tokens.max=200",
    "turns=12",
    "users=3",
    "agent.subagents.share=0.2",
    "agent.subagents.steps=2",
    "agent.compaction.at_tokens=7000",
    "agent.compaction.summary_tokens=300",
    "pacing.time_scale=0.00005",
    "gate=off",
    "repetitions.warmup=1",
    "repetitions.measured=2",
    f"fleet.window_s={WINDOW_S}",
]


@pytest.fixture(scope="module")
def fleet_run(tmp_path_factory):
    scenario = workloads.load_scenario("coding-agents").with_overrides(FLEET)
    out = tmp_path_factory.mktemp("fleet")
    result = workloads.run(scenario, out_dir=out, sim=TIMELESS_ENGINE)
    return scenario, result, out


def test_slots_replace_the_sessions_that_end(fleet_run):
    scenario, result, _ = fleet_run
    own = {r.session for r in result.records if r.parent_session is None}
    assert len(own) > scenario.users  # sessions of at most 12 steps, for 4.5 s
    assert max(own) < top_sessions(scenario)
    kids = {r.session for r in result.records if r.parent_session is not None}
    assert kids and min(kids) >= top_sessions(scenario)  # past every top-level session
    # each session plays its own drawn plan, the slots' first ones caught in mid-life
    for session in sorted(own)[:10]:
        turns = sorted(r.turn for r in result.records if r.session == session)
        plan = fleet_plan(scenario, 0, session)
        assert session >= scenario.users or plan != session_plan(scenario, 0, 0, session)
        assert turns == list(range(1, len(turns) + 1)) and len(turns) <= len(plan)
        kinds = [
            r.step_kind
            for r in sorted(result.records, key=lambda r: r.turn)
            if r.session == session
        ]
        assert kinds == [step.kind for step in plan[: len(turns)]]


def test_a_slots_first_session_carries_the_history_of_its_depth(fleet_run):
    scenario, result, _ = fleet_run
    first = {r.session: r for r in result.records if r.session < scenario.users and r.turn == 1}
    assert set(first) == set(range(scenario.users))
    for session, record in first.items():
        step = fleet_plan(scenario, 0, session)[0]
        assert record.configured_prompt_tokens == step.prior_tokens + step.new_tokens
        # sized to its whole prompt, as any first step (within the sizing's tolerance)
        assert record.prompt_tokens is not None
        assert abs(record.prompt_tokens - record.configured_prompt_tokens) <= max(
            8, 0.02 * record.configured_prompt_tokens
        )
    # caught in mid-life: deeper than a fresh session's opening (at most 4,000 here)
    assert max(r.configured_prompt_tokens for r in first.values()) > 4000


def test_a_step_belongs_to_the_window_it_was_sent_in(fleet_run):
    _, result, _ = fleet_run
    sent = sorted(
        (r for r in result.records if r.sent_ns is not None), key=lambda r: r.sent_ns or 0
    )
    # the window is taken as the send begins (before the send slice and the request
    # write): a step is in the window its send began in, give or take that moment
    start = sent[0].started_ns
    for r in sent:
        at = (r.started_ns - start) / 1e9 / WINDOW_S
        assert r.repetition - 0.05 <= at <= r.repetition + 1.05, (r.repetition, at)
    assert {r.repetition for r in sent} == {0, 1, 2}
    assert all(r.warmup == (r.repetition == 0) for r in result.records)
    # the measured window: the two measured fleet windows, opened when the warm-up's ended
    assert result.window is not None
    assert result.summary.run.measured_repetitions == 2
    measured = [r for r in sent if not r.warmup]
    first = min(r.started_ns for r in measured)
    last = max(r.started_ns for r in measured)
    # nothing sent after the last window (the window is taken just before started_ns)
    assert (last - first) / 1e9 < 2 * WINDOW_S + 0.1
    assert result.complete and all(r.valid for r in result.records)


def test_steps_follow_the_replies_they_need(fleet_run):
    scenario, result, out = fleet_run
    flow = session_flow(result.records, scenario)
    assert flow is not None and flow.tool_steps > 0 and flow.human_steps > 0
    assert flow.tool_after_calls == flow.tool_steps  # the simulator obeys "required"
    assert flow.human_after_text == flow.human_steps  # and "none"
    assert flow.compactions > 0
    # the transcripts: every tool result answers a call of the reply before it, and its
    # text is that tool's output (a grep's hits for grep, a diff for edit, ...)
    answered = 0
    for turn in read_transcripts(out / "transcripts.jsonl").values():
        messages = turn.messages
        for before, message in itertools.pairwise(messages):
            if message["role"] == "tool" and before["role"] == "assistant":
                ids = {c["id"] for c in before["tool_calls"]}
                assert message["tool_call_id"] in ids
                answered += 1
    assert answered > 0


def test_the_report_says_how_sessions_flowed(fleet_run):
    _, result, _ = fleet_run
    text = " ".join(plain_text(result).split())  # unwrapped
    assert "tool results after a reply with tool calls 100.0%" in text
    assert "a fleet: each slot plays session after session" in text
    # its turns are never all full (sessions start and end at any time): the wall
    # throughput leads the headline, never "no headline"
    assert "no headline" not in text and "wall throughput" in text
    # turn N is every session's N-th step, whenever it came: no Σ or span over them
    from workloads.report import console

    assert console.turn_table(result).columns[1:3] == ["per-user tok/s", "TTFT s"]
    assert "Σ streams" not in text and "left out of Σ" not in text
    assert "sessions:" in text


def test_the_progress_of_a_fleet_is_its_time():
    scenario = workloads.load_scenario("coding-agents")
    tally = _Tally(scenario)
    tally.done = 5
    line = progress_line(tally, tally.start_ns + 10 * 10**9)
    assert "5 turns" in line and "ETA 4m30s" in line  # 4 windows of 70 s, 10 s gone


def test_a_fleet_refuses_what_it_cannot_play():
    scenario = workloads.load_scenario("coding-agents")
    with pytest.raises(workloads.ScenarioError, match=r"fleet: needs pacing\.mode = 'free'"):
        scenario.with_overrides(["pacing.mode=lockstep"])
    assert scenario.with_overrides(["fleet=none", "pacing.mode=lockstep"]).fleet is None
    with pytest.raises(workloads.OptionsError, match="fleet"):
        workloads.run(scenario, workers=2)
