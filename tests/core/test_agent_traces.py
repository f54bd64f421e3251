"""The published agent corpora (core/agent_traces.py) read from files written to their
schemas: the shipped samples and hand-made bad lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workloads.core.agent_traces import any_format, load_published
from workloads.model.errors import TraceError

ROOT = Path(__file__).resolve().parents[2]


def test_each_format_is_recognised_from_its_first_object():
    names = {
        "weka-sample.json": "weka",
        "tracelab-sample.jsonl": "tracelab",
        "aiperf-sample.jsonl": "aiperf",
        "agent-sample.jsonl": "agent",
        "mooncake-sample.jsonl": "mooncake",
    }
    for name, kind in names.items():
        assert any_format(ROOT / "traces" / name) == kind


def test_a_weka_trace_nests_its_sub_agent_under_the_next_request_and_shrinks_once():
    trace = load_published(ROOT / "traces" / "weka-sample.json")
    (session,) = trace.sessions
    plan = session.plan
    doc = json.loads((ROOT / "traces" / "weka-sample.json").read_text())
    inputs = [r["in"] for r in doc["requests"] if r.get("type") != "subagent"]
    assert [s.prior_tokens + s.new_tokens for s in plan] == inputs  # whole prompts kept
    assert plan[0].prior_tokens == doc["system_tokens"] + doc["tool_tokens"]
    (child,) = plan[4].children
    assert [s.kind for s in child] == ["subagent"] * 3 and plan[4].pause_s == 0.0
    running = [a.prior_tokens + a.new_tokens + a.output_tokens for a in plan[:-1]]
    shrunk = [b.turn for a, b in zip(running, plan[1:], strict=True) if b.prior_tokens < a]
    assert shrunk == [6]
    assert dict(trace.models)["claude-haiku-4-5-20251001"] == 4
    assert 0.5 < (trace.ideal_hit_rate or 0) < 1.0 and trace.block_tokens == 64


def test_tracelab_rounds_become_sessions_at_their_arrival_times():
    trace = load_published(ROOT / "traces" / "tracelab-sample.jsonl")
    assert [round(s.plan[0].pause_s, 3) for s in trace.sessions] == [0.0, 3.0, 7.0]
    assert trace.recorded_hit_rate is not None and trace.ideal_hit_rate is None
    kinds = [s.kind for s in trace.sessions[0].plan]
    assert kinds == ["human", "tool", "tool", "tool", "human"]


def test_aiperf_rows_become_turns_of_their_session():
    trace = load_published(ROOT / "traces" / "aiperf-sample.jsonl")
    assert [len(s.plan) for s in trace.sessions] == [3, 3, 3]
    assert [s.plan[0].pause_s for s in trace.sessions] == [0.0, 2.0, 4.0]
    assert trace.ideal_hit_rate is not None and trace.block_tokens == 512


@pytest.mark.parametrize(
    ("name", "text", "said"),
    [
        (
            "w.json",
            '{"id": "x", "block_size": 64, "tool_tokens": 1, "system_tokens": 1, '
            '"requests": [{"t": 0, "in": "many", "out": 3, "hash_ids": []}]}',
            "w.json:1: requests[0]: field 'in' must be an integer",
        ),
        (
            "t.jsonl",
            '{"session_id": "a", "round_index": 0, "input_tokens_total": 10, '
            '"prefix_tokens": 0, "output_tokens": 1}\n'
            '{"session_id": "a", "round_index": 1, "input_tokens_total": 10, '
            '"prefix_tokens": 11, "output_tokens": 1}\n',
            "t.jsonl:2: field 'prefix_tokens' is 11",
        ),
        (
            "a.jsonl",
            '{"session_id": "a", "input_length": 600, "output_length": 2, "hash_ids": [1]}\n',
            "a.jsonl:1: field 'hash_ids' has 1 ids",
        ),
    ],
)
def test_a_bad_line_is_one_error_naming_file_line_and_field(tmp_path, name, text, said):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TraceError) as err:
        load_published(path)
    assert str(err.value).startswith(str(tmp_path / said))
    assert "\n" not in str(err.value)
