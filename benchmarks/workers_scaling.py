"""How many sessions one host drives with ``--workers N``: the scaling curve.

For each N in ``--workers`` the library runs one lock-step turn of ``--concurrency`` paced
streams (``--ttft-ms`` then one token every ``--itl-ms``: 100 tokens/s per stream by default,
as a real server streams) against ``--servers`` processes of benchmarks/stream_server.py
sharing one port (SO_REUSEPORT), each recording its own truth. A fresh set of server processes
per run. Figures per N:

- TTFT bias p50 / p99: the client's TTFT minus the server's truth for the same request
  (matched by response id): (first content read − request written) − (first content
  written − request read), ms. A client that keeps up stays within a few ms; a saturated one
  reads hundreds of ms high. It is the sum of two parts:
  - downlink p50 / p99: first content chunk written by the server → stamped by the client:
    the client's own clock error (how long a chunk waits for its loop);
  - uplink p50: request written by the client → read by the server: the server's read queue
    when a lock-step turn's requests arrive at once (a real server's users see it too).
- ITL bias p50 / p99: per request, (client's last − first content) − (server's last − first
  content write), / gaps, µs per token: how far the client falls behind the stream.
- loop lag p99 / CPU: the worst worker's event-loop lag and CPU share (the run's own client
  health, ``RunResult.client``).
- server core: the server processes' CPU share (mean over them); past ~90% the server, not
  the client, sets the pace and the row says so.
- wall: the run's duration (start-up included).

    python benchmarks/workers_scaling.py                              # 2 cores: C256, N 1 2
    python benchmarks/workers_scaling.py --concurrency 1000 --workers 1 2 4 8 --servers 6

Loopback only (127.0.0.1); Linux (/proc). Figures of record: benchmarks/RESULTS-workers.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import workloads
from workloads.model.target import Target

SERVER = Path(__file__).with_name("stream_server.py")
TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def start_servers(
    count: int, port: int, args: argparse.Namespace, out: Path
) -> list[subprocess.Popen[str]]:
    servers = []
    for i in range(count):
        servers.append(
            subprocess.Popen(
                [
                    sys.executable,
                    str(SERVER),
                    "--port",
                    str(port),
                    "--reuse-port",
                    "--ttft-ms",
                    str(args.ttft_ms),
                    "--itl-ms",
                    str(args.itl_ms),
                    "--truth",
                    str(out / f"truth-{i}.jsonl"),
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
        )
    for server in servers:
        assert server.stdout is not None
        line = server.stdout.readline()
        if "listening" not in line:
            raise SystemExit(f"stream_server did not start: {line!r}")
    return servers


def one_run(workers: int, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    port = free_port()
    servers = start_servers(args.servers, port, args, out)
    try:
        scenario = workloads.load_scenario("five-user-coding").with_overrides(
            [
                f"users={args.concurrency}",
                "turns=1",
                "opening_tokens=0",
                "turn_tokens=32",
                f"output_tokens={args.tokens}",
                "repetitions.warmup=0",
                "repetitions.measured=1",
                "gate=off",
                "tokenizer=tiktoken",
            ]
        )
        target = Target(f"http://127.0.0.1:{port}/v1", "bench-model")
        before = [cpu_seconds(s.pid) for s in servers]
        started = time.perf_counter()
        result = workloads.run(
            scenario,
            target,
            workers=workers,
            out_dir=out / "run",
            overwrite=True,
            transcripts=False,
        )
        wall = time.perf_counter() - started
        server_cpu = [cpu_seconds(s.pid) - b for s, b in zip(servers, before, strict=True)]
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            server.wait(30)
    truths = {}
    for i in range(args.servers):
        for line in (out / f"truth-{i}.jsonl").read_text().splitlines():
            t = json.loads(line)
            truths[t["id"]] = t
    ttft_bias, itl_bias, downlink, uplink = [], [], [], []
    valid = unmatched = 0
    for r in result.records:
        if not r.valid:
            continue
        valid += 1
        t = truths.get(r.request_id or "")
        if t is None or t["first_ns"] is None or r.ttft_ns is None:
            unmatched += 1
            continue
        ttft_bias.append((r.ttft_ns - (t["first_ns"] - t["received_ns"])) / 1e6)
        if r.first_content_ns is not None and r.sent_ns is not None:
            downlink.append((r.first_content_ns - t["first_ns"]) / 1e6)
            uplink.append((t["received_ns"] - r.sent_ns) / 1e6)
        gaps = t["tokens"] - 1
        if gaps > 0 and r.first_content_ns is not None and r.last_content_ns is not None:
            client_span = r.last_content_ns - r.first_content_ns
            itl_bias.append((client_span - (t["last_ns"] - t["first_ns"])) / gaps / 1e3)
    c = result.client
    stream_s = (args.ttft_ms + args.itl_ms * (args.tokens - 1)) / 1e3
    return {
        "workers": workers,
        "requests": len(result.records),
        "valid": valid,
        "unmatched": unmatched,
        "ttft_bias_p50_ms": percentile(ttft_bias, 50),
        "ttft_bias_p99_ms": percentile(ttft_bias, 99),
        "downlink_p50_ms": percentile(downlink, 50),
        "downlink_p99_ms": percentile(downlink, 99),
        "uplink_p50_ms": percentile(uplink, 50),
        "itl_bias_p50_us": percentile(itl_bias, 50),
        "itl_bias_p99_us": percentile(itl_bias, 99),
        "loop_lag_p99_ms": c.loop_lag_p99_ms if c else None,
        "loop_lag_max_ms": c.loop_lag_max_ms if c else None,
        "cpu_share": c.cpu_share if c else None,
        "server_core": sum(server_cpu) / len(server_cpu) / wall,
        "server_core_stream": sum(server_cpu) / len(server_cpu) / stream_s,
        "wall_s": wall,
        "warnings": [w for w in result.warnings if "client" in w],
    }


def fmt(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--servers", type=int, default=1, help="stream_server processes")
    parser.add_argument("--tokens", type=int, default=256, help="content tokens per stream")
    parser.add_argument("--ttft-ms", type=float, default=100.0)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    print(
        f"# {platform.node()} · {os.cpu_count()} CPUs · {platform.python_version()} · "
        f"load {os.getloadavg()[0]:.2f} · C{args.concurrency} · {args.tokens} tokens at "
        f"{args.ttft_ms:g} ms TTFT, {args.itl_ms:g} ms/token · {args.servers} server "
        "processes",
        flush=True,
    )
    print(
        "workers  valid  TTFT bias ms p50/p99  downlink ms p50/p99  uplink ms  "
        "ITL bias µs p50/p99  lag p99/max ms   CPU  server core  wall s",
        flush=True,
    )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for workers in args.workers:
            out = Path(tmp) / f"w{workers}"
            out.mkdir()
            row = one_run(workers, args, out)
            rows.append(row)
            ttft = (
                f"{fmt(row['ttft_bias_p50_ms'], '7.2f')} / {fmt(row['ttft_bias_p99_ms'], '6.2f')}"
            )
            down = f"{fmt(row['downlink_p50_ms'], '6.2f')} / {fmt(row['downlink_p99_ms'], '6.2f')}"
            itl = f"{fmt(row['itl_bias_p50_us'], '6.1f')} / {fmt(row['itl_bias_p99_us'], '6.1f')}"
            lag = f"{fmt(row['loop_lag_p99_ms'], '5.1f')} / {fmt(row['loop_lag_max_ms'], '4.0f')}"
            print(
                f"{workers:>7}  {row['valid']:>5}  {ttft}      {down}  "
                f"{fmt(row['uplink_p50_ms'], '9.2f')}  {itl}  {lag:>14}  "
                f"{fmt(row['cpu_share'], '.2f')}  {row['server_core']:>10.0%}  "
                f"{row['wall_s']:>6.1f}",
                flush=True,
            )
            for warning in row["warnings"]:
                print(f"         warning: {warning[:110]}…", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
