from __future__ import annotations

import subprocess
import sys

import pytest

import workloads

EXPECTED = {
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
}


def test_exports_do_not_drift():
    assert set(workloads.__all__) == EXPECTED


def test_every_export_exists_and_public_names_have_docstrings():
    for name in workloads.__all__:
        obj = getattr(workloads, name)
        if name != "__version__":
            assert obj.__doc__, f"workloads.{name} has no docstring"


def test_import_loads_only_the_data_models():
    """``import workloads`` must stay cheap: every pytest start pays it through the plugin,
    and harnesses that embed us pay it at their start. The heavy parts load on first use."""
    code = (
        "import sys, workloads; "
        "print('\\n'.join(m for m in sys.modules if m.split('.')[0] in "
        "('workloads', 'aiohttp', 'prometheus_client', 'matplotlib', 'rich', 'tiktoken')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(out.stdout.split())
    heavy = {m for m in loaded if not m.startswith("workloads")}
    assert heavy == set(), f"import workloads loaded {sorted(heavy)}"
    ours = {m for m in loaded if m.startswith("workloads")}
    allowed = {"workloads", "workloads._version"}
    assert {m for m in ours if m not in allowed and not m.startswith("workloads.model")} == set()


def test_lazy_names_resolve_and_unknown_names_raise():
    assert callable(workloads.run) and callable(workloads.probe_target)
    with pytest.raises(AttributeError):
        workloads.no_such_name  # noqa: B018
