"""core/traces: reading and checking Mooncake and agent traces, the ideal hit rate, and the
shipped samples (pure: no server)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from workloads.core.traces import (
    MooncakeRequest,
    ideal_cached_tokens,
    ideal_hit_rate,
    load_agent_trace,
    load_mooncake,
    observed_hit_rate,
    trace_format,
)
from workloads.model.errors import ScenarioError, TraceError
from workloads.model.records import TurnRecord

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, rows: list[object], name: str = "t.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def req(ts: int, n: int, ids: list[int], out: int = 8) -> dict[str, object]:
    return {"timestamp": ts, "input_length": n, "output_length": out, "hash_ids": ids}


def test_mooncake_lines_become_requests_in_order(tmp_path):
    path = write(tmp_path, [req(0, 1000, [1, 2]), "", req(5, 512, [1], out=3)])
    trace = load_mooncake(path)
    assert trace.requests == (
        MooncakeRequest(0, 1000, 8, (1, 2)),
        MooncakeRequest(5, 512, 3, (1,)),
    )
    assert not trace.truncated and len(trace.sha256) == 64


@pytest.mark.parametrize(
    ("rows", "words"),
    [
        (
            [{"timestamp": 0, "input_length": 10, "output_length": 1}],
            ["t.jsonl:1", "'hash_ids'", "missing"],
        ),
        (
            [req(0, 10, [1]), {"timestamp": 1, "output_length": 1, "hash_ids": [1]}],
            ["t.jsonl:2", "'input_length'", "missing"],
        ),
        ([req(0, 10, [1]), req("1", 10, [1])], ["t.jsonl:2", "'timestamp'", "integer"]),
        ([req(0, -5, [1])], ["t.jsonl:1", "'input_length'", "at least 1"]),
        ([req(9, 10, [1]), req(3, 10, [1])], ["t.jsonl:2", "'timestamp'", "back in time"]),
        ([req(0, 1025, [1, 2])], ["t.jsonl:1", "'hash_ids'", "ceil(1025/512) = 3"]),
        ([req(0, 10, ["a"])], ["t.jsonl:1", "'hash_ids'", "list of integers"]),
        ([req(0, 10, [1]), "{not json"], ["t.jsonl:2", "not a JSON object"]),
        (["[1, 2]"], ["t.jsonl:1", "not a JSON object"]),
        (["", "  "], ["t.jsonl", "no request"]),
    ],
)
def test_bad_mooncake_lines_name_the_file_line_and_field(tmp_path, rows, words):
    with pytest.raises(TraceError) as err:
        load_mooncake(write(tmp_path, rows))
    message = str(err.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_an_empty_or_too_large_file_is_refused_before_reading(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(TraceError, match=r"empty\.jsonl: the file is empty"):
        load_mooncake(empty)
    big = write(tmp_path, [req(0, 10, [1])] * 10)
    with pytest.raises(TraceError, match="over the limit of 100 bytes"):
        load_mooncake(big, max_bytes=100)
    assert issubclass(TraceError, ScenarioError)  # the CLI's exit 2


def test_limits_cut_the_trace_and_say_so(tmp_path):
    path = write(tmp_path, [req(i * 1000, 10, [i]) for i in range(10)])
    by_count = load_mooncake(path, max_requests=4)
    assert len(by_count.requests) == 4 and by_count.truncated
    assert by_count.limit == "max_requests = 4"
    by_time = load_mooncake(path, max_duration_s=2.5)
    assert [r.timestamp_ms for r in by_time.requests] == [0, 1000, 2000] and by_time.truncated
    assert not load_mooncake(path, max_requests=10).truncated


def test_ideal_cache_counts_leading_blocks_seen_before_capped_at_the_length():
    requests = [
        MooncakeRequest(0, 1200, 1, (1, 2, 3)),  # cold
        MooncakeRequest(1, 1100, 1, (1, 2, 9)),  # 1, 2 seen: 1024
        MooncakeRequest(2, 700, 1, (1, 2)),  # both seen, capped at 700
        MooncakeRequest(3, 1500, 1, (5, 1, 2)),  # first block new: nothing
        MooncakeRequest(4, 600, 1, (1, 3)),  # 1 and 3 both seen: 1024, capped at 600
    ]
    assert ideal_cached_tokens(requests) == [0, 1024, 700, 0, 600]
    total = 1200 + 1100 + 700 + 1500 + 600
    assert ideal_hit_rate(requests) == pytest.approx((1024 + 700 + 600) / total)
    assert ideal_hit_rate([]) is None


def test_ideal_cache_stops_at_the_first_unseen_block():
    requests = [MooncakeRequest(0, 1536, 1, (1, 2, 3)), MooncakeRequest(0, 1536, 1, (1, 7, 3))]
    assert ideal_cached_tokens(requests) == [0, 512]


def test_observed_hit_rate_is_token_weighted_over_valid_measured_records():
    def rec(prompt: int, cached: int | None, *, valid: bool = True, warmup: bool = False):
        return TurnRecord(
            repetition=0,
            warmup=warmup,
            session=0,
            turn=1,
            status="ok",
            valid=valid,
            prompt_tokens=prompt,
            cached_tokens=cached,
            configured_prior_tokens=0,
            started_ns=100,
        )

    records = [
        rec(1000, 500),
        rec(3000, 0),
        rec(100, 100, valid=False),
        rec(100, 100, warmup=True),
        rec(50, None),
    ]
    assert observed_hit_rate(records) == pytest.approx(500 / 4000)
    assert observed_hit_rate([rec(10, None)]) is None


def step(session, n, kind, appended=100, output=10, pause=1.0, **extra):
    return {
        "session": session,
        "step": n,
        "kind": kind,
        "appended_tokens": appended,
        "output_tokens": output,
        "pause_s": pause,
        **extra,
    }


def test_agent_trace_plans_accumulate_prior_tokens_and_reset_after_compaction(tmp_path):
    path = write(
        tmp_path,
        [
            step(0, 1, "human", 100, 10),
            step(0, 2, "tool", 200, 20),
            step(0, 3, "compaction", 30, 50),
            step(0, 4, "tool", 300, 5),
        ],
    )
    plan = load_agent_trace(path, opening_tokens=1000)[0]
    # after the compaction: the system message (the opening, by default), the summary (50)
    # and its message's framing (8), as draw_plan counts it and the runner sends it
    assert [s.prior_tokens for s in plan] == [1000, 1110, 1330, 1058]
    kept = load_agent_trace(path, opening_tokens=1000, system_tokens=600)[0]
    assert [s.prior_tokens for s in kept] == [1000, 1110, 1330, 658]
    assert [s.kind for s in plan] == ["human", "tool", "compaction", "tool"]
    assert plan[1].new_tokens == 200 and plan[1].output_tokens == 20 and plan[1].pause_s == 1.0


def test_sub_agents_nest_under_their_parent_step(tmp_path):
    path = write(
        tmp_path,
        [
            step(0, 1, "human"),
            step(0, 2, "tool"),
            step(5, 1, "subagent", parent=0, parent_step=2),
            step(5, 2, "tool"),
            step(4, 1, "subagent", parent=0, parent_step=2),
            step(6, 1, "subagent", parent=5, parent_step=2),
        ],
    )
    plans = load_agent_trace(path, opening_tokens=10)
    assert list(plans) == [0]
    children = plans[0][1].children
    assert [len(c) for c in children] == [1, 2]  # sessions 4 then 5
    assert children[1][1].children[0][0].kind == "subagent"  # session 6 under 5's step 2
    assert plans[0][0].children == ()


@pytest.mark.parametrize(
    ("rows", "words"),
    [
        ([step(0, 2, "human")], [":1", "'step'", "next step is 1"]),
        ([step(0, 1, "nap")], [":1", "'kind'", "human, tool, subagent, compaction"]),
        ([step(0, 1, "human", output=0)], [":1", "'output_tokens'", "at least 1"]),
        ([step(0, 1, "human", pause=-1)], [":1", "'pause_s'", "at least 0"]),
        ([step(0, 1, "human", appended="x")], [":1", "'appended_tokens'", "integer"]),
        ([step(0, 1, "subagent")], [":1", "'parent' is missing"]),
        (
            [step(0, 1, "human"), step(1, 1, "subagent", parent=0, parent_step=3)],
            [":2", "'parent_step' is 3", "has 1 steps"],
        ),
        ([step(1, 1, "subagent", parent=9, parent_step=1)], [":1", "'parent' is 9"]),
        (
            [
                step(1, 1, "subagent", parent=2, parent_step=1),
                step(2, 1, "subagent", parent=1, parent_step=1),
            ],
            ["cycle"],
        ),
    ],
)
def test_bad_agent_steps_name_the_file_line_and_field(tmp_path, rows, words):
    with pytest.raises(TraceError) as err:
        load_agent_trace(write(tmp_path, rows), opening_tokens=0)
    for word in words:
        assert word in str(err.value)


def test_format_is_told_by_the_first_line(tmp_path):
    assert trace_format(write(tmp_path, [req(0, 10, [1])], "a.jsonl")) == "mooncake"
    assert trace_format(write(tmp_path, [step(0, 1, "human")], "b.jsonl")) == "agent"
    with pytest.raises(TraceError, match=r"c\.jsonl:1: not a trace line"):
        trace_format(write(tmp_path, [{"x": 1}], "c.jsonl"))


def test_shipped_samples_are_what_the_script_writes_and_load():
    spec = importlib.util.spec_from_file_location(
        "make_sample_traces", ROOT / "scripts" / "make_sample_traces.py"
    )
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    for name, text in script.samples().items():
        assert (ROOT / "traces" / name).read_text(encoding="utf-8") == text, name
    trace = load_mooncake(ROOT / "traces" / "mooncake-sample.jsonl")
    assert 60 <= len(trace.requests) <= 120
    assert 30_000 <= trace.requests[-1].timestamp_ms <= 60_000
    assert 0.3 < (ideal_hit_rate(trace.requests) or 0) < 0.9  # shared prefixes, not all
    plans = load_agent_trace(ROOT / "traces" / "agent-sample.jsonl", opening_tokens=4096)
    kinds = {s.kind for plan in plans.values() for s in plan}
    assert {"human", "tool", "compaction"} <= kinds
    assert any(s.children for plan in plans.values() for s in plan)
