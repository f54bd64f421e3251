"""Warnings that are true: each warning a run can give has a test that causes its condition
and one that shows it silent on a healthy run (docs/architecture.md, "Warnings", lists every
rule with its tests; the telemetry and client-health rules are tested beside their code).

Conditions are caused for real where the simulated server can cause them (a ``sim`` profile
override or a scenario override); rules the simulator cannot reach (a target whose /tokenize
disagrees with its chat endpoint, several hosts, a resend) are fed hand-built records.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import workloads
from fakes import QUICK_ENGINE, FakeChatClient, LlamaCppLikeServer
from workloads.core.corpus import load_corpus
from workloads.core.tokens import EstimateTokenizer
from workloads.model.records import TurnRecord
from workloads.model.results import Sizing, TargetInfo
from workloads.report import console as report
from workloads.report.failures import failure_rate, failures
from workloads.report.verdicts import verdict_lines
from workloads.runner.outcome import Measured, build_result
from workloads.runner.sizing import CellSizing, sizing_warnings

BASE = [
    "users=2",
    "turns=2",
    "opening_tokens=300",
    "turn_tokens=60",
    "output_tokens=16",
    "repetitions.warmup=0",
    "repetitions.measured=1",
    "gate=off",
]

# The client's own health depends on the machine the test runs on (a busy CI host stalls
# the event loop), not on the run's configuration: tests/runner/test_monitor.py causes and silences
# those warnings with a loop blocked on purpose and with healthy figures.
CLIENT = (
    "the client may be the bottleneck",
    "the client stalled",
    "stamps waited up to",
    "reads waited up to",
    "had chunks read together after the client's event loop stalled",
)


def tiny(*more: str) -> workloads.Scenario:
    """five-user-coding, small: 2 users, 2 turns of 16 generated tokens at temperature 0.7."""
    return workloads.load_scenario("five-user-coding").with_overrides([*BASE, *more])


def about_the_run(result: workloads.RunResult) -> list[str]:
    return [w for w in result.warnings if not any(c in w for c in CLIENT)]


def one(result: workloads.RunResult, words: str) -> str:
    (warning,) = [w for w in result.warnings if words in w]
    return warning


# --- silent on a healthy run -------------------------------------------------------------

HEALTHY = {
    "lockstep": [],
    "free": ["pacing.mode=free"],
    "arrivals": ["pacing.mode=arrivals", "pacing.arrivals={ rate_per_s = 50.0 }"],
}


@pytest.mark.parametrize("pacing", sorted(HEALTHY))
def test_a_healthy_run_warns_about_nothing(pacing):
    """16-token replies at temperature 0.7 on 16-token blocks, a warm-up, the gate, telemetry
    read from the server's /metrics: every rule had what it reads, and none fires."""
    scenario = tiny("repetitions.warmup=1", "gate=report", *HEALTHY[pacing])
    result = workloads.run(scenario)
    assert result.complete and all(r.valid for r in result.records)
    assert result.window.server is not None and result.window.server.reconciles
    assert about_the_run(result) == []
    assert [text for text, style in verdict_lines(result) if style] == []
    assert report.users_label(result) == "C2"


# --- the shipped presets -----------------------------------------------------------------


def shrunk(scenario: workloads.Scenario) -> workloads.Scenario:
    """A preset at its shape (pacing, warm-up, nonce, depths, tools, agent) but smaller: at
    most 4 users and 4 turns, one measured repetition, pauses a hundredth as long, the first
    two cells of a sweep. The full presets were run too (the warnings they gave did not depend on
    this shrink: see the Warnings section of docs/architecture.md)."""
    overrides = [
        f"users={min(scenario.users, 4)}",
        f"turns={min(scenario.turns, 4)}",
        "repetitions.measured=1",
        f"pacing.time_scale={scenario.pacing.time_scale / 100}",
    ]
    if scenario.concurrency is not None:
        overrides.append(f"concurrency={scenario.concurrency[:2]}")
    if scenario.prior_tokens is not None:
        overrides.append(f"prior_tokens={scenario.prior_tokens[:1]}")
    return scenario.with_overrides(overrides)


def about_the_preset(result: workloads.RunResult) -> list[str]:
    """The warnings but those about this machine: the client's health, and turns sent late
    (sizing a turn on a busy machine can outlast its think and tool time, with no stall of
    the loop to name: CI's light tier on 2 shared cores sent one agent-fleet turn 0.10 s
    late). Both are true of the machine, not of the preset."""
    return [
        w
        for w in about_the_run(result)
        if "were sent more than 100 ms after they were due" not in w
    ]


# On QUICK_ENGINE (tests/fakes.py, five times quicker per step than the fast profile): no
# rule about the preset reads how long a decode step takes, only what the server reported
# and what the client sent; a preset runs in 1-13 s, not 15-22.


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", [n for n in sorted(workloads.list_scenarios()) if n != "trace-replay"]
)  # replays a trace: tested above
def test_a_shipped_preset_warns_about_nothing_of_its_own_on_the_simulator(name):
    result = workloads.run(shrunk(workloads.load_scenario(name)), sim=QUICK_ENGINE)
    assert result.records and all(r.valid for r in result.records)
    assert about_the_preset(result) == []


# --- cache effectiveness: a block-granularity effect is not a cache problem ---------------


def test_short_replies_on_whole_blocks_do_not_read_as_a_low_cache():
    """The simulator caches 16-token blocks: of 376 shareable tokens it holds 368 (the last
    reply token's KV is never computed, and 375 ends in a partial block). That gap of 8 is
    half of a 16-token reply; it is not a reply gone uncached."""
    result = workloads.run(tiny())
    later = [r for r in result.records if r.turn == 2]
    assert all(r.shareable_tokens - r.cached_tokens < 16 for r in later)  # the gap is there
    assert all(r.cached_tokens == 16 * ((r.shareable_tokens - 1) // 16) for r in later)
    assert not [w for w in result.warnings if "reads low" in w]


def test_replies_cached_with_what_the_next_prompt_lacks_read_low_and_say_why():
    """A reasoning model's reply is cached with its reasoning, which the next prompt does not
    carry: each turn's reply (56 of 64 tokens here) goes uncached."""
    result = workloads.run(tiny("output_tokens=64"), sim={"reasoning_tokens": 8})
    warning = one(result, "reads low")
    gap = int(re.search(r"median cacheable − cached = (\d+) tokens", warning)[1])
    assert gap >= 32  # over half a reply
    assert "reasoning the next prompt does not carry" in warning
    greedy = workloads.run(
        tiny("output_tokens=64", "sampling.temperature=0"), sim={"reasoning_tokens": 8}
    )
    assert not [w for w in greedy.warnings if "reads low" in w]  # said only where asked


def test_the_cache_rule_measures_from_whole_blocks_of_the_servers_size():
    scenario = tiny("output_tokens=64", "sampling.temperature=0.7")
    exact = Sizing(tokenizer="t", exact=True, calls=1, seconds=0.1)
    # 300 shareable, 256 cached: 32 tokens short of 288 on 16-token blocks, 0 on 64-token ones.
    records = [record(0, 2, shareable_tokens=300, cached_tokens=256, shareable_exact=True)]
    assert [w for w in sizing_warnings(records, exact, scenario) if "reads low" in w]
    assert not [
        w for w in sizing_warnings(records, exact, scenario, block_tokens=64) if "reads low" in w
    ]


# --- turns that failed, finished invalid, or loop ----------------------------------------


def test_failed_turns_are_counted_and_named():
    result = workloads.run(tiny(), sim={"faults.rate_500": 1.0})
    run = result.summary.run
    assert run.errors == run.records == 4 and run.cancelled == 0
    assert one(result, "measured turns failed").startswith("4 of 4 measured turns failed")


def test_turns_of_the_wrong_length_are_invalid_and_named():
    result = workloads.run(tiny(), sim={"faults.rate_early_stop": 1.0, "faults.after_tokens": 4})
    assert result.summary.run.invalid == 4
    assert one(result, "finished but are invalid").startswith("4 measured turns finished")


def test_looping_completions_are_flagged():
    result = workloads.run(tiny("output_tokens=200"), sim={"faults.rate_corrupt": 1.0})
    assert one(result, "are degenerate").startswith("4 of 4 measured completions")
    assert any(
        text.startswith("degenerate completions: 4 of 4") and style == "warning"
        for text, style in verdict_lines(result)
    )


def test_a_server_that_reports_no_cached_tokens_is_named():
    """A server without usage.prompt_tokens_details (FakeChatClient answers so)."""
    result = workloads.run(tiny(), client=FakeChatClient(lambda body: (300, "ok " * 8)))
    assert "does not report cached tokens" in one(result, "cached tokens")


def test_an_slo_on_a_figure_the_records_lack_has_no_goodput_and_says_why():
    """FakeChatClient records no chunk gaps: an ITL limit cannot be judged."""
    scenario = tiny("slo={ itl_ms = 50.0 }")
    result = workloads.run(scenario, client=FakeChatClient(lambda body: (300, "ok " * 8)))
    assert one(result, "no goodput").startswith(
        "no goodput: the SLO limits itl_ms, and valid measured records carry no chunk gaps"
    )
    healthy = workloads.run(scenario)  # the simulator's streams: gaps recorded
    assert healthy.goodput is not None and about_the_run(healthy) == []


# --- sizing --------------------------------------------------------------------------------


def test_estimated_sizing_says_so_and_advises_a_warm_up_only_where_it_helps():
    result = workloads.run(tiny("tokenizer=tiktoken"))
    warning = one(result, "sized with tiktoken estimates")
    # The simulator counts as tiktoken does: first turns land on their configured prompts,
    # so a warm-up would correct nothing.
    assert "within 0.0% of configured" in warning and "set repetitions.warmup" not in warning


def test_a_target_counting_far_from_tiktoken_is_named_after_one_warm_up():
    """The "words" tokenizer counts 1.4-1.8x tiktoken on code."""
    with LlamaCppLikeServer(tokenizer="words") as server:
        result = workloads.run(
            tiny("tokenizer=tiktoken", "repetitions.warmup=1"),
            workloads.Target(server.base_url, server.model),
        )
    assert "repetitions.warmup = 2 refines it" in one(result, "more or fewer tokens")


def test_a_turn_smaller_than_its_template_framing_misses_its_prompt():
    result = workloads.run(tiny("turn_tokens=2"))
    assert "turn_tokens smaller than the chat template's framing" in one(result, "missed")


def test_sizing_with_tokenize_inside_the_window_says_it_loaded_the_server():
    result = workloads.run(tiny("pacing.mode=free", "sizing_during_window=exact"))
    assert "loaded the server under test" in one(result, "sizing_during_window")


def test_the_rules_that_read_sizing_records_fire_only_on_their_condition():
    scenario = tiny()
    exact = Sizing(tokenizer="t", exact=True, calls=1, seconds=0.1)
    healthy = [record(s, t, pacing_lag_ns=5_000_000) for s in (0, 1) for t in (1, 2)]
    assert sizing_warnings(healthy, exact, scenario) == []
    # /tokenize counted another prompt than the chat endpoint's usage.
    differs = [*healthy[:-1], record(1, 2, tokenized_prompt_tokens=350)]
    assert "its /tokenize does not render chats" in sizing_warnings(differs, exact, scenario)[0]
    # A turn sent 0.3 s after it was due.
    late = [*healthy[:-1], record(1, 2, pacing_lag_ns=300_000_000)]
    (warning,) = sizing_warnings(late, exact, scenario, loop_lag_max_ms=20.0)
    assert warning.startswith(
        "1 measured turns were sent more than 100 ms after they were "
        "due (worst 0.30 s): sizing them took longer"
    )
    (stalled,) = sizing_warnings(late, exact, scenario, loop_lag_max_ms=250.0)
    assert "the client's event loop stalled for up to 250 ms (see the client line)" in stalled
    # /tokenize calls that failed.
    failed = exact.model_copy(update={"fallbacks": 2})
    assert sizing_warnings(healthy, failed, scenario) == [
        "2 openings or turns were sized by estimate because a /tokenize call failed"
    ]


def test_quiet_sizing_at_its_configured_prompts_is_no_warning_and_a_miss_is():
    scenario = tiny("pacing.mode=free", "repetitions.warmup=0")
    exact = Sizing(tokenizer="t", exact=True, calls=1, seconds=0.1)
    first = [record(s, 1) for s in (0, 1)]
    quiet = {"tokenized_prompt_tokens": None}  # sized by estimate: no /tokenize count
    on = [*first, record(0, 2, **quiet), record(1, 2, **quiet)]
    assert sizing_warnings(on, exact, scenario) == []
    off = [*first, record(0, 2, **quiet), record(1, 2, prompt_tokens=450, **quiet)]
    (warning,) = sizing_warnings(off, exact, scenario)
    assert warning.startswith("1 of 2 measured turns sized by tiktoken estimate")
    assert "(worst: turn 2, 450 tokens for 436: +3.2%)" in warning
    assert "uncorrected" in warning and "set repetitions.warmup = 1" in warning


# --- what build_result adds --------------------------------------------------------------


class ExactEstimate(EstimateTokenizer):
    exact = True  # stands for a target tokenizer: only the flag is read here
    description = "the target's /tokenize (a stand-in)"


def built(records: list[TurnRecord], *, insecure: bool = False) -> workloads.RunResult:
    scenario = tiny()
    tok = ExactEstimate()
    measured = Measured(
        scenario=scenario,
        target=TargetInfo(
            base_url="http://127.0.0.1:1/v1", model="m", simulated=False, insecure=insecure
        ),
        corpus=load_corpus("synthetic"),
        cells=scenario.cells(),
        sizings={0: CellSizing(scenario, tok)},
        tokenizer=tok,
        records=records,
    )
    return build_result(measured, complete=True)


def healthy_records() -> list[TurnRecord]:
    return [record(s, t) for s in (0, 1) for t in (1, 2)]


def test_built_results_of_healthy_records_have_no_warning():
    assert built(healthy_records()).warnings == []


def test_resends_are_counted_and_said_not_to_be_server_errors():
    records = healthy_records()
    records[1] = records[1].model_copy(update={"resends": 1})
    assert built(records).warnings == [
        "1 requests were re-sent on a fresh connection because the server had closed the "
        "pooled one before reading them (not server errors)"
    ]


def test_records_from_several_hosts_say_which_figures_need_one_clock():
    records = [r.model_copy(update={"host": f"h{r.session}"}) for r in healthy_records()]
    (warning,) = built(records).warnings
    assert warning.startswith("the turns were sent from 2 hosts (h0, h1)")


def test_an_insecure_target_is_named_first():
    assert (
        built(healthy_records(), insecure=True)
        .warnings[0]
        .startswith("TLS certificates were not verified (--insecure)")
    )


def test_a_cut_trace_says_only_its_first_requests_were_replayed(tmp_path):
    scenario = workloads.load_scenario("trace-replay").with_overrides(
        ["trace.max_requests=3", "pacing.time_scale=0.01"]
    )
    result = workloads.run(scenario, trace="mooncake-sample")
    assert "the trace was cut at 3 requests" in one(result, "trace was cut")
    whole = workloads.run(
        scenario.with_overrides(["trace.max_requests=1000000"]), trace=_three_requests(tmp_path)
    )
    assert not [w for w in whole.warnings if "trace was cut" in w]


def _three_requests(tmp_path: Path) -> Path:
    path = tmp_path / "three.jsonl"
    path.write_text(
        "".join(
            f'{{"timestamp": {i * 10}, "input_length": 600, "output_length": 8, '
            f'"hash_ids": [{i}, {i + 1}]}}\n'
            for i in range(3)
        )
    )
    return path


# --- concurrency: the header says what ran -------------------------------------------------


def test_a_header_whose_users_mostly_paused_says_how_many_requests_were_in_flight():
    """Four users thinking a second before each 16-token turn (tens of milliseconds on the
    simulator): well under half of them have a request in flight."""
    scenario = tiny(
        "users=4", "pacing.mode=free", 'pacing.think_time={ kind = "constant", median = 1.0 }'
    )
    result = workloads.run(scenario)
    c = result.concurrency
    assert c is not None and c.mean < 2
    label = report.users_label(result)
    assert label.startswith(f"C4 (requests in flight averaged {c.mean:.1f}: ")
    active, busy = re.search(
        r": ([\d.]+) sessions active at a time on average, each with a "
        r"request in flight (\d+)% of that time",
        label,
    ).groups()
    # The why multiplies out to the mean it explains (to the rounding of its two figures).
    assert float(active) * int(busy) / 100 == pytest.approx(c.mean, abs=0.06 + 0.01 * c.mean)
    assert report.coordinates_line(result).startswith(label + " · actual prompt tokens")
    lockstep = workloads.run(tiny("users=4"))
    assert report.users_label(lockstep) == "C4"  # set by the scenario: nothing to explain


# --- a stopped run --------------------------------------------------------------------------


def record(session: int, turn: int, **fields: object) -> TurnRecord:
    """A valid measured turn of tiny()'s shape: prompts 360 and 436, as configured."""
    prompt = 360 if turn == 1 else 436
    base: dict[str, object] = dict(
        repetition=0,
        warmup=False,
        session=session,
        turn=turn,
        status="ok",
        valid=True,
        finish_reason="length",
        prompt_tokens=prompt,
        completion_tokens=16,
        cached_tokens=0,
        shareable_tokens=0,
        shareable_exact=True,
        configured_prior_tokens=prompt - 60,
        configured_prompt_tokens=prompt,
        tokenized_prompt_tokens=prompt,
        started_ns=100 * turn,
        sent_ns=100 * turn + 1,
        first_content_ns=100 * turn + 10,
        last_content_ns=100 * turn + 20,
        done_ns=100 * turn + 21,
    )
    return TurnRecord.model_validate({**base, **fields})


def test_cancelled_turns_are_neither_failed_nor_in_the_failure_table():
    records = [
        record(0, 1),
        record(1, 1),
        record(0, 2, status="incomplete", valid=False, error_kind="cancelled"),
        record(1, 2, status="error", valid=False, error_kind="http_5xx"),
    ]
    result = built(records)
    run = result.summary.run
    assert (run.valid, run.errors, run.cancelled, run.records) == (2, 1, 1, 4)
    turn2 = result.summary.turns[1]
    assert (turn2.errors, turn2.cancelled) == (1, 1)
    assert [(f.turn, f.kind) for f in failures(records, output_tokens=16)] == [(2, "http_5xx")]
    assert failure_rate(records) == pytest.approx(1 / 3)  # of the turns that ran to an end
    assert one(result, "measured turns failed").startswith("1 of 4 measured turns failed")
    assert [row[-1] for row in report.turn_table(result).rows] == ["2/2", "0/2, 1 cancelled"]


def test_stopped_before_any_measured_turn_has_one_line_not_empty_tables():
    stop_at_first = asyncio.Event()

    def first(record: TurnRecord) -> None:
        stop_at_first.set()  # the first warm-up turn ended: no measured turn will start

    async def go() -> workloads.RunResult:
        return await workloads.run_async(
            tiny("repetitions.warmup=1"), on_record=first, stop=stop_at_first, stop_grace_s=0
        )

    result = asyncio.run(go())
    assert result.records and all(r.warmup for r in result.records)
    assert report.stopped_early(result) == "before any measured turn"
    cut = result.model_copy(
        update={"records": [record(0, 1, status="incomplete", valid=False, error_kind="cancelled")]}
    )
    assert report.stopped_early(cut) == (
        "before any measured turn finished (1 turn cancelled in flight)"
    )
    assert report.stopped_early(built(healthy_records())) is None


@pytest.mark.slow
def test_ctrl_c_before_any_measured_turn_prints_one_line(tmp_path):
    """The CLI, interrupted in its warm-up (a slow server: 12 s or more of warm-up)."""
    out = tmp_path / "early"
    args = [
        sys.executable,
        "-m",
        "workloads",
        "run",
        "five-user-coding",
        "--out",
        str(out),
        "--quiet",
        "--no-plots",
        "--grace",  # the turns in flight are cancelled at the signal, not waited for (~8 s)
        "0",
        "--sim",
        "decode_s_per_seq=0.01",
    ]
    for item in [*BASE, "repetitions.warmup=1", "output_tokens=400", "turns=3"]:
        args += ["--set", item]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    records = out / "records.jsonl"
    for _ in range(1200):  # bounded: 120 s for the run to start and write its header
        if records.exists() and records.stat().st_size > 0:
            break
        assert process.poll() is None, process.communicate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=0.1)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr.decode()
    line = " ".join(stdout.decode().split())  # the console wraps long lines
    # the notice when the signal came goes to stderr, as the error lines do
    assert "SIGINT: stopping — no new turns" in stderr.decode()
    assert line == (
        f"stopped by SIGINT before any measured turn: nothing to report; records in {out} "
        "(exit 130)"
    )


@pytest.mark.parametrize("temperature", [0.7, 0.0])
def test_a_cache_that_evicts_between_turns_is_named_not_blamed_on_replies(temperature):
    # A KV of 480 tokens holds one session's ~380 at a time: each turn evicts most of the
    # other session's prefix. The gap (~350 tokens against 16-token replies) read "low by about one
    # reply" (issue 35: 9,872 against 128), and at temperature 0 nothing was said.
    result = workloads.run(
        tiny(f"sampling.temperature={temperature}"),
        sim={**QUICK_ENGINE, "kv_capacity_tokens": 480},
    )
    assert not [w for w in result.warnings if "low by about one reply" in w]
    warning = one(result, "far more than a reply")
    gap = int(
        re.search(r"median cacheable − cached = ([\d,]+) tokens", warning)[1].replace(",", "")
    )
    assert gap > 2 * 16 + 16
    assert "evicted them" in warning
