"""Where the client's event loop stalls, and whether a stream was open then.

One process runs ``workloads.run_async`` (pinned to CPU 1) against benchmarks/stream_server.py
(pinned to CPU 0; TTFT 100 ms, 10 ms between tokens, one token per chunk), USERS sessions of
TURNS turns, free pacing, 512-token streams: the multi-turn shape of issue 20. A 1 ms
heartbeat on the loop and a watchdog thread that wakes every 0.5 ms: whenever the heartbeat
is more than 5 ms late, the watchdog samples the loop thread's stack (``sys._current_frames``).
The garbage collector's pauses over 2 ms are logged through ``gc.callbacks``, and every
collection is tallied by generation (count, time, objects freed). At the end, the records'
send and done stamps say how many streams were open during each stall. For each of the
longest stalls: which threads of the process ran on a CPU from its first sample to its last
(/proc/self/task/*/schedstat; the watchdog's own sampling is one of them: every thread here
shares CPU 1) and where the other threads were.

Every heartbeat is also logged with the loop thread's CPU clock: the log counts the stalls
over 5 ms again without the watchdog (a gap between two beats; a watchdog that waits for the
GIL sees a stall only at its end) and says whether the loop ran through each or waited. A
sidecar process on CPU 2 (no GIL, no share of CPU 1) reads every thread's /proc schedstat
and state while the run lasts (all of them every ~1 ms on the lent host): for each stall
with streams open, and each gap over 3 ms at the boundary, which thread ran, waited for the
CPU, or slept (D: blocked in a system call). The boundary between the pre-open and the first
sends is stamped: ``Pool.fill`` begun and returned, each connect and whether a fill opened
it, the window's telemetry start and its energy reads, ``play`` begun.

    python benchmarks/loop_stalls.py 256 2         # C256, 2 turns: ~20 s
    python benchmarks/loop_stalls.py 1000 2 auto   # with --workers auto (the parent only)

Prints every stall over 5 ms with streams open (start, length, open streams), the GC pauses,
the stacks of the longest stalls, the heartbeat log's count, and the boundary step by step.
Loopback only; Linux only (sched_setaffinity).
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextvars
import gc
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from client_overhead import (
    PLAIN,
    SCENARIO,
    stream_server,
)  # the benchmark's scenario: one shape for both

LATE_S = 0.005  # a heartbeat this late is a stall
BEAT_S = 0.001
WATCH_S = 0.0005
MAX_RUN_S = 600.0
SIDE_S = MAX_RUN_S  # the sidecar's span at most: it is stopped when the run ends
SIDE_EVERY_S = 0.0003


def main() -> None:
    if sys.argv[1] == "--side":
        sidecar(int(sys.argv[2]), Path(sys.argv[3]))
        return
    users, turns = int(sys.argv[1]), int(sys.argv[2])
    workers = sys.argv[3] if len(sys.argv) > 3 else "1"
    tmp = Path(tempfile.mkdtemp())
    with stream_server(
        *("--ttft-ms", "100", "--itl-ms", "10", "--truth", str(tmp / "truth.jsonl"))
    ) as url:
        scenario = SCENARIO.format(
            users=users, turns=turns, tokens=512, reps=1, pacing="free", **PLAIN
        )
        (tmp / "s.toml").write_text(scenario)
        report(*watch_run(tmp, url, users, workers))


def watch_run(
    tmp: Path, url: str, users: int, workers: str
) -> tuple[Any, float, list[Any], list[Any]]:
    os.sched_setaffinity(0, {1})
    sys.setswitchinterval(WATCH_S)  # the watchdog gets the interpreter during a stall
    import workloads
    from workloads.runner.workers.pool import auto_workers
    from workloads.wire.loop import run_loop

    loop_thread = threading.get_ident()
    loop_native = threading.get_native_id()
    last = [time.perf_counter()]
    done = threading.Event()
    stalls: list[list[Any]] = []  # [start, length, Counter of stacks]

    watcher = [0]
    moved: list[tuple[float, float, float]] = []  # samples the loop beat during: was, now, late
    stamps = Stamps()
    stamp_boundary(stamps)

    def watch() -> None:
        watcher[0] = threading.get_native_id()
        current: list[Any] | None = None
        deadline = time.perf_counter() + MAX_RUN_S
        while not done.is_set() and time.perf_counter() < deadline:
            time.sleep(WATCH_S)
            # Read once: the loop may take the GIL back while this thread samples (the switch
            # interval; extract_stack's file checks release it) and beat, and a stall keyed
            # by that newer beat was dated after its own end: a pre-open's connect stall then
            # read as one over the first sends (benchmarks/RESULTS.md, "The boundary between
            # the pre-open and the first sends").
            since = last[0]
            late = time.perf_counter() - since
            if late <= LATE_S:
                continue
            frames = sys._current_frames()
            frame = frames.get(loop_thread)
            stack = traceback.extract_stack(frame) if frame is not None else []
            key = tuple(f"{Path(f.filename).name}:{f.lineno}:{f.name}" for f in stack[-14:])
            others = tuple(  # what the other threads (but this one) were doing
                f"{names.get(ident, ident)}: {where(other)}"
                for ident, other in frames.items()
                if ident not in (loop_thread, threading.get_ident())
            )
            if last[0] != since:  # the beat came while this thread sampled
                moved.append((since, last[0], late))
            if current is None or current[0] != since:
                current = [since, late, collections.Counter(), thread_cpu(), None, others]
                stalls.append(current)
            current[1] = late
            current[2][key] += 1
            current[4] = thread_cpu()

    names: dict[int, str] = {}

    def where(frame: Any) -> str:
        top = traceback.extract_stack(frame)[-3:]
        return " < ".join(f"{Path(f.filename).name}:{f.lineno}:{f.name}" for f in reversed(top))

    pauses: list[tuple[float, float, int]] = []
    began = [0.0]
    collections_by_gen = [[0, 0.0, 0] for _ in range(3)]  # per generation: count, s, freed

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
            return
        length = time.perf_counter() - began[0]
        tally = collections_by_gen[info["generation"]]
        tally[0] += 1
        tally[1] += length
        tally[2] += info["collected"]
        stamps.collections.append((began[0], length, info["generation"]))
        if length > 0.002:
            pauses.append((began[0], length, info["generation"]))

    async def run() -> Any:
        loop = asyncio.get_running_loop()

        beats = stamps.beats

        def beat() -> None:
            last[0] = now = time.perf_counter()
            if len(beats) < MAX_RUN_S / BEAT_S:
                beats.append((now, time.thread_time_ns()))
            loop.call_later(BEAT_S, beat)

        beat()
        names.update((t.ident or 0, t.name) for t in threading.enumerate())
        return await workloads.run_async(
            workloads.load_scenario(tmp / "s.toml"),
            target=workloads.Target(url, "bench-model"),
            out_dir=tmp / "out",
            workers=auto_workers(users) if workers == "auto" else int(workers),
        )

    threading.Thread(target=watch, daemon=True).start()
    gc.callbacks.append(on_gc)
    side = subprocess.Popen(
        [sys.executable, __file__, "--side", str(os.getpid()), str(tmp / "side.json")]
    )
    start = time.perf_counter()
    try:
        result = run_loop(run())
    finally:
        done.set()
        gc.callbacks.remove(on_gc)
        side.terminate()
        side.wait(60)
    stamps.side = json.loads((tmp / "side.json").read_text())
    stamps.loop, stamps.watchdog = loop_native, watcher[0]
    spans = []
    for line in (tmp / "out" / "records.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("sent_ns") and record.get("done_ns"):
            spans.append((record["sent_ns"] / 1e9, record["done_ns"] / 1e9))
    names.update((t.ident or 0, t.name) for t in threading.enumerate())
    return (
        result,
        start,
        stalls,
        [spans, pauses, collections_by_gen, loop_native, watcher[0], stamps, moved],
    )


def thread_cpu() -> dict[int, int]:
    """Each thread of this process: ns on a CPU so far, and (keyed by the thread's id
    negated) ns runnable but waiting for a CPU (/proc/self/task/*/schedstat); key 0: CPU 1's
    jiffies so far in irq and softirq (/proc/stat)."""
    out = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            run_ns, wait_ns = (task / "schedstat").read_text().split()[:2]
            out[int(task.name)] = int(run_ns)
            out[-int(task.name)] = int(wait_ns)  # runnable, waiting for a CPU
        except (OSError, ValueError, IndexError):
            continue
    with open("/proc/stat") as stat:
        for line in stat:
            if line.startswith("cpu1 "):
                fields = line.split()
                out[0] = int(fields[6]) + int(fields[7])
    return out


def report(result: Any, start: float, stalls: list[Any], extra: list[Any]) -> None:
    spans, pauses, by_gen, loop_native, watcher, stamps, moved = extra

    def open_streams(a: float, b: float) -> int:
        return sum(1 for sent, done in spans if sent < b and done > a)

    print(f"complete {result.complete}; client health {result.client}")
    print(f"{len(spans)} requests; first sent at +{min(s for s, _ in spans) - start:.3f} s")
    print("GC pauses over 2 ms (start s, ms, generation, open streams):")
    print(
        [(round(a - start, 3), round(d * 1e3, 1), g, open_streams(a, a + d)) for a, d, g in pauses]
    )
    print(
        "collections in the run (generation: count, ms in all, objects freed):",
        {g: (n, round(t * 1e3, 1), freed) for g, (n, t, freed) in enumerate(by_gen)},
    )
    busy = [s for s in stalls if open_streams(s[0], s[0] + s[1])]
    print(f"stalls over {LATE_S * 1e3:g} ms: {len(stalls)}; with streams open: {len(busy)}")
    print(
        [
            (round(s[0] - start, 3), round(s[1] * 1e3, 1), open_streams(s[0], s[0] + s[1]))
            for s in busy
        ]
    )
    sampled = [(s[1], s[3], s[4] or s[3]) for s in busy]
    window = sum(max(0.0, length - LATE_S) for length, _, _ in sampled) * 1e3
    loop_ms = sum(b.get(loop_native, 0) - a.get(loop_native, 0) for _, a, b in sampled) / 1e6
    wait_ms = sum(b.get(-loop_native, 0) - a.get(-loop_native, 0) for _, a, b in sampled) / 1e6
    rest_ms = sum(
        b.get(t, 0) - ns for _, a, b in sampled for t, ns in a.items() if t > 0 and t != loop_native
    )
    print(
        f"in those stalls, from their first sample on (~{window:.0f} ms in all): the loop on "
        f"CPU {loop_ms:.1f} ms, runnable but waiting for CPU 1 {wait_ms:.1f} ms; this "
        f"process's other threads (the watchdog among them) on CPU {rest_ms / 1e6:.1f} ms"
    )
    for stall in sorted(busy, key=lambda s: -s[1])[:8]:
        print(f"\n== +{stall[0] - start:.3f} s, {stall[1] * 1e3:.1f} ms")
        before, after = stall[3], stall[4] or stall[3]
        label = {loop_native: "loop", watcher: "watchdog (this script)"}
        ran = {t: (after.get(t, 0) - ns) / 1e6 for t, ns in before.items() if t > 0}
        print(  # which threads had the CPU meanwhile (from the stall's first sample on)
            "  on CPU meanwhile, ms:",
            {label.get(t, t): round(ms, 1) for t, ms in ran.items() if ms},
            f"(the loop runnable, waiting for CPU 1: "
            f"{(after.get(-loop_native, 0) - before.get(-loop_native, 0)) / 1e6:.1f} ms; CPU 1 "
            f"in irq and softirq: {(after.get(0, 0) - before.get(0, 0)) * 10} ms, in jiffies)",
        )
        for other in stall[5]:
            print("  other thread:", other)
        for stack, samples in stall[2].most_common(2):
            print(f"  [{samples} samples]")
            for frame in stack:
                print("     ", frame)
    sent = sorted(s for s, _ in spans)
    long = gaps(stamps.beats, LATE_S)
    opened = [(a, b) for a, b in long if open_streams(a[0], b[0])]
    print(
        f"\nby the heartbeat log: stalls over {LATE_S * 1e3:g} ms {len(long)}; with streams "
        f"open {len(opened)}"
    )
    threads = Threads(stamps)
    for a, b in opened:
        print(
            f"  +{a[0] - start:.4f} s: {describe_gap(a, b, sent)}; open {open_streams(a[0], b[0])}"
        )
        threads.show(a[0], b[0], "    ")
    # Dated from the beat read after the stack (as this script did before): the later beat.
    misdated = [
        (round(now - start, 4), round(late * 1e3, 1))
        for was, now, late in moved
        if not open_streams(was, was + late) and open_streams(now, now + late)
    ]
    print(
        f"watchdog samples during which the loop beat: {len(moved)}; of those, stalls with no "
        f"stream open that a re-read beat would date over open streams (s, ms): {misdated}"
    )
    boundary(stamps, start, stalls, spans)


class Stamps:
    """The boundary between the pre-open and the first sends, as it ran (perf_counter s)."""

    def __init__(self) -> None:
        self.events: list[tuple[float, str]] = []  # the library's steps there
        self.connects: list[tuple[float, float, bool]] = []  # begun, ended, a fill's
        self.reads: list[tuple[float, float, int, int]] = []  # energy: begun, ended, CPU ns, tid
        self.beats: list[tuple[float, int]] = []  # each heartbeat, the loop thread's CPU ns
        self.collections: list[tuple[float, float, int]] = []  # begun, s, generation
        self.side: list[list[Any]] = []  # the sidecar's rows: s, tid, state, run ns, wait ns
        self.loop = self.watchdog = 0


def stamp_boundary(stamps: Stamps) -> None:
    """Wrap the library's steps at the boundary so that each notes when it ran."""
    from workloads.runner.players import LocalPlayers
    from workloads.telemetry.energy import EnergyMeter
    from workloads.telemetry.window import WindowTelemetry
    from workloads.wire.stream import Pool

    filling = contextvars.ContextVar("filling", default=False)  # the fill's tasks inherit it
    note = stamps.events.append
    fill, connect, play, window = Pool.fill, Pool._connect, LocalPlayers.play, WindowTelemetry.start

    async def traced_fill(self: Pool, count: int) -> int:
        note((time.perf_counter(), f"fill({count}) begins, {self.idle()} idle"))
        token = filling.set(True)
        try:
            idle = await fill(self, count)
        finally:
            filling.reset(token)
        note((time.perf_counter(), f"fill returns, {idle} idle, {len(self._open)} open"))
        return idle

    async def traced_connect(self: Pool) -> Any:
        began = time.perf_counter()
        try:
            return await connect(self)
        finally:
            stamps.connects.append((began, time.perf_counter(), filling.get()))

    async def traced_window(self: WindowTelemetry) -> None:
        note((time.perf_counter(), "window telemetry start begins"))
        await window(self)
        note((time.perf_counter(), "window telemetry start returns"))

    async def traced_play(self: LocalPlayers, repetition: Any) -> bool:
        note((time.perf_counter(), "play begins"))
        return await play(self, repetition)

    def timed(method: Any) -> Any:
        def read(self: EnergyMeter) -> None:
            began, cpu = time.perf_counter(), time.thread_time_ns()
            try:
                method(self)
            finally:
                ended = time.perf_counter()
                stamps.reads.append(
                    (began, ended, time.thread_time_ns() - cpu, threading.get_native_id())
                )

        return read

    Pool.fill = traced_fill  # type: ignore[method-assign]
    Pool._connect = traced_connect  # type: ignore[method-assign]
    WindowTelemetry.start = traced_window  # type: ignore[method-assign]
    LocalPlayers.play = traced_play  # type: ignore[method-assign]
    EnergyMeter.start = timed(EnergyMeter.start)  # type: ignore[method-assign]
    EnergyMeter.sample = timed(EnergyMeter.sample)  # type: ignore[method-assign]


def sidecar(pid: int, out: Path) -> None:
    """Every ~0.3 ms until SIGTERM (or SIDE_S s), each thread of ``pid``: its state and
    schedstat (ns on a CPU, ns runnable but waiting), from CPU 2: no GIL and no share of the
    client's core."""
    os.sched_setaffinity(0, {2 if (os.cpu_count() or 1) > 2 else 0})  # 2 cores here: CPU 0's
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    tasks = Path(f"/proc/{pid}/task")
    rows: list[tuple[float, int, str, int, int]] = []
    end = time.perf_counter() + SIDE_S
    while not stop.is_set() and (now := time.perf_counter()) < end:
        try:
            names = os.listdir(tasks)
        except OSError:
            break  # the client ended
        for name in names:
            try:
                stat = (tasks / name / "stat").read_text()
                run_ns, wait_ns = (tasks / name / "schedstat").read_text().split()[:2]
            except (OSError, ValueError):
                continue
            rows.append((now, int(name), stat[stat.rindex(")") + 2], int(run_ns), int(wait_ns)))
        time.sleep(SIDE_EVERY_S)
    out.write_text(json.dumps(rows))


def boundary(stamps: Stamps, start: float, stalls: list[Any], spans: list[Any]) -> None:
    """The pre-open and the first sends, step by step, and what ran in each stall there."""
    sent = sorted(s for s, _ in spans)
    if not sent:
        return
    fills = [t for t, what in stamps.events if what.startswith("fill(")]
    low = (fills[0] if fills else sent[0]) - 0.1
    high = sent[0] + 0.5

    def at(t: float) -> str:
        return f"+{t - start:.4f}"

    print("\n== the boundary: the pre-open and the first sends")
    for t, what in sorted(stamps.events):
        if low <= t <= high:
            print(f"  {at(t)} s  {what}")
    print(f"  {at(sent[0])} s  first request written; the 2nd {at(sent[min(1, len(sent) - 1)])}")
    returned = [t for t, what in stamps.events if what.startswith("fill returns")]
    for what, mine in (("by a fill", True), ("not by a fill", False)):
        picked = sorted((b, e) for b, e, f in stamps.connects if f is mine)
        if picked:
            after = sum(1 for b, _ in picked if returned and b > returned[0])
            longest = max(picked, key=lambda c: c[1] - c[0])
            print(
                f"  connects {what}: {len(picked)}, {at(picked[0][0])} to "
                f"{at(max(e for _, e in picked))} s; begun after the fill returned: {after}; "
                f"longest {(longest[1] - longest[0]) * 1e3:.1f} ms at {at(longest[0])} s"
            )
            if not mine and after:
                print(
                    "    begun after the fill returned (s, ms):",
                    [
                        (at(b), round((e - b) * 1e3, 2))
                        for b, e in picked
                        if returned and b > returned[0]
                    ][:12],
                )
    for began, ended, cpu, tid in stamps.reads:
        print(
            f"  energy read {at(began)}–{at(ended)} s ({(ended - began) * 1e3:.1f} ms, "
            f"its thread {tid} on CPU {cpu / 1e6:.1f} ms)"
        )
    for began, length, generation in stamps.collections:
        if low <= began <= high and length > 0.0005:
            print(f"  collection gen {generation} {at(began)} s, {length * 1e3:.1f} ms")
    threads = Threads(stamps)
    print("  heartbeat gaps over 3 ms there:")
    for a, b in gaps(stamps.beats, 0.003):
        if low <= a[0] <= high:
            print(f"    {at(a[0])} s: {describe_gap(a, b, sent)}")
            threads.show(a[0], b[0], "      ")
    for stall in stalls:
        if low <= stall[0] <= high:
            print(f"  stall {at(stall[0])} s, {stall[1] * 1e3:.1f} ms; its commonest sample:")
            for stack, samples in stall[2].most_common(1):
                print(f"    [{samples} of {sum(stall[2].values())} samples]")
                for frame in stack:
                    print("      ", frame)


def gaps(beats: list[tuple[float, int]], over: float) -> list[tuple[Any, Any]]:
    """Consecutive heartbeats further apart than ``over`` s."""
    return [(a, b) for a, b in itertools.pairwise(beats) if b[0] - a[0] > over]


def describe_gap(a: tuple[float, int], b: tuple[float, int], sent: list[float]) -> str:
    written = bisect.bisect_left(sent, b[0]) - bisect.bisect_left(sent, a[0])
    return (
        f"{(b[0] - a[0]) * 1e3:.1f} ms, the loop thread on CPU {(b[1] - a[1]) / 1e6:.1f} ms "
        f"of it; requests written in it {written}"
    )


class Threads:
    """The sidecar's rows by thread, to say what each thread did between two instants."""

    def __init__(self, stamps: Stamps) -> None:
        self.label = {stamps.loop: "loop", stamps.watchdog: "watchdog"}
        self.label.update({tid: "energy reader" for *_, tid in stamps.reads})
        self.rows: dict[int, list[list[Any]]] = collections.defaultdict(list)
        for row in stamps.side:
            self.rows[row[1]].append(row)
        self.times = {tid: [r[0] for r in rows] for tid, rows in self.rows.items()}

    def show(self, a: float, b: float, indent: str) -> None:
        """Each thread that ran or waited for a CPU from ``a`` to ``b``: on CPU, runnable
        waiting, and its states in the sidecar's reads (R running or runnable, S sleeping,
        D in an uninterruptible wait: a system call that blocks)."""
        for tid, rows in sorted(self.rows.items()):
            times = self.times[tid]
            first, last = bisect.bisect_right(times, a) - 1, bisect.bisect_left(times, b)
            if first < 0 or last >= len(rows):
                continue
            ran = (rows[last][3] - rows[first][3]) / 1e6
            waited = (rows[last][4] - rows[first][4]) / 1e6
            if ran or waited:
                states = "".join(r[2] for r in rows[first + 1 : last])
                print(
                    f"{indent}{self.label.get(tid, tid)}: on CPU {ran:.1f} ms, runnable "
                    f"waiting {waited:.1f} ms (the sidecar's reads span "
                    f"{(rows[last][0] - rows[first][0]) * 1e3:.1f} ms; states {states[:48] or '-'})"
                )


if __name__ == "__main__":
    main()
