"""workloads: simulate coding-agent users against OpenAI-compatible LLM servers.

    import workloads
    result = workloads.run("five-user-coding")          # embedded simulated server
    print(result.summary.run.aggregate_rate)

Everything public is importable from here; other modules are internal. Importing this
package loads nothing but its version: every name loads its module on first use (the data
models on pydantic; the run, the simulated server, telemetry and the plain HTTP reads on aiohttp),
so the pytest plugin costs nothing in a test run that does not use it.

Every error the library raises on purpose is a :class:`WorkloadsError` (the tree is in
:mod:`workloads.model.errors`); a failed request is never raised, it is a record. The
library never prints: it logs to the ``workloads`` logger, which is silent until the
application configures logging (``logging.basicConfig(level=logging.INFO)`` shows a run's
start, cells and end).
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from workloads._version import __version__

# Silent by default: without a handler here, Python's last-resort handler would print the
# library's warnings on stderr. An application's handlers (on the root logger or on
# "workloads") still get every record.
logging.getLogger("workloads").addHandler(logging.NullHandler())

if TYPE_CHECKING:
    from workloads.core.aggregate import summarize
    from workloads.core.load import load_result
    from workloads.model.capacity import CapacityResult, load_capacity
    from workloads.model.errors import (
        IncomparableError,
        OptionsError,
        OutputError,
        OutputExistsError,
        ResultFormatError,
        ResultFormatWarning,
        ScenarioError,
        TargetError,
        WorkloadsError,
    )
    from workloads.model.records import TurnRecord
    from workloads.model.results import RunResult
    from workloads.model.scenario import Scenario, list_scenarios, load_scenario
    from workloads.model.slo import Slo, parse_slo
    from workloads.model.summary import RunSummary, Summary, TurnSummary
    from workloads.model.target import Target
    from workloads.probe import probe_target, probe_target_async
    from workloads.runner.capacity import capacity, capacity_async
    from workloads.runner.predict import predict
    from workloads.runner.run import run, run_async
    from workloads.servers.simulated import SimulatedServer
    from workloads.telemetry import TelemetryOptions

# Every name loads its module on first use: the data models need pydantic (~0.2-1 s), the
# rest aiohttp, aiohttp.web and prometheus_client as well.
_LAZY = {
    "CapacityResult": "workloads.model.capacity",
    "load_capacity": "workloads.model.capacity",
    "IncomparableError": "workloads.model.errors",
    "OptionsError": "workloads.model.errors",
    "OutputError": "workloads.model.errors",
    "OutputExistsError": "workloads.model.errors",
    "ResultFormatError": "workloads.model.errors",
    "ResultFormatWarning": "workloads.model.errors",
    "ScenarioError": "workloads.model.errors",
    "TargetError": "workloads.model.errors",
    "WorkloadsError": "workloads.model.errors",
    "TurnRecord": "workloads.model.records",
    "RunResult": "workloads.model.results",
    "load_result": "workloads.core.load",
    "summarize": "workloads.core.aggregate",
    "Scenario": "workloads.model.scenario",
    "list_scenarios": "workloads.model.scenario",
    "load_scenario": "workloads.model.scenario",
    "Slo": "workloads.model.slo",
    "parse_slo": "workloads.model.slo",
    "RunSummary": "workloads.model.summary",
    "Summary": "workloads.model.summary",
    "TurnSummary": "workloads.model.summary",
    "Target": "workloads.model.target",
    "capacity": "workloads.runner.capacity",
    "capacity_async": "workloads.runner.capacity",
    "predict": "workloads.runner.predict",
    "run": "workloads.runner.run",
    "run_async": "workloads.runner.run",
    "SimulatedServer": "workloads.servers.simulated",
    "TelemetryOptions": "workloads.telemetry",
    "probe_target": "workloads.probe",
    "probe_target_async": "workloads.probe",
}

__all__ = [
    "CapacityResult",
    "IncomparableError",
    "OptionsError",
    "OutputError",
    "OutputExistsError",
    "ResultFormatError",
    "ResultFormatWarning",
    "RunResult",
    "RunSummary",
    "Scenario",
    "ScenarioError",
    "SimulatedServer",
    "Slo",
    "Summary",
    "Target",
    "TargetError",
    "TelemetryOptions",
    "TurnRecord",
    "TurnSummary",
    "WorkloadsError",
    "__version__",
    "capacity",
    "capacity_async",
    "list_scenarios",
    "load_capacity",
    "load_result",
    "load_scenario",
    "parse_slo",
    "predict",
    "probe_target",
    "probe_target_async",
    "run",
    "run_async",
    "summarize",
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
