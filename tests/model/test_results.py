"""Result files: every stored format version loads, newer majors are refused in one line, a
newer minor's unknown fields are dropped with one warning naming them, the saved models'
fields are those recorded for the format version, and records.jsonl alone (its header)
rebuilds a run killed before result.json, with its summaries."""

from __future__ import annotations

import hashlib
import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import pydantic
import pytest
from pydantic.json_schema import models_json_schema

import workloads
from workloads.cli import main
from workloads.core.aggregate import summarized
from workloads.model import records, results, summary
from workloads.model.results import FORMAT_MINOR, FORMAT_VERSION, read_records_file

DATA = Path(__file__).parents[1] / "data"
STORED = sorted(p.name for p in DATA.iterdir() if (p / "result.json").exists())


def test_every_format_version_up_to_the_current_one_has_a_stored_result():
    versions = {
        json.loads((DATA / name / "result.json").read_text())["format_version"] for name in STORED
    }
    assert versions == set(range(1, FORMAT_VERSION + 1))


@pytest.mark.parametrize("name", STORED)
def test_each_stored_version_loads_with_its_records_and_summaries(name):
    result = workloads.load_result(DATA / name)
    written = json.loads((DATA / name / "result.json").read_text())
    assert result.format_version == written["format_version"]
    assert result.records and all(isinstance(r, workloads.TurnRecord) for r in result.records)
    assert result.summary.run.records == written["summary"]["run"]["records"]


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
    with pytest.raises(
        workloads.ResultFormatError,
        match=r"written by a newer workloads "
        rf"\(format {FORMAT_VERSION + 1}",
    ):
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
    full = workloads.load_result(killed)
    (killed / "result.json").unlink()
    lines = (killed / "records.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["kind"] == "window"  # killed before the window closed,
    lines = lines[:-1]  # and in the middle of writing the last record
    (killed / "records.jsonl").write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:40])

    rebuilt = workloads.load_result(killed)  # its summaries computed from the records
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


# -- the saved models' fields belong to their format version ---------------------------------

SCHEMAS = DATA / "format-schemas.json"
# What result.json and records.jsonl hold: their models, and every model inside them.
SAVED = (
    results.RunResult,
    results.RunHeader,
    results.RepetitionNonces,
    results.Window,
    records.TurnRecord,
)
# Defaults that follow the release, not the format.
RELEASED = {"format_version", "format_minor", "workloads_version"}


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:12]


def _plain(node: Any) -> Any:
    """A JSON schema without what does not change a file: titles and descriptions (field
    names and docstrings), and the defaults that follow the release."""
    if isinstance(node, list):
        return [_plain(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key in ("title", "description"):
            continue
        if key == "properties":
            out[key] = {
                name: _plain(
                    {k: v for k, v in field.items() if not (name in RELEASED and k == "default")}
                )
                for name, field in value.items()
            }
        else:
            out[key] = value if key in ("default", "const", "enum") else _plain(value)
    return out


def fingerprint(models: tuple[type[pydantic.BaseModel], ...] = SAVED) -> dict[str, Any]:
    """Per saved model (and every model inside one, by the name the JSON schema gives it): a
    digest of each field's schema (its type, default and whether it is required), and ``*``
    of the rest (whether extra fields are allowed, ...)."""
    _, schema = models_json_schema([(m, "serialization") for m in models])
    found: dict[str, Any] = {}
    for name, one in sorted(_plain(schema["$defs"]).items()):
        required = set(one.get("required", ()))
        rest = {k: v for k, v in one.items() if k not in ("properties", "required")}
        found[name] = {
            "*": _digest(rest),
            **{
                f: _digest([field, f in required]) for f, field in one.get("properties", {}).items()
            },
        }
    return found


def schema_changes(recorded: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """One line per model whose fields differ from ``recorded``, naming the fields."""
    out = []
    for name in sorted(recorded.keys() | now.keys()):
        before, after = recorded.get(name), now.get(name)
        if before is None or after is None:
            out.append(f"{name} was {'added' if before is None else 'removed'}")
            continue
        parts = [
            f"{what} {', '.join(sorted(fields))}"
            for what, fields in (
                ("added", after.keys() - before.keys()),
                ("removed", before.keys() - after.keys()),
                ("changed", {f for f in before.keys() & after.keys() if before[f] != after[f]}),
            )
            if fields
        ]
        if parts:
            out.append(f"fields of {name} changed ({'; '.join(parts)})".replace("*", "(model)"))
    return out


def current_entry() -> dict[str, Any]:
    return {"pydantic": pydantic.VERSION, "models": fingerprint()}


def test_the_saved_models_fields_are_those_recorded_for_the_format_version():
    recorded = json.loads(SCHEMAS.read_text())
    version = f"{FORMAT_VERSION}.{FORMAT_MINOR}"
    record = (
        f"record it: python tests/model/{Path(__file__).name} adds its entry to "
        f"{SCHEMAS.relative_to(DATA.parent.parent)}"
    )
    assert version in recorded, f"format {version} has no recorded schema; {record}"
    changes = schema_changes(recorded[version]["models"], fingerprint())
    pydantic_note = ""
    if recorded[version]["pydantic"] != pydantic.VERSION:
        pydantic_note = (
            f" (pydantic is {pydantic.VERSION}, the record was made with "
            f"{recorded[version]['pydantic']}: if workloads' models did not "
            "change, its JSON schemas did, and the record may be redone)"
        )
    assert not changes, (
        "\n".join(changes) + f"\nwith format {version} unchanged: bump FORMAT_MINOR (fields "
        "added with a default that older runs read as) or FORMAT_VERSION (anything else, with "
        "a loader) in workloads/model/results.py, add a history line above _LOADERS, and "
        f"{record}" + pydantic_note
    )
    assert max(recorded, key=lambda v: tuple(map(int, v.split(".")))) == version


def test_the_fingerprint_names_an_added_field_a_changed_one_and_a_nested_one():
    recorded = fingerprint()

    class TurnRecord(records.TurnRecord):
        queue_ns: int | None = None  # a new figure
        resends: float = 0  # retyped

    # A new figure of TurnSummary, which result.json holds in summary.turns and in each
    # cell's summary.turns (every model on the way is replaced, so each name stays one model)
    class TurnSummary(summary.TurnSummary):
        goodput: float | None = None

    class Summary(summary.Summary):
        turns: list[TurnSummary]  # type: ignore[assignment]

    class CellSummary(results.CellSummary):
        summary: Summary  # type: ignore[assignment]

    class RunResult(results.RunResult):
        summary: Summary  # type: ignore[assignment]
        cells: list[CellSummary] | None = None  # type: ignore[assignment]

    now = fingerprint(
        (RunResult, results.RunHeader, results.RepetitionNonces, results.Window, TurnRecord)
    )
    assert schema_changes(recorded, now) == [
        "fields of TurnRecord changed (added queue_ns; changed resends)",
        "fields of TurnSummary changed (added goodput)",
    ]
    assert schema_changes(recorded, fingerprint()) == []


# -- a newer minor: its fields are dropped and named -----------------------------------------


def newer_minor(where: Path) -> Path:
    """A copy of the stored format-5 sweep as a newer minor of the current format would write
    it (format 6 added only an optional field to 5): new fields at the top, nested in lists
    and in the scenario, in the header and records, and a new line kind."""
    shutil.copytree(DATA / "v5-sweep", where)
    data = json.loads((where / "result.json").read_text())
    data["format_version"] = FORMAT_VERSION
    data["format_minor"] = FORMAT_MINOR + 1
    data["admission"] = 12.5
    for turn in data["summary"]["turns"]:
        turn["admitted"] = 1.0
    data["cells"][1]["summary"]["run"]["queue_s"] = None
    data["scenario"]["pacing"]["burst"] = 3
    (where / "result.json").write_text(json.dumps(data))
    lines = []
    for line in (where / "records.jsonl").read_text().splitlines():
        item = json.loads(line)
        if item.get("kind") == "header":
            item["format_version"] = FORMAT_VERSION
            item["format_minor"] = FORMAT_MINOR + 1
            item["scenario"]["pacing"]["burst"] = 3
        elif "kind" not in item:
            item["queue_ns"] = 7
        lines.append(json.dumps(item))
    lines.insert(2, json.dumps({"kind": "telemetry", "gpu_util": 0.5}))
    (where / "records.jsonl").write_text("\n".join(lines) + "\n")
    return where


def test_a_newer_minor_loads_without_the_fields_it_added_and_one_warning_names_them(tmp_path):
    with pytest.warns(workloads.ResultFormatWarning) as caught:
        result = workloads.load_result(newer_minor(tmp_path / "newer"))
    assert len(caught) == 1
    message = str(caught[0].message)
    assert caught[0].filename == __file__  # it points at the caller's line
    assert f"(format {FORMAT_VERSION}.{FORMAT_MINOR + 1})" in message
    in_result, in_records = message.split("result.json: ")[1].split("; records.jsonl: ")
    assert set(in_result.split(", ")) == {
        "admission",
        "scenario.pacing.burst",
        "summary.turns[].admitted",
        "cells[].summary.run.queue_s",
    }
    assert set(in_records.split(". Upgrade")[0].split(", ")) == {
        "header.scenario.pacing.burst",
        'lines of kind "telemetry"',
        "record.queue_ns",
    }
    stored = workloads.load_result(DATA / "v5-sweep")
    # the stored file predates 6.3: its scenario reads tool_choice "auto"; the same data
    # marked newer keeps the default, "plan"
    assert stored.scenario.tool_choice == "auto" and result.scenario.tool_choice == "plan"
    same = {"format_version": True, "format_minor": True, "scenario": {"tool_choice"}}
    assert result.model_dump(exclude=same) == stored.model_dump(exclude=same)
    assert result.records == stored.records


def test_a_records_file_read_alone_warns_about_what_it_dropped(tmp_path):
    newer = newer_minor(tmp_path / "newer")
    with pytest.warns(workloads.ResultFormatWarning, match="record.queue_ns") as caught:
        found = read_records_file(newer / "records.jsonl")
    assert len(caught) == 1 and found.records == workloads.load_result(DATA / "v5-sweep").records
    (newer / "result.json").unlink()  # killed: rebuilt from records.jsonl, which says so
    with pytest.warns(workloads.ResultFormatWarning, match="records.jsonl: header") as caught:
        workloads.load_result(newer)
    assert len(caught) == 1


def test_results_of_every_stored_format_load_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in STORED:
            workloads.load_result(DATA / name)


def test_dropping_unknown_fields_does_not_hide_a_bad_value(tmp_path):
    newer = newer_minor(tmp_path / "newer")
    data = json.loads((newer / "result.json").read_text())
    data["summary"]["run"]["records"] = "many"
    (newer / "result.json").write_text(json.dumps(data))
    with pytest.raises(
        workloads.ResultFormatError,
        match=r"result.json: not a valid result: "
        r"summary\.run\.records: Input should be a valid integer",
    ) as raised:
        workloads.load_result(newer)
    assert "\n" not in str(raised.value)


def test_a_scenario_file_still_refuses_an_unknown_field(tmp_path):
    scenario = json.loads((DATA / "v5-sweep" / "result.json").read_text())["scenario"]
    scenario["pacing"]["burst"] = 3
    with pytest.raises(pydantic.ValidationError, match="burst"):
        workloads.Scenario.model_validate(scenario)


def test_show_names_the_dropped_fields_in_one_warning_line(tmp_path, capsys):
    assert main(["show", str(newer_minor(tmp_path / "newer")), "--format", "csv"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(lines) == 1 and "summary.turns[].admitted" in lines[0]


def test_a_format_4_result_reads_as_4_0_and_saves_as_the_current_format(tmp_path):
    old = workloads.load_result(DATA / "v4-agents")
    assert (old.format_version, old.format_minor) == (4, 0)
    old.save(tmp_path / "saved")
    found = read_records_file(tmp_path / "saved" / "records.jsonl")
    assert found.header is not None
    for saved in (workloads.load_result(tmp_path / "saved"), found.header):
        assert (saved.format_version, saved.format_minor) == (FORMAT_VERSION, FORMAT_MINOR)


# -- a killed run: its summaries from its records ---------------------------------------------


def as_saved_in_5_0(summary: Any) -> Any:
    """A summary dump without what formats 5.1, 5.2, 6, 6.2 and 6.5 added to it (the
    percentiles' bounds, the per-turn spec decoding counts, the cancelled turns, the first
    steps apart, the pause pressure and the decode overlap), which the stored 5.0 sweep
    could not save."""
    later = {
        "bounds",
        "spec_draft_tokens",
        "spec_accepted_tokens",
        "cancelled",
        "first_step",
        "pause_pressure",
        "decode_overlap",
        "streams_decoding",
    }
    if isinstance(summary, dict):
        return {k: as_saved_in_5_0(v) for k, v in summary.items() if k not in later}
    if isinstance(summary, list):
        return [as_saved_in_5_0(v) for v in summary]
    return summary


def test_a_killed_sweep_loads_with_the_summaries_its_run_saved(tmp_path):
    saved = json.loads((DATA / "v5-sweep" / "result.json").read_text())
    killed = tmp_path / "killed"
    shutil.copytree(DATA / "v5-sweep", killed)
    (killed / "result.json").unlink()
    rebuilt = workloads.load_result(killed)  # from records.jsonl alone
    assert not rebuilt.complete and rebuilt.summary.run.records > 0
    assert as_saved_in_5_0(rebuilt.summary.model_dump(mode="json")) == saved["summary"]
    assert rebuilt.cells is not None
    for cell, written in zip(rebuilt.cells, saved["cells"], strict=True):
        assert as_saved_in_5_0(cell.summary.model_dump(mode="json")) == written["summary"]
        assert cell.model_dump(mode="json")["generation_rate"] == written["generation_rate"]


def test_summarize_gives_each_cell_the_summary_its_run_saved():
    saved = json.loads((DATA / "v5-sweep" / "result.json").read_text())
    result = workloads.load_result(DATA / "v5-sweep")
    assert result.cells is not None and len(result.cells) == len(saved["cells"]) == 2
    for cell, written in zip(result.cells, saved["cells"], strict=True):
        mine = [r for r in result.records if r.cell == cell.cell]
        computed = workloads.summarize(mine, users=cell.concurrency)
        assert as_saved_in_5_0(computed.model_dump(mode="json")) == written["summary"]
        assert computed.run.records == len([r for r in mine if not r.warmup]) > 0


if __name__ == "__main__":  # record the current format's schema (never rewrite a recorded one)
    version = f"{FORMAT_VERSION}.{FORMAT_MINOR}"
    recorded = json.loads(SCHEMAS.read_text())
    if version in recorded:
        raise SystemExit(
            f"format {version} is recorded in {SCHEMAS} already: a change to the "
            "saved models needs a new format version, not a new record"
        )
    recorded[version] = current_entry()
    SCHEMAS.write_text(json.dumps(recorded, indent=1) + "\n")
    print(f"recorded format {version} in {SCHEMAS}")


def test_a_format_4_free_pacing_sum_of_streams_loads_as_streams_sum_not_aggregate():
    # Format 5: with free or arrivals pacing the Σ of the streams' rates is no aggregate.
    written = json.loads((DATA / "v4-agents" / "result.json").read_text())
    assert written["scenario"]["pacing"]["mode"] == "free"
    loaded = workloads.load_result(DATA / "v4-agents")  # the file's summaries, not recomputed
    for turn, old in zip(loaded.summary.turns, written["summary"]["turns"], strict=True):
        assert turn.aggregate_rate is None
        assert turn.streams_sum_rate is not None
        assert turn.streams_sum_rate.model_dump() == old["aggregate_rate"]
    assert loaded.summary.run.aggregate_rate is None
    assert loaded.summary.run.turn_aggregate_rate is None
    assert loaded.summary == summarized(loaded).summary  # as format 5 computes it
    lockstep = workloads.load_result(DATA / "v3-workers")  # lock-step: as written
    assert lockstep.summary.run.aggregate_rate is not None
    assert all(
        t.aggregate_rate is not None and t.streams_sum_rate is None for t in lockstep.summary.turns
    )


def test_a_format_5_replay_keeps_its_cache_state_and_older_results_have_none(tmp_path, capsys):
    replay = workloads.load_result(DATA / "v5-replay").replay
    assert replay is not None and replay.recorded == "runs/a" and replay.cache == "warm"
    assert replay.turn1 is not None and replay.recorded_turn1 is not None
    assert replay.turn1.prompt_tokens == replay.recorded_turn1.prompt_tokens
    assert all(
        workloads.load_result(DATA / name).replay is None
        for name in STORED
        if json.loads((DATA / name / "result.json").read_text())["format_version"] < 5
    )
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
