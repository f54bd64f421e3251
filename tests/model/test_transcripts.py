"""Transcripts beside records.jsonl: content-addressed, one line per turn, hashes in records;
and run --replay, which re-sends them so compare can say matched, and says whether the target
still held the recorded prompts (a warm cache)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

import workloads
from workloads.cli import main
from workloads.model.errors import ResultFormatError
from workloads.model.transcripts import (
    TRANSCRIPTS_FILE,
    TranscriptWriter,
    prompt_hash,
    read_transcripts,
    text_hash,
)
from workloads.report import console as report
from workloads.report.compare import compare
from workloads.report.verdicts import verdict_lines
from workloads.servers.simulated import SimulatedServer

SMALL = [
    "--set",
    "users=2",
    "--set",
    "turns=3",
    "--set",
    "opening_tokens=600",
    "--set",
    "turn_tokens=120",
    "--set",
    "output_tokens=24",
    "--set",
    "repetitions.measured=1",
    "--set",
    "sampling.temperature=0",
]


def run(out: Path, *extra: str) -> workloads.RunResult:
    assert main(["run", *extra, "--out", str(out), "--quiet", "--no-plots"]) == 0
    return workloads.load_result(out)


def test_every_turn_is_in_the_transcripts_and_each_message_is_stored_once(tmp_path):
    result = run(tmp_path / "a", "five-user-coding", *SMALL)
    lines = [json.loads(x) for x in (tmp_path / "a" / TRANSCRIPTS_FILE).read_text().splitlines()]
    stored = [x["sha256"] for x in lines if "message" in x]
    assert len(stored) == len(set(stored))  # content-addressed: never twice
    turns = read_transcripts(tmp_path / "a" / TRANSCRIPTS_FILE)
    assert len(turns) == len(result.records) == 2 * 3 * 2
    for r in result.records:
        t = turns[(r.cell, r.repetition, r.session, r.turn)]
        assert r.prompt_sha256 == t.prompt_sha256 == prompt_hash(t.messages)
        assert t.completion is not None and r.completion_sha256 == text_hash(t.completion)
        if r.turn > 1:  # the previous reply, verbatim, is in this turn's history
            before = turns[(r.cell, r.repetition, r.session, r.turn - 1)]
            assert t.messages[: len(before.messages) + 1] == [
                *before.messages,
                {"role": "assistant", "content": before.completion},
            ]
    # Turn 3's history is not written again: a turn line names its messages by hash.
    turn_lines = [x["turn"] for x in lines if "turn" in x]
    assert max(len(json.dumps(x)) for x in turn_lines) < 1000


def test_no_transcripts_writes_none_and_records_keep_their_hashes(tmp_path):
    result = run(tmp_path / "b", "five-user-coding", *SMALL, "--no-transcripts")
    assert not (tmp_path / "b" / TRANSCRIPTS_FILE).exists()
    assert all(r.prompt_sha256 and r.completion_sha256 for r in result.records)


def test_a_torn_last_line_is_skipped_and_a_missing_message_is_an_error(tmp_path):
    path = tmp_path / TRANSCRIPTS_FILE
    with TranscriptWriter(path) as writer:
        for turn in (1, 2):
            writer.write(
                cell=0,
                repetition=0,
                warmup=False,
                session=0,
                turn=turn,
                messages=[{"role": "user", "content": f"q{turn}"}],
                completion="a",
            )
    path.write_text(path.read_text() + '{"turn": {"cell"')
    assert sorted(read_transcripts(path)) == [(0, 0, 0, 1), (0, 0, 0, 2)]
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[1:3]) + "\n")  # the first message line is gone
    with pytest.raises(ResultFormatError, match="not stored before it"):
        read_transcripts(path)


def test_replay_sends_byte_identical_prompts_so_compare_says_matched(tmp_path, capsys):
    original = run(tmp_path / "a", "five-user-coding", *SMALL)
    first = run(tmp_path / "r1", "--replay", str(tmp_path / "a"))
    second = run(tmp_path / "r2", "--replay", str(tmp_path / "a"))

    def key(r: workloads.TurnRecord) -> tuple[int, int, int]:
        return (r.repetition, r.session, r.turn)

    a, b, c = (sorted(x.records, key=key) for x in (original, first, second))
    assert [r.prompt_sha256 for r in b] == [r.prompt_sha256 for r in a]
    # Replay against the same target twice: identical prompt token counts.
    assert [r.prompt_tokens for r in b] == [r.prompt_tokens for r in c]
    assert [r.tokenized_prompt_tokens for r in b] == [r.tokenized_prompt_tokens for r in c]
    assert compare(original, first).match == "matched"
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "r1"), str(tmp_path / "r2")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "· matched · byte-identical prompts (6 prompt hashes equal)" in out
    assert "identity of gate outputs: 12/12 byte-identical" in out
    assert "identity of measured completions: 6/6 byte-identical" in out
    assert "likelihood (mean NLL of the fixed text): A 2.0850 · B 2.0850 · Δ +0.0000" in out


def test_replay_keeps_the_recorded_replies_not_the_new_servers(tmp_path):
    run(tmp_path / "a", "five-user-coding", *SMALL)
    # Another server seed: the new server answers differently, the prompts stay the same.
    replayed = run(tmp_path / "r", "--replay", str(tmp_path / "a"), "--sim", "seed=9")
    original = workloads.load_result(tmp_path / "a")

    def by_turn(result: workloads.RunResult, field: str) -> list[str | None]:
        records = sorted(result.records, key=lambda r: (r.repetition, r.session, r.turn))
        return [getattr(r, field) for r in records]

    assert by_turn(replayed, "prompt_sha256") == by_turn(original, "prompt_sha256")
    assert by_turn(replayed, "completion_sha256") != by_turn(original, "completion_sha256")


def test_replay_refuses_set_and_a_run_without_transcripts(tmp_path, capsys):
    run(tmp_path / "a", "five-user-coding", *SMALL, "--no-transcripts")
    assert main(["run", "--replay", str(tmp_path / "a"), "--set", "users=1"]) == 2
    assert "give no scenario name and no --set" in capsys.readouterr().err
    assert main(["run", "--replay", str(tmp_path / "a"), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "no transcripts" in err and err.count("\n") == 1


@pytest.fixture
def server() -> Iterator[SimulatedServer]:
    with SimulatedServer() as running:
        yield running


def percentages(result: workloads.RunResult) -> list[float]:
    """Every "N%" the console report prints."""
    console = Console(width=200, record=True, color_system=None)
    console.print(report.render(result))
    return [float(x.replace(",", "")) for x in re.findall(r"([\d,.]+)%", console.export_text())]


def test_a_replay_on_the_target_that_recorded_it_says_its_cache_is_warm(tmp_path, server, capsys):
    overrides = [x for x in SMALL if x != "--set"]
    scenario = workloads.load_scenario("five-user-coding").with_overrides(overrides)
    recorded = workloads.run(scenario, server.target, out_dir=tmp_path / "a", label="recorded")
    # Against the same server, which still holds the recorded prompts; then a fresh one.
    warm = workloads.run(
        scenario, server.target, out_dir=tmp_path / "warm", replay=tmp_path / "a", label="warm"
    )
    cold = workloads.run(scenario, out_dir=tmp_path / "cold", replay=tmp_path / "a")
    assert recorded.replay is None and warm.replay is not None and cold.replay is not None
    assert warm.replay.cache == "warm" and cold.replay.cache == "cold"
    before = warm.replay.recorded_turn1
    assert before is not None and before == cold.replay.recorded_turn1
    assert before.cached_tokens is not None and before.hit_rate is not None
    assert before.hit_rate < 0.2  # fresh nonces: the recorded run computed its turn 1
    assert warm.replay.turn1 is not None and warm.replay.turn1.hit_rate is not None
    assert warm.replay.turn1.hit_rate > 0.9
    assert workloads.load_result(tmp_path / "warm").replay == warm.replay  # the result says so
    # The replay's shareable prefix is its whole prompt: no share above 100 %, warm or cold.
    # (Worked out against this server's own history, turns 2 and 3 read 114 % and 112 %: the
    # cache held the recorded turn's whole prompt, new content included.)
    for result in (warm, cold):
        valid = [r for r in result.records if r.valid]
        assert valid and all(
            r.shareable_tokens == r.prompt_tokens and r.shareable_exact for r in valid
        )
        assert all((r.cached_tokens or 0) <= (r.shareable_tokens or 0) for r in valid)
        assert all(
            t.cache_effectiveness is not None and t.cache_effectiveness <= 1
            for t in result.summary.turns
        )
        assert max(percentages(result)) <= 100
    assert warm.summary.turns[0].cache_effectiveness > 0.9  # turn 1 found itself cached
    # The report states it.
    text = " ".join(" ".join(line for line, _ in verdict_lines(warm)).split())
    assert "on a WARM CACHE: turn 1 cached" in text and "the recorded run's 0 of" in text
    cold_line = verdict_lines(cold)[0][0]
    assert cold_line.startswith(f"replay of {tmp_path / 'a'} [recorded] on a cold cache")
    # compare marks the pair, unless the cache is the variable under test.
    assert compare(recorded, warm).headline == "matched prompts, warm cache"
    assert compare(recorded, cold).headline == "matched"
    declared = compare(recorded, warm, variable="cache")
    assert declared.headline == "matched" and not declared.forced_over
    assert declared.variable_values is not None
    assert declared.variable_values[0].startswith("as run (turn 1 cached ")
    assert declared.variable_values[1].startswith("warm (turn 1 cached ")
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "warm")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "A = recorded, B = warm · matched prompts, warm cache · byte-identical" in out
    assert "warm cache: B is a replay on a warm cache: turn 1 cached" in out


def test_a_cold_sampled_replay_is_not_said_to_lose_its_replies_to_retokenizing(tmp_path):
    # Its whole prompts are shareable, and a fresh target has seen none of the recorded
    # replies: shareable − cached is a reply and more per turn, which is not the re-tokenized
    # sampled reply the sizing warning is about.
    sampled = [x for x in SMALL if x not in ("--set", "sampling.temperature=0")]
    scenario = workloads.load_scenario("five-user-coding").with_overrides(sampled)
    assert scenario.sampling.temperature
    workloads.run(scenario, out_dir=tmp_path / "a")
    cold = workloads.run(scenario, out_dir=tmp_path / "cold", replay=tmp_path / "a")
    assert cold.replay is not None and cold.replay.cache == "cold"
    gaps = [
        (r.shareable_tokens or 0) - (r.cached_tokens or 0)
        for r in cold.records
        if r.valid and r.turn > 1 and not r.warmup
    ]
    assert gaps and min(gaps) > 24  # more than a reply went uncached, every turn
    assert not any("reads low by about one reply" in w for w in cold.warnings)


SWEEP = [
    "concurrency-sweep",
    "--set",
    "concurrency=[1, 3, 2]",
    "--set",
    "turns=2",
    "--set",
    "opening_tokens=600",
    "--set",
    "turn_tokens=120",
    "--set",
    "output_tokens=24",
    "--set",
    "repetitions.measured=1",
    "--set",
    "sampling.temperature=0",
    "--set",
    "gate=off",  # what is replayed is the measured turns (and their warm-ups)
]


@pytest.mark.slow
def test_a_replayed_sweep_sends_every_cells_recorded_prompts_cell_by_cell(tmp_path, capsys):
    """A sweep (C1, C3, C2: not in order, so a pairing by sorted load would show) replayed:
    every cell's turns carry the byte-identical prompts its recorded cell sent (its
    transcripts), its cells come in the recorded order with the recorded loads, and compare
    pairs each cell with its recorded self."""
    original = run(tmp_path / "a", *SWEEP)
    replayed = run(tmp_path / "r", "--replay", str(tmp_path / "a"), "--sim", "seed=9")
    recorded = read_transcripts(tmp_path / "a" / TRANSCRIPTS_FILE)
    sent = read_transcripts(tmp_path / "r" / TRANSCRIPTS_FILE)
    assert original.cells is not None and replayed.cells is not None
    assert (
        [(c.cell, c.concurrency) for c in replayed.cells]
        == [(c.cell, c.concurrency) for c in original.cells]
        == [(0, 1), (1, 3), (2, 2)]
    )
    # Every turn of every cell, warm-up included: (1 + 3 + 2) sessions x 2 turns x 2 reps.
    assert sorted(sent) == sorted(recorded) and len(sent) == 6 * 2 * 2
    for key, transcript in recorded.items():
        assert sent[key].messages == transcript.messages, key
        assert sent[key].prompt_sha256 == transcript.prompt_sha256
    by_key = {(r.cell, r.repetition, r.session, r.turn): r for r in original.records}
    assert len(replayed.records) == len(original.records) == len(recorded)
    for r in replayed.records:
        assert r.prompt_sha256 == by_key[(r.cell, r.repetition, r.session, r.turn)].prompt_sha256
    # The new server answered differently: the replay kept the recorded replies all the same.
    assert any(
        r.completion_sha256 != by_key[(r.cell, r.repetition, r.session, r.turn)].completion_sha256
        for r in replayed.records
    )
    comparison = compare(original, replayed)
    assert comparison.match == "matched"
    assert comparison.hashed_prompts == sum(not r.warmup for r in original.records) == 12
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    for load in ("C1", "C3", "C2"):
        assert f"{load} · " in out, out
    assert " vs C" not in out  # each cell against the same load, not a neighbour
