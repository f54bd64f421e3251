"""Does a connection per request cost TTFT truth? The streaming client with and without
connection reuse against the raw paced server (TTFT 100 ms, 10 ms between tokens).

Each of C sessions sends TURNS short turns back to back, alternating reuse on and off twice.
Per request: TTFT bias = (first content read - request written) - (first content written -
request read), matched by the response id against the server's truth, and the client's own
wait before writing (started_ns -> sent_ns: pool wait and connecting).

    python benchmarks/connection_reuse.py 5 10
    python benchmarks/connection_reuse.py 64 3

Server on core 0, client on core 1 (Linux).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from workloads.wire.client import AiohttpChatClient, ChatResponse

SERVER = Path(__file__).resolve().parent / "stream_server.py"
BODY = {
    "model": "bench-model",
    "messages": [{"role": "user", "content": "hi"}],
    "stream": True,
    "max_tokens": 16,
    "stream_options": {"include_usage": True},
}


async def run(url: str, users: int, turns: int, reuse: bool) -> list[ChatResponse]:
    out: list[ChatResponse] = []

    async def user(client: AiohttpChatClient) -> None:
        for _ in range(turns):
            out.append(await client.stream_chat(BODY))

    async with AiohttpChatClient(url, connections=users, reuse_connections=reuse) as client:
        await asyncio.gather(*[user(client) for _ in range(users)])
    return out


def quantile(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    users, turns = int(sys.argv[1]), int(sys.argv[2])
    truth_path = Path(tempfile.mkdtemp()) / "truth.jsonl"
    server = subprocess.Popen(
        [
            sys.executable,
            str(SERVER),
            "--cpu",
            "0",
            "--ttft-ms",
            "100",
            "--itl-ms",
            "10",
            "--truth",
            str(truth_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    url = server.stdout.readline().split()[-1]
    os.sched_setaffinity(0, {1})
    results: dict[bool, list[ChatResponse]] = {True: [], False: []}
    try:
        for reuse in (True, False, True, False):
            responses = asyncio.run(run(url, users, turns, reuse))
            failed = [r.error_message for r in responses if not r.ok]
            if failed:
                raise SystemExit(f"{len(failed)} requests failed: {failed[0]}")
            results[reuse] += responses
    finally:
        server.terminate()
        server.wait()
    truths = {t["id"]: t for t in map(json.loads, truth_path.read_text().splitlines())}
    for reuse, responses in results.items():
        bias, wait = [], []
        for r in responses:
            assert r.sent_ns is not None and r.first_content_ns is not None
            t = truths[r.request_id]
            bias.append(
                ((r.first_content_ns - r.sent_ns) - (t["first_ns"] - t["received_ns"])) / 1e6
            )
            wait.append((r.sent_ns - r.started_ns) / 1e6)
        print(
            f"C{users} reuse={reuse}: n={len(responses)} TTFT bias p50 "
            f"{quantile(bias, 0.5):.2f} / p99 {quantile(bias, 0.99):.2f} ms; started->sent p50 "
            f"{quantile(wait, 0.5):.2f} / p99 {quantile(wait, 0.99):.2f} ms"
        )


if __name__ == "__main__":
    main()
