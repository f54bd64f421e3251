from __future__ import annotations

import workloads

EXPECTED = {
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
}


def test_exports_do_not_drift():
    assert set(workloads.__all__) == EXPECTED


def test_every_export_exists_and_public_names_have_docstrings():
    for name in workloads.__all__:
        obj = getattr(workloads, name)
        if name != "__version__":
            assert obj.__doc__, f"workloads.{name} has no docstring"
