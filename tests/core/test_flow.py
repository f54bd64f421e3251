"""core/flow.py on records built in code: which steps followed the replies they need, steps
per human request, compactions, the longest session, what is left out."""

from __future__ import annotations

import workloads
from workloads.core.agent import draw_plan, fleet_plan
from workloads.core.corpus import stream_rng
from workloads.core.flow import planned_steps_per_request, session_flow
from workloads.model.records import TurnRecord


def step(session, turn, kind, calls, *, parent=None, repetition=0):
    return TurnRecord(
        repetition=repetition,
        warmup=False,
        session=session,
        turn=turn,
        status="ok",
        valid=True,
        configured_prior_tokens=0,
        started_ns=turn,
        step_kind=kind,
        tool_calls=calls,
        parent_session=parent,
    )


def test_steps_after_the_replies_they_need_are_counted_apart_from_the_others():
    records = [
        # session 0: a request, two tool steps (the second after a reply without calls),
        # then a human request after a reply with calls (a model that disobeyed "none")
        step(0, 1, "human", 1),
        step(0, 2, "tool", 0),
        step(0, 3, "tool", 2),
        step(0, 4, "human", 0),
        # session 1: a request, a compaction, then a tool step after the summary
        step(1, 1, "human", 1),
        step(1, 2, "compaction", 0),
        step(1, 3, "tool", None),  # tools not offered here: its reply's calls are not known
        step(1, 4, "human", 0),
        step(9, 1, "subagent", 1, parent=0),  # a sub-agent's steps follow its own task
        step(9, 2, "subagent", 0, parent=0),
    ]
    flow = session_flow(records)
    assert flow is not None
    assert (flow.sessions, flow.longest_session, flow.compactions) == (2, 4, 1)
    # tool steps with a known reply before them, the summary's excluded: 2, 1 after calls
    assert (flow.tool_steps, flow.tool_after_calls) == (2, 1)
    # human steps past the first with a known reply before: session 0's turn 4 (after 2
    # calls); session 1's turn 4 follows a reply whose calls are not known
    assert (flow.human_steps, flow.human_after_text) == (1, 0)
    # requests: 0 → 3 steps, 0's turn 4 → 1, 1 → 2 (the compaction is not a step of it), 1's
    # turn 4 → 1
    assert flow.human_requests == 4 and flow.steps_per_request == 7 / 4
    assert flow.planned_steps_per_request is None  # no scenario given
    assert session_flow([step(0, 1, None, 0)]) is None


def test_sessions_of_two_repetitions_are_two_unless_the_run_is_a_fleet():
    records = [step(0, 1, "human", 0, repetition=0), step(0, 1, "human", 0, repetition=1)]
    assert session_flow(records).sessions == 2
    fleet = workloads.load_scenario("coding-agents")
    flow = session_flow(records, fleet)
    assert flow.sessions == 1  # in a fleet a session's number is its own in the cell
    # the steps session 0 of the fleet plays from its first (caught in mid-life) to its end
    plan = fleet_plan(fleet, 0, 0)
    assert plan != draw_plan(
        fleet, stream_rng(0, "sizes", 0, 0, 0), stream_rng(0, "pacing", 0, 0, 0)
    )
    assert flow.planned_steps_per_request == planned_steps_per_request([plan])


def test_steps_before_a_sessions_first_request_count_and_the_interval_holds_the_ratio():
    # a fleet's session caught inside a loop: two tool steps before its first request
    records = [
        step(0, 1, "tool", 1),
        step(0, 2, "tool", 0),
        step(0, 3, "human", 1),
        step(0, 4, "tool", 0),
        step(1, 1, "human", 0),
        step(1, 2, "human", 0),
    ]
    flow = session_flow(records)
    assert flow is not None and flow.human_requests == 3
    assert flow.steps_per_request == 6 / 3  # not (2 + 1 + 1) / 3 with the first steps lost
    low, high = flow.steps_per_request_band or (0, 0)
    # resampled whole: session 0 alone reads 4, session 1 alone 1
    assert 1.0 <= low < 2.0 < high <= 4.0
    assert session_flow(records[:4]).steps_per_request_band is None  # one session
