"""workloads: simulate coding-agent users against OpenAI-compatible LLM servers.

    import workloads
    result = workloads.run("five-user-coding")          # embedded simulated server
    print(result.summary.run.aggregate_rate)

Everything public is importable from here; other modules are internal.
"""

__version__ = "0.1.0"

from workloads.aggregate import RunSummary, Summary, TurnSummary
from workloads.errors import (
    IncomparableError,
    ResultFormatError,
    ScenarioError,
    TargetError,
    WorkloadsError,
)
from workloads.records import TurnRecord
from workloads.results import RunResult, load_result
from workloads.runner import Target, run, run_async
from workloads.scenario import Scenario, list_scenarios, load_scenario
from workloads.simulated_server import SimulatedServer
from workloads.telemetry import TelemetryOptions

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
    "run",
    "run_async",
]
