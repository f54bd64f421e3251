from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

# A test must not fail because a machine is slow: no per-example deadline, and no health
# check on how long generating examples takes (CI builds llama.cpp beside the tests).
settings.register_profile("workloads", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("workloads")

# The simulated_server fixture and run_scenario come from workloads' own pytest plugin
# (entry point "workloads"), exactly as users get them.


@pytest.fixture
def tiny_scenario():
    import workloads

    return workloads.load_scenario("five-user-coding").with_overrides(
        [
            "users=2",
            "turns=2",
            "opening_tokens=600",
            "turn_tokens=120",
            "output_tokens=24",
            "repetitions.warmup=1",
            "repetitions.measured=1",
        ]
    )


@pytest.fixture
def serve_app():
    """Start an aiohttp app on 127.0.0.1 at a free port, in the test's event loop:
    ``async with serve_app(app) as root_url: ...`` (no mocks of aiohttp: real sockets)."""
    from contextlib import asynccontextmanager

    from aiohttp import web

    @asynccontextmanager
    async def serve(app: web.Application):
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            await runner.cleanup()

    return serve
