"""compare() on stored result files (tests/data, format_version 1) and hand-edited copies."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import workloads
from workloads.cli import main
from workloads.core.aggregate import summarize
from workloads.report.compare import compare

DATA = Path(__file__).parent / "data"


def load(name: str) -> workloads.RunResult:
    return workloads.load_result(DATA / name)


def test_stored_v1_results_still_load_with_their_records():
    a = load("v1-small-a")
    assert a.format_version == 1 and a.label == "arm-a"
    assert len(a.records) == 2 * 2 * 4  # users × turns × (1 warm-up + 3 measured)


def test_same_workload_twice_is_matched_within_the_tokenizer_delta():
    result = compare(load("v1-small-a"), load("v1-small-b"))
    assert result.match in ("matched", "matched_with_tokenizer_delta")
    assert result.prompt_delta_fraction <= 0.01
    assert not result.forced_over


def test_identical_prompts_are_matched_and_an_arm_is_not_significant_against_itself():
    a = load("v1-small-a")
    result = compare(a, a)
    assert result.match == "matched" and result.prompt_delta_tokens == 0
    assert result.metrics and all(m.verdict == "no difference" for m in result.metrics)
    assert not any(m.significant for m in result.metrics)


def test_different_scenarios_are_refused_unless_forced():
    a = load("v1-small-a")
    b = a.model_copy(update={"scenario": a.scenario.with_overrides(["output_tokens=17"])})
    with pytest.raises(workloads.IncomparableError, match="output_tokens"):
        compare(a, b)
    assert any("output_tokens" in p for p in compare(a, b, force=True).forced_over)


def test_prompts_more_than_one_percent_apart_are_refused():
    a = load("v1-small-a")
    bigger = [r.model_copy(update={"prompt_tokens": (r.prompt_tokens or 0) * 2})
              for r in a.records]
    with pytest.raises(workloads.IncomparableError, match="prompt tokens differ"):
        compare(a, a.model_copy(update={"records": bigger}))


def test_disjoint_ranges_give_a_ratio_overlapping_ones_do_not():
    a = load("v1-small-a")
    faster = [r.model_copy(update={"decode_tokens_per_s": (r.decode_tokens_per_s or 0) * 2})
              for r in a.records]
    result = compare(a, a.model_copy(update={"records": faster}))
    per_user = next(m for m in result.metrics if m.name == "per-user median")
    assert per_user.significant and per_user.ratio == pytest.approx(2.0)
    assert "better" in per_user.verdict


def test_cli_compare_prints_the_match_class(tmp_path, capsys):
    assert main(["compare", str(DATA / "v1-small-a"), str(DATA / "v1-small-b")]) == 0
    out = capsys.readouterr().out
    assert "A = arm-a, B = arm-b" in out and "matched" in out


def test_cli_compare_refusal_is_one_line(tmp_path, capsys):
    other = tmp_path / "other"
    shutil.copytree(DATA / "v1-small-a", other)
    text = (other / "result.json").read_text().replace('"users": 2', '"users": 3')
    (other / "result.json").write_text(text)
    assert main(["compare", str(DATA / "v1-small-a"), str(other)]) == 2
    err = capsys.readouterr().err
    assert "users" in err and err.count("\n") == 1


def edit(result: workloads.RunResult, change) -> workloads.RunResult:
    """A copy whose records went through ``change(record) -> dict of updates | None``."""
    records = [r.model_copy(update=change(r) or {}) for r in result.records]
    return result.model_copy(update={"records": records})


def test_one_repetition_a_side_is_never_significant():
    a = load("v1-small-a")
    one = a.model_copy(update={"records": [r for r in a.records if r.repetition in (0, 1)]})
    faster = edit(one, lambda r: {"decode_tokens_per_s": (r.decode_tokens_per_s or 0) * 2})
    result = compare(one, faster)
    per_user = next(m for m in result.metrics if m.name == "per-user median")
    assert per_user.ratio == pytest.approx(2.0)
    assert not per_user.significant and per_user.verdict == "too few repetitions (n=1)"


def test_a_ratio_that_rounds_to_one_is_no_difference():
    a = load("v1-small-a")
    slightly = edit(a, lambda r: {"decode_tokens_per_s": (r.decode_tokens_per_s or 0) * 1.001})
    assert all(m.verdict == "no difference" for m in compare(a, slightly).metrics)


def test_opposite_per_turn_prompt_differences_do_not_cancel():
    a = load("v1-small-a")
    b = edit(a, lambda r: {"prompt_tokens": (r.prompt_tokens or 0) + (50 if r.turn == 1 else -50)})
    with pytest.raises(workloads.IncomparableError, match="prompt tokens differ"):
        compare(a, b)
    forced = compare(a, b, force=True)
    assert forced.match == "unmatched" and abs(forced.prompt_delta_tokens) == 50
    assert forced.prompt_delta_at.startswith("turn ")


def test_a_different_failure_pattern_is_still_the_same_workload():
    a = load("v1-small-a")
    # One turn-2 request of B finished invalid (its prompt was still counted by the server).
    b = edit(a, lambda r: {"valid": False, "finish_reason": "stop"}
             if (r.repetition, r.session, r.turn) == (2, 0, 2) else None)
    result = compare(a, b)
    assert result.match == "matched" and result.prompt_delta_tokens == 0


def test_a_small_tokenizer_delta_reports_the_largest_per_turn_delta():
    a = load("v1-small-a")
    b = edit(a, lambda r: {"prompt_tokens": (r.prompt_tokens or 0) + (3 if r.turn == 2 else 0)})
    result = compare(a, b)
    assert result.match == "matched_with_tokenizer_delta"
    assert result.prompt_delta_tokens == 3 and result.prompt_delta_at == "turn 2"


def test_turns_are_paired_by_number_not_position():
    a = load("v1-small-a")
    b = a.model_copy(update={"records": [r for r in a.records if r.turn == 2]})
    with pytest.raises(workloads.IncomparableError, match="turn 1"):
        compare(a, b)
    result = compare(a, b, force=True)
    turns = {m.name: m for m in result.metrics if m.name.startswith("turn ")}
    assert turns["turn 1 aggregate"].b is None
    assert turns["turn 1 aggregate"].verdict == "not reported"
    assert turns["turn 2 aggregate"].verdict == "no difference"


def test_compare_uses_the_reports_aggregate_users_times_per_user_median():
    a = load("v1-small-a")
    result = compare(a, a)
    aggregate = next(m for m in result.metrics if m.name == "aggregate")
    per_user = next(m for m in result.metrics if m.name == "per-user median")
    assert aggregate.a is not None and per_user.a is not None
    assert aggregate.a.median == pytest.approx(a.scenario.users * per_user.a.median)
    assert aggregate.a.n == per_user.a.n == 3
    names = {m.name for m in result.metrics}
    assert "wall aggregate" in names and "TTFT median" in names


def test_a_sweep_is_compared_cell_by_cell():
    sweep = load("v1-sweep")
    result = compare(sweep, sweep)
    names = [m.name for m in result.metrics]
    assert "C1 · prior 300 · aggregate" in names and "C2 · prior 300 · aggregate" in names
    assert "C2 · prior 300 · turn 2 aggregate" in names
    by_name = {m.name: m for m in result.metrics}
    c2, c2_user = by_name["C2 · prior 300 · aggregate"], by_name["C2 · prior 300 · per-user median"]
    assert c2.a is not None and c2_user.a is not None
    assert c2.a.median == pytest.approx(2 * c2_user.a.median)  # the cell's own users


def test_sweeps_with_different_cells_are_refused_unless_forced():
    sweep = load("v1-sweep")
    c1 = [r for r in sweep.records if r.cell == 0]
    fewer = sweep.model_copy(update={
        "scenario": sweep.scenario.with_overrides(["concurrency=[1]"]), "records": c1})
    with pytest.raises(workloads.IncomparableError, match="different cells"):
        compare(sweep, fewer)
    forced = compare(sweep, fewer, force=True)
    assert {m.name.split(" · ")[0] for m in forced.metrics} == {"C1"}


def test_stored_sweep_cells_are_summarized_apart():
    sweep = load("v1-sweep")
    assert sweep.cells is not None
    pooled = summarize(sweep.records, users=sweep.scenario.users)
    assert pooled.turns[0].aggregate_rate is None  # pooled over C1 and C2: no Σ
    c1, c2 = (summarize([r for r in sweep.records if r.cell == c.cell], users=c.concurrency)
              .turns[0].aggregate_rate for c in sweep.cells)
    assert c1 is not None and c2 is not None and c2.median > c1.median
    assert c1.n == c2.n == 2
