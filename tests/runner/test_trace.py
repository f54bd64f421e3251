"""run --trace for real: the packaged Mooncake sample replayed against the embedded
simulated server, and bad traces refused with one line before --out exists."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fakes import TIMELESS_ENGINE, sim_args
from workloads.cli import main
from workloads.core.traces import ideal_hit_rate, load_mooncake

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "traces" / "mooncake-sample.jsonl"


@pytest.mark.slow
def test_the_sample_trace_replays_with_observed_beside_ideal_hit_rate(tmp_path, capsys):
    out = tmp_path / "run"
    # time_scale 0.01: the sample's 44 s of trace time in about 0.4 s, on a simulated
    # engine with no modelled time to speak of (its KV is ample: the observed hit rate is
    # the prefix sharing the replay kept, not a matter of speed)
    code = main(
        [
            "run",
            "--trace",
            str(SAMPLE),
            "--set",
            "pacing.time_scale=0.01",
            "--set",
            "gate=off",
            "--out",
            str(out),
            "--quiet",
            "--no-plots",
            *sim_args(TIMELESS_ENGINE),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    trace = load_mooncake(SAMPLE)
    result = json.loads((out / "result.json").read_text())
    t = result["trace"]
    assert t["file"] == SAMPLE.name and t["requests"] == len(trace.requests)
    assert t["time_scale"] == 0.01
    assert t["ideal_hit_rate"] == pytest.approx(ideal_hit_rate(trace.requests))
    assert t["observed_hit_rate"] is not None and t["observed_hit_rate"] > 0.2
    assert t["observed_hit_rate"] <= t["ideal_hit_rate"] + 0.02
    lines = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert lines[0]["kind"] == "header" and lines[0]["trace"]["sha256"] == t["sha256"]
    records = sorted((x for x in lines if "kind" not in x), key=lambda r: r["session"])
    assert len(records) == len(trace.requests)
    for record, request in zip(records, trace.requests, strict=True):
        assert record["valid"], record
        assert record["completion_tokens"] == request.output_length
        assert record["output_tokens"] == request.output_length
        assert record["configured_prompt_tokens"] == request.input_length
        # the server's count: the blocks, plus the nonce line and the chat template
        assert abs(record["prompt_tokens"] - request.input_length) < 64
    assert "prefix-cache hit rate: observed" in printed and "ideal" in printed
    assert "prefix-cache hit rate: observed" in (out / "report.html").read_text()
    assert main(["show", str(out)]) == 0
    assert "trace mooncake-sample.jsonl" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            '{"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [1]}\n',
            ["bad.jsonl:1", "'hash_ids'"],
        ),
        (
            '{"timestamp": 5, "input_length": 10, "output_length": 4, "hash_ids": [1]}\n'
            '{"timestamp": 1, "input_length": 10, "output_length": 4, "hash_ids": [1]}\n',
            ["bad.jsonl:2", "'timestamp'"],
        ),
        ("", ["bad.jsonl", "empty"]),
        ("not json\n", ["bad.jsonl:1", "not a JSON object"]),
        (
            '{"session": 0, "step": 1, "kind": "human", "appended_tokens": -1, '
            '"output_tokens": 1, "pause_s": 0}\n',
            ["bad.jsonl:1", "appended_tokens"],
        ),
        (
            '{"session": 0, "step": 1, "kind": "human", "appended_tokens": 1, "output_tokens": 1, '
            '"pause_s": 0}\n{"session": 0, "step": 3, "kind": "tool", "appended_tokens": 1, '
            '"output_tokens": 1, "pause_s": 0}\n',
            ["bad.jsonl:2", "step"],
        ),
    ],
)
def test_a_bad_trace_is_one_line_exit_2_and_no_output_directory(tmp_path, capsys, text, words):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(text)
    out = tmp_path / "never"
    assert main(["run", "--trace", str(bad), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: ")
    for word in words:
        assert word in err
    assert not out.exists()


def test_a_missing_trace_names_the_packaged_ones(tmp_path, capsys):
    assert (
        main(
            [
                "run",
                "--trace",
                str(tmp_path / "nope.jsonl"),
                "--quiet",
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    assert "mooncake-sample" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
