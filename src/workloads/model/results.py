"""RunResult: the saved, versioned result of a run, and its loader.

``DIR/result.json`` holds the validated scenario, the target's identity, the nonces, the
measured window, the summary and warnings; ``DIR/records.jsonl`` beside it holds the raw
TurnRecords. ``show`` and ``compare`` recompute from those files.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from workloads._version import __version__
from workloads.model.base import Frozen
from workloads.model.errors import ResultFormatError
from workloads.model.figures import EnergyFigures, ServerTelemetry
from workloads.model.records import TurnRecord, read_records
from workloads.model.scenario import Scenario
from workloads.model.summary import BandSummary, ConcurrencySummary, Summary
from workloads.model.whatif import WhatIfTurn

__all__ = ["FORMAT_VERSION", "CellSummary", "ClientHealth", "RunResult", "Sizing", "load_result"]

FORMAT_VERSION = 1
RESULT_FILE = "result.json"
RECORDS_FILE = "records.jsonl"


class ServerIdentity(Frozen):
    system_fingerprint: str | None = None
    version: str | None = None  # from GET /version where the server has it
    models: list[str] = Field(default_factory=list)  # from GET /v1/models


class TargetInfo(Frozen):
    base_url: str
    model: str
    simulated: bool  # the embedded simulated server (no --target)
    simulator_profile: dict[str, Any] | None = None
    server: ServerIdentity = ServerIdentity()


class RepetitionNonces(Frozen):
    cell: int = 0
    repetition: int
    warmup: bool
    run_nonce: str | None  # shared by this repetition's sessions (nonce = "run")
    sessions: list[str]


class Window(Frozen):
    """The measured interval: from the first measured request to the last measured reply.

    ``server`` holds the server's counter deltas over it, reconciled with the measured
    TurnRecords' usage (None: metrics were not scraped); ``energy`` this machine's energy over
    it (None: not read). Figures a server does not report are None inside them, never 0.
    """

    start_unix: float | None = None
    end_unix: float | None = None
    duration_s: float | None = None
    server: ServerTelemetry | None = None
    energy: EnergyFigures | None = None


class CellSummary(Frozen):
    """One coordinate of a sweep: its concurrency and prior depth, its measured window, and
    the summary of its measured turns."""

    cell: int
    concurrency: int
    prior_tokens: int  # configured context before turn 1's new content
    configured_prompt_tokens: int  # turn 1: prior_tokens + turn_tokens
    window: Window
    # Post-first streaming rate of every valid measured turn: median with min-max (at C1 and
    # one turn, the seed records' "median generation tokens per second" and its range).
    generation_rate: BandSummary | None = None
    summary: Summary
    cache_what_if: list[WhatIfTurn] | None = None


class Sizing(Frozen):
    """How prompts were sized to their configured depths, and what that cost the target."""

    tokenizer: str  # e.g. "vLLM-shaped /tokenize (messages)" or "tiktoken ... (estimate)"
    exact: bool  # the target's own tokenizer (depths and shareable prefixes are exact)
    calls: int  # tokenizer HTTP calls made to the target (0 for estimates)
    seconds: float  # their total duration; none was on a turn's timed path
    fallbacks: int = 0  # turns or openings sized by estimate because a call failed
    # Estimate mode: target tokens per estimated token, learned from each cell's warm-up,
    # per cell and turn ({"0": {"1": 1.02}}).
    scale: dict[str, dict[str, float]] = Field(default_factory=dict)


class ClientHealth(Frozen):
    """How the client itself fared over the run (:mod:`workloads.runner.monitor`): figures
    that say whether the numbers could be the client's, not the server's. None: not known."""

    loop_lag_samples: int
    loop_lag_p50_ms: float | None  # how late the event loop woke, sampled every 10 ms
    loop_lag_p99_ms: float | None
    loop_lag_max_ms: float | None
    cpu_share: float | None  # this process's CPU seconds / wall seconds (1.0 = one core)
    send_delay_p50_ms: float | None  # measured requests: started -> written (pool, connect)
    send_delay_p99_ms: float | None


class RunResult(Frozen):
    """Everything a run produced. Save with :meth:`save`, read back with :func:`load_result`.

        result = workloads.run("five-user-coding")
        print(result.summary.run.aggregate_rate)
        result.save("runs/today")
    """

    format_version: int = FORMAT_VERSION
    workloads_version: str = __version__
    created_unix: float
    complete: bool = True  # False: the run was interrupted; records hold what was measured
    label: str | None = None
    note: str | None = None
    scenario: Scenario
    target: TargetInfo
    corpus: dict[str, str]
    nonces: list[RepetitionNonces]
    window: Window
    summary: Summary  # a sweep pools every cell here; read ``cells`` instead
    cells: list[CellSummary] | None = None  # one per coordinate, for a sweep
    # The what-if cache oracle per turn (no contention; LRU of the server's KV capacity, and
    # unlimited), when token ids and the capacity are known. None: not computed.
    cache_what_if: list[WhatIfTurn] | None = None
    sizing: Sizing | None = None
    warnings: list[str] = Field(default_factory=list)
    environment: dict[str, str] = Field(default_factory=dict)
    records: list[TurnRecord] = Field(default_factory=list, exclude=True, repr=False)
    client: ClientHealth | None = None  # the client's own health; None in older results
    # Requests in flight over the measured span (None: no measured span); with free pacing
    # and arrivals it is an outcome, not a setting.
    concurrency: ConcurrencySummary | None = None

    def save(self, directory: str | Path, *, overwrite: bool = False) -> Path:
        """Write ``result.json`` into ``directory`` (and records.jsonl if not there yet)."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        path = out / RESULT_FILE
        if path.exists() and not overwrite:
            raise FileExistsError(f"{path} exists; pass overwrite=True or choose another --out")
        records_path = out / RECORDS_FILE
        if not records_path.exists():
            with records_path.open("w", encoding="utf-8") as f:
                for record in self.records:
                    f.write(record.model_dump_json() + "\n")
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(self.model_dump_json(indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)
        return path


def environment() -> dict[str, str]:
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "hostname": platform.node(),
    }


# format_version history (keep loading every version listed here):
#   1 — 2026-11-30: first version (later additive, optional: cells, sizing, nonces' cell).
#       Early files carry "window.telemetry": null, which the typed window.server /
#       window.energy replaced the same day; it is dropped on load.
def load_result(path: str | Path) -> RunResult:
    """Load a RunResult from ``DIR`` or ``DIR/result.json``, with its records."""
    p = Path(path)
    if p.is_dir():
        p = p / RESULT_FILE
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise ResultFormatError(f"{p}: no such result file") from err
    except json.JSONDecodeError as err:
        raise ResultFormatError(f"{p}: not JSON ({err})") from err
    version = data.get("format_version") if isinstance(data, dict) else None
    if version != FORMAT_VERSION:
        raise ResultFormatError(
            f"{p}: format_version {version!r} is not one this version of workloads reads "
            f"({FORMAT_VERSION}); upgrade workloads"
        )
    window = data.get("window")
    if isinstance(window, dict) and window.get("telemetry", 0) is None:
        window.pop("telemetry")
    records_path = p.parent / RECORDS_FILE
    records = list(read_records(records_path)) if records_path.exists() else []
    try:
        return RunResult.model_validate({**data, "records": records})
    except ValidationError as err:
        raise ResultFormatError(f"{p}: not a valid result: {err}") from err
