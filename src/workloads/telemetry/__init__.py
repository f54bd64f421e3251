"""Server telemetry and energy over the measured window.

prometheus  exposition text → Snapshot (prometheus_client's parser)
servers     name tables and counting rules: vLLM (current and ≤ 0.10), SGLang, llama.cpp, TGI
reconcile   window deltas, rates, and reconciliation with the client's usage (pure)
energy      NVML, Intel xe/i915 hwmon and RAPL counters, wrap-around aware
window      the I/O: edge snapshots, a bounded sampler, settle re-read
figures     the saved models (ServerTelemetry, EnergyFigures, Reconciliation)
"""

from workloads.model.figures import (
    EnergyDevice,
    EnergyFigures,
    GaugeSummary,
    Reconciliation,
    ServerTelemetry,
)
from workloads.telemetry.window import TelemetryOptions, WindowTelemetry, energy_for_target

__all__ = [
    "EnergyDevice",
    "EnergyFigures",
    "GaugeSummary",
    "Reconciliation",
    "ServerTelemetry",
    "TelemetryOptions",
    "WindowTelemetry",
    "energy_for_target",
]
