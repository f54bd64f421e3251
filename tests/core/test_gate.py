"""The correctness gate: judging (pure), the simulator's scripted correct model, and the gate
in a real run against the simulated server, with faults.rate_corrupt making it fail."""

from __future__ import annotations

import json
import time

import pytest

import workloads
from workloads.cli import EXIT_INVALID_RUN, main
from workloads.core.gate import CASES, judge
from workloads.servers.simulated.answers import answer

RIGHT = {
    "arithmetic": "1591.",
    "code": "```python\ndef is_even(n):\n    return n % 2 == 0\n```",
    "json-echo": '{"id": 7, "name": "cache", "tags": ["kv", "prefix"], "ok": true}',
    "list-continuation": "Thursday, Friday, Saturday",
    "recall": "The vault code is 4827.",
    "repeat": "The quick brown fox jumps over the lazy dog near the river bank.",
}
WRONG = {
    "arithmetic": ("1581", "expected 1591"),
    "code": ("def is_even(n)\n    return n % 2 == 0", "does not parse"),
    "json-echo": ('{"id": 7, "name": "cache"}', "a different object"),
    "list-continuation": ("Thursday, Saturday, Sunday", "expected Thursday"),
    "recall": ("I do not know.", "expected 4827"),
    "repeat": ("The quick brown fox jumps over the dog.", "not repeated exactly"),
}


def test_echoing_the_request_is_not_repeating_it():
    repeat = next(c for c in CASES if c.name == "repeat")
    verdict = judge(repeat, repeat.messages[0][1])  # what Gemma 3 270M answers
    assert not verdict.passed and verdict.why.startswith("echoed the request")


def test_show_and_compare_judge_saved_outputs_by_todays_rules():
    from workloads.core.gate import rejudged
    from workloads.model.gate import GateOutput, GateResult

    saved = GateResult(
        mode="report",
        outputs=[
            GateOutput(
                case="repeat",
                phase="before",
                passed=True,
                why="repeated exactly",
                output="Repeat after me, exactly: The quick brown fox jumps over the lazy "
                "dog near the river bank.",
            ),
            GateOutput(
                case="arithmetic",
                phase="before",
                passed=False,
                why="the request failed",
                error_kind="http_500",
            ),
        ],
    )
    again = rejudged(saved)
    assert [o.passed for o in again.outputs] == [False, False]
    assert again.outputs[1].why == "the request failed"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_each_case_passes_its_right_answer_and_fails_a_wrong_one_with_why(case):
    assert judge(case, RIGHT[case.name]).passed
    wrong, why = WRONG[case.name]
    verdict = judge(case, wrong)
    assert not verdict.passed and why in verdict.why


def test_code_is_parsed_never_run_and_needs_a_return():
    code = next(c for c in CASES if c.name == "code")
    assert "without a return" in judge(code, "def is_even(n):\n    pass\n").why
    assert "no is_even" in judge(code, "def odd(n):\n    return 1\n").why


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_simulators_scripted_model_answers_every_case_by_rule(case):
    reply = answer(case.chat())
    assert reply is not None and judge(case, reply).passed


def test_the_scripted_model_does_not_answer_ordinary_turns():
    assert answer([{"role": "user", "content": "Here is the tool output: 3 tests failed."}]) is None


def test_the_gate_runs_before_and_after_outside_the_window(tiny_scenario):
    result = workloads.run(tiny_scenario, telemetry=workloads.TelemetryOptions(energy="off"))
    gate = result.gate
    assert gate is not None and gate.passed and gate.mode == "report"
    assert len(gate.outputs) == 2 * len(CASES)
    # Sent together, kept in case order: the before pass, then the after pass.
    assert [(o.phase, o.case) for o in gate.outputs] == [
        (phase, c.name) for phase in ("before", "after") for c in CASES
    ]
    assert all(o.finish_reason == "stop" for o in gate.outputs)
    # The window's server counters count only the measured requests (2 users × 2 turns).
    server = result.window.server
    assert server is not None
    assert server.finished_requests == 4 and server.reconciles
    assert server.finished_reasons is not None and not server.finished_reasons.get("stop")
    assert result.invalid_reason is None


def test_gate_off_sends_nothing(tiny_scenario):
    result = workloads.run(
        tiny_scenario.with_overrides(["gate=off"]),
        telemetry=workloads.TelemetryOptions(energy="off"),
    )
    assert result.gate is None


def test_corrupt_output_fails_a_required_gate_flags_loops_and_exits_non_zero(tmp_path, capsys):
    out = tmp_path / "corrupt"
    code = main(
        [
            "run",
            "five-user-coding",
            "--out",
            str(out),
            "--quiet",
            "--no-plots",
            "--gate",
            "required",
            "--sim",
            "faults.rate_corrupt=1",
            "--set",
            "users=2",
            "--set",
            "turns=2",
            "--set",
            "opening_tokens=600",
            "--set",
            "turn_tokens=120",
            "--set",
            "output_tokens=48",
            "--set",
            "repetitions.measured=1",
        ]
    )
    assert code == EXIT_INVALID_RUN
    printed = " ".join(capsys.readouterr().out.split())
    assert (
        "correctness 0/6" in printed
        and "failed: arithmetic (before/after: expected 1591" in printed
    )
    assert "INVALID RUN: the required correctness gate failed" in printed
    saved = json.loads((out / "result.json").read_text())
    assert saved["invalid_reason"].startswith("the required correctness gate failed")
    assert saved["gate"]["mode"] == "required"
    # The measured streams were clean HTTP 200s of the right length, and looped.
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    measured = [r for r in records if "kind" not in r and not r["warmup"]]  # not header lines
    assert all(r["valid"] for r in measured)
    assert all(r["degenerate"] for r in measured)
    assert "degenerate completions: 4 of 4 measured" in printed


def test_a_gate_that_only_reports_does_not_fail_the_run(tmp_path):
    code = main(
        [
            "run",
            "five-user-coding",
            "--out",
            str(tmp_path / "r"),
            "--quiet",
            "--no-plots",
            "--sim",
            "faults.rate_corrupt=1",
            "--set",
            "users=1",
            "--set",
            "turns=1",
            "--set",
            "opening_tokens=300",
            "--set",
            "turn_tokens=60",
            "--set",
            "output_tokens=16",
            "--set",
            "repetitions.measured=1",
        ]
    )
    assert code == 0
    result = workloads.load_result(tmp_path / "r")
    assert result.gate is not None and not result.gate.passed
    assert result.invalid_reason is None


# Every request stalls STALL_S after its role chunk: longer than the gate's deadline, far
# shorter than the 120 s read gap the gate waited out per case when it sent them serially.
STALL_S = 5.0
STALLING = {"faults.rate_stall": 1.0, "faults.stall_s": STALL_S, "faults.after_tokens": 0}


def _in_flight_together(truths, deadline):
    """All requests arrived before the first one's deadline: they were in flight at once (sent
    one after another, each would have arrived a deadline after the one before)."""
    arrivals = [t.arrival_ns for t in truths]
    return (max(arrivals) - min(arrivals)) / 1e9 < deadline


async def test_a_stalling_server_costs_the_gate_one_deadline_not_a_read_gap_per_case():
    from workloads.runner.gate import gate_client, gate_deadline_s, send_gate

    scenario = workloads.load_scenario("five-user-coding").with_overrides(["timeouts.gate_s=2"])
    deadline = gate_deadline_s(scenario.timeouts)
    assert deadline == 2.0 < STALL_S < scenario.timeouts.read_gap_s
    async with workloads.SimulatedServer(sim=STALLING) as server:
        started = time.perf_counter()
        async with gate_client(server.target, scenario.timeouts) as client:
            outputs = await send_gate(client, server.model, scenario, "before")
        took = time.perf_counter() - started
        truths = server.truths()
    assert [o.case for o in outputs] == [c.name for c in CASES]
    assert all(o.phase == "before" and not o.passed for o in outputs)
    assert all(o.error_kind == "turn_deadline" for o in outputs)
    assert all("the gate's deadline, 2 s: timeouts.gate_s" in o.why for o in outputs)
    assert len(truths) == len(CASES) and all(t.fault == "stall" for t in truths)
    assert _in_flight_together(truths, deadline)
    # Well under the 6 x 2 s a serial gate would take even with the deadline (6 x 5 s with
    # only the read gap), and more than the deadline it waited out.
    assert deadline <= took < 3 * deadline


@pytest.mark.slow  # ~5 s: two gate passes (1 s), a stalled turn (2 s), the server stopping (1 s)
def test_a_run_sends_its_gate_through_the_gate_client_bounded_and_together(tiny_scenario):
    scenario = tiny_scenario.with_overrides(
        [
            "users=1",
            "turns=1",
            "repetitions.warmup=0",
            "timeouts.gate_s=1",
            "timeouts.read_gap_s=2",
        ]
    )
    with workloads.SimulatedServer(sim=STALLING | {"faults.stall_s": 3.0}) as server:
        result = workloads.run(
            scenario, target=server.target, telemetry=workloads.TelemetryOptions(energy="off")
        )
        truths = server.truths()
    gate = result.gate
    assert gate is not None and not gate.passed and gate.failed_cases == [c.name for c in CASES]
    # The gate's deadline cut every case (turn_deadline after 1 s), not the run's read gap
    # (read_stall after 2 s, as the measured turn got): the run's own client did not send it.
    assert [o.error_kind for o in gate.outputs] == ["turn_deadline"] * (2 * len(CASES))
    assert [r.error_kind for r in result.records] == ["read_stall"]
    assert result.invalid_reason is None  # gate = "report": recorded, the run stands
    gate_requests = [t for t in truths if t.max_tokens in {c.max_tokens for c in CASES}]
    before, after = gate_requests[: len(CASES)], gate_requests[-len(CASES) :]
    assert len(gate_requests) == 2 * len(CASES)
    assert _in_flight_together(before, 1.0) and _in_flight_together(after, 1.0)


# What Gemma 3 270M (base) continues each text case with at greedy on llama.cpp (seen), and a
# wrong continuation of each (what a corrupted server gives: the recall one is its answer
# with --rope-freq-base 10000).
TEXT_RIGHT = {
    "text:count": " 7, 8, 9, 10",
    "text:code": "    if n % 2 == 0:\n        return False\n    else:\n        return True\n\n"
    'def is_odd(n):\n    """Return True when n is odd."""\n    if n % 2 ==',
    "text:json-echo": '{"id": 7, "name": "cache", "tags": ["kv", "prefix"], "ok": true}\n{"id"',
    "text:list-continuation": " Thursday, Friday, Saturday, Sunday, and Monday, Tuesday",
    "text:recall": " 4827.\nNote",
    "text:repeat": "The quick brown fox jumps over the lazy dog near the river bank.\nThe quick",
}
TEXT_WRONG = {
    "text:count": " 7, 9, 11",
    "text:code": "    if n % 2 == 0\n        return True\n",
    "text:json-echo": '{"id": 7, "name": "cache"}\n',
    "text:list-continuation": " Thursday, Saturday",
    "text:recall": " 1000000",
    "text:repeat": "The quick brown fox jumps over the dog.\n",
}


def test_each_text_case_passes_a_base_models_continuation_and_fails_a_wrong_one():
    from workloads.core.gate import TEXT_CASES, judge_text

    assert {c.name for c in TEXT_CASES} == set(TEXT_RIGHT)
    for case in TEXT_CASES:
        assert judge_text(case, TEXT_RIGHT[case.name]).passed, case.name
        assert not judge_text(case, TEXT_WRONG[case.name]).passed, case.name


def test_a_base_model_echoing_chat_requests_is_judged_on_the_text_form():
    from workloads.core.gate import echoes, rejudged
    from workloads.model.gate import GateOutput, GateResult

    # Gemma 3 270M's chat answers: its own request, then noise.
    echoed = [
        GateOutput(
            case=c.name,
            phase="before",
            passed=False,
            why="",
            output=c.messages[-1][1] + " mendatang",
        )
        for c in CASES
    ]
    assert all(echoes(c, o.output) for c, o in zip(CASES, echoed, strict=True))
    assert not any(echoes(c, RIGHT[c.name]) for c in CASES)
    text = [
        GateOutput(case=name, phase=phase, passed=False, why="", output=out)
        for phase in ("before", "after")
        for name, out in TEXT_RIGHT.items()
    ]
    gate = rejudged(GateResult(mode="required", outputs=echoed + text))
    assert gate.form == "text" and gate.echoed == 6
    assert gate.passed and len(gate.cases) == 6
    assert all(o.why.startswith("echoed the request") for o in gate.outputs[:6])
    broken = [
        o.model_copy(update={"output": TEXT_WRONG[o.case]}) if o.case == "text:recall" else o
        for o in gate.outputs
    ]
    failed = rejudged(GateResult(mode="required", outputs=broken))
    assert not failed.passed and failed.failed_cases == ["text:recall"]
    # A chat model's gate is judged on the chat cases alone, as before.
    chat = rejudged(
        GateResult(
            mode="report",
            outputs=[
                GateOutput(case=c.name, phase="before", passed=False, why="", output=RIGHT[c.name])
                for c in CASES
            ],
        )
    )
    assert chat.form == "chat" and chat.passed and chat.echoed == 0


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        ([], "(the gate's deadline, 30 s: timeouts.gate_s)"),
        (
            ["timeouts.read_gap_s=5"],
            "(the gate's deadline, 5 s: timeouts.read_gap_s, below timeouts.gate_s 30 s)",
        ),
        (
            ["timeouts.turn_s=4", "timeouts.read_gap_s=5"],
            "(the gate's deadline, 4 s: timeouts.turn_s, below timeouts.gate_s 30 s)",
        ),
    ],
)
def test_the_gates_deadline_names_the_timeout_that_set_it(overrides, said):
    from workloads.runner.gate import gate_deadline_text

    scenario = workloads.load_scenario("five-user-coding").with_overrides(overrides)
    assert gate_deadline_text(scenario.timeouts) == " " + said
