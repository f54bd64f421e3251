"""The degeneration detector on texts (pure), and on the simulator's corrupt 32-token replies
(faults.rate_corrupt; a longer looping stream is flagged in tests/core/test_gate.py)."""

from __future__ import annotations

import inspect

import workloads
import workloads.core.aggregate
from workloads.core.degeneration import MIN_WORDS, degeneration
from workloads.model.transcripts import TRANSCRIPTS_FILE, read_transcripts
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


# Healthy short outputs: a 16-token sentence, a short code line, a number, a short list.
SHORT_HEALTHY = [
    "The function returns None when the list is empty, so callers check it first.",
    "    return sorted(items, key=lambda item: item.name)\n",
    "x = [0, 0, 0, 0, 0, 0, 0, 0]",
    "1000000",
    "Thursday, Friday, Saturday",
    "Done: the test passes now.\n\n```\n$ pytest -q tests/test_cache.py\n3 passed\n```",
]


def test_healthy_short_outputs_are_not_flagged():
    for text in SHORT_HEALTHY:
        assert len(text.split()) < MIN_WORDS
        assert degeneration(text) is None, text


def test_a_short_loop_is_flagged_by_its_repeated_unit():
    # What the simulator's corrupt reply looks like: its first three tokens to max_tokens.
    reason = degeneration("Here is the" * 10 + "Here is")
    assert reason == "a 11-character unit repeated back to back over 100% of 117 characters"
    assert degeneration("1591" * 12) is not None  # no spaces, too short for zlib
    assert degeneration("ha " * 6) is not None
    # A loop over most, but not all, of a short output is still one.
    assert degeneration("Sure. " + "I read `" * 8) is not None
    # Three repeats over a fifth of the text: a sentence that says "no" thrice, not a loop.
    assert degeneration("No, no, no: the cache is cold because the nonce changed.") is None


def test_the_simulators_corrupt_32_token_replies_are_all_flagged(tmp_path):
    scenario = workloads.load_scenario("five-user-coding").with_overrides(
        [
            "users=2",
            "turns=2",
            "opening_tokens=300",
            "turn_tokens=50",
            "output_tokens=32",
            "repetitions.measured=3",
            "gate=off",
        ]
    )
    result = workloads.run(scenario, out_dir=tmp_path, sim={"faults.rate_corrupt": 1.0})
    measured = [r for r in result.records if not r.warmup]
    assert len(measured) == 12 and all(r.valid for r in measured)
    transcripts = read_transcripts(tmp_path / TRANSCRIPTS_FILE)
    replies = [
        transcripts[(r.cell, r.repetition, r.session, r.turn)].completion or "" for r in measured
    ]
    assert all(len(text.split()) < MIN_WORDS for text in replies)  # short: the old floor
    assert sum(bool(r.degenerate) for r in measured) == 12


def test_records_carry_the_flag_and_none_without_a_reply():
    looping = identity([{"role": "user", "content": "go"}], "again and again " * 40)
    assert looping["degenerate"] is True and looping["degenerate_reason"]
    nothing = identity([{"role": "user", "content": "go"}], None)
    assert nothing["degenerate"] is None and nothing["completion_sha256"] is None
