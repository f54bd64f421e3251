"""``--help`` tells the truth: every command has a line in the top-level help and a paragraph
in its own; the files ``run --help`` and ``capacity --help`` name are the files they write,
and the exit codes they list are codes they return. The commands run in process against the
embedded simulated server, small (the overrides below), so the help is held to what the code
does, not to a copy of its text."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import threading
from pathlib import Path

import pytest

from fakes import turn_lines
from workloads.cli import build_parser, main
from workloads.cli.help import EXIT_CRASH, exit_codes

SMALL = [
    "users=2",
    "turns=2",
    "opening_tokens=300",
    "turn_tokens=50",
    "output_tokens=8",
    "repetitions.warmup=0",
    "repetitions.measured=1",
]


def sets(*items: str) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


def help_of(capsys: pytest.CaptureFixture[str], *command: str) -> str:
    with pytest.raises(SystemExit) as done:
        main([*command, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def flat(text: str) -> str:
    """``text`` with every run of whitespace one space: argparse wraps to the terminal."""
    return " ".join(text.split())


def subcommands() -> argparse._SubParsersAction:  # type: ignore[type-arg]
    parser = build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def test_every_command_has_a_line_in_the_help_and_a_paragraph_in_its_own(capsys):
    top = flat(help_of(capsys))
    sub = subcommands()
    lines = {action.dest: action.help for action in sub._choices_actions}
    assert set(lines) == {
        "run",
        "capacity",
        "fit",
        "predict",
        "list",
        "show",
        "compare",
        "probe",
        "serve",
    }
    for name, line in lines.items():
        assert line and flat(line) in top, name
        own = flat(help_of(capsys, name))
        paragraph = flat(sub.choices[name].description or "")
        assert len(paragraph) > 80 and paragraph in own, name


def test_list_and_scenarios_are_one_command(capsys):
    assert main(["list"]) == 0
    listed = capsys.readouterr().out
    assert main(["scenarios"]) == 0
    assert capsys.readouterr().out == listed
    import workloads

    for name in workloads.list_scenarios():
        assert name in listed


def files_named(text: str) -> set[str]:
    """The file names a help text lists in its ``files in --out DIR`` section."""
    section = text[text.index("files in --out DIR") :]
    return set(re.findall(r"[\w-]+\.(?:jsonl|json|html|png)", section))


def files_written(out: Path) -> set[str]:
    """Every file under ``out`` by name; those under plots/ (and points/) are checked there."""
    return {p.name for p in out.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_run_help_names_every_file_a_run_writes_and_only_those(tmp_path, capsys):
    pytest.importorskip("matplotlib")  # the plots extra: without it no plots/ is written
    text = flat(help_of(capsys, "run"))
    named = files_named(text)
    runs = {
        # every default but --no-plots: records, transcripts, result and report.html, no plots/
        "lockstep": ["five-user-coding", *sets(*SMALL), "--no-plots"],
        # one run draws every plot: a sweep adds cache.png, drawn sizes add context.png and
        # sizes.png (outputs capped, pauses compressed); --no-transcripts leaves
        # transcripts.jsonl out
        "agents-sweep": [
            "coding-agents",
            *sets(
                "users=2",
                "turns=3",
                "fleet=none",
                "opening_tokens=300",
                "shared_prefix_tokens=100",
                "output_tokens.max=32",
                "pacing.time_scale=0.0001",
                "repetitions.warmup=0",
                "repetitions.measured=1",
                "concurrency=[1,2]",
                "gate=off",
            ),
            "--no-transcripts",
        ],
    }
    written: dict[str, set[str]] = {}
    for name, args in runs.items():
        out = tmp_path / name
        assert main(["run", *args, "--out", str(out), "--quiet"]) == 0, name
        written[name] = files_written(out)
        assert written[name] <= named, f"{name} wrote files run --help does not name"
        in_plots = (
            {p.name for p in (out / "plots").glob("*")} if (out / "plots").exists() else set()
        )
        assert all(n.endswith(".png") for n in in_plots)
    capsys.readouterr()
    assert set().union(*written.values()) == named  # every file named is written by some run
    assert "transcripts.jsonl" not in written["agents-sweep"]
    assert {"cache.png", "context.png", "sizes.png"} <= written["agents-sweep"]
    assert written["lockstep"] == {
        "records.jsonl",
        "transcripts.jsonl",
        "result.json",
        "report.html",
    }
    assert "plots/" in text and "--no-transcripts" in text and "--no-plots" in text
    # what the help says of records.jsonl's lines holds: a header, nonces and window lines
    kinds = [
        json.loads(line).get("kind")
        for line in (tmp_path / "lockstep" / "records.jsonl").read_text().splitlines()
    ]
    assert {"header", "nonces", "window"} <= set(kinds) and None in kinds
    assert all(k in text for k in ('"kind": "nonces"', '"kind": "window"', "header line"))


def codes_listed(text: str) -> list[int]:
    section = text[text.index("exit codes:") : text.index("files in --out DIR")]
    return [int(code) for code in re.findall(r"^  (\d+) +\S", section, re.M)]


def signal_once_recording(out: Path, signum: int) -> threading.Thread:
    """A thread that sends ``signum`` to this process once a TurnRecord line is in a
    records.jsonl under ``out`` (the run's signal handlers are in place by then), bounded
    at 120 s."""
    recorded = threading.Event()

    def has_a_turn() -> bool:
        for path in out.rglob("records.jsonl"):
            try:
                if turn_lines(path.parent):  # a half-written last line is skipped
                    return True
            except FileNotFoundError:  # a run that never started removes its empty file
                continue
        return False

    def watch() -> None:
        for _ in range(12000):
            if has_a_turn():
                recorded.set()
                os.kill(os.getpid(), signum)
                return
            recorded.wait(0.01)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


# Long replies on the fast profile (a turn streams for about a second), so a signal lands
# while turns are in flight.
LONG = ["turns=3", "output_tokens=400", "gate=off"]


def small_run(out: Path, *extra: str, scenario: str = "five-user-coding") -> int:
    """``run`` of a small five-user-coding into ``out``, with ``extra`` flags and no plots
    (drawing them is most of a small run's time; no exit code depends on them): its exit
    code."""
    return main(
        ["run", scenario, "--out", str(out), *sets(*SMALL), "--quiet", "--no-plots", *extra]
    )


@pytest.mark.slow
def test_each_exit_code_run_help_lists_is_one_run_returns(tmp_path, capsys, simulated_server):
    listed = codes_listed(help_of(capsys, "run"))
    assert listed == exit_codes("run")
    target = ["--target", simulated_server.base_url]
    returned = {
        small_run(tmp_path / "ok"),
        small_run(tmp_path / "bad", scenario="no-such-scenario"),
        small_run(tmp_path / "failed", "--sim", "faults.rate_500=1.0", "--gate", "off"),
        small_run(tmp_path / "target", *target, "--model", "no-such-model"),
        small_run(tmp_path / "invalid", "--gate", "required", "--sim", "faults.rate_corrupt=1"),
    }
    (tmp_path / "unwritable" / "report.html").mkdir(parents=True)  # it cannot be written
    returned.add(small_run(tmp_path / "unwritable", "--gate", "off"))
    for signum in (signal.SIGINT, signal.SIGTERM):
        where = tmp_path / f"signalled-{signum}"
        watcher = signal_once_recording(where, signum)
        returned.add(small_run(where, *sets(*LONG), "--grace", "0"))
        watcher.join()
    capsys.readouterr()
    # 1 is Python's own status for an uncaught exception: listed for what it means, never
    # returned on purpose, so no run here returns it.
    assert EXIT_CRASH in listed
    assert returned == set(listed) - {EXIT_CRASH}, sorted(returned)


def small_search(out: Path, *extra: str) -> int:
    """``capacity`` of a small five-user-coding at C1 only, 3 repetitions, into ``out``."""
    search = ["--slo", "ttft_s=60", "--goal", "50", "--start", "1", "--max-load", "1"]
    search += ["--repetitions", "3", "--max-repetitions", "3", "--out", str(out)]
    return main(["capacity", "five-user-coding", *search, *sets(*SMALL), *extra])


@pytest.mark.slow
def test_capacity_help_names_its_files_and_codes_and_they_hold(tmp_path, capsys, simulated_server):
    pytest.importorskip("matplotlib")  # the plots extra: capacity.png
    text = help_of(capsys, "capacity")
    listed = codes_listed(text)
    assert listed == exit_codes("capacity")
    out = tmp_path / "cap"
    returned = {small_search(out)}
    written = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    expected = {"capacity.json", "capacity.png"}
    expected |= {"points/c1-1/records.jsonl", "points/c1-1/result.json"}
    assert written == expected
    assert {Path(p).name for p in written} == files_named(flat(text))
    assert "points/cLOAD-N/" in text
    returned.add(main(["capacity", "five-user-coding", "--slo", "ttft=2", "--out", str(out)]))
    target = ["--target", simulated_server.base_url, "--model", "no-such-model"]
    returned.add(small_search(tmp_path / "target", *target))
    (tmp_path / "unwritable" / "capacity.png").mkdir(parents=True)  # it cannot be written
    returned.add(small_search(tmp_path / "unwritable"))
    for signum in (signal.SIGINT, signal.SIGTERM):
        where = tmp_path / f"signalled-{signum}"
        watcher = signal_once_recording(where, signum)
        returned.add(small_search(where, *sets(*LONG), "--no-plots"))
        watcher.join()
        assert (where / "capacity.json").exists()  # what was measured is saved
    capsys.readouterr()
    assert EXIT_CRASH in listed
    assert returned == set(listed) - {EXIT_CRASH}, sorted(returned)


def test_probe_exits_as_its_help_says(capsys, simulated_server):
    import socket

    text = flat(help_of(capsys, "probe"))
    assert "Exit 0 whenever the probe ran" in text and "4 when the target does not" in text
    assert main(["probe", "--target", simulated_server.base_url]) == 0
    printed = capsys.readouterr().out  # piped: no line padded with trailing spaces
    assert "  model " in printed and "  streaming " in printed
    assert [line for line in printed.splitlines() if line != line.rstrip()] == []
    with socket.socket() as s:  # a port nothing listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
        assert main(["probe", "--target", closed]) == 4
    assert main(["probe", "--target", "127.0.0.1:8000/v1"]) == 2
    capsys.readouterr()
