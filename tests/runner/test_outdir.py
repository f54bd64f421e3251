"""The run directory (runner/outdir.py) and writing into it: one run per directory, even for
runs started at once; ``show`` refuses a records file two runs wrote into; a write that
fails (a full disk: /dev/full, or a file-size limit in a child process) names the file,
keeps every whole line written before and leaves no partial file; a run that fails to
start leaves no folder; a typo in --sim or --set is one line before anything is made."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import workloads
from fakes import TINY_RUN, FakeChatClient
from workloads.cli import main
from workloads.core.load import load_result
from workloads.model.errors import (
    OutputError,
    OutputExistsError,
    ResultFormatError,
    ScenarioError,
)
from workloads.model.records import RecordWriter
from workloads.runner.outdir import claim_out_dir, new_run_dir

SRC = Path(workloads.__file__).parents[1]
TINY = [*TINY_RUN, "--quiet"]
needs_dev_full = pytest.mark.skipif(
    not os.path.exists("/dev/full"), reason="no /dev/full (it fails every write: ENOSPC)"
)


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("error: ")
    return err


def at_once(count: int, attempt) -> list[object]:
    """``attempt()`` in ``count`` threads released together; what each returned or
    raised."""
    start = threading.Barrier(count)
    outcomes: list[object] = [None] * count

    def one(i: int) -> None:
        start.wait(timeout=60)
        try:
            outcomes[i] = attempt()
        except Exception as err:  # the outcome under test
            outcomes[i] = err

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return outcomes


# --- claiming ---------------------------------------------------------------------------


def test_runs_started_in_the_same_second_get_a_directory_each(tmp_path):
    base = tmp_path / "runs" / "five-user-coding-20261201-120000"
    made = at_once(8, lambda: new_run_dir(base).path)
    assert all(isinstance(p, Path) for p in made), made
    assert len(set(made)) == 8
    assert sorted(p.name for p in made) == sorted(
        [base.name] + [f"{base.name}-{n}" for n in range(2, 9)]
    )
    assert all(p.is_dir() and not any(p.iterdir()) for p in made)


@pytest.mark.parametrize("overwrite", [False, True])
def test_only_one_of_concurrent_claims_of_one_out_gets_it(tmp_path, overwrite):
    out = tmp_path / "r"
    attempted = threading.Semaphore(0)
    release = threading.Event()

    def claim() -> str:
        try:
            with claim_out_dir(out, overwrite=overwrite):
                attempted.release()
                assert release.wait(timeout=120)
                return "claimed"
        except OutputExistsError:
            attempted.release()
            raise

    results: list[object] = []
    runner = threading.Thread(target=lambda: results.extend(at_once(6, claim)))
    runner.start()
    for _ in range(6):
        assert attempted.acquire(timeout=120)
    release.set()
    runner.join(timeout=120)
    assert results.count("claimed") == 1, results
    refusals = [r for r in results if isinstance(r, OutputExistsError)]
    assert len(refusals) == 5
    assert all(isinstance(r, FileExistsError) for r in refusals)  # what callers caught before


def test_a_claim_that_loses_the_race_never_removes_the_winners_directory(tmp_path):
    """Six claims of one new directory, many times over: the claim that made the directory
    may lose the lock, and must not remove the directory before the winner has created
    records.jsonl in it (it did: 4 races in 300 then had no winner at all)."""
    for i in range(60):  # bounded; each race takes milliseconds
        out = tmp_path / f"r{i}"
        answered = threading.Semaphore(0)

        def claim(out: Path = out, answered: threading.Semaphore = answered) -> str:
            try:
                with claim_out_dir(out):
                    for _ in range(5):  # hold it until the other five have answered
                        assert answered.acquire(timeout=60)
                    return "claimed"
            except OutputError:
                answered.release()
                raise

        results = at_once(6, claim)
        assert results.count("claimed") == 1, (i, results)
        assert all(isinstance(r, OutputExistsError) for r in results if r != "claimed"), results


def test_a_run_in_another_process_holds_its_out_until_it_ends(tmp_path):
    out = tmp_path / "r"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path\n"
            "from workloads.runner.outdir import claim_out_dir\n"
            "with claim_out_dir(Path(sys.argv[1])):\n"
            "    print('claimed', flush=True)\n"
            "    sys.stdin.read()\n",
            str(out),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "claimed\n"
        with (
            pytest.raises(OutputExistsError, match="being written by another run"),
            claim_out_dir(out, overwrite=True),
        ):
            pass
        assert (out / "records.jsonl").exists()  # the holder's, untouched by --overwrite
    finally:
        holder.communicate(input="", timeout=120)
    with claim_out_dir(out, overwrite=True):  # ended: --overwrite may now replace it
        pass


def test_an_out_that_holds_a_killed_runs_records_is_refused(tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    (out / "records.jsonl").write_text('{"kind":"header"}\n')
    with (
        pytest.raises(OutputExistsError, match=r"records\.jsonl exists.*overwrite=True"),
        claim_out_dir(out),
    ):
        pass
    assert (out / "records.jsonl").read_text() == '{"kind":"header"}\n'


def test_library_errors_name_arguments_and_the_cli_each_flag_once(tmp_path, capsys):
    fake = FakeChatClient(lambda body: (100, "ok " * 30))
    scenario = workloads.load_scenario("five-user-coding").with_overrides(TINY_RUN[1::2])
    out, blocker = tmp_path / "r", tmp_path / "blocker"
    blocker.write_text("")
    workloads.run(scenario, client=fake, out_dir=out)
    messages = []
    for where in (out, blocker):
        with pytest.raises(OutputExistsError) as caught:
            workloads.run(scenario, client=fake, out_dir=where)
        messages.append(str(caught.value))
    for saved in ("result", "capacity"):
        with pytest.raises(OutputExistsError) as caught:
            if saved == "result":
                workloads.load_result(out).save(out)
            else:
                (tmp_path / "c").mkdir()
                (tmp_path / "c" / "capacity.json").write_text("{}")
                workloads.capacity(scenario, out_dir=tmp_path / "c", slo="ttft_s=1")
        messages.append(str(caught.value))
    for message in messages:  # a library caller's words: no command-line flag
        assert "--" not in message, message
    assert "overwrite=True" in messages[0] and f"out_dir={str(blocker)!r}" in messages[1]
    capsys.readouterr()
    assert main(["run", "five-user-coding", "--out", str(out), *TINY]) == 2
    line = one_line(capsys)
    assert line.count("--overwrite") == 1 and "overwrite=True" not in line, line
    assert "choose another --out, or pass --overwrite" in line


# --- show refuses two runs in one file ----------------------------------------------------


def test_show_refuses_a_records_file_two_runs_wrote_naming_both(tmp_path, tiny_scenario, capsys):
    fake = FakeChatClient(lambda body: (100, "ok " * 30))
    a, b = tmp_path / "a", tmp_path / "b"
    first = workloads.run(tiny_scenario, client=fake, out_dir=a)
    second = workloads.run(tiny_scenario, client=fake, out_dir=b)
    shared = tmp_path / "shared"
    shared.mkdir()
    lines_a = (a / "records.jsonl").read_text().splitlines(keepends=True)
    lines_b = (b / "records.jsonl").read_text().splitlines(keepends=True)
    # As two runs appending to one file wrote it: their lines interleaved.
    mixed = [lines_a[0], lines_b[0], *lines_a[1:], *lines_b[1:]]
    (shared / "records.jsonl").write_text("".join(mixed))
    for with_result in (False, True):
        if with_result:
            shutil.copy(a / "result.json", shared / "result.json")
        with pytest.raises(ResultFormatError) as caught:
            load_result(shared)
        message = str(caught.value)
        assert "holds two runs" in message
        assert "line 1 (started " in message and "line 2 (started " in message
        assert main(["show", str(shared)]) == 2
        assert "holds two runs" in one_line(capsys)
    assert first.created_unix != second.created_unix


# --- a write that fails ----------------------------------------------------------------------


@needs_dev_full
def test_a_full_disk_names_the_records_file(tmp_path):
    path = tmp_path / "records.jsonl"
    path.symlink_to("/dev/full")
    with RecordWriter(path) as writer:
        with pytest.raises(OutputError) as caught:
            writer.write_line('{"kind":"header"}')
        assert caught.value.errno == errno.ENOSPC
        assert caught.value.path == str(path)
        assert str(caught.value) == f"cannot write {path}: No space left on device (ENOSPC)"
        writer.write_line('{"kind":"nonces"}')  # a failed writer writes nothing more
    assert writer.failure is caught.value


def test_a_write_cut_short_leaves_the_file_at_its_last_whole_line(tmp_path):
    # A file-size limit (RLIMIT_FSIZE) makes the kernel write part of a line and then
    # refuse (EFBIG), as a disk that fills up mid-write does. Process-wide, hence a child.
    path = tmp_path / "records.jsonl"
    script = (
        "import resource, sys\n"
        "from pathlib import Path\n"
        "from workloads.model.records import RecordWriter\n"
        "from workloads.model.errors import OutputError\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (100, resource.RLIM_INFINITY))\n"
        "with RecordWriter(Path(sys.argv[1])) as w:\n"
        "    try:\n"
        "        for i in range(10):\n"
        '            w.write_line(\'{"line": %d, "pad": "%s"}\' % (i, \'x\' * 12))\n'
        "    except OutputError as err:\n"
        "        print(err.errno, err)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{errno.EFBIG} cannot write {path}: File too large")
    text = path.read_text()
    assert text.endswith("\n")
    lines = [json.loads(line) for line in text.splitlines()]
    assert [line["line"] for line in lines] == list(range(len(lines)))
    assert 0 < len(text) <= 100 and len(text) + len(text.splitlines()[0]) + 1 > 100


@needs_dev_full
def test_a_failed_save_leaves_no_tmp_and_the_old_result_intact(tmp_path, tiny_scenario):
    out = tmp_path / "r"
    result = workloads.run(
        tiny_scenario, client=FakeChatClient(lambda body: (100, "ok")), out_dir=out
    )
    before = (out / "result.json").read_text()
    (out / "result.json.tmp").symlink_to("/dev/full")
    with pytest.raises(OutputError) as caught:
        result.save(out, overwrite=True)
    assert caught.value.errno == errno.ENOSPC
    assert str(out / "result.json") in str(caught.value)
    assert not (out / "result.json.tmp").exists() and not (out / "result.json.tmp").is_symlink()
    assert (out / "result.json").read_text() == before


@needs_dev_full
@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="finds the file by /proc")
def test_a_disk_full_mid_run_stops_it_keeping_the_records_written(tmp_path, tiny_scenario):
    out = tmp_path / "r"
    records = out / "records.jsonl"
    seen: list[int] = []

    def disk_fills_after_three(record: object) -> None:
        seen.append(1)
        if len(seen) == 3:  # from here on the records file's writes meet a full disk
            fd = next(
                int(fd.name)
                for fd in Path("/proc/self/fd").iterdir()
                if os.path.realpath(fd) == str(records.resolve())
            )
            full = os.open("/dev/full", os.O_WRONLY)
            os.dup2(full, fd)
            os.close(full)

    with pytest.raises(OutputError) as caught:
        workloads.run(
            tiny_scenario,
            client=FakeChatClient(lambda body: (100, "ok " * 30)),
            out_dir=out,
            on_record=disk_fills_after_three,
        )
    err = caught.value
    assert err.errno == errno.ENOSPC and err.path == str(records)
    assert str(err).startswith(f"cannot write {records}: No space left on device (ENOSPC)")
    assert "the run stopped there; the 3 turn records written before are kept" in str(err)
    assert "\n" not in str(err)
    assert len(seen) < 8  # stopped: the scenario has 8 turns
    assert not (out / "result.json").exists()
    assert not list(out.glob("*.tmp"))
    lines = records.read_text().splitlines()
    assert all(json.loads(line) for line in lines)  # whole lines only
    rebuilt = load_result(out)  # what show reads: the three records
    assert len(rebuilt.records) == 3 and not rebuilt.complete


def test_the_cli_exits_6_naming_the_file_when_the_records_cannot_be_written(tmp_path):
    # Size the limit from a run of the same scenario: its header, nonces and first record,
    # and half of the second, so the second record's write is cut short.
    sized = tmp_path / "sized"
    assert main(["run", "five-user-coding", "--out", str(sized), *TINY, "--no-transcripts"]) == 0
    lines = (sized / "records.jsonl").read_bytes().splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if b'"kind"' not in line)
    limit = sum(map(len, lines[: first + 1])) + len(lines[first + 1]) // 2
    out = tmp_path / "r"
    script = (
        "import resource, sys\n"
        "from workloads.cli import main\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, resource.RLIM_INFINITY))\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            "run",
            "five-user-coding",
            "--out",
            str(out),
            *TINY,
            "--no-transcripts",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    assert done.returncode == 6, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(
        f"error: cannot write {out / 'records.jsonl'}: File too "
        "large (EFBIG); the run stopped there; the 1 turn records"
    )
    assert (out / "records.jsonl").read_bytes().endswith(b"\n")
    assert len(load_result(out).records) == 1
    assert not (out / "result.json").exists() and not list(out.glob("*.tmp"))


# --- a run that fails to start ---------------------------------------------------------------


def test_a_failed_start_leaves_no_default_run_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    unreachable = "http://127.0.0.1:1/v1"  # port 1: nothing listens there
    assert main(["run", "five-user-coding", "--target", unreachable, *TINY]) == 4
    one_line(capsys)
    assert not (tmp_path / "runs").exists()
    (tmp_path / "runs").mkdir()
    assert main(["run", "five-user-coding", "--target", unreachable, *TINY]) == 4
    assert list((tmp_path / "runs").iterdir()) == []  # runs/ was there: it stays


def test_a_failed_start_removes_only_the_folders_it_made(tmp_path, capsys):
    unreachable = "http://127.0.0.1:1/v1"
    deep = tmp_path / "made" / "by" / "run"
    assert (
        main(["run", "five-user-coding", "--target", unreachable, "--out", str(deep), *TINY]) == 4
    )
    assert not (tmp_path / "made").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("kept")
    assert (
        main(["run", "five-user-coding", "--target", unreachable, "--out", str(mine), *TINY]) == 4
    )
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]


def test_a_library_run_that_fails_to_start_leaves_no_folder(tmp_path, tiny_scenario):
    out = tmp_path / "a" / "b"
    with pytest.raises(ScenarioError, match=r"simulator override .nope."):
        workloads.run(tiny_scenario, out_dir=out, sim={"nope": 1})
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize(
    ("flags", "names"),
    [
        (
            ["--sim", "kv_capacity_tokenz=46202"],
            "--sim 'kv_capacity_tokenz': no such profile field",
        ),
        (["--sim", "faults.rate_5OO=0.1"], "--sim 'faults.rate_5OO'"),
        (["--sim", "spec_tokens=many"], "--sim 'spec_tokens'"),
        (["--sim", "profile=h100"], "no simulator profile 'h100'"),
        (["--set", "userz=2"], "userz"),
    ],
)
def test_a_typo_in_sim_or_set_is_one_line_before_anything_is_made(
    tmp_path, monkeypatch, capsys, flags, names
):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "five-user-coding", *flags, "--quiet"]) == 2
    assert names in one_line(capsys)
    assert not (tmp_path / "runs").exists()
