"""What a result says about sizing misses: only misses over 1% of the configured prompt, with
their size (hand-built records, pure)."""

from __future__ import annotations

import workloads
from workloads.model.records import TurnRecord
from workloads.model.results import Sizing
from workloads.runner.sizing import sizing_warnings

EXACT = Sizing(tokenizer="vLLM-shaped /tokenize (messages)", exact=True, calls=1, seconds=0.1)


def rec(session: int, prompt: int, configured: int = 12_216) -> TurnRecord:
    return TurnRecord(
        repetition=1,
        warmup=False,
        session=session,
        turn=1,
        status="ok",
        valid=True,
        finish_reason="length",
        prompt_tokens=prompt,
        completion_tokens=512,
        configured_prior_tokens=configured - 1000,
        configured_prompt_tokens=configured,
        started_ns=0,
    )


def test_a_miss_of_two_tokens_in_twelve_thousand_is_not_a_warning():
    scenario = workloads.load_scenario("five-user-coding")
    records = [rec(s, 12_214) for s in range(27)]
    assert not any("missed" in w for w in sizing_warnings(records, EXACT, scenario))


def test_a_miss_over_one_percent_is_a_warning_with_its_size():
    scenario = workloads.load_scenario("five-user-coding")
    records = [rec(0, 12_214), rec(1, 12_000), rec(2, 11_950)]
    warnings = [w for w in sizing_warnings(records, EXACT, scenario) if "missed" in w]
    assert len(warnings) == 1
    assert warnings[0].startswith(
        "2 measured turns missed their configured prompt by more "
        "than 1% (worst: turn 1, 11,950 tokens for 12,216: -266, -2.2%)"
    )
