"""A run played by worker processes: ``--workers N`` shards every cell's sessions over N
processes, each with its own event loop and HTTP client, so one host drives a thousand
sessions without one loop's lag entering the measurements.

The coordinator (this module, in the run's process) keeps everything that is one per run:
the records file and transcripts (every record arrives here the moment a worker makes it),
the windows and their telemetry, the correctness gate, the result. The workers
(:mod:`workloads.runner.workers.worker`) size and send; lock-step barriers and turn 1's
order are answered here, so the shards move as one run. One host shares one monotonic
clock, so the workers' stamps compare as a single process's do; on Ray
(:mod:`workloads.runner.workers.ray_actors`) each record says its host, and only durations
are taken across hosts.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import secrets
import socket
import sys
import time
from array import array
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from workloads.core.conversation import make_nonces
from workloads.model.records import TurnRecord
from workloads.model.results import ClientHealth, RepetitionNonces
from workloads.model.scenario import Cell
from workloads.model.target import Target
from workloads.runner.repetition import Repetition
from workloads.runner.turn import TokenTrace
from workloads.runner.workers.channel import LINE_LIMIT, Channel, ChannelClosed, authentic
from workloads.runner.workers.worker import TOKEN_ENV
from workloads.wire.loop import loop_name

if TYPE_CHECKING:
    from workloads.runner.cells import Run

__all__ = [
    "SESSIONS_PER_WORKER",
    "WorkerFailed",
    "WorkerPlayers",
    "WorkerPool",
    "auto_workers",
    "usable_cpus",
]

SESSIONS_PER_WORKER = 64  # --workers auto: a process per this many concurrent sessions
START_TIMEOUT_S = 120.0  # spawn, import, connect, probe the tokenizer
FINISH_TIMEOUT_S = 30.0
START_LEAD_S = 0.02  # free pacing's common start: time for the play command to arrive
STDERR_TAIL = 4096

Spawner = Callable[[str, int, str, int, int], Awaitable["Process"]]


class WorkerFailed(RuntimeError):
    """A worker process could not start, or went away during the run."""


def auto_workers(concurrency: int, cpus: int | None = None) -> int:
    """``--workers auto``: one process per :data:`SESSIONS_PER_WORKER` concurrent sessions,
    at most one per core this process may use (:func:`usable_cpus`, or ``cpus``); 1 (no
    worker process) for small runs."""
    cpus = cpus or usable_cpus()[0]
    return max(1, min(cpus, -(-concurrency // SESSIONS_PER_WORKER)))


def usable_cpus(cgroup: Path = Path("/sys/fs/cgroup")) -> tuple[int, str]:
    """The cores this process may run on, and why that many: its CPU affinity
    (``os.sched_getaffinity``), lowered by the cgroup's CPU quota where one is set (v2
    ``cpu.max``, v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``; rounded up). Not
    ``os.cpu_count()``, the host's: pinned to one core of 8, ``--workers auto`` started 4
    processes and 519 MB for one core's work (issue 35)."""
    host = os.cpu_count() or 1
    try:
        cpus = len(os.sched_getaffinity(0))
        why = f"affinity {cpus} of the host's {host}" if cpus < host else f"{host} on the host"
    except (AttributeError, OSError):  # macOS and Windows have no affinity call
        cpus, why = host, f"{host} on the host"
    if (quota := _cgroup_quota(cgroup)) is not None and quota < cpus:
        cpus, why = quota, f"the cgroup's CPU quota of {quota} ({why})"
    return max(1, cpus), why


def _cgroup_quota(root: Path) -> int | None:
    """Cores the cgroup's CPU quota allows (rounded up); None where none is set or readable.
    v2's ``cpu.max`` ("QUOTA PERIOD", or "max PERIOD") is read in the process's own cgroup
    (/proc/self/cgroup's ``0::PATH``) and at the root, where a container sees its own; v1's
    in ``cpu/``."""
    places: list[tuple[Path, Path | None]] = [(root / "cpu.max", None)]
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::") and line[3:].strip("/"):
                places.insert(0, (root / line[3:].strip("/") / "cpu.max", None))
    places.append((root / "cpu" / "cpu.cfs_quota_us", root / "cpu" / "cpu.cfs_period_us"))
    for quota_file, period_file in places:
        try:
            fields = quota_file.read_text().split()
            if period_file is not None:
                fields.append(period_file.read_text().strip())
            quota, period = int(fields[0]), int(fields[1])
        except (OSError, ValueError, IndexError):  # "max", or no such file: no quota there
            continue
        if quota > 0 and period > 0:
            return -(-quota // period)
    return None


class Process(Protocol):
    """A started worker: how to learn that it ended, why, and how to end it."""

    name: str

    def exited(self) -> str | None:
        """Why the worker is gone (exit status, last lines of its stderr); None if running."""
        ...

    async def wait(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the worker to end by itself, then end it."""
        ...


class _Subprocess:
    def __init__(self, proc: asyncio.subprocess.Process, index: int) -> None:
        self.name = f"worker {index} (pid {proc.pid})"
        self.proc = proc
        self.tail = b""
        self.reader = asyncio.ensure_future(self._read_stderr())

    async def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for _ in range(1 << 40):  # bounded by the process's life
            data = await self.proc.stderr.read(65536)
            if not data:
                return
            self.tail = (self.tail + data)[-STDERR_TAIL:]

    def exited(self) -> str | None:
        if self.proc.returncode is None:
            return None
        last = self.tail.decode("utf-8", "replace").strip().splitlines()[-3:]
        return f"exit status {self.proc.returncode}" + (f": {' | '.join(last)}" if last else "")

    async def wait(self, timeout_s: float) -> None:
        try:
            await asyncio.wait_for(self.proc.wait(), timeout_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await self.proc.wait()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(self.reader, 5)


async def spawn_local(host: str, port: int, token: str, index: int, count: int) -> Process:
    """A worker process on this host (``python -m workloads.runner.workers.worker``)."""
    env = dict(os.environ)
    env[TOKEN_ENV] = token
    # The worker imports this very package: from a source tree (tests, a checkout) that is
    # on our sys.path but not on a fresh interpreter's, say where. An installed package's
    # directory is left alone (first on the path it would shadow the standard library).
    source = str(Path(__file__).resolve().parents[2])
    if Path(source).name not in ("site-packages", "dist-packages"):
        env["PYTHONPATH"] = os.pathsep.join(p for p in (source, env.get("PYTHONPATH")) if p)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "workloads.runner.workers.worker",
        host,
        str(port),
        str(index),
        str(count),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        start_new_session=True,  # Ctrl-C in a terminal reaches the coordinator, not them
    )
    return _Subprocess(proc, index)


class WorkerPool:
    """N worker processes connected to this process. Use as ``async with``: leaving the
    block ends every worker (asked first, then killed)."""

    def __init__(
        self,
        count: int,
        *,
        spawn: Spawner = spawn_local,
        host: str = "127.0.0.1",
        bind: str | None = None,
    ) -> None:
        self.count = count
        self.spawn = spawn
        self.host = host  # where workers connect to
        self.bind = bind or host
        self.token = secrets.token_hex(32)
        self.channels: list[Channel | None] = [None] * count
        self.hosts: list[str] = [""] * count
        self.processes: list[Process] = []
        self.replies: list[asyncio.Queue[dict[str, Any]]] = [asyncio.Queue() for _ in range(count)]
        self.on_message: Callable[[int, dict[str, Any]], None] = lambda i, m: None
        self._connected = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._readers: list[asyncio.Task[None]] = []
        self.gone: list[str | None] = [None] * count
        self.on_close: list[Callable[[], object]] = []  # e.g. disconnect from Ray

    async def __aenter__(self) -> WorkerPool:
        self._server = await asyncio.start_server(self._accept, self.bind, 0, limit=LINE_LIMIT)
        port = self._server.sockets[0].getsockname()[1]
        try:
            for i in range(self.count):
                self.processes.append(await self.spawn(self.host, port, self.token, i, self.count))
            await self._wait_connected()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _wait_connected(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._connected.is_set():
            for process in self.processes:
                if (why := process.exited()) is not None:
                    raise WorkerFailed(f"{process.name} did not start: {why}")
            if time.monotonic() > deadline:
                raise WorkerFailed(f"worker processes did not connect within {START_TIMEOUT_S:g} s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._connected.wait(), 0.2)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        channel = Channel(reader, writer)
        try:
            hello = await asyncio.wait_for(channel.recv(), 10)
        except (ChannelClosed, TimeoutError, ValueError):
            await channel.close()
            return
        index = hello.get("index")
        if (
            not authentic(hello, self.token)
            or type(index) is not int
            or not (0 <= index < self.count)
            or self.channels[index] is not None
        ):
            await channel.close()  # not one of ours
            return
        self.channels[index] = channel
        self.hosts[index] = str(hello.get("host", ""))
        self._readers.append(asyncio.ensure_future(self._read(index, channel)))
        if all(c is not None for c in self.channels):
            self._connected.set()

    async def _read(self, index: int, channel: Channel) -> None:
        try:
            for _ in range(1 << 62):  # bounded by the worker's life
                message = await channel.recv()
                if message["op"] in ("done", "up", "failed"):
                    self.replies[index].put_nowait(message)
                else:
                    self.on_message(index, message)
        except (ChannelClosed, ValueError) as err:
            process = self.processes[index] if index < len(self.processes) else None
            why = (process.exited() if process else None) or str(err)
            self.gone[index] = why
            self.replies[index].put_nowait({"op": "gone", "why": why})

    def send(self, index: int, op: str, **fields: Any) -> None:
        channel = self.channels[index]
        if channel is not None and self.gone[index] is None:
            with contextlib.suppress(ChannelClosed):
                channel.send(op, **fields)

    def broadcast(self, op: str, **fields: Any) -> None:
        for i in range(self.count):
            self.send(i, op, **fields)

    async def reply(self, index: int, timeout_s: float | None = None) -> dict[str, Any]:
        """Worker ``index``'s answer to the command it was sent last."""
        try:
            message = await asyncio.wait_for(self.replies[index].get(), timeout_s)
        except TimeoutError:
            raise WorkerFailed(
                f"{self._name(index)} did not answer within {timeout_s:g} s"
            ) from None
        if message["op"] == "gone":
            raise WorkerFailed(f"{self._name(index)} went away: {message['why']}")
        if message["op"] == "failed":
            raise WorkerFailed(f"{self._name(index)}: {message.get('reason')}")
        return message

    async def command(
        self, op: str, timeout_s: float | None = None, **fields: Any
    ) -> list[dict[str, Any]]:
        """Send ``op`` to every worker and wait for every answer."""
        self.broadcast(op, **fields)
        return list(await asyncio.gather(*(self.reply(i, timeout_s) for i in range(self.count))))

    def _name(self, index: int) -> str:
        if index < len(self.processes):
            return self.processes[index].name
        return f"worker {index}"

    async def close(self) -> None:
        """End every worker: they exit after ``finish``; those that do not are killed."""
        for channel in self.channels:
            if channel is not None:
                await channel.close()
        for process in self.processes:
            await process.wait(FINISH_TIMEOUT_S)
        for task in self._readers:
            task.cancel()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for hook in self.on_close:
            hook()
        self.on_close = []


class WorkerPlayers:
    """:class:`~workloads.runner.players.Players` over a :class:`WorkerPool`: the run's
    cells played by the pool's workers."""

    def __init__(self, pool: WorkerPool, run: Run, *, target: Target, transcripts: bool) -> None:
        self.pool = pool
        self.run = run
        self.target = target
        self.transcripts = transcripts
        self.configured = False
        self.ready: dict[str, set[int]] = {}  # lock-step barrier: key -> workers there
        self.firsts: set[str] = set()  # repetitions whose turn 1 somebody has sent
        self.observations: list[tuple[int, int, int, int]] = []
        pool.on_message = self._message

    def _message(self, index: int, message: dict[str, Any]) -> None:
        op = message["op"]
        if op == "record":
            self.run.record(TurnRecord.model_validate(message["record"]))
        elif op == "exchange":
            fields = {k: v for k, v in message.items() if k != "op"}
            if self.run.transcripts is not None:
                self.run.transcripts.write(**fields)
        elif op == "ready":
            key = str(message["key"])
            there = self.ready.setdefault(key, set())
            there.add(index)
            if len(there) == self.pool.count:
                del self.ready[key]
                self.pool.broadcast("ready", key=key, value=time.perf_counter())
        elif op == "first":
            key = str(message["key"])
            repetition = key.rsplit(".", 1)[0]
            first = repetition not in self.firsts
            self.firsts.add(repetition)
            self.pool.send(index, "first", key=key, value=first)

    async def _configure(self) -> None:
        m = self.run.measured
        await self.pool.command(
            "config",
            START_TIMEOUT_S,
            scenario=m.scenario.model_dump(mode="json"),
            target=dataclasses.asdict(self.target) | {"model": m.target.model},
            model=m.target.model,
            exact=m.tokenizer.exact,
            entropy=self.run.entropy.hex(),
            grace_s=self.run.grace_s,
            transcripts=self.transcripts,
            host=socket.gethostname(),
        )
        self.configured = True

    async def open(self, repetition: Repetition) -> RepetitionNonces:
        if not self.configured:
            await self._configure()
        await self.pool.command("open", **_where(repetition))
        s = self.run.measured.sizings[repetition.cell.index].scenario
        nonces = make_nonces(
            self.run.entropy,
            cell=repetition.cell.index,
            repetition=repetition.index,
            users=s.users,
            mode=s.nonce,
        )
        return RepetitionNonces(
            cell=repetition.cell.index,
            repetition=repetition.index,
            warmup=repetition.warmup,
            run_nonce=nonces.run,
            sessions=nonces.sessions,
        )

    async def play(self, repetition: Repetition) -> bool:
        self.pool.broadcast("play", start=time.perf_counter() + START_LEAD_S, **_where(repetition))
        answers = asyncio.ensure_future(
            asyncio.gather(*(self.pool.reply(i) for i in range(self.pool.count)))
        )
        stop = self.run.stop
        try:
            stopping = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait({answers, stopping}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopping.cancel()
            if not answers.done():  # stopped: each worker gives its turns their grace
                self.pool.broadcast("stop")
                await asyncio.wait({answers}, timeout=self.run.grace_s + FINISH_TIMEOUT_S)
            if not answers.done():
                raise WorkerFailed("worker processes did not stop within the grace period")
            replies = answers.result()
        finally:
            if not answers.done():
                answers.cancel()
        self.observations = [tuple(o) for r in replies for o in r["observations"]]
        return all(r["finished"] for r in replies)

    async def learn(self, repetition: Repetition) -> None:
        sizing = self.run.measured.sizings[repetition.cell.index]
        if repetition.warmup and not sizing.exact:
            sizing.learn(self.observations)  # the result's scales: the same as the workers'
            await self.pool.command("learn", observations=self.observations, **_where(repetition))

    async def traces(self, cell: Cell) -> list[TokenTrace]:
        replies = await self.pool.command("traces", cell=cell.index)
        return [
            TokenTrace(
                t["sent_ns"],
                t["turn"],
                array("i", t["prompt"]),
                array("i", t["completion"]),
                t["counted"],
            )
            for r in replies
            for t in r["traces"]
        ]

    async def finish(self) -> list[ClientHealth]:
        """Each worker's client health; the workers' tokenizer use goes into the run's
        sizing figures."""
        if not self.configured:  # stopped before the first repetition: nothing was played
            return []
        replies = await self.pool.command("finish", FINISH_TIMEOUT_S)
        m = self.run.measured
        for r in replies:
            m.tokenizer_calls += int(r["calls"])
            m.tokenizer_seconds += float(r["seconds"])
            for cell, n in r["fallbacks"].items():
                m.sizings[int(cell)].fallbacks += int(n)
        return [ClientHealth.model_validate(r["health"]) for r in replies]

    def event_loop(self) -> str:
        """The loop the worker processes stamp on (they start the library's own), and how
        many there are, for the result's environment."""
        return f"{loop_name()} in {self.pool.count} worker processes"


def _where(repetition: Repetition) -> dict[str, Any]:
    return {
        "cell": repetition.cell.index,
        "repetition": repetition.index,
        "warmup": repetition.warmup,
    }
