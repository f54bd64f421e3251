"""Worker processes as Ray actors (``--ray ADDRESS``; the ``ray`` extra).

Each actor runs :func:`workloads.runner.workers.worker.serve` in its own process on some node of the
cluster (spread over the nodes), and connects back to this process, the run's coordinator,
over TCP: so this process must be reachable from the cluster's nodes at the address Ray
knows it by. Each record carries its worker's host; stamps are only compared between records
of one host (durations), never across hosts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import ray
from ray.exceptions import RayError

from workloads.runner.workers.pool import Process, WorkerPool
from workloads.runner.workers.worker import serve
from workloads.wire.loop import run_loop

__all__ = ["ray_pool"]


class _ShardActor:
    """One worker process, as a Ray actor."""

    def run(self, host: str, port: int, token: str, index: int, count: int) -> int:
        return run_loop(serve(host, port, token, index, count))


class _RayProcess:
    def __init__(self, actor: Any, done: Any, index: int) -> None:
        self.name = f"Ray worker {index}"
        self.actor = actor
        self.done = done  # the ObjectRef of the actor's run()

    def exited(self) -> str | None:
        ready, _ = ray.wait([self.done], timeout=0)
        if not ready:
            return None
        try:
            return f"exit status {ray.get(self.done)}"
        except RayError as err:  # the actor died or its run() raised: Ray says why
            return f"{type(err).__name__}: {str(err).strip().splitlines()[-1:]}"

    async def wait(self, timeout_s: float) -> None:
        try:
            await asyncio.wait_for(asyncio.wrap_future(self.done.future()), timeout_s)
        except (TimeoutError, RayError):  # timed out or died: make sure it is gone
            with contextlib.suppress(RayError):
                ray.kill(self.actor)


async def ray_pool(address: str, count: int) -> WorkerPool:
    """A :class:`WorkerPool` of ``count`` Ray actors on the cluster at ``address``."""
    started = not ray.is_initialized()
    if started:  # on this thread: Ray sets its signal handlers only on the main thread
        ray.init(
            address=address,
            log_to_driver=False,
            include_dashboard=False,
            logging_level=logging.WARNING,
        )
    host = _own_address()
    actor_class: Any = ray.remote(num_cpus=1)(_ShardActor)

    async def spawn(at: str, port: int, token: str, index: int, total: int) -> Process:
        actor = actor_class.options(scheduling_strategy="SPREAD").remote()
        return _RayProcess(actor, actor.run.remote(at, port, token, index, total), index)

    pool = WorkerPool(count, spawn=spawn, host=host, bind=host)
    if started:
        pool.on_close.append(ray.shutdown)
    return pool


def _own_address() -> str:
    """This process's node's address as the cluster knows it (``ray start
    --node-ip-address``): where the workers can reach us."""
    node = ray.get_runtime_context().get_node_id()
    for entry in ray.nodes():  # type: ignore[no-untyped-call]
        if entry.get("NodeID") == node and entry.get("NodeManagerAddress"):
            return str(entry["NodeManagerAddress"])
    return str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]
