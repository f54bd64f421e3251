"""workloads: simulate coding-agent users against OpenAI-compatible LLM servers.

    import workloads
    result = workloads.run("five-user-coding")          # embedded simulated server
    print(result.summary.run.aggregate_rate)

Everything public is importable from here; other modules are internal. Importing this
package loads only the data models: the run, the simulated server, telemetry and the HTTP
client load on first use of a name that needs them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from workloads._version import __version__
from workloads.model.errors import (
    IncomparableError,
    ResultFormatError,
    ScenarioError,
    TargetError,
    WorkloadsError,
)
from workloads.model.records import TurnRecord
from workloads.model.results import RunResult, load_result
from workloads.model.scenario import Scenario, list_scenarios, load_scenario
from workloads.model.summary import RunSummary, Summary, TurnSummary
from workloads.model.target import Target

if TYPE_CHECKING:
    from workloads.probe import probe_target, probe_target_async
    from workloads.runner.run import run, run_async
    from workloads.servers.simulated import SimulatedServer
    from workloads.telemetry import TelemetryOptions

# Names whose modules are heavy (aiohttp, aiohttp.web, prometheus_client): loaded on first use.
_LAZY = {
    "run": "workloads.runner.run",
    "run_async": "workloads.runner.run",
    "SimulatedServer": "workloads.servers.simulated",
    "TelemetryOptions": "workloads.telemetry",
    "probe_target": "workloads.probe",
    "probe_target_async": "workloads.probe",
}

__all__ = [
    "IncomparableError",
    "ResultFormatError",
    "RunResult",
    "RunSummary",
    "Scenario",
    "ScenarioError",
    "SimulatedServer",
    "Summary",
    "Target",
    "TargetError",
    "TelemetryOptions",
    "TurnRecord",
    "TurnSummary",
    "WorkloadsError",
    "__version__",
    "list_scenarios",
    "load_result",
    "load_scenario",
    "probe_target",
    "probe_target_async",
    "run",
    "run_async",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'workloads' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
