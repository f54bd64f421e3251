from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# A test must not fail because a machine is slow: no per-example deadline, and no health
# check on how long generating examples takes (CI builds llama.cpp beside the tests).
# HYPOTHESIS_PROFILE picks how many examples a property gets where its test sets none:
# "ci" (the default) sized for the suite's time; "nightly" ten times more, to run seldom.
# A test's own @settings(max_examples=...) holds in both.
_RELAXED = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("ci", max_examples=50, **_RELAXED)
settings.register_profile("nightly", max_examples=500, **_RELAXED)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

_STARTED = time.perf_counter()

# pytest-xdist's workers start with COLUMNS=80 in their environment where the pytest that
# started them had none, and the CLI takes COLUMNS as the user's width (cli/common.py): a
# worker gets the starting pytest's COLUMNS back (its environment is inherited), or none.
if "PYTEST_XDIST_WORKER" not in os.environ:
    os.environ["WORKLOADS_TESTS_COLUMNS"] = os.environ.get("COLUMNS", "")
elif columns := os.environ.get("WORKLOADS_TESTS_COLUMNS"):
    os.environ["COLUMNS"] = columns
else:
    os.environ.pop("COLUMNS", None)


# Python's bytecode cache, on for the test run even where the environment turns it off (CI's
# image sets PYTHONDONTWRITEBYTECODE): the package's modules are then compiled once, not in
# each of the ~60 processes the tests start, and the rewritten test modules (pytest's
# assertion rewriting, ~4 s of CPU for the whole tree) are shared by the xdist workers
# (pytest_collection below). Both land in git-ignored __pycache__ folders.
sys.dont_write_bytecode = False


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session) -> None:
    """In an xdist worker, before it collects: rewrite the test modules whose rewritten
    bytecode is not cached yet, starting at this worker's share of the list (worker i of n
    at i/n), so the workers rewrite the tree once between them, not once each (each would
    otherwise spend ~4 s of CPU on the same work at the same time). Only a head start: the
    collection that follows rewrites whatever is still missing, as always. Uses pytest's own
    rewriting and cache layout (private to pytest): any difference, and this does nothing."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if not worker.startswith("gw") or count < 2 or sys.dont_write_bytecode:
        return
    try:
        from _pytest.assertion import rewrite

        state = session.config.stash[rewrite.assertstate_key]
        files = sorted(Path(__file__).parent.rglob("test_*.py"))
        start = len(files) * int(worker[2:]) // count
        for path in files[start:] + files[:start]:  # bounded: each file once
            cache = rewrite.get_cache_dir(path)
            pyc = cache / (path.name[:-3] + rewrite.PYC_TAIL)
            if pyc.exists() or not rewrite.try_makedirs(cache):
                continue
            source_hash, code = rewrite._rewrite_test(path, session.config)
            rewrite._write_pyc(state, code, source_hash, pyc)
    except Exception:  # pytest's internals changed: collection rewrites as it always has
        return


def pytest_terminal_summary(terminalreporter, config) -> None:
    """The wall time of this pytest run, with what it ran: `.ci/run` runs the light tier
    and the llama.cpp tier as two runs, and this line is each one's figure."""
    markexpr = config.getoption("markexpr")
    tier = f"-m {markexpr!r}" if markexpr else "every tier"
    workers = getattr(config.option, "numprocesses", None) or "no"
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    terminalreporter.write_line(
        f"wall time: {time.perf_counter() - _STARTED:.1f} s, {tier} ({workers} xdist "
        f"workers, {os.cpu_count()} CPUs, load average {load} at the end)"
    )


def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto``: two workers per core and one more. The suite waits on simulated engines'
    clocks and loopback sockets more than it computes (load 1.5 of 2 cores with a worker per
    core); on 2 cores the light tier took 312 s with 2 workers and 209 s with 4 (2026-11),
    and 5 workers beat 4 in each of 8 alternated pairs (2026-12-02: 77-94 s against 78-102 s
    on a noisy host; 6 and 8 were no better)."""
    return 2 * (os.cpu_count() or 1) + 1


# Files whose tests the xdist workers share test by test, where pyproject's --dist loadfile
# keeps every other file on one worker: long tests, each independent of the others, and no
# module-scoped fixture (a worker would run it again). One such file on one worker held it
# for minutes while the other worker idled.
SPREAD = {"tests/runner/test_outcome_warnings.py", "tests/test_readme.py"}


def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile, but the tests of the SPREAD files are work units of their own."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SpreadScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return nodeid if path in SPREAD else path

    return SpreadScheduling(config, log)


# The simulated_server fixture and run_scenario come from workloads' own pytest plugin, the
# module users get through the "workloads" entry point (named with -p in pyproject's addopts;
# tests/test_pytest_plugin.py checks the entry point itself).


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
