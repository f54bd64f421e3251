"""Transcripts beside records.jsonl: content-addressed, one line per turn, hashes in records;
and run --replay, which re-sends them so compare can say matched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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
from workloads.report.compare import compare

SMALL = ["--set", "users=2", "--set", "turns=3", "--set", "opening_tokens=600",
         "--set", "turn_tokens=120", "--set", "output_tokens=24",
         "--set", "repetitions.measured=1", "--set", "sampling.temperature=0"]


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
                *before.messages, {"role": "assistant", "content": before.completion}]
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
            writer.write(cell=0, repetition=0, warmup=False, session=0, turn=turn,
                         messages=[{"role": "user", "content": f"q{turn}"}], completion="a")
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
