"""pytest fixtures for your own tests, registered through the ``pytest11`` entry point.

    def test_my_server_keeps_up(run_scenario):
        result = run_scenario("five-user-coding", set=["users=2", "repetitions.measured=1"])
        assert result.summary.run.valid == result.summary.run.records

``simulated_server`` is a :class:`workloads.SimulatedServer` on 127.0.0.1 at a free port,
started for one test and stopped after it. ``run_scenario`` runs a scenario against it (or
against ``target=...``) and returns the RunResult. It refuses ``sim=`` (OptionsError): the
server is already running, and overrides could not change it; ``workloads.run(scenario,
sim={...})`` starts an embedded simulator of its own with them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

# Every pytest start in an environment with workloads installed loads this plugin: the data
# models (pydantic), the server and the run (aiohttp, aiohttp.web, prometheus_client) load
# only when a fixture runs (tests/test_pytest_plugin.py checks).
if TYPE_CHECKING:
    from workloads.model.results import RunResult
    from workloads.model.scenario import Scenario
    from workloads.model.target import Target
    from workloads.servers.simulated import SimulatedServer


@pytest.fixture
def simulated_server() -> Iterator[SimulatedServer]:
    """The embedded simulated server ("fast" profile, ground truth on) for one test."""
    from workloads.servers.simulated import SimulatedServer

    with SimulatedServer("fast", debug=True) as server:
        yield server


@pytest.fixture
def run_scenario(simulated_server: SimulatedServer, tmp_path: Path) -> Callable[..., RunResult]:
    """Run a scenario (name, path or Scenario) against the simulated server (``sim=``
    refused: it cannot change a server that is already running)."""

    def runner(
        scenario: Scenario | str | Path,
        *,
        set: Sequence[str] = (),
        target: Target | None = None,
        **options: Any,
    ) -> RunResult:
        from workloads.model.errors import OptionsError
        from workloads.model.scenario import Scenario, load_scenario

        if options.get("sim"):  # ignored silently before: the run went to the running server
            where = "target=" if target is not None else "the simulated_server fixture"
            raise OptionsError(
                f"run_scenario(sim={options['sim']!r}): the run goes to {where}, already "
                "running, which simulator overrides cannot change; call "
                "workloads.run(scenario, sim=...) to run an embedded simulator with them",
                option="sim",
            )
        chosen = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
        chosen = chosen.with_overrides(set)
        options.setdefault("out_dir", tmp_path / f"run-{chosen.name}")
        from workloads.runner.run import run

        return run(chosen, target or simulated_server.target, **options)

    return runner
