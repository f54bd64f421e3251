"""Exit codes scripts can trust, and one clear line (no traceback) for every bad input: the CLI
driven in process (``main([...])``) against the real simulated server."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from fakes import TINY_RUN
from workloads.cli import main

DATA = Path(__file__).parents[1] / "data"
TINY = [*TINY_RUN, "--quiet"]


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("error: ")
    return err


def test_a_run_whose_turns_all_fail_exits_3_and_prints_the_failures_by_kind(tmp_path, capsys):
    code = main(
        [
            "run",
            "five-user-coding",
            "--out",
            str(tmp_path / "r"),
            *TINY,
            "--sim",
            "faults.rate_500=1.0",
        ]
    )
    assert code == 3
    out = capsys.readouterr().out
    assert "Failed measured turns: 4 of 4" in out
    assert "HTTP 500" in out  # the first message of the kind, per turn
    rows = [line for line in out.splitlines() if "│ http_5xx" in line]
    assert [row.split("│")[1].strip() for row in rows] == ["1", "2"]
    assert "100.0% of measured turns failed" in out
    assert main(["show", str(tmp_path / "r")]) == 0  # show reports; it does not judge
    assert "Failed measured turns: 4 of 4" in capsys.readouterr().out


def test_failures_within_max_error_rate_exit_0(tmp_path, capsys):
    code = main(
        [
            "run",
            "five-user-coding",
            "--out",
            str(tmp_path / "r"),
            *TINY,
            "--sim",
            "faults.rate_early_stop=1.0",
            "--sim",
            "faults.after_tokens=2",
            "--max-error-rate",
            "1",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "invalid" in out and "finish_reason 'stop'" in out


def test_a_clean_run_exits_0_and_prints_no_failure_table(tmp_path, capsys):
    assert main(["run", "five-user-coding", "--out", str(tmp_path / "r"), *TINY]) == 0
    assert "Failed measured turns" not in capsys.readouterr().out


def test_a_model_the_target_does_not_serve_exits_4_listing_what_it_offers(
    simulated_server, tmp_path, capsys
):
    code = main(
        [
            "run",
            "five-user-coding",
            "--target",
            simulated_server.base_url,
            "--model",
            "no-such-model",
            "--out",
            str(tmp_path / "r"),
            *TINY,
        ]
    )
    assert code == 4
    err = one_line(capsys)
    assert "'no-such-model' is not served" in err and simulated_server.model in err
    assert not (tmp_path / "r" / "records.jsonl").exists()


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("127.0.0.1:8000/v1", "has no scheme; write it in full, e.g. http://127.0.0.1:8000/v1"),
        ("ftp://127.0.0.1/v1", "is not HTTP (ftp://)"),
        ("http:///v1", "names no host"),
    ],
)
def test_a_target_url_that_is_not_http_is_one_line(tmp_path, capsys, url, says):
    code = main(["run", "five-user-coding", "--target", url, "--out", str(tmp_path / "r")])
    assert code == 2
    assert says in one_line(capsys)
    assert main(["probe", "--target", url]) == 2
    assert says in one_line(capsys)


def test_sim_with_target_is_refused(simulated_server, tmp_path, capsys):
    code = main(
        [
            "run",
            "five-user-coding",
            "--target",
            simulated_server.base_url,
            "--sim",
            "spec_tokens=2",
            "--out",
            str(tmp_path / "r"),
        ]
    )
    assert code == 2
    assert "--sim" in one_line(capsys)


def test_out_naming_an_existing_file_is_one_line(tmp_path, capsys):
    existing = tmp_path / "a-file"
    existing.write_text("not a directory")
    assert main(["run", "five-user-coding", "--out", str(existing), *TINY]) == 2
    assert "is a file, not a directory" in one_line(capsys)
    assert existing.read_text() == "not a directory"


def test_out_that_cannot_be_written_is_one_line(tmp_path, capsys):
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    assert main(["run", "five-user-coding", "--out", str(blocker / "sub"), *TINY]) == 2
    assert f"is inside {blocker}, a file, not a directory" in one_line(capsys)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_out_in_a_read_only_directory_is_one_line(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        assert main(["run", "five-user-coding", "--out", str(locked / "r"), *TINY]) == 6
        assert "cannot write to --out" in one_line(capsys)
    finally:
        locked.chmod(0o700)


def test_an_existing_result_is_never_overwritten_unless_asked(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["run", "five-user-coding", "--out", str(out), *TINY]) == 0
    first = (out / "result.json").read_text()
    capsys.readouterr()
    assert main(["run", "five-user-coding", "--out", str(out), *TINY]) == 2
    assert "--overwrite" in one_line(capsys)
    assert (out / "result.json").read_text() == first
    assert main(["run", "five-user-coding", "--out", str(out), *TINY, "--overwrite"]) == 0
    assert (out / "result.json").read_text() != first
    lines = (out / "records.jsonl").read_text().splitlines()
    assert sum('"kind":"header"' in line for line in lines) == 1  # replaced, not appended


def test_serve_on_a_port_in_use_is_one_line(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--port", str(port)]) == 2
    assert f"port {port} on 127.0.0.1 is in use" in one_line(capsys)


def test_compare_force_of_arms_without_a_common_cell_is_one_line(capsys):
    assert main(["compare", str(DATA / "v1-small-a"), str(DATA / "v1-sweep"), "--force"]) == 2
    assert "no cell (concurrency × prior tokens) in common" in one_line(capsys)


@pytest.mark.parametrize("flags", [["--max-error-rate", "5"], ["--grace", "-1"]])
def test_out_of_range_safety_flags_are_one_line(tmp_path, capsys, flags):
    assert main(["run", "five-user-coding", "--out", str(tmp_path / "r"), *flags]) == 2
    one_line(capsys)


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--ca-bundle", "{tmp}/none.pem"], "--ca-bundle {tmp}/none.pem: no such file"),
        (["--ca-bundle", "{tmp}/bad.pem"], "not a PEM file of CA certificates"),
        (["--proxy", "socks5://127.0.0.1:1080"], "a socks5:// proxy is not supported"),
    ],
)
@pytest.mark.parametrize("command", ["run", "probe", "capacity", "fit"])
def test_a_missing_ca_bundle_or_bad_proxy_is_bad_input(tmp_path, capsys, flags, says, command):
    (tmp_path / "bad.pem").write_text("not a certificate\n")
    flags = [flag.replace("{tmp}", str(tmp_path)) for flag in flags]
    scenario = {
        "probe": [],
        "fit": ["--out", str(tmp_path / "r.toml")],
    }.get(command, ["five-user-coding", "--out", str(tmp_path / "r")])
    slo = ["--slo", "ttft_s=2"] if command == "capacity" else []
    target = ["--target", "https://127.0.0.1:9/v1"]
    assert main([command, *scenario, *slo, *target, *flags]) == 2
    assert says.replace("{tmp}", str(tmp_path)) in one_line(capsys)
    assert not (tmp_path / "r").exists() and not (tmp_path / "r.toml").exists()


def test_a_bad_proxy_in_the_environment_is_bad_input(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "socks5://127.0.0.1:1080")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert main(["probe", "--target", "https://127.0.0.1:9/v1"]) == 2
    assert "HTTPS_PROXY: proxy socks5://127.0.0.1:1080" in one_line(capsys)
