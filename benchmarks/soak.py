"""Soak: many minutes on the simulated server at C16 with every fault knob on at a few percent.

What it checks, segment after segment (one run each, on a fresh simulated server, all in this
one process, back to back until the time is up):

* no record lost: the TurnRecords the run returned, those in records.jsonl, and those handed
  to ``on_record`` are the same, and equal the turns attempted (every repetition, users ×
  turns; nothing is stopped, so every turn is attempted). Sessions run free (no barrier), so
  a stalled stream holds up its own session only;
* every failure typed: each record that is not ``ok`` has an ``error_kind``; each record is
  valid exactly when the server injected no fault into it, and the per-fault counts the
  server drew equal the failed records the client classed for them (the cross-table is
  printed: fault → client kind);
* memory flat: this process's RSS after each segment (the server's ground truth and the
  run's records are dropped between segments; what stays is what leaks).

The server keeps ground truth for every request it served (token ids included), by design;
one server per segment keeps that from looking like a leak of the client.

    python benchmarks/soak.py --minutes 30            # C16, every fault at 2 %
    python benchmarks/soak.py --minutes 1 --users 4   # a quick look

Exits 1 when a check fails. Figures of the real runs: benchmarks/RESULTS-soak.md.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

import workloads
from workloads.servers.simulated import SimulatedServer

FAULTS = ("429", "500", "disconnect", "stall", "malformed", "error_in_stream", "early_stop")


def rss_mib() -> float:
    """This process's resident set size now (Linux /proc), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # peak, elsewhere


def client_class(record: workloads.TurnRecord) -> str:
    """How the client classed a record: its error kind (with the HTTP status), "invalid"
    for a finished turn of the wrong length, or "valid"."""
    if record.valid:
        return "valid"
    if record.error_kind is None:
        return "invalid" if record.status == "ok" else f"untyped {record.status}"
    if record.http_status not in (None, 200):
        return f"{record.error_kind} {record.http_status}"
    return record.error_kind


def segment(args: argparse.Namespace, index: int, out: Path) -> dict[str, object]:
    """One run on a fresh faulty server; returns its figures and the checks' findings."""
    rate = args.fault_rate
    sim = {f"faults.rate_{k}": rate for k in FAULTS}
    # A stall longer than the read-gap timeout, so it ends as a timeout, not a slow turn;
    # the gap is wide enough that a busy shared machine alone does not reach it (at load 11
    # on 2 cores, 6 s did: TTFT at C16 then runs to several seconds).
    sim |= {
        "faults.stall_s": 25.0,
        "faults.retry_after_s": 0.0,
        "faults.after_tokens": 8,
        "seed": index,
    }
    scenario = workloads.load_scenario("five-user-coding").with_overrides(
        [
            f"users={args.users}",
            f"turns={args.turns}",
            "opening_tokens=1500",
            "turn_tokens=200",
            "output_tokens=48",
            "repetitions.warmup=0",
            f"repetitions.measured={args.repetitions}",
            "timeouts.read_gap_s=20",
            "pacing.mode=free",
        ]
    )
    seen: list[workloads.TurnRecord] = []
    directory = out / f"segment-{index:03d}"
    with SimulatedServer(sim=sim, debug=True) as server:
        result = workloads.run(
            scenario,
            server.target,
            out_dir=directory,
            on_record=seen.append,
            telemetry=workloads.TelemetryOptions(energy="off"),
        )
        truths = server.truths()
    lines = [json.loads(line) for line in (directory / "records.jsonl").read_text().splitlines()]
    in_file = sum("kind" not in line for line in lines)
    attempted = args.users * args.turns * args.repetitions
    problems = []
    if not len(result.records) == len(seen) == in_file == attempted:
        problems.append(
            f"records lost: attempted {attempted}, returned {len(result.records)}, "
            f"on_record {len(seen)}, records.jsonl {in_file}"
        )
    untyped = [r for r in result.records if r.status != "ok" and r.error_kind is None]
    if untyped:
        problems.append(f"{len(untyped)} failed records without an error_kind")
    # Server faults by kind against the client's classes. A request the client re-sent
    # reaches the server twice; the soak counts what the server drew per request it served.
    drawn = collections.Counter(t.fault or "none" for t in truths)
    classes = collections.Counter(client_class(r) for r in result.records)
    by_id = {t.request_id: t for t in truths}
    cross: collections.Counter[tuple[str, str]] = collections.Counter()
    for r in result.records:
        truth = by_id.get(r.request_id or "")
        fault = (truth.fault or "none") if truth is not None else "(no id: refused)"
        cross[(fault, client_class(r))] += 1
    failed = sum(not r.valid for r in result.records)
    faulted = sum(n for fault, n in drawn.items() if fault != "none")
    if failed != faulted:
        problems.append(
            f"{failed} records failed but the server injected {faulted} faults; "
            "fault -> client class: "
            + ", ".join(f"{a} -> {b}: {n}" for (a, b), n in sorted(cross.items()))
        )
    resends = sum(r.resends for r in result.records)
    return {
        "segment": index,
        "attempted": attempted,
        "records": len(result.records),
        "requests_served": len(truths),
        "resends": resends,
        "failed": failed,
        "faulted": faulted,
        "drawn": dict(drawn),
        "classes": dict(classes),
        "cross": {f"{a} -> {b}": n for (a, b), n in sorted(cross.items())},
        "problems": problems,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--users", type=int, default=16)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--repetitions", type=int, default=2, help="measured, per segment")
    parser.add_argument(
        "--fault-rate",
        type=float,
        default=0.02,
        help="probability of each of the 7 faults per request",
    )
    parser.add_argument("--out", help="keep the segments' results here (default: a temp dir)")
    parser.add_argument("--json", help="write every segment's figures to this file")
    args = parser.parse_args()
    print(
        f"{time.strftime('%Y-%m-%d %H:%M')} · {platform.node()} · {platform.machine()} · "
        f"CPython {platform.python_version()} · C{args.users} · {args.turns} turns × "
        f"{args.repetitions} reps per segment · each fault at {args.fault_rate:.0%}",
        flush=True,
    )
    deadline = time.monotonic() + args.minutes * 60
    segments: list[dict[str, object]] = []
    totals: collections.Counter[str] = collections.Counter()
    cross: collections.Counter[str] = collections.Counter()
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out) if args.out else Path(tmp)
        index = 0
        started = time.monotonic()
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            figures = segment(args, index, out)
            gc.collect()
            figures["seconds"] = round(time.monotonic() - t0, 1)
            figures["rss_mib"] = round(rss_mib(), 1)
            segments.append(figures)
            for key in ("attempted", "records", "requests_served", "resends", "failed", "faulted"):
                totals[key] += int(figures[key])  # type: ignore[call-overload]
            cross.update(figures["cross"])  # type: ignore[arg-type]
            problems += [f"segment {index}: {p}" for p in figures["problems"]]  # type: ignore[attr-defined]
            print(
                f"segment {index:3d} · {figures['seconds']:6.1f} s · records "
                f"{figures['records']}/{figures['attempted']} · failed {figures['failed']} "
                f"(faults drawn {figures['faulted']}) · RSS {figures['rss_mib']} MiB"
                + ("" if not figures["problems"] else f" · {figures['problems']}"),
                flush=True,
            )
            index += 1
        elapsed = time.monotonic() - started
    rss = [float(s["rss_mib"]) for s in segments]  # type: ignore[arg-type]
    half = len(rss) // 2
    print(
        f"\n{len(segments)} segments in {elapsed / 60:.1f} min · turns attempted "
        f"{totals['attempted']} · records {totals['records']} · requests served "
        f"{totals['requests_served']} · re-sends {totals['resends']} · failed "
        f"{totals['failed']} · faults drawn {totals['faulted']}"
    )
    if rss:
        later = rss[half:] or rss
        print(
            f"RSS MiB: first segment {rss[0]}, min {min(rss)}, max {max(rss)}, "
            f"median of the first half {sorted(rss[:half] or rss)[len(rss[:half] or rss) // 2]}"
            f", of the second half {sorted(later)[len(later) // 2]}"
        )
    print("server fault -> client class (records):")
    for key, n in sorted(cross.items()):
        print(f"  {key:40s} {n:6d}")
    if args.json:
        Path(args.json).write_text(json.dumps(segments, indent=1))
    for p in problems:
        print("PROBLEM:", p)
    print("all checks passed" if not problems else f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
