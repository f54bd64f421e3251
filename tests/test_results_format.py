"""Result files: every stored format version loads, newer ones are refused in one line, and
records.jsonl alone (its header) rebuilds the report of a run killed before result.json."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import workloads
from workloads.cli import main
from workloads.core.aggregate import summarized
from workloads.model.results import FORMAT_VERSION, read_records_file

DATA = Path(__file__).parent / "data"
STORED = sorted(p.name for p in DATA.iterdir() if (p / "result.json").exists())


def test_every_format_version_up_to_the_current_one_has_a_stored_result():
    versions = {json.loads((DATA / name / "result.json").read_text())["format_version"]
                for name in STORED}
    assert versions == set(range(1, FORMAT_VERSION + 1))


@pytest.mark.parametrize("name", STORED)
def test_each_stored_version_loads_with_its_records_and_summaries(name):
    result = workloads.load_result(DATA / name)
    written = json.loads((DATA / name / "result.json").read_text())
    assert result.format_version == written["format_version"]
    assert result.records and all(isinstance(r, workloads.TurnRecord) for r in result.records)
    assert summarized(result).summary.run.records == written["summary"]["run"]["records"]


def test_a_version_2_records_file_starts_with_the_run_header():
    found = read_records_file(DATA / "v2-small" / "records.jsonl")
    result = workloads.load_result(DATA / "v2-small")
    assert found.header is not None and found.header.format_version == 2
    assert found.header.scenario.model_dump() == result.scenario.model_dump()
    assert found.header.target.base_url == result.target.base_url
    assert found.nonces == result.nonces  # one line per repetition
    assert found.windows[0] == result.window
    assert found.records == result.records


def test_a_version_1_records_file_has_no_header_and_still_reads():
    found = read_records_file(DATA / "v1-small-a" / "records.jsonl")
    assert found.header is None and found.records


def test_a_result_of_a_newer_format_names_it_in_one_line(tmp_path, capsys):
    newer = tmp_path / "newer"
    shutil.copytree(DATA / "v2-small", newer)
    data = json.loads((newer / "result.json").read_text())
    data["format_version"] = FORMAT_VERSION + 1
    data["a_field_from_the_future"] = 1
    (newer / "result.json").write_text(json.dumps(data))
    with pytest.raises(workloads.ResultFormatError, match=r"written by a newer workloads "
                       rf"\(format {FORMAT_VERSION + 1}"):
        workloads.load_result(newer)
    assert main(["show", str(newer)]) == 2
    err = capsys.readouterr().err
    assert "newer workloads" in err and err.count("\n") == 1


def test_a_records_header_of_a_newer_format_is_refused_too(tmp_path):
    newer = tmp_path / "newer"
    shutil.copytree(DATA / "v2-small", newer)
    lines = (newer / "records.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    header["format_version"] = FORMAT_VERSION + 1
    (newer / "records.jsonl").write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    (newer / "result.json").unlink()
    with pytest.raises(workloads.ResultFormatError, match="written by a newer workloads"):
        workloads.load_result(newer)


def test_show_rebuilds_the_report_from_records_jsonl_alone(tmp_path, capsys):
    killed = tmp_path / "killed"
    shutil.copytree(DATA / "v2-small", killed)
    full = summarized(workloads.load_result(killed))
    (killed / "result.json").unlink()
    lines = (killed / "records.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["kind"] == "window"  # killed before the window closed,
    lines = lines[:-1]  # and in the middle of writing the last record
    (killed / "records.jsonl").write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:40])

    rebuilt = summarized(workloads.load_result(killed))
    assert not rebuilt.complete
    assert any("rebuilt from records.jsonl" in w for w in rebuilt.warnings)
    assert rebuilt.scenario.model_dump() == full.scenario.model_dump()
    assert rebuilt.target == full.target  # the identity's fingerprint from the records
    assert rebuilt.records == full.records[:-1]  # the torn last line is dropped
    assert rebuilt.summary.run.records == full.summary.run.records - 1
    assert main(["show", str(killed)]) == 0
    out = capsys.readouterr().out
    assert "Per turn" in out and "incomplete" in out


def test_a_format_1_directory_without_result_json_cannot_be_rebuilt(tmp_path):
    old = tmp_path / "old"
    shutil.copytree(DATA / "v1-small-a", old)
    (old / "result.json").unlink()
    with pytest.raises(workloads.ResultFormatError, match="no header line"):
        workloads.load_result(old)


def test_save_writes_records_with_their_header_where_there_are_none(tmp_path):
    result = workloads.load_result(DATA / "v1-small-a")
    result.save(tmp_path / "copy")
    found = read_records_file(tmp_path / "copy" / "records.jsonl")
    assert found.header is not None and found.header.format_version == FORMAT_VERSION
    assert workloads.load_result(tmp_path / "copy").format_version == FORMAT_VERSION
    assert found.header.scenario.model_dump() == result.scenario.model_dump()
    assert found.records == result.records and found.nonces == result.nonces


def test_runs_from_before_quiet_sizing_read_as_sized_exactly_inside_their_windows():
    # format 1 and 2 runs sized every turn with the target's tokenizer; the field's default
    # ("estimate") describes runs made since
    for name in STORED:
        version = json.loads((DATA / name / "result.json").read_text())["format_version"]
        expected = "exact" if version < 3 else "estimate"
        assert workloads.load_result(DATA / name).scenario.sizing_during_window == expected
    found = read_records_file(DATA / "v2-small" / "records.jsonl")
    assert found.header is not None and found.header.scenario.sizing_during_window == "exact"


def test_a_format_5_replay_keeps_its_cache_state_and_older_results_have_none(tmp_path,
                                                                            capsys):
    replay = workloads.load_result(DATA / "v5-replay").replay
    assert replay is not None and replay.recorded == "runs/a" and replay.cache == "warm"
    assert replay.turn1 is not None and replay.recorded_turn1 is not None
    assert replay.turn1.prompt_tokens == replay.recorded_turn1.prompt_tokens
    assert all(workloads.load_result(DATA / name).replay is None for name in STORED
               if json.loads((DATA / name / "result.json").read_text())["format_version"] < 5)
    # A replay killed before result.json: its header names the recorded run, and the cache
    # state is judged again from the records.
    killed = tmp_path / "killed"
    shutil.copytree(DATA / "v5-replay", killed)
    (killed / "result.json").unlink()
    rebuilt = workloads.load_result(killed)
    assert rebuilt.replay is not None and rebuilt.replay.turn1 is None
    capsys.readouterr()
    assert main(["show", str(killed)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "replay of runs/a [recorded] on a WARM CACHE: turn 1 cached 672 of 700" in out
