"""Agent sessions played for real against the embedded simulated server on 127.0.0.1: drawn
sizes, tool calls on the wire, compaction, sub-agents, lock-step, and agent traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import workloads
from fakes import TIMELESS_ENGINE, sim_args
from workloads.cli import main
from workloads.core.agent import child_session, draw_plan
from workloads.core.corpus import load_corpus
from workloads.model.transcripts import read_transcripts

TRACE = Path(__file__).resolve().parents[2] / "traces" / "agent-sample.jsonl"

# Small enough for a few seconds on two shared cores: a 4K system prefix and 5-8K openings
# (the shipped 16K and 20-32K cost tokenizing, not coverage), compaction at 9K, short
# replies and summaries, pauses 20,000 times faster, and a simulated engine with no
# modelled time to speak of (no test here reads a speed); the sizes stay distributions.
SHORT = [
    "shared_prefix_tokens=4096",
    'opening_tokens={kind="quantiles", points=[[0.0, 5000], [0.5, 6000], [1.0, 8000]]}',
    "output_tokens.median=60",
    "agent.subagents.share=0.5",
    "agent.subagents.steps=2",
    "pacing.time_scale=0.00005",
    "gate=off",
    "fleet=none",  # repetitions of fixed sessions (tests/runner/test_fleet.py plays fleets)
]
COMPACT_AT = 9000
SMALL = [
    *SHORT,
    "users=2",
    "turns=8",
    "repetitions.warmup=1",
    "repetitions.measured=1",
    f"agent.compaction.at_tokens={COMPACT_AT}",
    "output_tokens.max=400",
    "agent.compaction.summary_tokens=500",
]
SIM = TIMELESS_ENGINE


def read_records(out: Path) -> list[dict]:
    lines = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    return [line for line in lines if "kind" not in line]


@pytest.fixture(scope="module")
def agents_run(tmp_path_factory):
    scenario = workloads.load_scenario("coding-agents").with_overrides(SMALL)
    out = tmp_path_factory.mktemp("agents")
    result = workloads.run(scenario, out_dir=out, sim=SIM)
    return scenario, result, out, read_records(out)


def test_the_run_completes_and_every_turn_is_valid(agents_run):
    _, result, _, records = agents_run
    assert result.complete
    assert records and all(r["status"] == "ok" and r["valid"] for r in records)


def test_sizes_are_drawn_not_fixed(agents_run):
    _, _, _, records = agents_run
    outputs = {r["output_tokens"] for r in records if r["step_kind"] != "compaction"}
    tool_results = {r["new_tokens"] for r in records if r["step_kind"] == "tool"}
    assert len(outputs) >= 5 and len(tool_results) >= 5
    assert all(8 <= n <= 400 for n in outputs)  # output_tokens' min and the max set here
    assert all(16 <= n <= 10_000 for n in tool_results)


def test_every_reply_has_exactly_its_drawn_length(agents_run):
    _, _, _, records = agents_run
    for r in records:
        assert r["completion_tokens"] == r["output_tokens"], r


def test_step_kinds_cover_human_and_tool(agents_run):
    _, _, _, records = agents_run
    kinds = {r["step_kind"] for r in records}
    assert {"human", "tool"} <= kinds <= {"human", "tool", "subagent", "compaction"}
    for r in records:
        assert (r["step_kind"] == "subagent") == (r["parent_session"] is not None)


def test_tool_calls_are_answered_by_tool_messages_of_their_ids(agents_run):
    _, _, out, records = agents_run
    transcripts = read_transcripts(out / "transcripts.jsonl")
    assert len(transcripts) == len(records)
    answered = 0
    for t in transcripts.values():
        messages = t.messages
        for i, m in enumerate(messages):
            if m["role"] != "assistant" or not m.get("tool_calls"):
                continue
            ids = [c["id"] for c in m["tool_calls"]]
            following = messages[i + 1 : i + 1 + len(ids)]
            assert [f["role"] for f in following] == ["tool"] * len(ids), t.turn
            assert [f["tool_call_id"] for f in following] == ids
            answered += 1
    assert answered > 0
    assert any(r["tool_calls"] for r in records)  # the server called tools


def test_a_compaction_leaves_only_the_system_prefix_cached(agents_run):
    scenario, _, _, records = agents_run
    by_turn = {(r["repetition"], r["session"], r["turn"]): r for r in records}
    compactions = [r for r in records if r["step_kind"] == "compaction"]
    checked = 0
    for c in compactions:
        after = by_turn.get((c["repetition"], c["session"], c["turn"] + 1))
        if after is None:
            continue  # the session's last step
        checked += 1
        assert c["cached_tokens"] > COMPACT_AT - 1024  # the whole history was reused for it
        # after it, the history is gone: only the system message (prompt and tools,
        # shared_prefix_tokens of it) and its template can be reused
        assert after["cached_tokens"] < c["cached_tokens"]
        assert after["cached_tokens"] <= scenario.shared_prefix_tokens + 1024
        assert after["configured_prior_tokens"] < c["configured_prior_tokens"]
    assert checked >= 1


def test_sizing_counts_the_tool_schemas_the_request_sends(agents_run):
    _, _, _, records = agents_run
    tokenized = [r for r in records if r["tokenized_prompt_tokens"] is not None]
    assert tokenized
    # the simulator's /tokenize renders a chat exactly as its chat endpoint does
    assert [r["prompt_tokens"] - r["tokenized_prompt_tokens"] for r in tokenized] == [0] * len(
        tokenized
    )


def test_subagents_are_sessions_of_their_own_with_a_parent(agents_run):
    scenario, _, _, records = agents_run
    kids = [r for r in records if r["parent_session"] is not None]
    assert kids
    for r in kids:
        assert r["session"] >= scenario.users
        assert r["step_kind"] == "subagent" and r["turn"] <= 2  # agent.subagents.steps = 2
        index = r["session"] - child_session(scenario.users, r["parent_session"], 0)
        assert 0 <= index < 64
    parents = {(r["repetition"], r["session"]) for r in records if r["parent_session"] is None}
    assert {(r["repetition"], r["parent_session"]) for r in kids} <= parents


def test_lockstep_sessions_play_their_drawn_plans(tmp_path):
    scenario = workloads.load_scenario("coding-agents").with_overrides(
        [
            *SHORT,
            "users=2",
            "turns=4",
            "repetitions.warmup=0",
            "repetitions.measured=1",
            'pacing.mode="lockstep"',
            "output_tokens.max=300",
        ]
    )
    result = workloads.run(scenario, out_dir=tmp_path / "run", sim=SIM)
    assert result.complete
    records = read_records(tmp_path / "run")
    played = {(r["session"], r["turn"]): r for r in records}
    assert len(played) == len(records)
    corpus = load_corpus(scenario.content.corpus)
    seed = scenario.content.seed
    expected = 0
    for session in range(scenario.users):
        # the runner's generators: (content seed, purpose, cell, repetition, session)
        plan = draw_plan(
            scenario,
            corpus.rng(seed, "sizes", 0, 0, session),
            corpus.rng(seed, "pacing", 0, 0, session),
        )
        kids = [c for step in plan for c in step.children]
        for number, child in [(session, plan)] + [
            (child_session(scenario.users, session, k), c) for k, c in enumerate(kids)
        ]:
            for step in child:
                r = played[(number, step.turn)]
                assert (r["step_kind"], r["new_tokens"], r["output_tokens"]) == (
                    step.kind,
                    step.new_tokens,
                    step.output_tokens,
                )
                assert r["completion_tokens"] == step.output_tokens and r["valid"]
                expected += 1
    assert len(records) == expected


def trace_steps() -> dict[int, list[dict]]:
    steps: dict[int, list[dict]] = {}
    for line in TRACE.read_text().splitlines():
        if line.strip():
            item = json.loads(line)
            steps.setdefault(item["session"], []).append(item)
    return steps


@pytest.mark.slow
def test_run_trace_plays_an_agent_trace_step_by_step(tmp_path, capsys):
    out = tmp_path / "trace"
    SCALE = 0.002  # the trace's 93 s of pauses in 0.19 s
    code = main(
        [
            "run",
            "--trace",
            str(TRACE),
            "--set",
            f"pacing.time_scale={SCALE}",
            "--set",
            'gate="off"',
            "--out",
            str(out),
            "--quiet",
            "--no-plots",  # the test reads the records
            # the file's quicker simulated engine
            *sim_args(SIM),
        ]
    )
    capsys.readouterr()
    assert code == 0
    records = [r for r in read_records(out) if not r["warmup"]]
    steps = trace_steps()
    top = sorted(s for s, items in steps.items() if "parent" not in items[0])
    users = len(top)
    number = {sid: i for i, sid in enumerate(top)}  # trace sessions in sorted id order
    spawned: dict[int, int] = {}
    for sid in sorted(steps):
        first = steps[sid][0]
        if "parent" in first:  # a sub-agent: its parent's next child number
            parent = number[first["parent"]]
            number[sid] = child_session(users, parent, spawned.get(parent, 0))
            spawned[parent] = spawned.get(parent, 0) + 1
    repetitions = {r["repetition"] for r in records}
    for rep in repetitions:
        played = {(r["session"], r["turn"]): r for r in records if r["repetition"] == rep}
        assert len(played) == sum(len(items) for items in steps.values())
        for sid, items in steps.items():
            for item in items:
                r = played[(number[sid], item["step"])]
                assert r["output_tokens"] == item["output_tokens"]
                assert r["completion_tokens"] == item["output_tokens"]
                assert r["step_kind"] == item["kind"]
                assert r["new_tokens"] == item["appended_tokens"]
                assert r["pause_s"] == pytest.approx(item["pause_s"] * SCALE)
                if "parent" in item:
                    assert r["parent_session"] == number[item["parent"]]
                else:
                    assert r["parent_session"] is None


@pytest.mark.parametrize(
    "name", ["agent-sample.jsonl", "weka-sample.json", "tracelab-sample.jsonl"]
)
def test_every_traced_step_is_sent_at_its_configured_prompt(tmp_path, capsys, name):
    # The audit's case: after a compaction and at a sub-agent's first step the runner sent
    # the opening's user part (3.6-7.6K tokens) less than the loader configured; a trace
    # whose context shrank is sent at the trace's size.
    out = tmp_path / "trace"
    trace = Path(__file__).resolve().parents[2] / "traces" / name
    code = main(
        [
            "run",
            "--trace",
            str(trace),
            *("--set", "pacing.time_scale=0.002", "--set", "repetitions.warmup=0"),
            *("--set", "repetitions.measured=1", "--gate", "off"),
            # sized with the simulator's /tokenize: the check is the plan, not quiet sizing
            *("--set", 'sizing_during_window="exact"'),
            *("--out", str(out), "--quiet", "--no-plots", *sim_args(SIM)),
        ]
    )
    assert code == 0, capsys.readouterr().out
    records = [r for r in read_records(out) if not r["warmup"]]
    kinds = {r["step_kind"] for r in records}
    assert "subagent" in kinds or name == "tracelab-sample.jsonl"
    for r in records:
        if r["step_kind"] == "compaction":
            continue  # sends the scenario's instruction, not the trace's appended_tokens
        wanted = r["configured_prompt_tokens"]
        assert abs(r["prompt_tokens"] - wanted) <= 0.05 * wanted, (r["step_kind"], r["turn"])
    report = capsys.readouterr().out
    if name != "agent-sample.jsonl":
        assert f"agent trace {name}" in report and "prompts vs the trace's input sizes" in report


def test_a_set_the_trace_decides_is_refused_and_others_apply(tmp_path, capsys):
    trace = Path(__file__).resolve().parents[2] / "traces" / "aiperf-sample.jsonl"
    code = main(["run", "--trace", str(trace), "--set", "users=2", "--out", str(tmp_path / "a")])
    assert code == 2 and "sets users" in capsys.readouterr().err
    assert not (tmp_path / "a").exists()
    out = tmp_path / "b"
    code = main(
        [
            "run",
            "--trace",
            str(trace),
            *("--set", "repetitions.warmup=0", "--set", "repetitions.measured=1"),
            *("--set", "sampling.temperature=0.5", "--gate", "off"),
            *("--out", str(out), "--quiet", "--no-plots", *sim_args(SIM)),
        ]
    )
    assert code == 0, capsys.readouterr().out
    saved = json.loads((out / "result.json").read_text())["scenario"]
    assert saved["sampling"]["temperature"] == 0.5  # applied to coding-agents, not dropped
    assert saved["repetitions"]["measured"] == 1


def test_a_trace_of_one_token_replies_still_gets_a_headline(tmp_path, capsys):
    # A one-token reply has no post-first rate, so no per-user rate: the headline said
    # "no valid measured turns (0 failed, 0 invalid)" of a run whose turns were all valid.
    trace = tmp_path / "one.jsonl"
    rows = [{"session_id": f"s{i}", "input_length": 900, "output_length": 1} for i in range(2)]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code = main(
        [
            "run",
            "--trace",
            str(trace),
            *("--set", "repetitions.warmup=0", "--set", "repetitions.measured=1"),
            *("--gate", "off", "--out", str(tmp_path / "out"), "--no-plots", *sim_args(SIM)),
        ]
    )
    report = capsys.readouterr().out
    assert code == 0, report
    assert "no valid measured turns" not in report
    assert "per-user rate not measured" in report and "2/2 valid" in report
