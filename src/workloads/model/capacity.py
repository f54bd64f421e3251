"""CapacityResult: what ``workloads capacity`` found, saved as ``capacity.json`` with its own
format version: every load measured (session goodput with its interval, its verdict, the
per-user rate), the knee, and why the search stopped if it stopped early."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from workloads._version import __version__
from workloads.model.base import Frozen
from workloads.model.errors import ResultFormatError
from workloads.model.files import read_json, replace_file, target_file
from workloads.model.scenario import Scenario
from workloads.model.slo import Slo

__all__ = [
    "CAPACITY_FILE",
    "CAPACITY_FORMAT_VERSION",
    "CapacityPoint",
    "CapacityResult",
    "PointVerdict",
    "load_capacity",
]

CAPACITY_FORMAT_VERSION = 1  # of capacity.json; history above load_capacity
CAPACITY_FILE = "capacity.json"
PointVerdict = Literal["meets", "fails", "cannot tell"]


class CapacityPoint(Frozen):
    """One load the search measured, over all its repetitions (several runs when it
    measured more). ``verdict``: "meets" when the interval of session goodput is at or
    above the goal, "fails" when below it, "cannot tell" when the repetitions allowed ran
    out first (the search then treats it as not meeting)."""

    load: float  # concurrency (whole) or arrival rate (sessions/s)
    repetitions: int  # measured repetitions pooled
    sessions: int
    good_sessions: int
    session_share: float | None
    low: float | None  # two-sided 95% interval of session goodput
    high: float | None
    verdict: PointVerdict
    requests: int
    met: int  # requests that met the SLO
    per_user_rate: float | None  # median post-first rate over the valid records, tok/s
    goodput_token_rate: float | None  # completion tokens that met / s, median over reps
    runs: list[str] = Field(default_factory=list)  # run directories, relative to the file

    @property
    def request_share(self) -> float | None:
        return self.met / self.requests if self.requests else None


class CapacityResult(Frozen):
    """The capacity search's answer: ``knee`` is the highest load shown to keep session
    goodput at or above ``goal`` (None: none was), ``first_failing`` the lowest load above
    it not shown to (None: none measured)."""

    format_version: int = CAPACITY_FORMAT_VERSION
    workloads_version: str = __version__
    created_unix: float
    scenario: Scenario  # as each point ran it, less the load
    target: str  # the base URL, or "simulated server"
    model: str
    simulator_profile: dict[str, Any] | None = None
    slo: Slo
    goal: float
    axis: Literal["concurrency", "rate"]
    points: list[CapacityPoint]
    knee: float | None
    first_failing: float | None
    stopped: str | None = None  # why the search ended before it bracketed the knee

    def save(self, directory: str | Path, *, overwrite: bool = False) -> Path:
        """Write ``capacity.json`` into ``directory`` (never over one unless asked; no
        partial file on a failed write: :class:`OutputError` names it)."""
        path = target_file(directory, CAPACITY_FILE, overwrite=overwrite)
        return replace_file(path, self.model_dump_json(indent=2) + "\n")


# format_version history of capacity.json (one loader each):
#   1 — 2026-12-02: first version.
_LOADERS = {1: lambda data: data}


def load_capacity(path: str | Path) -> CapacityResult:
    """A :class:`CapacityResult` from ``DIR`` or ``DIR/capacity.json``."""
    p = Path(path)
    if p.is_dir():
        p = p / CAPACITY_FILE
    data = read_json(p, missing="no such capacity file")
    version = data.get("format_version")
    if version not in _LOADERS:
        raise ResultFormatError(
            f"{p}: format_version {version!r} is not a capacity format "
            f"this workloads reads (1 to {CAPACITY_FORMAT_VERSION})"
        )
    try:
        return CapacityResult.model_validate(_LOADERS[version](data))
    except ValidationError as err:
        raise ResultFormatError(f"{p}: not a valid capacity result: {err}") from err
