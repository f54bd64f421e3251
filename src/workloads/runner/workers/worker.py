"""A worker process: plays one shard of every cell's sessions for a run's coordinator
(:mod:`workloads.runner.workers.pool`), on an event loop and an HTTP client of its own.

Started as ``python -m workloads.runner.workers.worker HOST PORT INDEX COUNT`` with the
run's token in the environment (``WORKLOADS_WORKER_TOKEN``, never on the command line), or
inside a Ray actor (:mod:`workloads.runner.workers.ray_actors`). It connects back to the
coordinator, gets the run's configuration, then does what it is told, one command at a time:

* ``open`` / ``play`` / ``learn`` / ``traces`` a repetition or cell, as
  :class:`~workloads.runner.players.LocalPlayers` does in one process; every record and
  exchange goes to the coordinator the moment it is made;
* lock-step barriers and turn 1's order ask the coordinator (``ready`` → ``go``,
  ``first`` → ``first``); ``stop`` sets this worker's stop event;
* ``finish`` returns the worker's client health and tokenizer use, and the worker exits.

Times: stamps are this host's ``perf_counter_ns`` (CLOCK_MONOTONIC). A barrier or start time
from the coordinator is used only when the coordinator runs on this host; otherwise the
worker uses the moment the message arrived (durations stay host-local).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import time
from contextlib import AsyncExitStack
from typing import Any

from workloads.core import tokens
from workloads.core.corpus import load_corpus
from workloads.core.tokens import EstimateTokenizer, TargetTokenizer
from workloads.model.records import TurnRecord
from workloads.model.scenario import Scenario
from workloads.model.target import Target
from workloads.runner.monitor import ClientMonitor
from workloads.runner.options import SessionIO, Stopping
from workloads.runner.order import OpeningOrder
from workloads.runner.players import LocalPlayers, Shard
from workloads.runner.repetition import Barrier, Repetition
from workloads.runner.sizing import CellSizing
from workloads.runner.workers.channel import LINE_LIMIT, Channel, ChannelClosed
from workloads.wire.client import AiohttpChatClient
from workloads.wire.loop import run_loop
from workloads.wire.tokenize import probe_tokenizer
from workloads.wire.transport import transport_for

__all__ = ["TOKEN_ENV", "serve"]

TOKEN_ENV = "WORKLOADS_WORKER_TOKEN"
MAX_COMMANDS = 10_000_000  # bounded: a run sends a few per repetition


class _Remote:
    """What this worker asks the coordinator: barriers and turn 1's order."""

    def __init__(self, channel: Channel, stop: asyncio.Event, same_host: bool) -> None:
        self.channel = channel
        self.stop = stop
        self.same_host = same_host
        self.waiting: dict[tuple[str, str], asyncio.Future[Any]] = {}

    def answer(self, message: dict[str, Any]) -> None:
        future = self.waiting.pop((message["op"], message["key"]), None)
        if future is not None and not future.done():
            future.set_result(message.get("value"))

    async def ask(self, op: str, key: str, **fields: Any) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiting[(op, key)] = future
        self.channel.send(op, key=key, **fields)
        stopping = asyncio.ensure_future(self.stop.wait())
        try:
            await asyncio.wait({future, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if not future.done():
            self.waiting.pop((op, key), None)
            future.cancel()
            return None
        return future.result()

    def barrier(self, repetition: Repetition) -> Barrier:
        async def wait(turn: int) -> float | None:
            key = f"{repetition.cell.index}.{repetition.index}.{turn}"
            at = await self.ask("ready", key)
            if at is None:
                return None
            return float(at) if self.same_host else time.perf_counter()

        return wait

    def order(self, repetition: Repetition) -> OpeningOrder:
        remote = self

        class Order:
            async def first(self, session: int) -> bool:
                key = f"{repetition.cell.index}.{repetition.index}.{session}"
                return bool(await remote.ask("first", key))

        return Order()


async def serve(host: str, port: int, token: str, index: int, count: int) -> int:
    """Work for the coordinator at ``host:port`` as worker ``index`` of ``count``; 0 when
    it finished, 1 when the coordinator went away first."""
    reader, writer = await asyncio.open_connection(host, port, limit=LINE_LIMIT)
    channel = Channel(reader, writer)
    try:
        channel.send("hello", token=token, index=index, host=socket.gethostname(), pid=os.getpid())
        config = await channel.recv()
        return await _work(channel, config, Shard(index, count))
    except ChannelClosed:
        return 1
    finally:
        await channel.close()


async def _work(channel: Channel, config: dict[str, Any], shard: Shard) -> int:
    scenario = Scenario.model_validate(config["scenario"])
    target = Target(**config["target"])
    transport = transport_for(target)
    model: str = config["model"]
    host = socket.gethostname()
    stop = asyncio.Event()
    remote = _Remote(channel, stop, same_host=config["host"] == host)
    records: list[TurnRecord] = []
    cells = {c.index: c for c in scenario.cells()}

    def on_record(record: TurnRecord) -> None:
        record = record.model_copy(update={"host": host})
        records.append(record)
        channel.send("record", record=record.model_dump(mode="json"))

    def on_exchange(
        record: TurnRecord,
        messages: list[dict[str, str]],
        reply: str | None,
        digests: list[str] | None,
    ) -> None:
        channel.send(
            "exchange",
            cell=record.cell,
            repetition=record.repetition,
            warmup=record.warmup,
            session=record.session,
            turn=record.turn,
            messages=messages,
            completion=reply,
            prompt_sha256=record.prompt_sha256,
            digests=digests,
        )

    await asyncio.to_thread(tokens.encoding)  # tiktoken's tables, off the loop (0.3 s)
    async with AsyncExitStack() as stack:
        tokenizer: TargetTokenizer = EstimateTokenizer()
        if config["exact"]:
            found = await probe_tokenizer(
                target.root_url,
                model,
                transport=transport,
                template_kwargs=scenario.extra_body.get("chat_template_kwargs"),
            )
            if found is None:
                channel.send(
                    "failed",
                    reason="the target's tokenizer endpoint did not answer "
                    "this worker as it answered the run",
                )
                await channel.flush()
                return 1
            tokenizer = await stack.enter_async_context(found)
        users = max((len(shard.sessions(c.concurrency)) for c in cells.values()), default=1)
        client = await stack.enter_async_context(
            AiohttpChatClient(
                target.base_url,
                connections=max(1, users),
                transport=transport,
                timeouts=scenario.timeouts,
            )
        )
        sizings = {i: CellSizing(scenario.for_cell(c), tokenizer) for i, c in cells.items()}
        starts: dict[tuple[int, int], float] = {}
        monitor = ClientMonitor()
        players = LocalPlayers(
            sizings=sizings,
            corpus=load_corpus(scenario.content.corpus),
            entropy=bytes.fromhex(config["entropy"]),
            io=SessionIO(client, model, on_record, on_exchange if config["transcripts"] else None),
            stopping=Stopping(stop, float(config["grace_s"])),
            shard=shard,
            order=lambda: None,  # replaced per repetition below
            barrier=remote.barrier,
            start=lambda rep: starts.get((rep.cell.index, rep.index)),
            monitor=monitor,
        )
        commands: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        async def listen() -> None:
            try:
                for _ in range(MAX_COMMANDS):
                    message = await channel.recv()
                    if message["op"] in ("ready", "first"):
                        remote.answer(message)
                    elif message["op"] == "stop":
                        stop.set()
                    else:
                        commands.put_nowait(message)
            except ChannelClosed:
                stop.set()
                commands.put_nowait({"op": "gone"})

        listener = asyncio.create_task(listen())
        channel.send("up")
        try:
            async with monitor:  # this worker watches its own loop while it plays
                for _ in range(MAX_COMMANDS):
                    command = await commands.get()
                    if command["op"] == "gone":
                        return 1
                    if command["op"] == "finish":
                        break
                    reply = await _command(
                        command, players, cells, remote, starts, same_host=config["host"] == host
                    )
                    channel.send("done", **reply)
                    await channel.flush()
            health = monitor.health(records)
            channel.send(
                "done",
                health=health.model_dump(mode="json"),
                calls=tokenizer.calls,
                seconds=tokenizer.seconds,
                fallbacks={str(i): z.fallbacks for i, z in sizings.items()},
            )
            await channel.flush()
        finally:
            listener.cancel()
    return 0


async def _command(
    command: dict[str, Any],
    players: LocalPlayers,
    cells: dict[int, Any],
    remote: _Remote,
    starts: dict[tuple[int, int], float],
    *,
    same_host: bool,
) -> dict[str, Any]:
    op = command["op"]
    cell = cells[int(command["cell"])]
    if op == "traces":
        traces = await players.traces(cell)
        return {
            "traces": [
                {
                    "sent_ns": t.sent_ns,
                    "turn": t.turn,
                    "prompt": t.prompt.tolist(),
                    "completion": t.completion.tolist(),
                    "counted": t.counted,
                }
                for t in traces
            ]
        }
    repetition = Repetition(
        cell=cell, index=int(command["repetition"]), warmup=bool(command["warmup"])
    )
    if op == "open":
        players.order = lambda: remote.order(repetition)
        await players.open(repetition)
        return {}
    if op == "play":
        key = (cell.index, repetition.index)
        starts[key] = float(command["start"]) if same_host else time.perf_counter()
        finished = await players.play(repetition)
        return {"finished": finished, "observations": players.observations()}
    if op == "learn":
        sizing = players.sizings[cell.index]
        if repetition.warmup and not sizing.exact:
            sizing.learn([tuple(o) for o in command["observations"]])
        return {}
    raise ChannelClosed(f"unknown command {op!r}")


def main(argv: list[str]) -> int:
    """``python -m workloads.runner.workers.worker HOST PORT INDEX COUNT`` (the token in the
    environment)."""
    host, port, index, count = argv
    token = os.environ.pop(TOKEN_ENV, "")
    # The coordinator decides when the run stops (SIGINT/SIGTERM there: grace, then cancel);
    # a signal sent to the whole process group must not end a worker mid-turn. A worker
    # ends when the coordinator tells it to, or when the coordinator is gone.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return run_loop(serve(host, int(port), token, int(index), int(count)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
