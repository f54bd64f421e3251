"""The report of a realistic agents' run: coding-agents, small, on the embedded simulated
server (a low compaction threshold, so a compaction step happens)."""

from __future__ import annotations

import csv
import io

import pytest

import workloads
from fakes import TIMELESS_ENGINE, sim_args
from workloads.cli import main
from workloads.report import agents
from workloads.report.export import csv_text, plain_text


@pytest.fixture(scope="module")
def agents_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("agents") / "run"
    code = main(
        [
            "run",
            "coding-agents",
            "--out",
            str(out),
            "--quiet",
            "--set",
            "users=2",
            "--set",
            "turns=6",
            "--set",
            "fleet=none",
            "--set",
            "repetitions.warmup=0",
            "--set",
            "repetitions.measured=1",
            "--set",
            'gate="off"',
            "--set",
            "pacing.time_scale=0.0002",
            "--set",
            "agent.compaction.at_tokens=26000",
            # A simulated engine with no modelled time to speak of (as
            # tests/runner/test_session_agents.py's): the report's tables and plots are of the
            # same drawn plans, and no test here reads a speed. The plots stay: the HTML
            # report's are a subject here.
            *sim_args(TIMELESS_ENGINE),
        ]
    )
    assert code == 0
    return out, workloads.load_result(out)


@pytest.mark.slow
def test_the_report_has_the_per_kind_table_and_the_cache_after_compaction(agents_run):
    _, result = agents_run
    text = plain_text(result, width=80)
    assert all(len(line) <= 80 for line in text.splitlines())
    text = " ".join(text.split())  # phrases, wherever the 80 columns wrapped them
    assert "By step kind" in text
    assert "human request" in text and "compaction" in text
    assert "cache after" in text and "the first step after each hit" in text
    assert "Drawn sizes" in text and "new tokens: tool result" in text
    assert "pauses compressed 5,000-fold (pacing.time_scale 0.0002)" in text
    # Sizes are drawn: no one configured prompt per turn, and the coordinates name medians.
    assert "turn configured prompt" not in text
    assert "sizes drawn per step, medians: opening ~24,000" in text


@pytest.mark.slow
def test_the_summary_shows_the_cache_cliff_after_a_compaction(agents_run):
    _, result = agents_run
    kinds = {k.kind: k for k in result.summary.kinds or []}
    assert "compaction" in kinds and "tool" in kinds
    assert sum(k.records for k in result.summary.kinds or []) == len(result.records)
    cliff = result.summary.cache_cliff
    assert cliff is not None and cliff.compactions == kinds["compaction"].records
    assert cliff.after >= 1
    tool = kinds["tool"].hit_rate
    assert cliff.after_hit_rate is not None and tool is not None
    assert cliff.after_hit_rate < tool  # the prompt after a compaction starts anew
    assert cliff.other_hit_rate is not None and cliff.after_hit_rate < cliff.other_hit_rate


@pytest.mark.slow
def test_the_html_report_embeds_the_context_and_sizes_plots(agents_run):
    out, _ = agents_run
    page = (out / "report.html").read_text(encoding="utf-8")
    assert 'alt="context.png"' in page and 'alt="sizes.png"' in page
    assert "By step kind" in page
    assert (out / "plots" / "context.png").stat().st_size > 10_000


@pytest.mark.slow
def test_csv_and_json_carry_the_kinds(agents_run):
    _, result = agents_run
    rows = list(csv.DictReader(io.StringIO(csv_text(result))))
    kind_rows = {r["step_kind"]: r for r in rows if r["step_kind"]}
    assert set(kind_rows) == {k.kind for k in result.summary.kinds or []}
    assert all(r["turn"] == "" for r in kind_rows.values())
    assert float(kind_rows["compaction"]["output_tokens_p50"]) > 1000  # summaries are long
    assert '"kinds"' in result.model_dump_json()


def test_a_fixed_shape_result_has_no_agent_blocks():
    scenario = workloads.load_scenario("five-user-coding")
    result = workloads.RunResult.model_construct(scenario=scenario, records=[], cells=None)
    assert agents.drawn_sizes_table(result) is None and agents.time_scale_line(result) is None


def test_a_fold_reads_as_a_number_not_an_exponent():
    from workloads.report.agents import _fold

    assert [_fold(1 / s) for s in (0.0001, 0.003, 0.4)] == ["10,000", "333", "2.5"]


def _paused_agents(kv_capacity_tokens: int) -> workloads.RunResult:
    """Six agents on the simulator, each a 3,000-token opening and a human request every
    third step after a think time of 0.5-1.5 s, tool results at once; a KV of
    ``kv_capacity_tokens``. Their contexts grow to ~6K: six of them are ~36K."""
    scenario = workloads.Scenario.model_validate(
        {
            "name": "paused-agents",
            "users": 6,
            "turns": 9,
            "shared_prefix_tokens": 512,
            "nonce": "run",
            "opening_tokens": 3000,
            "turn_tokens": 300,
            "output_tokens": 32,
            "repetitions": {"warmup": 0, "measured": 1},
            "gate": "off",
            "agent": {"steps_per_request": 3, "request_tokens": 100},
            "pacing": {
                "mode": "free",
                "think_time": {"kind": "quantiles", "points": [[0.0, 0.5], [1.0, 1.5]]},
                "tool_time": {"kind": "constant", "median": 0.0},
            },
        }
    )
    sim = {**TIMELESS_ENGINE, "kv_capacity_tokens": kv_capacity_tokens}
    return workloads.run(scenario, sim=sim)


@pytest.mark.slow
def test_a_small_kv_evicts_prefixes_over_a_pause_and_the_report_says_so():
    # 8,000 tokens hold one agent's context and a bit: over a human's think time the other
    # five agents write more than that, and the paused agent's prefix is evicted (LRU);
    # between tool steps (no pause) it is the most recently used, and stays.
    result = _paused_agents(8000)
    rows = {(k.kind, k.first_step): k for k in result.summary.kinds or []}
    after, tool = rows[("human", False)], rows[("tool", False)]
    assert after.hit_rate is not None and tool.hit_rate is not None
    assert after.hit_rate < tool.hit_rate
    pp = result.summary.pause_pressure
    assert pp is not None and pp.known == pp.steps == after.valid > 0
    assert pp.kv_capacity_tokens == 8000  # read from the simulator's cache_config_info
    assert pp.room_tokens is not None and pp.above > 0
    line = agents.pause_pressure_line(result)
    assert line is not None and "eviction by other sessions' traffic" in line


def test_a_kinds_first_steps_and_later_steps_read_apart():
    from workloads.model.summary import KindSummary

    def label(kind, first):
        k = KindSummary(
            kind=kind,
            first_step=first,
            records=1,
            valid=1,
            hit_rate=None,
            cache_effectiveness=None,
            shareable_exact=False,
            ttft_percentiles=None,
            ttft_content_percentiles=None,
            per_user_rate=None,
            prompt_tokens=None,
            new_tokens=None,
            output_tokens=None,
            pause_s=None,
            tool_calls=None,
        )
        return agents.kind_label(k)

    assert label("human", True) == "human request (first step)"
    assert label("human", False) == "human request (after a pause)"
    assert label("subagent", True) == "sub-agent (first step)"
    assert label("subagent", False) == "sub-agent (later steps)"
    assert label("tool", False) == "tool result" and label("compaction", False) == "compaction"
    assert label("tool", True) == "tool result (first step)"  # a trace's session may open so
    assert label("human", None) == "human request"  # a summary saved before format 6.2
