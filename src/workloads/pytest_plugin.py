"""pytest fixtures for your own tests, registered through the ``pytest11`` entry point.

    def test_my_server_keeps_up(run_scenario):
        result = run_scenario("five-user-coding", set=["users=2", "repetitions.measured=1"])
        assert result.summary.run.valid == result.summary.run.records

``simulated_server`` is a :class:`workloads.SimulatedServer` on 127.0.0.1 at a free port,
started for one test and stopped after it. ``run_scenario`` runs a scenario against it (or
against ``target=...``) and returns the RunResult.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from workloads.results import RunResult
from workloads.runner import Target, run
from workloads.scenario import Scenario, load_scenario
from workloads.simulated_server import SimulatedServer


@pytest.fixture
def simulated_server() -> Iterator[SimulatedServer]:
    """The embedded simulated server ("fast" profile, ground truth on) for one test."""
    with SimulatedServer("fast", debug=True) as server:
        yield server


@pytest.fixture
def run_scenario(
    simulated_server: SimulatedServer, tmp_path: Path
) -> Callable[..., RunResult]:
    """Run a scenario (name, path or Scenario) against the simulated server."""

    def runner(
        scenario: Scenario | str | Path,
        *,
        set: Sequence[str] = (),
        target: Target | None = None,
        **options: Any,
    ) -> RunResult:
        chosen = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
        chosen = chosen.with_overrides(set)
        options.setdefault("out_dir", tmp_path / f"run-{chosen.name}")
        return run(chosen, target or simulated_server.target, **options)

    return runner
