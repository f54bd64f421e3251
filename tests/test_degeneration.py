"""The degeneration detector on texts (pure); a looping stream from the simulator is flagged
in its record in tests/test_gate.py (faults.rate_corrupt)."""

from __future__ import annotations

import inspect

import workloads.core.aggregate
from workloads.core.degeneration import degeneration
from workloads.runner.turn import identity


def test_a_looping_completion_is_flagged():
    reason = degeneration("Let me check the test. " * 30)
    assert reason is not None and reason.startswith("repeated 4-grams")


def test_a_loop_without_spaces_is_flagged_by_compression():
    reason = degeneration("1591" * 100)
    assert reason is not None and "a loop" in reason


def test_a_collapsed_vocabulary_is_flagged():
    reason = degeneration(" ".join(["ok", "yes", "fine"][i % 3] + str(i % 2) for i in range(80)))
    assert reason is not None


def test_real_code_and_short_answers_are_not_flagged():
    assert degeneration(inspect.getsource(workloads.core.aggregate)) is None
    assert degeneration("1591") is None
    assert degeneration("ok " * 5) is None  # too short to judge


def test_records_carry_the_flag_and_none_without_a_reply():
    looping = identity([{"role": "user", "content": "go"}], "again and again " * 40)
    assert looping["degenerate"] is True and looping["degenerate_reason"]
    nothing = identity([{"role": "user", "content": "go"}], None)
    assert nothing["degenerate"] is None and nothing["completion_sha256"] is None
