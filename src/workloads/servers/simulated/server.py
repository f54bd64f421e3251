"""`SimulatedServer`: the simulated engine on 127.0.0.1, in a thread of its own.

Running the server on its own event loop (in a background thread) keeps its step timing from
being delayed by the client's callbacks, and lets synchronous code — the CLI, pytest
fixtures, a notebook — start and stop it without owning an event loop.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from aiohttp import web

from workloads.model.target import Target
from workloads.servers.simulated.app import build_app
from workloads.servers.simulated.engine import Engine, RequestTruth
from workloads.servers.simulated.profiles import Profile, sim_profile

__all__ = ["SimulatedServer"]

# What stop() gives requests still being answered before it cancels them: a stream held by
# a stall fault (faults.stall_s) whose client has gone would otherwise hold the server past
# stop()'s wait for its thread, and leave it running.
SHUTDOWN_S = 1.0


class SimulatedServer:
    """An OpenAI-compatible simulated inference server on 127.0.0.1 (port 0 = any free one).

        with SimulatedServer(profile="fast") as server:
            result = workloads.run("five-user-coding", target=server.target)
            truth = server.truths()   # what the engine saw, per request

    ``profile`` is a name from ``PROFILES`` ("fast", "arc-b70-27b", "h200-8b") or a
    :class:`Profile`; ``sim`` overrides its fields (``{"kv_capacity_tokens": 46202}``,
    ``{"faults.rate_429": 0.1}``). ``debug=True`` turns on ``GET /debug/requests``.
    """

    def __init__(
        self,
        profile: str | Profile = "fast",
        *,
        sim: dict[str, Any] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        corpus: str = "stdlib",
        debug: bool = False,
    ) -> None:
        # "profile" in the overrides picks the named profile, so a run's --sim can choose it
        # (python -m workloads run five-user-coding --sim profile=arc-b70-27b).
        self.profile = sim_profile(sim, profile)
        self.host = host
        self.port = port
        self._corpus = corpus
        self._debug = debug
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self.engine: Engine | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, ending in ``/v1``."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def model(self) -> str:
        """The model name the server answers to."""
        return self.profile.model

    @property
    def target(self) -> Target:
        """A :class:`workloads.Target` for this server."""
        return Target(
            base_url=self.base_url, model=self.model, simulator_profile=self.profile.model_dump()
        )

    def truths(self) -> list[RequestTruth]:
        """Ground truth for every request so far (a snapshot copy), in arrival order."""
        assert self.engine is not None, "server not started"
        return list(self.engine.truths)

    def token_ids(self, request_id: str) -> tuple[list[int], list[int]]:
        """(prompt ids, generated ids) of one request, e.g. to feed the what-if cache oracle
        (:mod:`workloads.core.whatif`). KeyError for an unknown request id."""
        assert self.engine is not None, "server not started"
        return self.engine.token_ids(request_id)

    async def _start_async(self) -> None:
        self.engine = Engine(self.profile)
        self.engine.start()
        self._runner = web.AppRunner(
            build_app(self.engine, corpus=self._corpus, debug=self._debug),
            access_log=None,
            shutdown_timeout=SHUTDOWN_S,
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def _stop_async(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self.engine is not None:
            await self.engine.stop()
        # A handler whose client went away is no longer the runner's: end it here, before
        # the loop closes under it.
        left = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in left:
            task.cancel()
        await asyncio.gather(*left, return_exceptions=True)

    def start(self) -> SimulatedServer:
        """Start the server thread; returns once it accepts connections."""
        ready = threading.Event()
        failure: list[BaseException] = []

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._start_async())
            except BaseException as err:  # report to the starting thread, then end
                failure.append(err)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._stop_async())
            loop.close()

        self._thread = threading.Thread(target=main, name="workloads-sim", daemon=True)
        self._thread.start()
        ready.wait(timeout=30)
        if failure:
            raise failure[0]
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        self._thread = None
        self._loop = None

    def __enter__(self) -> SimulatedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> SimulatedServer:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)
