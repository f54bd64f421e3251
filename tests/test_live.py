"""Live progress: the line's figures from hand-built records, the plain line on stderr when
not a terminal, silence with --quiet."""

from __future__ import annotations

import io
import time

from rich.console import Console

import workloads
from workloads.cli import main
from workloads.live import LiveProgress, _Tally, progress_line
from workloads.model.records import TurnRecord

S = 1_000_000_000


def rec(
    session: int, *, status: str = "ok", kind: str | None = None, ttft: float = 0.2, rep: int = 1
) -> TurnRecord:
    return TurnRecord(
        repetition=rep,
        warmup=False,
        session=session,
        turn=1,
        status=status,
        error_kind=kind,
        valid=status == "ok",
        completion_tokens=512 if status == "ok" else None,
        configured_prior_tokens=8192,
        started_ns=0,
        ttft_ns=int(ttft * S),
    )


def test_the_line_has_turns_eta_rate_ttft_and_errors_by_kind():
    scenario = workloads.load_scenario("five-user-coding")  # 5 × 3 × 4 = 60 turns
    tally = _Tally(scenario)
    start = tally.start_ns
    assert "0/60 turns" in progress_line(tally, start + S)
    assert "sizing prompts" in progress_line(tally, start + S)
    for s, ttft in enumerate([0.1, 0.2, 0.3]):
        tally.add(rec(s, ttft=ttft))
    tally.add(rec(3, status="error", kind="read_stall"))
    tally.add(rec(4, status="error", kind="read_stall"))
    tally.add(rec(5, status="error", kind="http_5xx"))
    line = progress_line(tally, time.perf_counter_ns())
    assert "6/60 turns" in line and "ETA" in line
    assert "measured 1/3 · turn 1" in line
    assert "TTFT p50 0.20 s" in line
    assert "errors: 2 read_stall, 1 http_5xx" in line
    assert "tok/s" in line


def test_not_a_terminal_writes_plain_lines_to_the_stream():
    scenario = workloads.load_scenario("five-user-coding")
    out = io.StringIO()
    console = Console(file=io.StringIO())
    with LiveProgress(scenario, console, terminal=False, interval_s=0.01, stream=out) as live:
        live.on_record(rec(0))
        for _ in range(500):  # bounded: the ticker writes within a few intervals
            if "1/60 turns" in out.getvalue():
                break
            time.sleep(0.01)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("five-user-coding: 0s · 0/60 turns")
    assert any("1/60 turns" in line for line in lines)
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()


def test_quiet_runs_print_no_progress_and_piped_runs_print_a_line(tmp_path, capsys):
    small = [
        "--set",
        "users=1",
        "--set",
        "turns=1",
        "--set",
        "opening_tokens=300",
        "--set",
        "output_tokens=4",
        "--set",
        "repetitions.measured=1",
        "--no-plots",
    ]
    assert main(["run", "five-user-coding", "--out", str(tmp_path / "q"), "--quiet", *small]) == 0
    assert capsys.readouterr().err == ""
    assert main(["run", "five-user-coding", "--out", str(tmp_path / "p"), *small]) == 0
    assert "five-user-coding: 0s · 0/2 turns" in capsys.readouterr().err


def test_a_terminal_gets_a_bar_that_ends_cleanly():
    scenario = workloads.load_scenario("five-user-coding")
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=100)
    with LiveProgress(scenario, console) as live:
        assert live.terminal
        live.on_record(rec(0))
        live.on_record(rec(1, status="error", kind="read_stall"))
    drawn = " ".join(screen.getvalue().split())  # the status wraps in a narrow terminal
    assert "five-user-coding" in drawn and "errors: 1 read_stall" in drawn
    assert "…" not in drawn  # wrapped, never cut
