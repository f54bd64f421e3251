"""Stopping a run: the stop event (what the CLI sets on SIGINT and SIGTERM) starts no new turn,
lets the turns in flight finish within the grace period or records them ``cancelled`` with
what they measured, and saves the partial result; SIGTERM and SIGINT to the CLI exit 143 and
130; after SIGKILL, ``show`` rebuilds the report from records.jsonl."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import workloads
from fakes import turn_lines
from workloads.cli import main
from workloads.core.conversation import Conversation
from workloads.core.corpus import load_corpus
from workloads.core.tokens import EstimateTokenizer
from workloads.runner.options import SessionIO
from workloads.runner.session import Session
from workloads.runner.sizing import CellSizing
from workloads.servers.simulated import SimulatedServer
from workloads.wire.client import AiohttpChatClient

# Long replies on the fast profile: a turn streams for about a second, so a stop lands while
# turns are in flight.
LONG = [
    "users=3",
    "turns=3",
    "opening_tokens=600",
    "turn_tokens=100",
    "output_tokens=400",
    "repetitions.warmup=0",
    "repetitions.measured=2",
    "gate=off",  # the gate's greedy requests stream too: the stop must land on turns
]


async def stop_when_streaming(server: SimulatedServer, stop: asyncio.Event, users: int = 3) -> None:
    """Set ``stop`` once the server has written content for every user's first request
    (bounded wait: on a loaded machine a session may start its turn late)."""
    for _ in range(6000):
        if sum(t.first_written_ns is not None for t in server.truths()) >= users:
            break
        await asyncio.sleep(0.005)
    await asyncio.sleep(0.1)  # a few chunks more reach the client
    stop.set()


def run_stopped(server: SimulatedServer, out: Path, grace_s: float) -> workloads.RunResult:
    scenario = workloads.load_scenario("five-user-coding").with_overrides(LONG)

    async def go() -> workloads.RunResult:
        stop = asyncio.Event()
        async with asyncio.TaskGroup() as tg:
            tg.create_task(stop_when_streaming(server, stop))
            running = tg.create_task(
                workloads.run_async(
                    scenario,
                    server.target,
                    out_dir=out,
                    stop=stop,
                    stop_grace_s=grace_s,
                )
            )
        return running.result()

    return asyncio.run(go())


def test_a_stop_with_grace_lets_turns_in_flight_finish_and_starts_no_new_one(tmp_path):
    with SimulatedServer() as server:
        result = run_stopped(server, tmp_path / "graceful", grace_s=120)
        served = len(server.truths())
    assert not result.complete
    assert [r.turn for r in result.records] == [1, 1, 1]  # turn 1 finished, turn 2 never sent
    assert all(r.status == "ok" and r.valid for r in result.records)
    assert served == 3
    saved = workloads.load_result(tmp_path / "graceful")
    assert not saved.complete and saved.records == result.records
    assert any("interrupted" in w for w in saved.warnings)


def test_a_stop_without_grace_records_the_turns_in_flight_with_what_they_measured(tmp_path):
    with SimulatedServer() as server:
        result = run_stopped(server, tmp_path / "cut", grace_s=0)
    assert len(result.records) == 3
    for r in result.records:
        assert r.status == "incomplete" and r.error_kind == "cancelled" and not r.valid
        # What the client had measured when it was cancelled is kept, not dropped.
        assert r.http_status == 200 and r.sent_ns is not None and r.headers_ns is not None
        assert r.error_ns is not None and r.error_ns >= r.sent_ns  # when it was cut
    streaming = [r for r in result.records if r.first_content_ns is not None]
    assert streaming and all(r.content_events > 0 and r.ttft_ns for r in streaming)
    assert turn_lines(tmp_path / "cut") == [r.model_dump(mode="json") for r in result.records]
    # Counted as cancelled, not as failed: the run ended, the server did not fail them.
    run = result.summary.run
    assert (run.cancelled, run.errors, run.invalid) == (3, 0, 0)
    assert not [w for w in result.warnings if "measured turns failed" in w]
    assert any("3 turns in flight then were cancelled" in w for w in result.warnings)


def test_a_cancelled_turn_keeps_its_corrected_shareable_prefix(tmp_path):
    """nonce = "run": turn 1 shares the system prefix with the other sessions' openings,
    except for the first session to send, which finds none of them at the server yet: 0.
    A turn cut off in flight records the same as a finished one would."""
    with SimulatedServer() as server:
        scenario = workloads.load_scenario("five-user-coding").with_overrides(
            [*LONG, "nonce=run", "turns=1"]
        )

        async def go() -> workloads.RunResult:
            stop = asyncio.Event()
            async with asyncio.TaskGroup() as tg:
                tg.create_task(stop_when_streaming(server, stop))
                running = tg.create_task(
                    workloads.run_async(
                        scenario, server.target, out_dir=tmp_path / "cut", stop=stop, stop_grace_s=0
                    )
                )
            return running.result()

        result = asyncio.run(go())
    cut = sorted(result.records, key=lambda r: r.started_ns)
    assert len(cut) == 3 and all(r.error_kind == "cancelled" for r in cut)
    assert cut[0].shareable_tokens == 0  # the first to send: nothing of the others yet
    assert all(r.shareable_tokens and r.shareable_tokens > 0 for r in cut[1:])


def start_cli(out: Path, *extra: str) -> subprocess.Popen[bytes]:
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
        *extra,
    ]
    for item in LONG:
        args += ["--set", item]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_for_records(out: Path, n: int, process: subprocess.Popen[bytes]) -> None:
    """Until records.jsonl holds ``n`` TurnRecords (bounded: 120 s)."""
    for _ in range(1200):
        if (out / "records.jsonl").exists() and len(turn_lines(out)) >= n:
            return
        assert process.poll() is None, process.communicate()
        time.sleep(0.1)
    process.kill()
    raise AssertionError(f"records.jsonl never reached {n} records")


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_the_cli_stops_it_gracefully_with_the_partial_result(tmp_path, signum, code):
    out = tmp_path / "signalled"
    process = start_cli(out, "--grace", "0")
    wait_for_records(out, 3, process)  # turn 1 done; turn 2 in flight (lock-step)
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == code, stderr.decode()
    assert b"Traceback" not in stderr
    assert f"stopped by {signal.Signals(signum).name}".encode() in stdout
    records = turn_lines(out)
    result = json.loads((out / "result.json").read_text())
    assert result["complete"] is False
    finished = [r for r in records if r["status"] == "ok"]
    cut = [r for r in records if r["error_kind"] == "cancelled"]
    assert len(finished) >= 3 and len(finished) + len(cut) == len(records)
    assert all(r["sent_ns"] is not None for r in cut)  # in flight: sent, then cancelled
    keys = [(r["repetition"], r["session"], r["turn"]) for r in records]
    assert len(set(keys)) == len(keys)


@pytest.mark.slow
def test_after_sigkill_show_renders_the_report_from_records_jsonl(tmp_path, capsys):
    out = tmp_path / "killed"
    process = start_cli(out)
    wait_for_records(out, 4, process)
    os.kill(process.pid, signal.SIGKILL)
    process.communicate(timeout=60)
    assert not (out / "result.json").exists()
    killed = workloads.load_result(out)  # rebuilt from records.jsonl, summaries and all
    assert not killed.complete and len(killed.records) >= 4
    assert killed.summary.run.records == len(killed.records)  # every one measured (no warm-up)
    assert killed.summary.run.valid >= 3  # turn 1 of each user finished before the kill
    assert main(["show", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "Per turn" in printed and "rebuilt from records.jsonl" in printed
    assert "incomplete" in printed


def test_a_turn_cancelled_before_any_response_byte_keeps_its_send_time():
    """A raw socket server that reads the request and never answers (a long prefill)."""
    scenario = workloads.load_scenario("five-user-coding").with_overrides(
        ["users=1", "turns=1", "opening_tokens=300", "output_tokens=8"]
    )
    records: list[workloads.TurnRecord] = []

    async def go() -> None:
        got_request, finished = asyncio.Event(), asyncio.Event()
        handlers: list[asyncio.Task[None]] = []

        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            handlers.append(asyncio.current_task())  # type: ignore[arg-type]
            await reader.readuntil(b"\r\n\r\n")
            got_request.set()
            await finished.wait()  # never a byte back, until the test is over
            writer.close()
            await writer.wait_closed()

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server, AiohttpChatClient(f"http://127.0.0.1:{port}/v1") as client:
            session = Session(
                io=SessionIO(client, "m", records.append),
                scenario=scenario,
                conversation=Conversation(
                    corpus=load_corpus("stdlib"),
                    style="agent",
                    seed=0,
                    session=0,
                    nonce="n#0",
                    run_nonce=None,
                ),
                sizing=CellSizing(scenario, EstimateTokenizer()),
                repetition=0,
                warmup=False,
            )
            await session.open(0)
            sending = asyncio.create_task(session.turn(1))
            await asyncio.wait_for(got_request.wait(), timeout=60)
            sending.cancel()
            await asyncio.wait({sending})
            finished.set()
            await asyncio.wait(handlers)  # the handler closes its side

    asyncio.run(go())
    assert len(records) == 1
    r = records[0]
    assert r.status == "incomplete" and r.error_kind == "cancelled"
    assert r.sent_ns is not None and r.sent_ns >= r.started_ns
    assert r.http_status is None and r.first_content_ns is None  # no byte came back
    assert r.error_ns is not None and r.error_ns >= r.sent_ns  # when it was cut


def test_the_library_installs_no_sigterm_handler_when_embedded():
    before = signal.getsignal(signal.SIGTERM)
    during: list[object] = []
    scenario = workloads.load_scenario("five-user-coding").with_overrides(
        [
            "users=1",
            "turns=1",
            "opening_tokens=300",
            "output_tokens=4",
            "repetitions.warmup=0",
            "repetitions.measured=1",
        ]
    )
    workloads.run(scenario, on_record=lambda r: during.append(signal.getsignal(signal.SIGTERM)))
    assert during == [before]


async def test_a_signal_after_the_last_turn_is_not_called_a_partial_result(
    tiny_scenario, tmp_path, capsys
):
    from workloads.cli.common import make_console
    from workloads.cli.run import run_exit_code, run_until_signal

    last = tiny_scenario.users * tiny_scenario.turns * 2  # a warm-up and a measured repetition
    seen: list[object] = []

    def on_record(record: object) -> None:
        seen.append(record)
        if len(seen) == last:  # every turn has ended: the signal comes now
            os.kill(os.getpid(), signal.SIGTERM)

    out = tmp_path / "r"
    result, signum = await run_until_signal(
        {"scenario": tiny_scenario, "out_dir": out, "on_record": on_record},
        grace_s=5,
        console=make_console(),
    )
    assert signum == signal.SIGTERM and len(seen) == last
    assert result.complete and json.loads((out / "result.json").read_text())["complete"]
    code = run_exit_code(result, signum, 0.0, make_console())
    printed = capsys.readouterr()
    assert code == 0
    assert "partial" not in printed.out and "the result is complete" in printed.out
    assert printed.err.startswith("SIGTERM: stopping — no new turns")  # a notice: stderr
