"""The event loop's CPU per streamed read: its own transport against wire/arrival.py's socket
read with ``recvmsg`` and the kernel's arrival stamp.

A server process (pinned to CPU 0) writes one 150-byte SSE-like chunk to each of K
connections every 10 ms; the client (this process, pin it with ``taskset -c 1``) reads them
on the library's loop (uvloop when installed) through a protocol that only counts, for 2.5 s
of the loop thread's CPU clock (``time.thread_time``). Each mode's connections are fresh,
modes alternate, three rounds.

    taskset -c 1 python benchmarks/read_cost.py        # K = 64
    taskset -c 1 python benchmarks/read_cost.py 256

Figures (this project's 2-core VM, CPython 3.11.7, uvloop 0.23.0, K = 64, 2026-12-02, three
calls of three rounds): loop transport 8.6–10.4 µs a read, stamped socket 11.1–15.0 µs. The
difference: ``recvmsg`` with its control message over ``recv`` (~1–2 µs here) and the stamp's
Python (~1.5 µs: two clock reads, the timespec, the slice); uvloop's transport reads in C.
Linux only (SO_TIMESTAMPNS, sched_setaffinity).
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import socket
import sys
import time

from workloads.wire import arrival
from workloads.wire.loop import run_loop

GAP_S = 0.01
SECONDS = 3.0
CHUNK = b"data: " + b"x" * 140 + b"\n\n"


def server(ports: mp.Queue, count: int) -> None:
    os.sched_setaffinity(0, {0})
    with socket.create_server(("127.0.0.1", 0)) as listener:
        ports.put(listener.getsockname()[1])
        conns = [listener.accept()[0] for _ in range(count)]
    for conn in conns:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    due = time.monotonic()
    end = due + SECONDS + 0.5
    while time.monotonic() < end:  # bounded by time
        for conn in conns:
            try:
                conn.send(CHUNK)
            except OSError:  # the client has gone
                return
        due += GAP_S
        time.sleep(max(0.0, due - time.monotonic()))
    for conn in conns:
        conn.close()


class Counter(asyncio.Protocol):
    reads = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        pass

    def data_received(self, data: bytes) -> None:
        self.received(data, time.perf_counter_ns())  # as wire/stream.py's Connection

    def received(self, data: bytes, arrival_ns: int) -> None:
        Counter.reads += 1

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        pass


async def client(mode: str, port: int, count: int) -> tuple[float, int]:
    loop = asyncio.get_running_loop()
    for _ in range(count):
        if mode == "loop transport":
            await loop.create_connection(Counter, "127.0.0.1", port)
        else:
            await arrival.open_stamped(Counter, socket.AF_INET, 0, ("127.0.0.1", port))
    await asyncio.sleep(0.3)
    Counter.reads = 0
    cpu = time.thread_time()
    await asyncio.sleep(SECONDS - 0.5)
    return time.thread_time() - cpu, Counter.reads


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    if not arrival.kernel_stamps():
        sys.exit("this kernel does not stamp TCP reads (SO_TIMESTAMPNS)")
    for _ in range(3):
        for mode in ("loop transport", "stamped socket"):
            ports: mp.Queue = mp.Queue()
            proc = mp.Process(target=server, args=(ports, count))
            proc.start()
            cpu, reads = run_loop(client(mode, ports.get(timeout=10), count))
            proc.join(timeout=10)
            print(f"{mode:15s} K={count} reads {reads:6d}  {cpu / reads * 1e6:5.2f} µs a read")


if __name__ == "__main__":
    main()
