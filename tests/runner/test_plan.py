"""The pure rules a session applies between turns (runner/plan.py), on hand-built values."""

from __future__ import annotations

from array import array

from workloads.model.records import TurnRecord
from workloads.runner.plan import LastTurn, estimated_shareable, observation, turn_base
from workloads.runner.sizing import PreparedTurn


def _record(prompt: int | None, completion: int | None) -> TurnRecord:
    return TurnRecord(
        repetition=0,
        warmup=True,
        session=0,
        turn=1,
        status="ok",
        valid=True,
        prompt_tokens=prompt,
        completion_tokens=completion,
        configured_prior_tokens=100,
        started_ns=0,
    )


def test_turn_one_starts_from_the_opening():
    assert turn_base(1, LastTurn(), opening=40, opening_exact=True, sizing_exact=True) == (
        40,
        True,
    )


def test_exact_base_is_the_last_prompt_plus_the_servers_completion_count():
    last = LastTurn(_record(50, 7), tokens=50, exact=True, reply="ignored when exact")
    assert turn_base(2, last, opening=0, opening_exact=True, sizing_exact=True) == (57, True)


def test_estimated_base_counts_the_reply_with_tiktoken():
    last = LastTurn(_record(50, 7), tokens=50, exact=False, reply="hello world")
    assert turn_base(2, last, opening=0, opening_exact=False, sizing_exact=False) == (52, False)


def test_after_a_fallback_the_session_stays_in_estimate_units():
    last = LastTurn(_record(50, 7), tokens=50, exact=False, reply="x")
    assert turn_base(2, last, opening=0, opening_exact=True, sizing_exact=True) == (51, False)


def test_unknown_completion_count_means_measure_the_history():
    last = LastTurn(_record(50, None), tokens=50, exact=True, reply="x")
    assert turn_base(2, last, opening=0, opening_exact=True, sizing_exact=True) == (None, True)


def test_estimated_shareable_is_the_previous_prompt_and_completion():
    assert estimated_shareable(LastTurn(_record(50, 7))) == 57
    assert estimated_shareable(LastTurn(_record(None, 7))) is None
    assert estimated_shareable(LastTurn()) is None


def test_observation_pairs_what_the_target_added_with_what_was_estimated():
    prepared = PreparedTurn(messages=[], ids=array("i"), exact=False, target=80, base=57, tokens=80)
    got = observation(2, 3, prepared, _record(90, 7), LastTurn(_record(50, 7)))
    assert got == (3, 2, 90 - 57, 80 - 57)
    exact = PreparedTurn(
        messages=[], ids=array("i", [0] * 80), exact=True, target=80, base=57, tokens=80
    )
    assert observation(2, 3, exact, _record(90, 7), LastTurn(_record(50, 7))) is None
    assert observation(2, 3, prepared, _record(90, 7), LastTurn(_record(None, 7))) is None
