"""What holds the client's memory at its peak: a tracemalloc snapshot diff, C256.

One process runs ``workloads.run_async`` (pinned to CPU 1) against benchmarks/stream_server.py
(pinned to CPU 0; TTFT 100 ms, 10 ms between tokens), USERS sessions of TURNS turns, free
pacing, 512-token streams: the shape of issue 20's RSS target. tracemalloc traces from the
first import on (one frame per allocation); a watcher thread polls the traced total every
20 ms and snapshots it whenever it has grown 2% past the last snapshot, so the last snapshot
is the traced peak (within 2%). Printed: RSS after the imports, after tiktoken's tables and
at the end (the process's peak, from rusage; tracemalloc's own bookkeeping inflates it), what
the imports hold by file, and the peak snapshot less the after-import one, by file and by line.

    python benchmarks/memory_peak.py 256 2
    python benchmarks/memory_peak.py 256 2 --rss   # RSS over time only, no tracing
    python benchmarks/memory_peak.py 256 6 --agent # client_overhead's --agent shape: a
                                                   # 4K-token opening, 500-token tool results

Native memory (tiktoken's Rust tables, uvloop's and the kernel's buffers) is not traced: the
RSS lines show it. Loopback only; Linux only (sched_setaffinity).
"""

from __future__ import annotations

import sys
import tracemalloc

TRACE = "--rss" not in sys.argv  # --rss: no tracing (its bookkeeping and snapshots hold RSS)
if TRACE:
    tracemalloc.start(1)

import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

POLL_S = 0.02
GROWTH = 1.02
MAX_RUN_S = 600.0


def rss_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGESIZE") / 2**20


def top(stats: list[tracemalloc.StatisticDiff] | list[tracemalloc.Statistic], n: int) -> None:
    for stat in stats[:n]:
        frame = stat.traceback[0]
        where = f"{'/'.join(Path(frame.filename).parts[-3:])}:{frame.lineno}"
        size = getattr(stat, "size_diff", stat.size)
        count = getattr(stat, "count_diff", stat.count)
        print(f"  {size / 2**20:8.2f} MB {count:9d} blocks  {where}")


def main() -> None:
    users, turns = int(sys.argv[1]), int(sys.argv[2])
    os.sched_setaffinity(0, {1})
    from client_overhead import (
        AGENT_OPENING,
        AGENT_TOOL_TOKENS,
        MODEL,
        PLAIN,
        SCENARIO,
        stream_server,
    )

    shape = PLAIN
    if "--agent" in sys.argv:
        shape = {"opening": AGENT_OPENING, "turn_tokens": AGENT_TOOL_TOKENS, "style": "agent"}

    import workloads
    import workloads.runner.run
    from workloads.core import tokens
    from workloads.wire.loop import run_loop

    imported = tracemalloc.take_snapshot() if TRACE else None
    print(f"RSS after the imports: {rss_mb():.1f} MB")
    tokens.encoding()
    print(f"RSS after tiktoken's tables: {rss_mb():.1f} MB")
    tmp = Path(tempfile.mkdtemp(prefix="memory-peak-"))
    done = threading.Event()
    peak: list[tracemalloc.Snapshot | float | None] = [imported, 0.0, 0.0]  # snapshot, traced, RSS
    high = [0.0, 0.0]  # the highest RSS polled, MB, and when (perf_counter s)

    def watch() -> None:
        deadline = time.monotonic() + MAX_RUN_S
        while not done.is_set() and time.monotonic() < deadline:
            time.sleep(POLL_S)
            if (rss := rss_mb()) > high[0]:
                high[:] = [rss, time.perf_counter()]
            traced = tracemalloc.get_traced_memory()[0]
            if TRACE and traced > float(peak[1]) * GROWTH:
                peak[:] = [tracemalloc.take_snapshot(), traced, rss_mb()]

    with stream_server("--ttft-ms", "100", "--itl-ms", "10") as url:
        (tmp / "s.toml").write_text(
            SCENARIO.format(users=users, turns=turns, tokens=512, reps=1, pacing="free", **shape)
        )
        scenario = workloads.load_scenario(tmp / "s.toml")
        start = time.perf_counter()
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        result = run_loop(
            workloads.run_async(scenario, target=workloads.Target(url, MODEL), out_dir=tmp / "out")
        )
        ended = time.perf_counter()
        done.set()
        watcher.join()
    print(f"complete {result.complete}")
    lines = map(json.loads, (tmp / "out" / "records.jsonl").open())
    ends = [r["done_ns"] / 1e9 for r in lines if r.get("done_ns")]
    print(
        f"highest RSS polled {high[0]:.1f} MB at +{high[1] - start:.2f} s; the streams ended "
        f"+{min(ends) - start:.2f} … +{max(ends) - start:.2f} s; the run returned at "
        f"+{ended - start:.2f} s"
    )
    print(
        f"traced peak {float(peak[1]) / 2**20:.1f} MB (RSS then {float(peak[2]):.1f} MB); "
        f"process peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f} MB"
    )
    if not TRACE:
        return
    assert imported is not None
    print("\nwhat the imports hold, by file (top 15):")
    top(imported.statistics("filename"), 15)
    snapshot = peak[0]
    assert isinstance(snapshot, tracemalloc.Snapshot)
    print("\nat the traced peak, less after the imports, by file (top 15):")
    top(snapshot.compare_to(imported, "filename"), 15)
    print("\n... by line (top 25):")
    top(snapshot.compare_to(imported, "lineno"), 25)


if __name__ == "__main__":
    main()
