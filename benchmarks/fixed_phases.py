"""Where the fixed cost goes: a whole C1 run of 2 requests, its process CPU by phase.

The run of ``client_overhead.py --fixed`` (1 user, 2 turns of 64-token streams, zero delay,
the defaults otherwise) in one process pinned to CPU 1, against benchmarks/stream_server.py
pinned to CPU 0. The CPU before the first import (the interpreter's start) and each import
are read with ``resource.getrusage``; during ``workloads.run_async`` a sampler thread reads
every other thread's CPU clock (``time.pthread_getcpuclockid``) each millisecond and charges
what a thread used since the last sample to the phase its stack shows then (the outermost
frame that PHASES names; an import in progress counts as imports). The sampler's own CPU is
left out of the phases and printed apart; what no phase names is "the rest of the run".

    python benchmarks/fixed_phases.py            # median of 5 runs, a fresh process each
    python benchmarks/fixed_phases.py --runs 1

Loopback only; Linux only (sched_setaffinity).
"""

from __future__ import annotations

import resource

START = resource.getrusage(resource.RUSAGE_SELF)  # the interpreter's start, before any import

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

HERE = Path(__file__).resolve().parent
SAMPLE_S = 0.001
MAX_RUN_S = 120.0

# (phase, file name, function): the outermost frame of a sampled stack that one of these
# matches names the phase (rules in this order; "" matches any): a task's stack begins at its
# own coroutine (a session's turns, a gate case), not at the code that started it.
PHASES = (
    ("tokenizer tables", "tokens.py", "encoding"),
    ("target check (models)", "identify.py", ""),
    ("tokenizer probe", "tokenize.py", "probe_tokenizer"),
    ("likelihood probe", "likelihood.py", ""),
    ("gate", "gate.py", ""),
    ("opening sessions (sizing)", "players.py", "open"),
    ("opening sessions (sizing)", "repetition.py", "open_sessions"),
    ("opening sessions (sizing)", "repetition.py", "_spawn_and_prepare"),
    ("measured window (the sessions' turns)", "players.py", "play"),
    ("measured window (the sessions' turns)", "repetition.py", ""),
    ("measured window (the sessions' turns)", "session.py", ""),
    ("traces (after the window)", "players.py", "traces"),
    ("telemetry", "window.py", ""),
    ("summaries and result.json", "", "build_result"),
    ("summaries and result.json", "cells.py", "_save"),
    ("summaries and result.json", "monitor.py", "health"),
)
IMPORTS = "<frozen importlib._bootstrap>"


def cpu_s(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


def phase_of(frame: Any) -> str:
    """The phase a thread's stack is in: an import anywhere in it, else the outermost frame
    a rule matches."""
    frames = []
    while frame is not None:
        if frame.f_code.co_filename == IMPORTS:
            return "imports during the run"
        frames.append(frame.f_code)
        frame = frame.f_back
    for code in reversed(frames):
        name = Path(code.co_filename).name
        for phase, file, function in PHASES:
            if (name == file or not file) and (not function or code.co_name == function):
                return phase
    return "the rest of the run (loop, client set-up, records)"


def one_run() -> dict[str, float]:
    """One C1 run of 2 requests in this process; its CPU seconds by phase (printed as JSON)."""
    os.sched_setaffinity(0, {1})
    phases: dict[str, float] = {"interpreter start": cpu_s(START)}
    before = resource.getrusage(resource.RUSAGE_SELF)
    import aiohttp  # noqa: F401

    after = resource.getrusage(resource.RUSAGE_SELF)
    phases["import aiohttp"] = cpu_s(after) - cpu_s(before)
    import workloads
    import workloads.runner.run
    from workloads.wire.loop import run_loop

    phases["import workloads (the rest)"] = cpu_s(resource.getrusage(resource.RUSAGE_SELF)) - cpu_s(
        after
    )
    from client_overhead import MODEL, PLAIN, SCENARIO, stream_server

    tmp = Path(tempfile.mkdtemp(prefix="fixed-phases-"))
    with stream_server() as url:
        (tmp / "s.toml").write_text(
            SCENARIO.format(users=1, turns=2, tokens=64, reps=1, pacing="free", **PLAIN)
        )
        scenario = workloads.load_scenario(tmp / "s.toml")
        done = threading.Event()
        clocks: dict[int, tuple[int, float]] = {}  # thread ident -> (clock id, CPU s so far)
        sampler_cpu = [0.0]

        def sample() -> None:
            me = threading.get_ident()
            deadline = time.monotonic() + MAX_RUN_S
            while not done.is_set() and time.monotonic() < deadline:
                frames = sys._current_frames()
                for ident, frame in frames.items():
                    if ident == me:
                        continue
                    if ident not in clocks:
                        try:
                            clock = time.pthread_getcpuclockid(ident)
                        except OSError:
                            continue
                        clocks[ident] = (clock, 0.0)
                    clock, last = clocks[ident]
                    try:
                        now = time.clock_gettime(clock)
                    except OSError:  # the thread ended meanwhile
                        continue
                    phase = phase_of(frame)
                    phases[phase] = phases.get(phase, 0.0) + now - (last or now)
                    clocks[ident] = (clock, now)
                time.sleep(SAMPLE_S)
            sampler_cpu[0] = time.thread_time()

        ran_before = cpu_s(resource.getrusage(resource.RUSAGE_SELF))
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        result = run_loop(
            workloads.run_async(scenario, target=workloads.Target(url, MODEL), out_dir=tmp / "out")
        )
        done.set()
        sampler.join()
        ran = cpu_s(resource.getrusage(resource.RUSAGE_SELF)) - ran_before - sampler_cpu[0]
        assert result.complete, "the run did not complete"
    counted = sum(v for k, v in phases.items() if not k.startswith(("interpreter", "import ")))
    # a thread's CPU before its first sample (and since its last), and start-up of the loop
    phases["not sampled (threads' first and last ms)"] = ran - counted
    phases["process (less the sampler)"] = (
        cpu_s(resource.getrusage(resource.RUSAGE_SELF)) - (sampler_cpu[0])
    )
    phases["sampler (left out)"] = sampler_cpu[0]
    return phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child run
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_run()))
        return
    runs = []
    for _ in range(args.runs):
        out = subprocess.run(
            [sys.executable, __file__, "--one"], capture_output=True, text=True, check=True
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"a whole C1 run of 2 requests, CPU s by phase, median of {len(runs)}:")
    for phase in runs[0]:
        values = [r.get(phase, 0.0) for r in runs]
        print(f"  {phase:<52} {statistics.median(values):7.3f}")
    for phase in sorted({p for r in runs for p in r} - set(runs[0])):
        values = [r.get(phase, 0.0) for r in runs]
        print(f"  {phase:<52} {statistics.median(values):7.3f}")


if __name__ == "__main__":
    main()
