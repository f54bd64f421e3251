"""predict(): a scenario played against the simulated engine on a virtual clock — no
server, no HTTP, no sleeping — into the RunResult a run makes, marked predicted.

    result = predict("five-user-coding", profile="fast")              # a named profile
    result = predict("five-user-coding", profile="server.toml")       # what `fit` wrote
    python -m workloads predict five-user-coding --profile server.toml

:mod:`workloads.runner.virtual` plays the sessions (their plans are a run's draws: sizes,
pauses, sub-agents, compactions) against :class:`~workloads.runner.virtual.VirtualEngine`,
cell by cell, warm-ups and windows as a run has them; this module turns its records into
the result, summarised by ``core/aggregate`` as a run's are.

The records are a run's with virtual stamps: sent, first and last token, the gap between
every emission (a content chunk each, as the simulated server writes them), usage with
cached tokens, the shareable prefix (exact). What a run adds around the engine is the
server's intake (:data:`~workloads.runner.virtual.INTAKE_NS`, or the round trip a fit
measured: a profile file's ``provenance.overhead_s``), one request at a time; not modelled:
the correctness gate, the likelihood probe, server telemetry and the profile's faults.
Agent traces (``agent.trace``: recorded plans, whose contexts may shrink) are refused.
"""

from __future__ import annotations

import hashlib
import time
import tomllib
from pathlib import Path
from typing import Any

from workloads.core import aggregate
from workloads.core.concurrency import concurrency
from workloads.core.pressure import kv_figures
from workloads.model.errors import ScenarioError
from workloads.model.results import (
    CellSummary,
    PredictionInfo,
    RunResult,
    TargetInfo,
    Window,
    cell_coordinates,
    environment,
)
from workloads.model.scenario import Scenario, load_scenario
from workloads.runner.virtual import INTAKE_NS, VirtualRun
from workloads.servers.simulated.profiles import Profile, sim_profile

__all__ = ["predict", "predictable", "profile_identity"]


def predictable(scenario: Scenario) -> None:
    """Raise :class:`ScenarioError` (one line) for a scenario :func:`predict` does not play."""
    if scenario.agent is not None and scenario.agent.trace is not None:
        raise ScenarioError(
            f"scenario {scenario.name!r} plays an agent trace ({scenario.agent.trace}), whose "
            "recorded contexts may shrink between steps, which predict does not play: run "
            f"{scenario.name} on the embedded simulator"
        )


def profile_identity(profile: str | Profile, sim: dict[str, Any] | None = None) -> PredictionInfo:
    """What a prediction's result says of its profile: the name, the file it came from, a
    sha256 (of the file's bytes, which ``sha256sum FILE`` tells, or, for a named profile or
    one with ``sim`` overrides, of the played profile's canonical JSON), and the round trip
    the fit measured beyond the engine (a file's ``provenance.overhead_s``; None: none)."""
    played = _profile(profile, sim)
    file = profile if isinstance(profile, str) and profile.endswith(".toml") else None
    trip = None
    if file is not None:
        data = Path(file).read_bytes()  # load_profile read it already: a bad file was told
        value = tomllib.loads(data.decode()).get("provenance", {}).get("overhead_s", {})
        if isinstance(value, dict) and isinstance(value.get("value"), int | float):
            trip = max(0.0, float(value["value"]))
    if file is not None and not _overrides(sim):
        digest = hashlib.sha256(data).hexdigest()
    else:
        digest = hashlib.sha256(played.model_dump_json().encode()).hexdigest()
    return PredictionInfo(profile=played.name, file=file, profile_sha256=digest, round_trip_s=trip)


def _overrides(sim: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (sim or {}).items() if k != "profile"}


def _profile(profile: str | Profile, sim: dict[str, Any] | None) -> Profile:
    return sim_profile(_overrides(sim), default=profile)


def predict(
    scenario: Scenario | str | Path,
    profile: str | Profile | None = None,
    *,
    sim: dict[str, Any] | None = None,
    label: str | None = None,
    note: str | None = None,
) -> RunResult:
    """Play ``scenario`` against the simulated engine with ``profile`` (a name, a profile
    file as ``workloads fit`` writes it, or a :class:`Profile`; ``sim`` overrides its
    fields; None: the profile ``run`` starts the embedded simulator with, the scenario's
    ``sim`` over "fast") on a virtual clock, and return the RunResult a run would make, its
    ``predicted`` naming the profile. Raises :class:`ScenarioError` for a scenario it does
    not play (:func:`predictable`) or a bad profile.

        result = predict("five-user-coding", profile="fast")
        print(result.summary.run.per_user_rate)
    """
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)
    predictable(scenario)
    if profile is None:  # as run_async merges them: a profile named in sim starts afresh
        merged = dict(sim or {}) if "profile" in (sim or {}) else {**scenario.sim, **(sim or {})}
        profile, sim = merged.pop("profile", "fast"), merged
    played = _profile(profile, sim)
    info = profile_identity(profile, sim)
    trip = info.round_trip_s
    cpu = time.process_time()
    play = VirtualRun(scenario, played, intake_ns=max(INTAKE_NS, round((trip or 0.0) * 1e9)))
    for cell in scenario.cells():
        play.cell(cell)
    info = info.model_copy(update={"cpu_s": round(time.process_time() - cpu, 3)})
    return _result(scenario, played, info, play, label=label, note=note)


def _window(span: tuple[int, int] | None) -> Window:
    return Window() if span is None else Window(duration_s=(span[1] - span[0]) / 1e9)


def _result(
    s: Scenario,
    profile: Profile,
    info: PredictionInfo,
    play: VirtualRun,
    *,
    label: str | None,
    note: str | None,
) -> RunResult:
    records = sorted(play.records, key=lambda r: (r.cell, r.repetition, r.sent_ns or 0, r.session))
    lockstep = s.pacing.mode == "lockstep"
    target = TargetInfo(
        base_url=f"virtual:{info.file or profile.name}",
        model=profile.model,
        simulated=True,
        simulator_profile=profile.model_dump(),
    )
    kv = kv_figures(None, target)
    cells = None
    if s.swept:
        cells = [
            CellSummary(
                **cell_coordinates(s, cell),
                window=_window(play.windows.get(cell.index)),
                **aggregate.cell_figures(mine, users=cell.concurrency, lockstep=lockstep, **kv),
                goodput=aggregate.judged_goodput(mine, s.slo),
            )
            for cell in s.cells()
            if (mine := [r for r in records if r.cell == cell.index])
        ]
    spans = list(play.windows.values())
    run_span = (min(a for a, _ in spans), max(b for _, b in spans)) if spans else None
    warnings = []
    if any(rate for _, rate in profile.faults.rates()):
        warnings.append("the profile's faults are not predicted: every request was served")
    if s.nonce == "run" and not s.shared_prefix_tokens:
        warnings.append(
            'nonce = "run" without shared_prefix_tokens: the system message the sessions '
            "share has no token count here, so nothing of it was shared"
        )
    return RunResult(
        created_unix=time.time(),
        label=label,
        note=note,
        scenario=s,
        target=target,
        corpus={"name": "none (predicted: token counts, no text)"},
        nonces=play.nonces,
        window=_window(play.windows.get(0) if not s.swept else run_span),
        summary=aggregate.summarize(records, users=s.users, lockstep=lockstep, **kv),
        cells=cells,
        warnings=warnings,
        environment={**environment(), "clock": "virtual"},
        records=records,
        concurrency=concurrency(records),
        goodput=aggregate.judged_goodput(records, s.slo),
        predicted=info,
    )
