"""--workers: a run's sessions sharded over worker processes behaves as the same run in one
process — the same prompts, one turn-1 opener per repetition, lock-step barriers across the
processes, every record in records.jsonl — and a stop or a dying worker loses nothing
measured. Real worker processes against the real simulated server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

import workloads
from fakes import turn_lines
from workloads.cli import main
from workloads.core.aggregate import summarize
from workloads.core.concurrency import concurrency
from workloads.model.transcripts import TRANSCRIPTS_FILE, read_transcripts
from workloads.runner.workers.pool import WorkerFailed, auto_workers, usable_cpus
from workloads.servers.simulated import SimulatedServer

pytestmark = pytest.mark.slow

SMALL = [
    "users=4",
    "turns=2",
    "opening_tokens=600",
    "turn_tokens=80",
    "output_tokens=24",
    "nonce=run",
    "shared_prefix_tokens=200",
    "repetitions.warmup=1",
    "repetitions.measured=1",
    "gate=off",
]


def scenario(*extra: str) -> workloads.Scenario:
    return workloads.load_scenario("five-user-coding").with_overrides([*SMALL, *extra])


async def run_on(
    server: SimulatedServer, out: Path, workers: int, **options: object
) -> workloads.RunResult:
    return await workloads.run_async(
        scenario(), server.target, out_dir=out, workers=workers, **options
    )


async def test_sharded_run_sends_what_one_process_sends(tmp_path: Path) -> None:
    async with SimulatedServer() as server:
        one = await run_on(server, tmp_path / "one", 1)
        two = await run_on(server, tmp_path / "two", 2)
    assert one.complete and two.complete
    assert one.environment["event_loop"] == "asyncio"  # the test's own loop stamped
    assert two.environment["event_loop"].endswith(" in 2 worker processes")
    assert two.client is not None and two.client.processes == 2
    assert len(two.records) == len(one.records) == 4 * 2 * 2
    assert {r.host for r in two.records} != {None}  # each record names its worker's host
    assert len(turn_lines(tmp_path / "two")) == len(two.records)  # all in records.jsonl

    def prompts(result: workloads.RunResult) -> dict[tuple[int, int, int], int | None]:
        return {(r.repetition, r.session, r.turn): r.prompt_tokens for r in result.records}

    assert prompts(two) == prompts(one)  # sized alike, shard by shard
    assert all(r.status == "ok" and r.valid for r in two.records)
    for result in (one, two):  # exactly one session opens each repetition's shared prefix
        for rep in (0, 1):
            firsts = [r for r in result.records if r.repetition == rep and r.turn == 1]
            assert sum(1 for r in firsts if r.shareable_tokens == 0) == 1
            assert all(r.shareable_tokens is not None for r in firsts)
    # lock-step across processes: no session starts turn 2 before every turn 1 ended (one
    # host, one monotonic clock: the workers' stamps compare)
    ends: dict[tuple[int, int], int] = defaultdict(int)
    starts: dict[tuple[int, int], int] = {}
    for r in two.records:
        assert r.done_ns is not None
        key = (r.repetition, r.turn)
        ends[key] = max(ends[key], r.done_ns)
        starts[key] = min(starts.get(key, r.started_ns), r.started_ns)
    for rep in (0, 1):
        assert starts[(rep, 2)] >= ends[(rep, 1)]
    # one clock: spans across records are reported; from two hosts' clocks they are not
    assert two.summary.run.wall_aggregate_rate is not None and two.concurrency is not None
    mixed = [r.model_copy(update={"host": f"h{r.session % 2}"}) for r in two.records]
    assert summarize(mixed, users=4).run.wall_aggregate_rate is None
    assert summarize(mixed, users=4).run.request_rate is None
    assert concurrency(mixed) is None


async def test_free_pacing_and_transcripts_across_workers(tmp_path: Path) -> None:
    s = scenario("pacing.mode=free")
    async with SimulatedServer() as server:
        result = await workloads.run_async(s, server.target, out_dir=tmp_path, workers=3)
    assert result.complete and len(result.records) == 16
    transcripts = read_transcripts(tmp_path / TRANSCRIPTS_FILE)
    assert len(transcripts) == 16  # every exchange reached the run's transcripts file
    assert all(t.completion for t in transcripts.values())
    assert sorted({r.session for r in result.records}) == [0, 1, 2, 3]


async def test_stop_reaches_every_worker(tmp_path: Path) -> None:
    s = scenario("output_tokens=400", "turns=3", "repetitions.warmup=0", "repetitions.measured=2")
    async with SimulatedServer() as server:
        stop = asyncio.Event()

        async def stop_soon() -> None:
            for _ in range(2000):  # bounded: until some turn streams
                if any(t.first_written_ns is not None for t in server.truths()):
                    break
                await asyncio.sleep(0.005)
            stop.set()

        async with asyncio.TaskGroup() as tg:
            tg.create_task(stop_soon())
            run = tg.create_task(
                workloads.run_async(
                    s, server.target, out_dir=tmp_path, workers=2, stop=stop, stop_grace_s=0.0
                )
            )
        result = run.result()
    assert not result.complete
    assert len(result.records) < 4 * 3 * 2
    assert any(r.error_kind == "cancelled" for r in result.records)
    assert len(turn_lines(tmp_path)) == len(result.records)


def _children() -> list[int]:
    pid = os.getpid()
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(p) for p in text.split()]


async def test_a_worker_that_dies_fails_the_run_and_keeps_its_records(tmp_path: Path) -> None:
    before = set(_children())
    killed: list[int] = []

    def kill_a_worker(record: workloads.TurnRecord) -> None:
        if not killed:
            workers = [p for p in _children() if p not in before]
            os.kill(workers[0], signal.SIGKILL)
            killed.append(workers[0])

    async with SimulatedServer() as server:
        with pytest.raises(WorkerFailed, match=r"went away|exit status"):
            await run_on(server, tmp_path, 2, on_record=kill_a_worker)
    assert killed
    kept = turn_lines(tmp_path)
    assert kept  # what was measured before the worker died is on disk
    saved = json.loads((tmp_path / "result.json").read_text())
    assert saved["complete"] is False


def test_auto_workers_uses_a_process_per_64_sessions_up_to_the_cores() -> None:
    assert auto_workers(5, cpus=16) == 1
    assert auto_workers(64, cpus=16) == 1
    assert auto_workers(65, cpus=16) == 2
    assert auto_workers(1000, cpus=16) == 16
    assert auto_workers(1000, cpus=2) == 2


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")
def test_auto_workers_counts_the_cores_this_process_may_use_not_the_hosts() -> None:
    # Pinned to one core of 8, --workers auto started 4 processes (519 MB) for 256 sessions.
    code = (
        "import os; from workloads.runner.workers.pool import auto_workers, usable_cpus; "
        "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
        "print(auto_workers(256), usable_cpus()[0])"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.split() == ["1", "1"]


def test_a_cgroup_cpu_quota_caps_the_usable_cores(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("150000 100000\n")  # 1.5 cores: 2 usable
    cores, why = usable_cpus(tmp_path)
    assert cores == min(2, len(os.sched_getaffinity(0)))
    if cores == 2 and len(os.sched_getaffinity(0)) > 2:
        assert why.startswith("the cgroup's CPU quota of 2")
    (tmp_path / "cpu.max").write_text("max 100000\n")  # no quota
    assert usable_cpus(tmp_path)[0] == len(os.sched_getaffinity(0))
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")  # v1: one core
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert usable_cpus(tmp_path)[0] == 1


def test_cli_workers_flag_refuses_what_is_not_a_number_of_processes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --workers 2 through the CLI, end to end: the Ctrl-C test below (its report names the
    # 2 worker processes)
    assert main(["run", "five-user-coding", "--workers", "0", "--out", str(tmp_path / "bad")]) == 2
    assert "--workers 0: give a number of processes" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_ctrl_c_to_the_whole_process_group_stops_a_sharded_cli_run_gracefully(
    tmp_path: Path,
) -> None:
    """A terminal's Ctrl-C reaches every process of the foreground group: the workers leave
    the stop to the coordinator, which saves the partial result and exits 130."""
    out = tmp_path / "signalled"
    args = [
        sys.executable,
        "-m",
        "workloads",
        "run",
        "five-user-coding",
        "--out",
        str(out),
        "--quiet",
        "--no-plots",
        "--workers",
        "2",
        "--grace",
        "0",
    ]
    for item in [*SMALL, "output_tokens=400", "turns=3", "repetitions.warmup=0"]:
        args += ["--set", item]
    process = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )  # its own group, as in a terminal
    try:
        for _ in range(1200):  # bounded: 120 s for turn 1 of every session
            if (out / "records.jsonl").exists() and len(turn_lines(out)) >= 4:
                break
            assert process.poll() is None, process.communicate()
            time.sleep(0.1)
        os.killpg(process.pid, signal.SIGINT)
        stdout, stderr = process.communicate(timeout=120)
    finally:  # a failed test leaves no run behind (its group killed, its pipes closed)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    assert process.returncode == 130, stderr.decode()[-2000:]
    assert b"Traceback" not in stderr
    assert b"2 worker processes" in stdout  # the report names the processes
    result = json.loads((out / "result.json").read_text())
    assert result["complete"] is False
    records = turn_lines(out)
    assert len(records) >= 4
    assert all(r["status"] == "ok" or r["error_kind"] == "cancelled" for r in records)


def test_workers_auto_says_what_it_chose_and_why() -> None:
    from workloads.cli.run import auto_workers_line

    many = workloads.load_scenario("five-user-coding").with_overrides(["users=256"])
    line = auto_workers_line(1, many)
    assert line is not None
    assert "this process alone for 256 concurrent sessions (one process per 64: 4" in line
    assert "at most one per core this process may use" in line
    assert auto_workers_line(1, workloads.load_scenario("five-user-coding")) is None
