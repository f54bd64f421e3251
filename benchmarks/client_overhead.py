"""What the client costs, and how true its clock is: the library against a raw streaming server.

The server (benchmarks/stream_server.py, a separate process) is pinned to one core and the
client (the library, through its public API, in a separate process) to another; the harness
sits on the server's core. Every run is one scenario with ``users`` = concurrency, 512-token
streams (and 64-token streams at zero delay, for the marginal cost), one token per content
chunk (vLLM's framing; ``--burst N`` for N per server write), a fresh server and client
process per run. ``--turns 1`` (the default): one turn, lock-step (all streams start
together). ``--turns N`` (N ≥ 2): N turns per session, free pacing with no think or tool
time, so each session sends its next turn as its reply ends, and one session's turn end
(record, transcript, next turn's sizing) overlaps other sessions' first tokens: the shape of
an agent run, where a client that does its turn-end work in one burst stamps late.

Beside the library, every configuration also runs the reference client (``bare-aiohttp``,
left out with ``--no-bare``): a bare aiohttp read loop (``async for line in
response.content``, ``json.loads`` per event), on the same loop, core and server, playing
the same sessions. Its figures and the library's ratios to them are printed in the same run,
so a comparison does not depend on how fast the shared core was that minute.

Figures, each the median over the runs (``--runs``, 3 by default):

- all-in µs/token: the client's CPU time over ``run_async`` (checking the target, sizing the
  prompts, streaming, records, the result file; the import excluded) / streamed tokens.
- marginal µs/token: the slope of that CPU between 512- and 64-token streams at the same
  concurrency and request count: what one more streamed token costs, with every per-request
  and per-run cost excluded. Zero delay only. fixed ms/request: the rest, (all-in CPU −
  marginal × tokens) / requests (per-run costs spread over the requests, and per-request ones).
- stream µs/token, client core: the client's CPU inside the streaming windows only (first
  request sent → last stream done, per repetition; read from /proc/PID/task/*/schedstat in ns,
  sampled by the harness) / tokens, and that CPU / the windows' wall time, the client core's
  use: near 100% the client is saturated. Shown where the windows last ≥ 0.2 s in all.
- tok/s per core: tokens / streaming-window CPU seconds; at zero delay with the client core
  saturated this is the most one core streams.
- peak RSS of the client process.
- TTFT bias: the client's TTFT minus the server's truth for the same request (matched by the
  response id): (first content chunk read − request written) − (first content chunk written −
  request read). p50 and p99 over the run's requests.
- ITL bias: per request, (client's last − first content time) − (server's last − first content
  write), over the 511 gaps; p50 and p99, µs per token.
- downlink: first content chunk written by the server → stamped by the client, the client's
  own part of the TTFT bias (the rest, uplink, is the server's read queue); p50 and p99.
- stall: the library's own self-watch, its worst event-loop lag (result.json ``client``).
- proc CPU s: the whole client process (interpreter start, imports, run, exit), from the
  harness's rusage of the child.
- start-up CPU: user + system CPU of ``python -c "import workloads"`` (median of 5), beside
  ``python -c pass``.

Both processes stamp with time.perf_counter_ns (CLOCK_MONOTONIC on Linux, one clock for the
whole host), so the server's stamps and the client's records compare directly.

    python benchmarks/client_overhead.py --quick         # < 2 minutes, one run of each
    python benchmarks/client_overhead.py                 # ~7 minutes on 2 cores
    python benchmarks/client_overhead.py --nice -19      # cores shared with other work
    python benchmarks/client_overhead.py --json out.json --profile c64.prof
    python benchmarks/client_overhead.py --nice -19 --modes paced --users 64 256 --turns 2
    python benchmarks/client_overhead.py --python venv-a/bin/python venv-b/bin/python
    python benchmarks/client_overhead.py --fixed --runs 7 --python venv-a/bin/python
    python benchmarks/client_overhead.py --nice -19 --modes paced --users 1000 --turns 2 \
        --workers auto                                      # C1000 over worker processes
    python benchmarks/client_overhead.py --nice -19 --modes zero --users 5 64 --runs 5 \
        --server-processes 6                     # the client, not the server, sets the pace

The client runs on the loop the library itself starts (``workloads.wire.loop.run_loop``:
uvloop where the ``fast`` extra is installed; ``asyncio.run`` for a version without it);
``--python PY:asyncio`` forces the standard loop for that client. At zero delay with one
content chunk per server write the server core saturates before a fast client does (its
``server core`` column passes 90%, and the script warns): ``--burst 16`` measures the client,
and so does ``--server-processes N`` at one token per write (N server processes on one port,
SO_REUSEPORT, a core each; the column is then the busiest one's).

``--profile`` adds one cProfile'd client run at C64, zero delay, and prints its hot spots.
``--python`` runs the clients of several interpreters (say, the venvs of two checkouts)
alternately, so a before/after comparison shares one machine state: on a VM whose other
vCPU is busy, a core's speed moves by up to 2× within minutes (the yardstick line shows it).
Loopback only (127.0.0.1). Linux only (sched_setaffinity, /proc). Results and conditions of
record: benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import dataclasses
import io
import itertools
import json
import os
import platform
import pstats
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SERVER = HERE / "stream_server.py"
MODEL = "bench-model"
CONCURRENCIES = (1, 5, 64, 256, 1000)
STREAM_TOKENS = 512
SHORT_TOKENS = 64  # the second stream length for the marginal slope
PACED = (100.0, 10.0)  # TTFT ms, inter-token ms
SAMPLE_S = 0.005  # the harness reads the client's CPU this often
MIN_WINDOW_S = 0.2  # streaming-window figures need at least this much streaming in all
BUSY_LOAD = 1.5  # a 1-minute load average above this: other work shares the cores
SERVER_BUSY = 0.9  # zero delay with the server core this busy: the server may be the limit
RUN_TIMEOUT_S = 300.0  # one client run, however slow; then it is killed and reported
SERVER_START_S = 10.0
BARE = "bare-aiohttp"  # the reference client's name among --python's interpreters

# Repetitions per run (requests = concurrency × repetitions), full and --quick.
ZERO_REPS = {1: 128, 5: 32, 64: 4, 256: 2, 1000: 1}
ZERO_REPS_QUICK = {1: 16, 5: 8, 64: 1, 256: 1, 1000: 1}
PACED_REPS = {1: 4, 5: 2, 64: 2, 256: 1, 1000: 1}
PACED_REPS_QUICK = {5: 1, 64: 1, 256: 1, 1000: 1}  # C1 paced is left out of --quick
MARGINAL_QUICK = (5, 64)  # --quick measures the marginal cost at these only

# --agent, the shape agents run (issue 38): several free-paced turns on an opening of
# thousands of tokens, each turn the real reply and a tool result appended. An opening of
# ~4K tokens is a coding agent's system prompt and tool schemas (Claude Code's is larger);
# 500-token tool results are the middle of the coding-agents preset's.
AGENT_USERS = (5, 64)
AGENT_TURNS = 6
AGENT_OPENING = 4000
AGENT_TOOL_TOKENS = 500
AGENT_REPS = {5: 4, 64: 1}  # repetitions per run (C5: 120 requests, C64: 384)
# Per-request CPU at a long history: sessions of HISTORY_TURNS and HISTORY_TURNS + EXTRA
# turns, 64-token replies, on the same opening; the CPU difference / the extra requests.
HISTORIES = (8_000, 32_000, 100_000)
HISTORY_USERS = 4
HISTORY_TURNS = 2
HISTORY_EXTRA = 10

SCENARIO = """\
description = "client overhead benchmark: {users} users, {turns} turn(s), {tokens}-token streams"
users = {users}
turns = {turns}
opening_tokens = {opening}
turn_tokens = {turn_tokens}
output_tokens = {tokens}
exact_output = true
nonce = "session"

[repetitions]
warmup = 0
measured = {reps}

[pacing]
mode = "{pacing}"

[content]
corpus = "synthetic"
style = "{style}"
seed = 0
"""
# The plain shapes (one lock-step turn, or --turns N of chat): no opening, 32-token turns.
PLAIN = {"opening": 0, "turn_tokens": 32, "style": "chat"}


# ---------------------------------------------------------------------------------------------
# The client process: the library through its public API, and nothing else.


def client_main(config: dict[str, Any]) -> None:
    """Run one scenario with the library; print one JSON line of what it cost."""
    cores = set(config.get("cpus") or [config["cpu"]])  # --workers: the client's cores
    os.sched_setaffinity(0, cores)
    cpu_start = time.process_time()
    import asyncio

    import workloads

    cpu_imported = time.process_time()
    scenario = workloads.load_scenario(Path(config["scenario"]))
    target = workloads.Target(config["url"], MODEL)
    options: dict[str, Any] = {}
    if config.get("workers", "1") != "1":  # worker processes, on the client's cores
        try:
            from workloads.runner.workers.pool import auto_workers
        except ImportError:  # a version from before runner/workers/ was a folder
            from workloads.runner.workers import auto_workers  # type: ignore[no-redef]

        workers = config["workers"]
        options["workers"] = (
            auto_workers(config["users"], cpus=len(cores)) if workers == "auto" else int(workers)
        )
    run = workloads.run_async(scenario, target=target, out_dir=config["out"], **options)
    cpu_before = time.process_time()
    try:  # the loop the library itself starts (uvloop when installed), where it has one
        from workloads.wire.loop import run_loop

        def start(main: Any) -> Any:
            return run_loop(main, fast=config["loop"] != "asyncio")
    except ImportError:  # a version from before wire/loop.py: the standard loop
        start = asyncio.run
    if config.get("profile"):
        profiler = cProfile.Profile()
        result = profiler.runcall(start, run)
        profiler.dump_stats(config["profile"])
    else:
        result = start(run)
    cpu_after = time.process_time()
    print(
        json.dumps(
            {
                "import_cpu_s": cpu_imported - cpu_start,
                "run_cpu_s": cpu_after - cpu_before,
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                # the largest worker process's (reaped by now): 0 without workers
                "worker_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
                "complete": result.complete,
                "warnings": result.warnings,
            }
        ),
        flush=True,
    )


# ---------------------------------------------------------------------------------------------
# The reference client: a bare aiohttp read loop, what a short hand-written load generator does.


def bare_main(config: dict[str, Any]) -> None:
    """Play the same sessions as the scenario with aiohttp alone: per session, ``turns``
    requests back to back (free pacing), the reply appended to the history; each line of
    the stream read with ``async for line in response.content``, ``json.loads`` of each
    ``data:`` line, the content stamped as it is parsed. Writes records.jsonl with the fields
    the harness matches; prints the same JSON line as :func:`client_main`."""
    os.sched_setaffinity(0, {config["cpu"]})
    cpu_start = time.process_time()
    import asyncio

    import aiohttp

    cpu_imported = time.process_time()
    clock = time.perf_counter_ns
    out = Path(config["out"])
    out.mkdir(parents=True, exist_ok=True)
    records: list[dict[str, Any]] = []
    url = config["url"].rstrip("/") + "/chat/completions"
    # --agent: the library's histories, each turn's new messages (read before the clock)
    script = json.loads(Path(config["script"]).read_text()) if config.get("script") else None

    async def turn(
        http: aiohttp.ClientSession,
        rep: int,
        session: int,
        number: int,
        history: list[dict[str, Any]],
    ) -> None:
        if script is not None:
            history.extend(script[f"{rep}/{session}"][number - 1])
        else:
            history.append(
                {
                    "role": "user",
                    "content": f"session {session} turn {number}: " + "write about the sea " * 6,
                }
            )
        body = {
            "model": MODEL,
            "messages": history,
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": config["tokens"],
            "ignore_eos": True,
            "min_tokens": config["tokens"],
        }
        sent = clock()
        first = last = None
        request_id = None
        completion = None
        parts: list[str] = []
        async with http.post(url, json=body) as response:
            async for line in response.content:
                now = clock()
                if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                    continue
                chunk = json.loads(line[6:])
                request_id = chunk.get("id", request_id)
                if chunk.get("usage"):
                    completion = chunk["usage"].get("completion_tokens")
                for choice in chunk.get("choices") or ():
                    text = (choice.get("delta") or {}).get("content")
                    if text:
                        parts.append(text)
                        first = now if first is None else first
                        last = now
        done = clock()
        reply = "".join(parts)
        history.append({"role": "assistant", "content": reply})
        records.append(
            {
                "repetition": rep,
                "session": session,
                "turn": number,
                "valid": completion == config["tokens"],
                "completion_tokens": completion,
                "request_id": request_id,
                "sent_ns": sent,
                "done_ns": done,
                "first_content_ns": first,
                "last_content_ns": last,
                "ttft_ns": None if first is None else first - sent,
            }
        )

    async def session(http: aiohttp.ClientSession, rep: int, index: int) -> None:
        history: list[dict[str, Any]] = []
        if script is None:
            history.append({"role": "system", "content": "You are terse."})
        for number in range(1, config["turns"] + 1):
            await turn(http, rep, index, number, history)

    async def main() -> None:
        connector = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
            for rep in range(config["reps"]):
                async with asyncio.TaskGroup() as tg:
                    for index in range(config["users"]):
                        tg.create_task(session(http, rep, index))

    cpu_before = time.process_time()
    if config["loop"] != "asyncio":
        try:
            import uvloop  # the loop the library runs on, where installed: like with like
        except ImportError:
            asyncio.run(main())
        else:
            uvloop.run(main())
    else:
        asyncio.run(main())
    cpu_after = time.process_time()
    with (out / "records.jsonl").open("w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    print(
        json.dumps(
            {
                "import_cpu_s": cpu_imported - cpu_start,
                "run_cpu_s": cpu_after - cpu_before,
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "complete": True,
                "warnings": [],
            }
        ),
        flush=True,
    )


# ---------------------------------------------------------------------------------------------
# The harness.


@dataclass(frozen=True)
class Setup:
    """Where and how the processes run."""

    server_cpu: int = 0
    client_cpu: int = 1
    burst: int = 1  # zero delay: content chunks per server write
    nice: int = 0  # 0: leave the scheduler alone
    turns: int = 1  # per session; more than one: free pacing (turn ends overlap streams)
    workers: str = "1"  # the library's --workers (N or auto)
    cores: tuple[
        int, ...
    ] = ()  # the harness's cores at the start (--workers: all but the server's)
    server_processes: int = 1  # benchmark server processes (SO_REUSEPORT), a core each
    agent: bool = False  # the agent shape: an opening, a tool result each turn (see --agent)
    opening: int = AGENT_OPENING  # --agent: the opening's tokens
    tool_tokens: int = AGENT_TOOL_TOKENS  # --agent: each turn's tool result, tokens

    @property
    def shape(self) -> dict[str, Any]:
        """The scenario's opening, turn tokens and content style."""
        if not self.agent:
            return PLAIN
        return {"opening": self.opening, "turn_tokens": self.tool_tokens, "style": "agent"}

    @property
    def pacing(self) -> str:
        return "free" if self.turns > 1 else "lockstep"


def prioritize(pid: int, nice: int) -> None:
    """Give ``pid`` the nice value ``nice``. With autogroups on (the Linux default for
    desktops and many VMs) a nice value only counts inside the process's session, so each
    process is started in a session of its own and its autogroup gets the value too."""
    if not nice:
        return
    os.setpriority(os.PRIO_PROCESS, pid, nice)
    group = Path(f"/proc/{pid}/autogroup")
    if group.exists():
        group.write_text(str(nice))


def bytecode_env() -> dict[str, str]:
    """This environment without PYTHONDONTWRITEBYTECODE (see :func:`spawn`)."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


@contextlib.contextmanager
def stream_server(*options: str) -> Iterator[str]:
    """benchmarks/stream_server.py pinned to CPU 0 with ``options`` (its command line), as the
    one-process benchmarks run it (loop_stalls, loop_iterations, memory_peak, fixed_phases):
    yields its URL; terminated on the way out."""
    server = subprocess.Popen(
        [sys.executable, str(HERE / "stream_server.py"), "--cpu", "0", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert server.stdout is not None
        yield server.stdout.readline().strip().removeprefix("listening on ")
    finally:
        server.terminate()


def spawn(command: list[str], setup: Setup, **options: Any) -> subprocess.Popen[str]:
    """Start ``command``. Without PYTHONDONTWRITEBYTECODE: a checkout's modules are then
    imported from bytecode after the first run, as an installed package's are (with it, an
    editable install compiles every module of the library in every run: ~0.8 s of CPU)."""
    proc = subprocess.Popen(
        command, text=True, start_new_session=bool(setup.nice), env=bytecode_env(), **options
    )
    prioritize(proc.pid, setup.nice)
    return proc


@dataclass
class Run:
    """One client run against a fresh server, and what it measured."""

    mode: str
    users: int
    tokens: int
    reps: int
    python: str = sys.executable
    requests: int = 0
    valid: int = 0
    streamed: int = 0  # Σ completion tokens over valid requests
    run_cpu_s: float = 0.0
    import_cpu_s: float = 0.0
    peak_rss_mb: float = 0.0
    worker_rss_mb: float = 0.0  # --workers: the largest worker process's peak RSS
    window_s: float = 0.0  # Σ streaming windows (per repetition: first sent → last done)
    window_cpu_s: float | None = None  # client CPU inside them
    server_cpu_s: float | None = None  # server CPU inside them (the busiest process's)
    ttft_bias_ms: list[float] = field(default_factory=list)
    itl_bias_us: list[float] = field(default_factory=list)
    uplink_ms: list[float] = field(default_factory=list)  # request written → read by server
    downlink_ms: list[float] = field(default_factory=list)  # first chunk written → read
    unmatched: int = 0
    warnings: list[str] = field(default_factory=list)  # the library's, from its result
    total_cpu_s: float = 0.0  # the whole client process: interpreter, import, run, exit
    lag_p99_ms: float | None = None  # the library's own event-loop lag (its result's client)
    lag_max_ms: float | None = None
    error: str | None = None
    out: Path | None = None  # the run's folder (--agent: the bare loop's script comes from it)


def agent_script(run_dir: Path, dest: Path) -> Path:
    """The library run's histories as the bare loop replays them: from its transcripts, per
    repetition and session, each turn's new messages (the prompt less the previous prompt
    and its reply; turn 1: the whole opening). The bare loop appends its own real reply
    between them, so it sends what the library sent. Written to ``dest`` as JSON."""
    store: dict[str, Any] = {}
    turns: dict[tuple[int, int], list[tuple[int, list[str]]]] = {}
    for line in (run_dir / "transcripts.jsonl").open():
        entry = json.loads(line)
        if "sha256" in entry:
            store[entry["sha256"]] = entry["message"]
        elif not (t := entry["turn"])["warmup"]:
            turns.setdefault((t["repetition"], t["session"]), []).append((t["turn"], t["messages"]))
    reps = sorted({rep for rep, _ in turns})
    script: dict[str, list[list[dict[str, Any]]]] = {}
    for (rep, session), played in turns.items():
        sent = 0  # messages the previous prompt and its reply hold
        new = []
        for _, names in sorted(played):
            new.append([store[h] for h in names[sent:]])
            sent = len(names) + 1
        script[f"{reps.index(rep)}/{session}"] = new
    dest.write_text(json.dumps(script))
    return dest


def server_cores(setup: Setup) -> list[int]:
    """The benchmark server's cores, one per process: the server core, then the lowest cores
    that are neither it nor the client's."""
    spare = [c for c in setup.cores if c not in (setup.server_cpu, setup.client_cpu)]
    return [setup.server_cpu, *spare[: setup.server_processes - 1]]


def client_cores(setup: Setup) -> set[int]:
    """The library client's cores: its one core, or with --workers every core of this
    process's but the server's (the worker processes inherit the set)."""
    if setup.workers == "1":
        return {setup.client_cpu}
    return (set(setup.cores) | {setup.client_cpu}) - set(server_cores(setup))


def children_cpu() -> float:
    """User + system CPU seconds of this process's reaped children, so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def task_cpu_ns(pid: int) -> int | None:
    """On-CPU time of every thread of ``pid``, in ns (schedstat: not tick-rounded)."""
    total = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return None
    return total


def interpolate(samples: list[tuple[int, int]], t: int) -> float:
    """CPU ns at time ``t`` from (time, cpu) samples, linear between neighbours."""
    if t <= samples[0][0]:
        return samples[0][1]
    for (t0, c0), (t1, c1) in itertools.pairwise(samples):
        if t0 <= t <= t1:
            return c0 + (c1 - c0) * (t - t0) / max(1, t1 - t0)
    return samples[-1][1]


def start_servers(mode: str, out: Path, setup: Setup) -> tuple[list[subprocess.Popen[str]], str]:
    """The benchmark server: one process per server core, on one port (SO_REUSEPORT: the
    kernel spreads the connections), each writing its truth to ``out/truth-N.jsonl``."""
    ttft, itl = PACED if mode == "paced" else (0.0, 0.0)
    procs: list[subprocess.Popen[str]] = []
    url = ""
    port = 0  # the first process picks it, the others join it
    many = setup.server_processes > 1
    try:
        for i, core in enumerate(server_cores(setup)):
            proc = spawn(
                [
                    sys.executable,
                    str(SERVER),
                    *("--cpu", str(core), "--port", str(port)),
                    *("--truth", str(out / f"truth-{i}.jsonl")),
                    *("--ttft-ms", str(ttft), "--itl-ms", str(itl)),
                    *("--burst", str(setup.burst if mode == "zero" else 1)),
                    *(["--reuse-port"] if many else []),
                ],
                setup,
                stdout=subprocess.PIPE,
            )
            procs.append(proc)
            assert proc.stdout is not None
            deadline = time.monotonic() + SERVER_START_S
            line = ""
            while time.monotonic() < deadline and not line:
                line = proc.stdout.readline().strip()
            if not line.startswith("listening on "):
                raise RuntimeError(f"stream server did not start: {line!r}")
            if not url:
                url = line.removeprefix("listening on ")
                port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
    except BaseException:
        for proc in procs:
            proc.kill()
        raise
    return procs, url


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def run_client(
    mode: str,
    users: int,
    tokens: int,
    reps: int,
    work: Path,
    setup: Setup,
    profile: Path | None = None,
    python: str = sys.executable,
    script: Path | None = None,
) -> Run:
    """One fresh server, one client process; the figures of that run. ``script``: the bare
    loop sends these histories (:func:`agent_script`) instead of its own chat."""
    tag = f"{mode}-c{users}-n{tokens}-{time.monotonic_ns()}"
    out = work / tag
    out.mkdir(parents=True)
    scenario = out / "scenario.toml"
    scenario.write_text(
        SCENARIO.format(
            users=users,
            tokens=tokens,
            reps=reps,
            turns=setup.turns,
            pacing=setup.pacing,
            **setup.shape,
        )
    )
    run = Run(mode=mode, users=users, tokens=tokens, reps=reps, python=python)
    servers, url = start_servers(mode, out, setup)
    samples: list[tuple[int, int]] = []
    server_samples: list[list[tuple[int, int]]] = [[] for _ in servers]  # per process
    try:
        interpreter, _, loop = python.partition(":")
        config = {
            "cpu": setup.client_cpu,
            "cpus": sorted(client_cores(setup)),
            "workers": setup.workers,
            "scenario": str(scenario),
            "url": url,
            "out": str(out / "run"),
            "profile": str(profile) if profile else None,
            "loop": loop or "auto",
            "users": users,
            "tokens": tokens,
            "reps": reps,
            "turns": setup.turns,
            "script": str(script) if script else None,
        }
        run.out = out
        role = "--client"
        reaped = children_cpu()  # the server is reaped later: the growth is the client's
        if interpreter == BARE:
            interpreter, role = sys.executable, "--bare-client"
        client = spawn(
            [interpreter, str(Path(__file__).resolve()), role, json.dumps(config)],
            setup,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while client.poll() is None and time.monotonic() < deadline:
            now = time.perf_counter_ns()
            cpu = task_cpu_ns(client.pid)
            if cpu is not None:
                samples.append((now, cpu))
            for server, taken in zip(servers, server_samples, strict=True):
                if (server_cpu := task_cpu_ns(server.pid)) is not None:
                    taken.append((now, server_cpu))
            time.sleep(SAMPLE_S)
        if client.poll() is None:
            stop(client, signal.SIGKILL)
            run.error = f"client still running after {RUN_TIMEOUT_S:g} s: killed"
            return run
        stdout, stderr = client.communicate(timeout=30)
        run.total_cpu_s = children_cpu() - reaped
    finally:
        for server in servers:
            stop(server)
    if client.returncode != 0:
        run.error = f"client exit {client.returncode}: {stderr.strip()[-500:]}"
        return run
    report = json.loads(stdout.strip().splitlines()[-1])
    run.run_cpu_s = report["run_cpu_s"]
    run.import_cpu_s = report["import_cpu_s"]
    run.peak_rss_mb = report["peak_rss_mb"]
    run.worker_rss_mb = report.get("worker_rss_mb", 0.0)
    run.warnings = report["warnings"]
    result_path = out / "run" / "result.json"
    if result_path.exists():
        health = json.loads(result_path.read_text()).get("client") or {}
        run.lag_p99_ms = health.get("loop_lag_p99_ms")
        run.lag_max_ms = health.get("loop_lag_max_ms")
    lines = map(json.loads, (out / "run" / "records.jsonl").open())
    records = [r for r in lines if "kind" not in r]  # header, nonces, windows: not turns
    truths = {
        t["id"]: t
        for path in sorted(out.glob("truth-*.jsonl"))
        for t in map(json.loads, path.open())
    }
    match(run, records, truths)
    windows = streaming_windows(records)
    run.window_s = sum(end - start for start, end in windows) / 1e9
    if len(samples) >= 2:
        run.window_cpu_s = (
            sum(interpolate(samples, end) - interpolate(samples, start) for start, end in windows)
            / 1e9
        )
    busiest = [  # each server process's CPU inside the windows: the busiest one's
        sum(interpolate(taken, end) - interpolate(taken, start) for start, end in windows) / 1e9
        for taken in server_samples
        if len(taken) >= 2
    ]
    if busiest:
        run.server_cpu_s = max(busiest)
    return run


def streaming_windows(records: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """Per repetition: the first request sent → the last stream done."""
    spans: dict[int, tuple[int, int]] = {}
    for r in records:
        if r.get("sent_ns") is None or r.get("done_ns") is None:
            continue
        start, end = spans.get(r["repetition"], (r["sent_ns"], r["done_ns"]))
        spans[r["repetition"]] = (min(start, r["sent_ns"]), max(end, r["done_ns"]))
    return sorted(spans.values())


def match(run: Run, records: list[dict[str, Any]], truths: dict[str, dict[str, Any]]) -> None:
    """Client records against the server's truth, request by request."""
    run.requests = len(records)
    for r in records:
        if not r.get("valid"):
            continue
        run.valid += 1
        run.streamed += r["completion_tokens"]
        t = truths.get(r.get("request_id") or "")
        if t is None or t["first_ns"] is None or r.get("ttft_ns") is None:
            run.unmatched += 1
            continue
        true_ttft = t["first_ns"] - t["received_ns"]
        run.ttft_bias_ms.append((r["ttft_ns"] - true_ttft) / 1e6)
        run.uplink_ms.append((t["received_ns"] - r["sent_ns"]) / 1e6)
        run.downlink_ms.append((r["first_content_ns"] - t["first_ns"]) / 1e6)
        gaps = t["tokens"] - 1
        if gaps > 0:
            client_span = r["last_content_ns"] - r["first_content_ns"]
            server_span = t["last_ns"] - t["first_ns"]
            run.itl_bias_us.append((client_span - server_span) / gaps / 1e3)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def median_of(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


@dataclass
class Row:
    """One (client, mode, concurrency) line of the table: medians over runs."""

    client: str
    mode: str
    users: int
    runs: int
    requests: int
    allin_us: float | None = None
    marginal_us: float | None = None
    fixed_ms: float | None = None  # all-in CPU less the marginal cost of its tokens, per request
    stream_us: float | None = None
    client_core: float | None = None
    server_core: float | None = None
    tokens_per_core_s: float | None = None
    peak_rss_mb: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    itl_p50_us: float | None = None
    itl_p99_us: float | None = None
    uplink_p50_ms: float | None = None
    downlink_p50_ms: float | None = None
    downlink_p99_ms: float | None = None
    total_cpu_s: float | None = None  # the whole client process
    lag_max_ms: float | None = None  # the library's self-watch: its worst event-loop stall


def summarize(client: str, mode: str, users: int, long: list[Run], short: list[Run]) -> Row:
    ok = [r for r in long if r.error is None and r.valid]
    row = Row(client, mode, users, len(ok), ok[0].requests if ok else 0)
    if not ok:
        return row
    row.allin_us = median_of([r.run_cpu_s / r.streamed * 1e6 for r in ok])
    timed = [r for r in ok if r.window_cpu_s is not None and r.window_s >= MIN_WINDOW_S]
    if timed:
        row.stream_us = median_of(
            [r.window_cpu_s / r.streamed * 1e6 for r in timed if r.window_cpu_s]
        )
        row.client_core = median_of([r.window_cpu_s / r.window_s for r in timed if r.window_cpu_s])
        row.server_core = median_of([r.server_cpu_s / r.window_s for r in timed if r.server_cpu_s])
        row.tokens_per_core_s = median_of(
            [r.streamed / r.window_cpu_s for r in timed if r.window_cpu_s]
        )
    short_ok = [r for r in short if r.error is None and r.valid]
    if short_ok:
        cpu_long = statistics.median(r.run_cpu_s for r in ok)
        cpu_short = statistics.median(r.run_cpu_s for r in short_ok)
        tok_long = statistics.median(r.streamed for r in ok)
        tok_short = statistics.median(r.streamed for r in short_ok)
        if tok_long > tok_short:
            row.marginal_us = (cpu_long - cpu_short) / (tok_long - tok_short) * 1e6
            fixed_s = cpu_long - row.marginal_us / 1e6 * tok_long
            row.fixed_ms = fixed_s / statistics.median(r.valid for r in ok) * 1e3
    row.peak_rss_mb = median_of([r.peak_rss_mb for r in ok])
    row.total_cpu_s = median_of([r.total_cpu_s for r in ok])
    row.lag_max_ms = median_of([r.lag_max_ms for r in ok])
    if all(r.ttft_bias_ms for r in ok):
        row.ttft_p50_ms = median_of([percentile(r.ttft_bias_ms, 50) for r in ok])
        row.ttft_p99_ms = median_of([percentile(r.ttft_bias_ms, 99) for r in ok])
        row.uplink_p50_ms = median_of([percentile(r.uplink_ms, 50) for r in ok])
        row.downlink_p50_ms = median_of([percentile(r.downlink_ms, 50) for r in ok])
        row.downlink_p99_ms = median_of([percentile(r.downlink_ms, 99) for r in ok])
    if all(r.itl_bias_us for r in ok):
        row.itl_p50_us = median_of([percentile(r.itl_bias_us, 50) for r in ok])
        row.itl_p99_us = median_of([percentile(r.itl_bias_us, 99) for r in ok])
    return row


FIXED_TOKENS = 64
# The fixed cost's parts, each a process of its own (python -c): what the whole run pays once.
FIXED_PARTS = (
    ("interpreter", "pass"),
    ("import aiohttp", "import aiohttp"),
    ("import pydantic", "import pydantic"),
    ("import the run's modules", "import workloads.runner.run, workloads.wire.loop"),
    ("tiktoken's tables", "from workloads.core import tokens; tokens.encoding()"),
)


def fixed_cost(pythons: list[str], setup: Setup, runs: int, names: dict[str, str]) -> None:
    """Issue 20's fixed cost: the whole client process of a C1 run of 2 requests, median of
    ``runs``, the clients alternated; then the parts (each includes the interpreter)."""
    totals: dict[str, list[float]] = {py: [] for py in pythons}
    with tempfile.TemporaryDirectory(prefix="client-fixed-") as tmp:
        for _ in range(runs):
            for py in pythons:
                run = run_client("zero", 1, FIXED_TOKENS, 1, Path(tmp), setup, python=py)
                if run.error or run.valid < run.requests or run.requests != 2:
                    print(f"  {names[py]}: {run.error or f'{run.valid}/{run.requests} valid'}")
                    continue
                totals[py].append(run.total_cpu_s)
    print(f"\nfixed cost: a whole C1 run of 2 requests, process CPU s, median of {runs}:")
    for py in pythons:
        values = totals[py]
        spread = " ".join(f"{v:.2f}" for v in values)
        print(f"  {names[py]:<21} {fmt(median_of(list(values)), '.3f')}  [{spread}]")
    for py in pythons:
        if py == BARE:
            continue
        interpreter = py.partition(":")[0]
        parts = ", ".join(
            f"{name} {startup_cpu(code, interpreter):.3f}" for name, code in FIXED_PARTS
        )
        print(f"  parts ({names[py]}; each a process of its own, median of 5): {parts}")


def play(
    py: str,
    tokens: int,
    mode: str,
    users: int,
    reps: int,
    work: Path,
    setup: Setup,
    latest: dict[int, Path],
) -> Run:
    """One run of client ``py``; with --agent the bare loop replays the histories of the
    library's last run of this length (``latest``, which this updates)."""
    script = None
    if py == BARE and setup.agent and tokens in latest:
        script = agent_script(latest[tokens], work / f"script-{tokens}.json")
    run = run_client(mode, users, tokens, reps, work, setup, python=py, script=script)
    if py != BARE and run.error is None and run.out is not None:
        latest.setdefault(tokens, run.out / "run")
    return run


def history_cost(
    pythons: list[str],
    setup: Setup,
    work: Path,
    runs: int,
    histories: list[int],
    names: dict[str, str],
) -> None:
    """Per-request CPU at long histories: C{HISTORY_USERS} sessions of HISTORY_TURNS and of
    HISTORY_TURNS + HISTORY_EXTRA turns on an opening of ``history`` tokens, 64-token replies,
    zero delay; (the client's CPU inside the streaming window of the longer run − the
    shorter's) / the extra requests. The window (first request sent → last stream done)
    leaves out the imports, the probes, the opening's first sizing and the summaries; the
    difference cancels the rest, so what is left is what one more request at that history
    costs (its 64 streamed tokens included). Clients alternated."""
    print(
        f"\nper-request CPU at long histories: C{HISTORY_USERS}, {SHORT_TOKENS}-token replies, "
        f"{setup.tool_tokens}-token tool results, {HISTORY_TURNS} against "
        f"{HISTORY_TURNS + HISTORY_EXTRA} turns, zero delay; median of {runs} run(s)"
    )
    print(f"{'client':<21}{'history':>9}{'ms/request':>12}{'runs (ms)':>30}")
    for history in histories:
        per: dict[str, list[float]] = {py: [] for py in pythons}
        for _ in range(runs):
            scripts: dict[int, Path] = {}
            for py in pythons:
                cpu = {}
                for turns in (HISTORY_TURNS, HISTORY_TURNS + HISTORY_EXTRA):
                    shape = dataclasses.replace(setup, turns=turns, opening=history)
                    script = None
                    if py == BARE and turns in scripts:
                        script = agent_script(scripts[turns], work / f"history-{turns}.json")
                    run = run_client(
                        "zero",
                        HISTORY_USERS,
                        SHORT_TOKENS,
                        1,
                        work,
                        shape,
                        python=py,
                        script=script,
                    )
                    if run.error or run.valid < run.requests:
                        print(
                            f"  {names[py]} {history}: "
                            + (run.error or f"{run.valid}/{run.requests} valid")
                        )
                        break
                    if py != BARE and run.out is not None:
                        scripts.setdefault(turns, run.out / "run")
                    cpu[turns] = run.window_cpu_s or 0.0
                else:
                    extra = HISTORY_USERS * HISTORY_EXTRA
                    per[py].append(
                        (cpu[HISTORY_TURNS + HISTORY_EXTRA] - cpu[HISTORY_TURNS]) / extra * 1e3
                    )
        for py in pythons:
            values = per[py]
            spread = " ".join(f"{v:.2f}" for v in values)
            print(
                f"{names[py]:<21}{history:>9}{fmt(median_of(list(values)), '.2f'):>12}   [{spread}]"
            )


def startup_cpu(code: str, python: str = sys.executable, times: int = 5) -> float:
    """Median user + system CPU seconds of ``python -c code``, a fresh process each time."""
    values = []
    for _ in range(times):
        proc = subprocess.Popen([python, "-c", code], env=bytecode_env())
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise RuntimeError(f"python -c {code!r} failed")
        values.append(usage.ru_utime + usage.ru_stime)
    return statistics.median(values)


CALIBRATION_CHUNK = (
    '{"id":"chatcmpl-bench-1-1","object":"chat.completion.chunk","created":1796074528,'
    '"model":"bench-model","choices":[{"index":0,"delta":{"content":" the"},'
    '"logprobs":null,"finish_reason":null}]}'
)


def calibrate(cpu: int, loops: int = 20_000, rounds: int = 7) -> float:
    """This core's speed today, to compare figures across machines and machine states: µs
    per ``json.loads`` of one stream chunk, best of ``rounds``, on the client's core."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        best = float("inf")
        for _ in range(rounds):
            start = time.process_time()
            for _ in range(loops):
                json.loads(CALIBRATION_CHUNK)
            best = min(best, time.process_time() - start)
    finally:
        os.sched_setaffinity(0, before)
    return best / loops * 1e6


def client_name(python: str) -> str:
    """A short name for a client interpreter: its virtual environment's folder (and
    ``+asyncio`` for ``PY:asyncio``)."""
    interpreter, _, loop = python.partition(":")
    path = Path(interpreter)
    name = path.parent.parent.name if path.parent.name == "bin" else path.name
    return f"{name}+{loop}" if loop else name


def machine() -> str:
    import aiohttp

    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{platform.node()} · {model} · {os.cpu_count()} cores · "
        f"{platform.python_implementation()} {platform.python_version()} · "
        f"aiohttp {aiohttp.__version__} · load average {load}"
    )


def fmt(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def table(rows: list[Row]) -> str:
    columns = [
        ("client", "", 21, "<"),
        ("mode", "", 6, "<"),
        ("C", "", 5, ">"),
        ("req", "", 6, ">"),
        ("all-in", "µs/tok", 8, ">"),
        ("margin", "µs/tok", 8, ">"),
        ("fixed", "ms/req", 8, ">"),
        ("stream", "µs/tok", 8, ">"),
        ("client", "core", 7, ">"),
        ("server", "core", 7, ">"),
        ("tok/s", "/core", 8, ">"),
        ("RSS", "MB", 6, ">"),
        ("TTFT bias ms", "p50 / p99", 20, ">"),
        ("downlink ms", "p50 / p99", 18, ">"),
        ("ITL bias µs", "p50 / p99", 20, ">"),
        ("stall", "ms", 7, ">"),
        ("proc", "CPU s", 7, ">"),
    ]

    def line(cells: list[str]) -> str:
        return "".join(f"{c:{a}{w}}" for c, (_, _, w, a) in zip(cells, columns, strict=True))

    lines = [line([c[0] for c in columns]), line([c[1] for c in columns])]
    for r in rows:
        lines.append(
            line(
                [
                    r.client[:20],
                    r.mode,
                    str(r.users),
                    str(r.requests),
                    fmt(r.allin_us, ".1f"),
                    fmt(r.marginal_us, ".1f"),
                    fmt(r.fixed_ms, ".2f"),
                    fmt(r.stream_us, ".1f"),
                    "–" if r.client_core is None else f"{r.client_core:.0%}",
                    "–" if r.server_core is None else f"{r.server_core:.0%}",
                    "–" if r.tokens_per_core_s is None else f"{r.tokens_per_core_s / 1e3:.1f}k",
                    fmt(r.peak_rss_mb, ".0f"),
                    f"{fmt(r.ttft_p50_ms, '.2f')} / {fmt(r.ttft_p99_ms, '.2f')}",
                    f"{fmt(r.downlink_p50_ms, '.2f')} / {fmt(r.downlink_p99_ms, '.2f')}",
                    f"{fmt(r.itl_p50_us, '.1f')} / {fmt(r.itl_p99_us, '.1f')}",
                    fmt(r.lag_max_ms, ".1f"),
                    fmt(r.total_cpu_s, ".2f"),
                ]
            )
        )
    return "\n".join(lines)


def ratios(rows: list[Row]) -> str:
    """Each client's figures over the bare aiohttp loop's of the same (mode, C): the
    comparison that holds however fast the shared core was during the run."""
    bare = {(r.mode, r.users): r for r in rows if r.client == BARE}
    out = []
    for r in rows:
        b = bare.get((r.mode, r.users))
        if b is None or r.client == BARE:
            continue

        def over(mine: float | None, theirs: float | None) -> str:
            return "–" if mine is None or not theirs else f"{mine / theirs:.2f}×"

        out.append(
            f"{r.client} / {BARE}, {r.mode} C{r.users}: all-in CPU {over(r.allin_us, b.allin_us)}"
            f", marginal {over(r.marginal_us, b.marginal_us)}, stream CPU "
            f"{over(r.stream_us, b.stream_us)}, process CPU {over(r.total_cpu_s, b.total_cpu_s)}"
            f", peak RSS {over(r.peak_rss_mb, b.peak_rss_mb)}; downlink p99 "
            f"{fmt(r.downlink_p99_ms, '.2f')} ms against {fmt(b.downlink_p99_ms, '.2f')} ms"
        )
    return "\n".join(out)


def hot_spots(stats_path: Path, top: int = 25) -> str:
    buffer = io.StringIO()
    stats = pstats.Stats(str(stats_path), stream=buffer)
    stats.strip_dirs().sort_stats("tottime").print_stats(top)
    return buffer.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="one run of each, fewer requests")
    parser.add_argument("--runs", type=int, help="runs per figure (median); default 3, quick 1")
    parser.add_argument(
        "--agent",
        action="store_true",
        help="the shape agents run (the headline): zero delay, free pacing, "
        f"{AGENT_TURNS} turns (--turns), an opening of {AGENT_OPENING} tokens (--opening), "
        f"each turn the real reply and a {AGENT_TOOL_TOKENS}-token tool result "
        f"(--tool-tokens) appended, C{' and C'.join(map(str, AGENT_USERS))}; the bare loop "
        "replays the library's histories (its transcripts); then the per-request CPU at "
        "long histories (--histories)",
    )
    parser.add_argument("--opening", type=int, default=AGENT_OPENING, help="--agent: tokens")
    parser.add_argument(
        "--tool-tokens", type=int, default=AGENT_TOOL_TOKENS, help="--agent: tokens per turn"
    )
    parser.add_argument(
        "--histories",
        type=int,
        nargs="*",
        default=list(HISTORIES),
        metavar="TOKENS",
        help=f"--agent: the per-request CPU at these openings (C{HISTORY_USERS}, 64-token "
        f"replies, {HISTORY_TURNS} against {HISTORY_TURNS + HISTORY_EXTRA} turns); none: skip",
    )
    parser.add_argument("--users", type=int, nargs="+")
    parser.add_argument("--modes", nargs="+", choices=("zero", "paced"))
    parser.add_argument(
        "--cpus",
        type=int,
        nargs=2,
        default=(0, 1),
        metavar=("SERVER", "CLIENT"),
        help="the cores for the server (and harness) and for the client",
    )
    parser.add_argument(
        "--burst",
        type=int,
        default=1,
        help="zero delay: content chunks per server write (default 1, one "
        "token per chunk: vLLM's framing)",
    )
    parser.add_argument(
        "--turns",
        type=int,
        help=f"turns per session (default 1, lock-step; --agent {AGENT_TURNS}); more than "
        "one: free pacing, each session's next turn sent as its reply ends, so turn ends "
        "(records, sizing, transcripts) overlap other streams' first tokens",
    )
    parser.add_argument(
        "--workers",
        default="1",
        metavar="N|auto",
        help="the library's worker processes (run_async's workers; auto: the library's "
        "rule, one per 64 sessions, at most one per client core); past 1 the client and "
        "its workers run on every core but the server's, and the streaming-window CPU "
        "columns count the parent process only",
    )
    parser.add_argument(
        "--server-processes",
        type=int,
        default=1,
        metavar="N",
        help="benchmark server processes on one port (SO_REUSEPORT), each pinned to a core of "
        "its own (the server core, then the lowest others but the client's): at zero delay "
        "one server process's core saturates first, and several let the client set the pace; "
        "the server core column is then the busiest process's",
    )
    parser.add_argument(
        "--no-bare",
        dest="bare",
        action="store_false",
        help=f"leave out the reference client ({BARE}: a bare aiohttp read "
        "loop, run beside the library's in every configuration)",
    )
    parser.add_argument(
        "--nice",
        type=int,
        default=0,
        metavar="N",
        help="run the harness, server and client at this nice value, each in "
        "an autogroup of its own (-20..19; negative needs root): on cores "
        "shared with other work, -19 keeps them from waiting behind it",
    )
    parser.add_argument(
        "--fixed",
        action="store_true",
        help="measure the fixed cost instead: a whole C1 run of 2 requests (2 turns of "
        f"{FIXED_TOKENS} tokens, free pacing, the library's defaults: gate, likelihood and "
        "tokenizer probes, result files), the client process's CPU beside the bare loop's "
        "for the same 2 requests, and its parts as processes of their own",
    )
    parser.add_argument("--json", type=Path, help="write every run's raw figures here")
    parser.add_argument(
        "--profile",
        type=Path,
        help="also profile one client run at C64 zero delay; stats file here",
    )
    parser.add_argument(
        "--python",
        nargs="+",
        default=[sys.executable],
        metavar="PY",
        help="the clients' interpreters (e.g. venvs of two checkouts, before "
        "and after): runs alternate between them, so each comparison is made "
        "under the same machine state; default: this interpreter. PY:asyncio "
        "runs that client on the standard loop even where uvloop is installed",
    )
    parser.add_argument("--client", help=argparse.SUPPRESS)  # internal: the client process
    parser.add_argument("--bare-client", help=argparse.SUPPRESS)  # internal: the reference
    args = parser.parse_args(argv)
    if args.client:
        client_main(json.loads(args.client))
        return 0
    if args.bare_client:
        bare_main(json.loads(args.bare_client))
        return 0
    available = os.sched_getaffinity(0)
    if not set(args.cpus) <= available or args.cpus[0] == args.cpus[1]:
        parser.error(f"--cpus must be two different cores of {sorted(available)}")
    os.sched_setaffinity(0, {args.cpus[0]})
    if args.turns is None:
        args.turns = AGENT_TURNS if args.agent else 1
    if args.users is None:
        args.users = list(AGENT_USERS if args.agent else CONCURRENCIES)
    if args.modes is None:
        args.modes = ["zero"] if args.agent else ["zero", "paced"]
    if args.agent and (args.modes != ["zero"] or args.turns < 2):
        parser.error("--agent is zero delay (--modes zero) with 2 or more turns")
    if args.turns < 1:
        parser.error("--turns must be at least 1")
    if args.workers != "auto" and (not args.workers.isdigit() or int(args.workers) < 1):
        parser.error("--workers must be a number of processes (1 or more) or auto")
    if not 1 <= args.server_processes <= len(available - {args.cpus[1]}):
        parser.error(
            f"--server-processes must be 1 to {len(available - {args.cpus[1]})}: a core each, "
            "none of them the client's"
        )
    setup = Setup(
        args.cpus[0],
        args.cpus[1],
        args.burst,
        args.nice,
        args.turns,
        args.workers,
        tuple(sorted(available)),
        args.server_processes,
        args.agent,
        args.opening,
        args.tool_tokens,
    )
    if args.bare:
        args.python = [*args.python, BARE]
    prioritize(os.getpid(), args.nice)  # the harness samples on time too
    runs = args.runs or (1 if args.quick else 3)
    zero_reps = ZERO_REPS_QUICK if args.quick else ZERO_REPS
    paced_reps = PACED_REPS_QUICK if args.quick else PACED_REPS
    started = time.monotonic()
    print(machine(), flush=True)
    if args.nice:
        print(f"nice {args.nice} (process and autogroup): harness, server and client", flush=True)
    if os.getloadavg()[0] > BUSY_LOAD:
        print(
            f"warning: load average {os.getloadavg()[0]:.1f} before the runs: other work "
            "shares these cores; CPU figures are inflated and the biases are not the "
            "client's alone",
            flush=True,
        )
    names = {py: client_name(py) for py in args.python}
    imports = {
        py: startup_cpu(
            "import aiohttp" if py == BARE else "import workloads",
            sys.executable if py == BARE else py.partition(":")[0],
        )
        for py in args.python
    }
    bare_s = startup_cpu("pass")
    yardstick_us = calibrate(setup.client_cpu)
    for py in args.python:
        what = "aiohttp" if py == BARE else "workloads"
        print(
            f"start-up CPU ({names[py]}): python -c 'import {what}' {imports[py]:.2f} s "
            f"(python -c pass {bare_s:.2f} s), median of 5",
            flush=True,
        )
    print(
        f"yardstick: json.loads of one chunk {yardstick_us:.2f} µs on the client core", flush=True
    )
    if args.fixed:
        fixed_cost(args.python, dataclasses.replace(setup, turns=2), runs, names)
        return 0
    rows: list[Row] = []
    raw: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="client-overhead-") as tmp:
        work = Path(tmp)
        for mode in args.modes:
            for users in args.users:
                reps_of = zero_reps if mode == "zero" else paced_reps
                if args.agent:
                    reps_of = (
                        {u: max(1, r // 2) for u, r in AGENT_REPS.items()}
                        if args.quick
                        else AGENT_REPS
                    )
                if args.quick and users not in reps_of:
                    continue
                reps = reps_of.get(users, 1)
                marginal = mode == "zero" and (
                    args.agent or not args.quick or users in MARGINAL_QUICK
                )
                long: dict[str, list[Run]] = {py: [] for py in args.python}
                short: dict[str, list[Run]] = {py: [] for py in args.python}
                latest: dict[int, Path] = {}  # --agent: the last library run, by length
                for _ in range(runs):
                    latest.clear()
                    for py in args.python:  # alternating: the same machine state for each
                        config = (mode, users, reps, work, setup, latest)
                        long[py].append(play(py, STREAM_TOKENS, *config))
                        if marginal:
                            short[py].append(play(py, SHORT_TOKENS, *config))
                for py in args.python:
                    for r in long[py] + short[py]:
                        if r.error:
                            print(
                                f"  {names[py]} {mode} C{users} n{r.tokens}: {r.error}",
                                file=sys.stderr,
                            )
                        elif r.valid < r.requests or r.unmatched:
                            print(
                                f"  {names[py]} {mode} C{users} n{r.tokens}: {r.valid}/"
                                f"{r.requests} valid, {r.unmatched} unmatched",
                                file=sys.stderr,
                            )
                    raw += [asdict(r) for r in long[py] + short[py]]
                    rows.append(summarize(names[py], mode, users, long[py], short[py]))
                    if setup.workers != "1" and py != BARE:
                        print(
                            f"  {names[py]} {mode} C{users}: peak RSS per process, MB: parent "
                            + ", ".join(f"{r.peak_rss_mb:.0f}" for r in long[py])
                            + "; the largest worker "
                            + ", ".join(f"{r.worker_rss_mb:.0f}" for r in long[py]),
                            flush=True,
                        )
                print(
                    f"  {mode} C{users}: {runs} run(s) done, {time.monotonic() - started:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
        modes = {
            "zero": "zero delay",
            "paced": "paced (TTFT {:g} ms, {:g} ms between tokens)".format(*PACED),
        }
        shape = (
            "1 turn, lock-step"
            if setup.turns == 1
            else f"{setup.turns} turns per session, free pacing"
        )
        if setup.agent:
            shape += (
                f", agent shape: {setup.opening}-token opening, the reply and a "
                f"{setup.tool_tokens}-token tool result appended each turn"
            )
        print(
            f"\n{' and '.join(modes[m] for m in args.modes)} · {STREAM_TOKENS}-token streams"
            f" (marginal: against {SHORT_TOKENS}) · {shape} · median of {runs} run(s)"
        )
        print(table(rows))
        if args.bare:
            print(ratios(rows))
        for row in rows:
            if row.mode == "zero" and row.server_core and row.server_core > SERVER_BUSY:
                print(
                    f"warning: zero delay C{row.users}: the server core was "
                    f"{row.server_core:.0%} busy; the server may have set the pace"
                )
        if args.agent and args.histories:
            history_cost(args.python, setup, work, runs, args.histories, names)
        if args.profile:
            run_client(
                "zero", 64, STREAM_TOKENS, zero_reps[64], work, setup, args.profile, args.python[0]
            )
            print(
                f"\ncProfile of the client ({names[args.python[0]]}) at C64, zero delay "
                f"(stats: {args.profile}):"
            )
            print(hot_spots(args.profile))
    print(
        f"yardstick after: {calibrate(setup.client_cpu):.2f} µs · load average after: "
        f"{', '.join(f'{x:.2f}' for x in os.getloadavg())} · "
        f"{time.monotonic() - started:.0f} s in all"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "machine": machine(),
                    "import_cpu_s": imports,
                    "bare_python_cpu_s": bare_s,
                    "yardstick_us": yardstick_us,
                    "rows": [asdict(r) for r in rows],
                    "runs": raw,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
