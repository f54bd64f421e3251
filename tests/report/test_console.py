from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from rich.console import Console

import workloads
from fakes import FakeChatClient
from workloads.cli import main
from workloads.core.aggregate import summarized
from workloads.report import console as report
from workloads.report.text import format_band


def rendered(result: workloads.RunResult) -> str:
    console = Console(width=140, record=True, color_system=None)
    console.print(report.render(result))
    return console.export_text()


@pytest.mark.slow
def test_a_depth_sweep_prints_seed_000_shaped_rows(tmp_path, capsys):
    out = tmp_path / "sweep"
    code = main(
        [
            "run",
            "depth-sweep",
            "--out",
            str(out),
            "--quiet",
            "--no-plots",
            "--set",
            "prior_tokens=[512, 1024]",
            "--set",
            "turn_tokens=256",
            "--set",
            "output_tokens=16",
            "--set",
            "repetitions.measured=2",
        ]
    )
    assert code == 0
    result = workloads.load_result(out)
    text = rendered(result)
    assert "prior target" in text and "configured prompt" in text and "range" in text
    table = report.sweep_table(result)
    rows = [dict(zip(table.columns, row, strict=True)) for row in table.rows]
    assert len(rows) == 2
    for row, (prior, prompt) in zip(rows, [("512", "768"), ("1,024", "1,280")], strict=True):
        assert [row["prior target"], row["configured prompt"], row["actual prompt"]] == [
            prior,
            prompt,
            prompt,
        ]  # configured target, configured, actual
        low, high = (float(x.replace(",", "")) for x in row["range"].split("–"))
        assert low <= float(row["median tok/s"].replace(",", "")) <= high  # within its range
        assert row["valid"] == "2/2"
        assert float(row["requests/s"]) > 0
    assert "exact, from the target's" in text


def test_a_concurrency_sweep_adds_the_aggregate_column():
    scenario = workloads.load_scenario("concurrency-sweep").with_overrides(
        [
            "concurrency=[1, 2]",
            "turns=1",
            "opening_tokens=300",
            "output_tokens=4",
            "repetitions.warmup=0",
            "repetitions.measured=1",
        ]
    )
    result = workloads.run(scenario, client=FakeChatClient(lambda body: (320, "ok")))
    text = rendered(result)
    assert "aggregate" in text and "sweep of 2 cells: C 1, 2" in text


def test_the_turn_table_shows_configured_next_to_actual_prompt_tokens():
    scenario = workloads.load_scenario("five-user-coding").with_overrides(
        [
            "users=1",
            "turns=2",
            "opening_tokens=300",
            "turn_tokens=50",
            "output_tokens=4",
            "repetitions.warmup=0",
            "repetitions.measured=1",
        ]
    )
    result = workloads.run(scenario, client=FakeChatClient(lambda body: (351, "ok")))
    text = rendered(result)
    assert "configured" in text
    table = text[text.index("configured prompt") :]
    row = next(line for line in table.splitlines() if re.match(r"\s*2\s", line))
    assert "404" in row.split()[1]  # 300 + 2 × 50 + 4, next to the server's count


DATA = Path(__file__).parents[1] / "data"


def small(**changes: dict[str, object]) -> workloads.RunResult:
    """The stored two-user result with its records edited, summaries recomputed. Keys of
    ``changes``: "REP,SESSION,TURN" for one record, "all" for every record."""
    a = workloads.load_result(DATA / "v1-small-a")
    records = []
    for r in a.records:
        update = {
            **changes.get("all", {}),
            **changes.get(f"{r.repetition},{r.session},{r.turn}", {}),
        }
        records.append(r.model_copy(update=update))
    return summarized(a.model_copy(update={"records": records}))


def test_the_turn_table_says_what_each_band_is_over_and_shows_wall_rates():
    text = rendered(small())
    assert "rates: median over measured repetitions" in text
    assert "TTFT and prefill: median over requests" in text
    assert "wall tok/s" in text
    row = next(line for line in text.splitlines() if re.match(r"\s*1\s+\d", line))
    assert row.count("(") >= 4  # aggregate, wall, per-user, TTFT … each with its band


def test_a_turn_without_valid_records_says_so_not_not_reported():
    invalid = {"valid": False, "finish_reason": "stop"}
    keys = {f"{rep},{s},2": invalid for rep in range(4) for s in range(2)}
    text = rendered(small(**keys))
    row = next(line for line in text.splitlines() if re.match(r"\s*2\s", line) and "0/6" in line)
    assert "— (no valid turns)" in row and "not reported" not in row


def test_a_repetition_with_a_missing_stream_is_marked_and_left_out():
    text = rendered(small(**{"2,1,1": {"valid": False, "status": "error"}}))
    row = next(line for line in text.splitlines() if re.match(r"\s*1\s+\d", line))
    assert " *" in row
    flat = " ".join(text.split())
    assert "1 repetition of 3 summed fewer valid streams than the 2 users (1–2 streams" in flat


def test_free_pacing_run_line_leads_with_wall_throughput_not_an_aggregate():
    result = small()
    free = summarized(
        result.model_copy(update={"scenario": result.scenario.with_overrides(["pacing.mode=free"])})
    )
    line = report.run_line(free)
    assert line.startswith("wall throughput") and "per-user median" in line
    assert "aggregate" not in line and "×" not in line
    assert "Σ streams tok/s" in rendered(free)
    lockstep = report.run_line(result)
    assert lockstep.startswith("aggregate ") and "wall throughput" in lockstep


def test_numbers_have_thousands_separators_and_counts_are_plural_aware():
    fast = small(all={"decode_tokens_per_s": 3210.0})
    assert "aggregate 6,420 tok/s (median Σ of 2 streams over 6 turns)" in report.run_line(fast)
    one = fast.model_copy(
        update={
            "scenario": fast.scenario.with_overrides(["turns=1"]),
            "records": [r for r in fast.records if r.turn == 1 and r.repetition in (0, 1)],
        }
    )
    line = report.coordinates_line(summarized(one))
    assert "1 turn × 1 measured repetition" in line and "1 turns" not in line


def test_format_band_is_public_and_collapses_a_band_that_prints_as_one_value():
    from workloads.core.aggregate import BandSummary

    assert format_band(BandSummary(median=1197.2, low=1197.0, high=1197.4, n=2)) == "1,197"
    assert format_band(None, missing="x") == "x"
    assert format_band(BandSummary(median=2, low=1, high=3, n=3)) == "2.00 (1.00–3.00)"


def test_show_recomputes_each_cell_of_a_sweep_from_its_records(tmp_path, capsys):
    copy = tmp_path / "sweep"
    shutil.copytree(DATA / "v1-sweep", copy)
    data = json.loads((copy / "result.json").read_text())
    for cell in data["cells"]:
        cell["summary"]["run"]["valid"] = 0  # a stale cache: show must not print it
        cell["generation_rate"] = None
    (copy / "result.json").write_text(json.dumps(data))
    assert main(["show", str(copy / "result.json"), "--plots"]) == 0
    out = capsys.readouterr().out
    assert "4/4" in out and "8/8" in out
    assert (copy / "plots" / "rates.png").exists()  # next to result.json, not inside it


def test_scenarios_piped_is_readable(capsys):
    assert main(["scenarios"]) == 0
    out = capsys.readouterr().out
    assert all(len(line) <= 120 for line in out.splitlines())
    described = workloads.load_scenario("five-user-coding").description
    assert any(line.rstrip().endswith(described) for line in out.splitlines())


def test_the_run_line_has_no_headline_when_no_turn_had_every_stream_valid():
    # Session 1 failed in every measured turn: only survivors' rates are left, which read high.
    failed = {
        f"{rep},1,{turn}": {"valid": False, "status": "error"}
        for rep in (1, 2, 3)
        for turn in (1, 2)
    }
    line = report.run_line(small(**failed))
    assert line.startswith(
        "no headline: in no turn of any measured repetition were all 2 "
        "streams valid (6 partial turns"
    )
    assert "tok/s" not in line


def test_the_aggregate_headline_leaves_out_and_counts_partial_turns():
    line = report.run_line(small(**{"2,1,1": {"valid": False, "status": "error"}}))
    assert "over 5 turns, 1 partial left out" in line


def test_the_report_says_what_was_in_flight_and_how_the_client_fared():
    from workloads.model.results import ClientHealth
    from workloads.model.summary import ConcurrencySummary

    result = small().model_copy(
        update={
            "concurrency": ConcurrencySummary(
                mean=1.84, max=2, span_s=0.46, samples=[(0.0, 2), (0.3, 1), (0.46, 0)]
            ),
            "client": ClientHealth(
                loop_lag_samples=40,
                loop_lag_p50_ms=0.2,
                loop_lag_p99_ms=4.9,
                loop_lag_max_ms=86.0,
                cpu_share=0.45,
                send_delay_p50_ms=0.3,
                send_delay_p99_ms=1.2,
            ),
        }
    )
    text = " ".join(rendered(result).split())
    assert "in flight: mean 1.8, max 2 requests over the measured 0.5 s" in text
    assert (
        "client: event-loop lag p50 0.20 ms, p99 4.90 ms, max 86.0 ms · CPU 0.45 of a core "
        "· send delay p50 0.30 ms, p99 1.20 ms"
    ) in text
    assert report.client_line(small()) is None and report.concurrency_line(small()) is None


def test_spec_acceptance_per_turn_is_shown_and_not_reported_where_responses_lack_it(tmp_path):
    """The simulator drafts (its counters show it) but, like vLLM, reports no per-response
    draft counts: the per-turn column says not reported. The same records carrying
    llama.cpp's per-response timings give each turn its own acceptance, and compare a row
    per turn."""
    from workloads.report.compare import compare

    args = [
        "run",
        "five-user-coding",
        "--sim",
        "spec_tokens=2",
        "--quiet",
        "--no-plots",
        "--set",
        "users=2",
        "--set",
        "turns=2",
        "--set",
        "opening_tokens=300",
        "--set",
        "turn_tokens=50",
        "--set",
        "output_tokens=16",
        "--set",
        "repetitions.measured=2",
    ]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    result = workloads.load_result(tmp_path / "a")
    server = result.window.server
    assert server is not None and server.spec_draft_tokens  # the window saw drafting
    table = report.cache_table(result)
    assert [row[-1] for row in table.rows] == ["not reported"] * 2
    assert table.columns[-1] == "spec accepted"

    def with_timings(r: workloads.TurnRecord) -> workloads.TurnRecord:
        drafted = 2 * (r.completion_tokens or 0)
        accepted = drafted * r.turn // 4  # turn 1: a quarter, turn 2: half
        return r.model_copy(update={"timings": {"draft_n": drafted, "draft_n_accepted": accepted}})

    timed = summarized(
        result.model_copy(update={"records": [with_timings(r) for r in result.records]})
    )
    assert [t.spec_acceptance for t in timed.summary.turns] == [0.25, 0.5]
    table = report.cache_table(timed)
    drafted = 2 * 16 * 2 * 2  # 2 per token, 16 tokens, 2 sessions, 2 measured repetitions
    assert [row[-1] for row in table.rows] == [f"25.0% of {drafted}", f"50.0% of {drafted}"]
    assert "spec accepted" in rendered(timed)
    rows = {m.name: m for m in compare(result, timed).metrics}
    assert "turn 1 spec acceptance" in rows and "turn 2 spec acceptance" in rows
    assert rows["turn 2 spec acceptance"].b is not None
    assert rows["turn 2 spec acceptance"].b.median == 0.5
    assert rows["turn 2 spec acceptance"].a is None  # not reported in A: nothing to test


def test_a_run_without_drafting_has_no_spec_column():
    scenario = workloads.load_scenario("five-user-coding").with_overrides(
        [
            "users=1",
            "turns=1",
            "opening_tokens=300",
            "output_tokens=4",
            "repetitions.warmup=0",
            "repetitions.measured=1",
        ]
    )
    result = workloads.run(scenario, client=FakeChatClient(lambda body: (320, "ok")))
    assert "spec accepted" not in report.cache_table(result).columns
