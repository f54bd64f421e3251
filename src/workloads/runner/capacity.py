"""capacity(): the highest load at which session goodput stays at or above a goal.

The load is the concurrency (``users``) of a closed-loop scenario, or the arrival rate
(``pacing.arrivals.rate_per_s``) of an open-loop one. From ``start`` (the scenario's own
load), :func:`workloads.core.knee.next_load` picks each next load from the verdicts so far:
double while nothing failed, halve while nothing met, and bisect between the highest load
that met and the lowest that failed, never leaving a load inside unmeasured (a load that
could not tell splits the bracket but closes nothing), down to one session (concurrency) or
``resolution`` (a rate: 10% by default).

Each load is a run (:func:`workloads.runner.run.run_async`) of ``batch`` measured
repetitions, judged by :func:`workloads.core.goodput.judge_share`: "meets" or "fails" only
when the interval of its session goodput says so; otherwise it runs ``batch`` more
repetitions, up to ``max_repetitions``, and a load still undecided then is "cannot tell"
(never the knee, which is a load *shown* to meet). Every loop is
bounded: ``max_points`` loads, ``max_repetitions`` per load, ``max_seconds`` of wall time
(checked between runs), and the ``stop`` event.

    result = workloads.capacity("five-user-coding", slo="ttft_s=2,itl_ms=50")
    result.knee  # 12.0: the highest concurrency shown to keep 95% of sessions good
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from workloads.core import stats
from workloads.core.goodput import judge_share, missing_figure
from workloads.core.knee import knee as bracket
from workloads.core.knee import next_load
from workloads.model.capacity import CAPACITY_FILE, CapacityPoint, CapacityResult, PointVerdict
from workloads.model.errors import OptionsError, OutputExistsError
from workloads.model.goodput import RepetitionGoodput
from workloads.model.results import RunResult
from workloads.model.scenario import Scenario, load_scenario
from workloads.model.slo import Slo, parse_slo
from workloads.model.target import Target
from workloads.runner.run import run_async
from workloads.wire.loop import run_loop

__all__ = ["CapacityLimits", "capacity", "capacity_async"]

MAX_CONCURRENCY = 4096  # the scenario's own limit on users


@dataclass(frozen=True, slots=True)
class CapacityLimits:
    """How far the search may go (every bound is checked between runs)."""

    max_points: int = 12  # loads measured
    batch: int = 3  # measured repetitions per run (at least 3: compare's minimum)
    max_repetitions: int = 30  # per load, pooled over its runs; then "cannot tell"
    max_seconds: float | None = 3600.0  # wall time of the whole search; None: unbounded
    # A rate search stops bisecting when the bracket's high / low is within 1 + this.
    resolution: float = 0.1
    # The highest load the search tries (None: 4,096 sessions, or 100,000 arrivals/s).
    max_load: float | None = None

    def check(self) -> None:
        if self.max_points < 1 or self.batch < stats.MIN_REPETITIONS:
            raise OptionsError(
                f"max_points must be ≥ 1 and batch ≥ {stats.MIN_REPETITIONS} "
                f"(got {self.max_points}, {self.batch})",
                option="limits",
            )
        if self.max_repetitions < self.batch:
            raise OptionsError(
                f"max_repetitions ({self.max_repetitions}) must be at least batch ({self.batch})",
                option="max_repetitions",
            )
        if not self.resolution > 0:
            raise OptionsError("resolution must be above 0", option="resolution")
        if self.max_load is not None and not self.max_load > 0:
            raise OptionsError("max_load must be above 0", option="max_load")


@dataclass
class _Load:
    """What one load has measured so far, over its runs."""

    load: float
    repetitions: list[RepetitionGoodput] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)  # post-first rates of valid records
    requests: int = 0
    met: int = 0
    runs: list[str] = field(default_factory=list)

    def add(self, result: RunResult, run_dir: str | None) -> None:
        g = result.goodput
        assert g is not None  # judged: the scenario carries the SLO
        self.repetitions += g.repetitions
        self.requests += g.requests
        self.met += g.met
        self.rates += [
            r.decode_tokens_per_s
            for r in result.records
            if r.valid
            and not r.warmup
            and r.parent_session is None
            and r.decode_tokens_per_s is not None
        ]
        if run_dir is not None:
            self.runs.append(run_dir)

    def point(self, goal: float) -> CapacityPoint:
        """The load's figures so far; "cannot tell" until its interval decides."""
        judged = judge_share([(r.good_sessions, r.sessions) for r in self.repetitions], goal)
        verdict: PointVerdict = "cannot tell"
        if judged is not None and judged.verdict != "measure more":
            verdict = judged.verdict
        sessions = sum(r.sessions for r in self.repetitions)
        good = sum(r.good_sessions for r in self.repetitions)
        return CapacityPoint(
            load=self.load,
            repetitions=len(self.repetitions),
            sessions=sessions,
            good_sessions=good,
            session_share=good / sessions if sessions else None,
            low=judged.low if judged else None,
            high=judged.high if judged else None,
            verdict=verdict,
            requests=self.requests,
            met=self.met,
            per_user_rate=stats.median(self.rates),
            goodput_token_rate=stats.median(
                r.met_tokens / r.span_s for r in self.repetitions if r.span_s
            ),
            runs=list(self.runs),
        )


def _axis(scenario: Scenario) -> Literal["concurrency", "rate"]:
    return "rate" if scenario.pacing.mode == "arrivals" else "concurrency"


def _at(scenario: Scenario, load: float, repetitions: int) -> Scenario:
    """``scenario`` at ``load``, with ``repetitions`` measured repetitions."""
    update: dict[str, Any] = {
        "repetitions": scenario.repetitions.model_copy(update={"measured": repetitions})
    }
    if _axis(scenario) == "rate":
        arrivals = scenario.pacing.arrivals
        assert arrivals is not None
        update["pacing"] = scenario.pacing.model_copy(
            update={"arrivals": arrivals.model_copy(update={"rate_per_s": load})}
        )
    else:
        update["users"] = int(load)
    return scenario.model_copy(update=update)


def _label(axis: str, load: float) -> str:
    return f"rate{load:g}" if axis == "rate" else f"c{int(load)}"


def _bounds(
    scenario: Scenario, start: float | None, limits: CapacityLimits
) -> tuple[float, float, float]:
    """(the first load, the floor, the ceiling) of the search; an explicit ``start`` above
    ``max_load`` is refused (the scenario's own load is brought down to it)."""
    if _axis(scenario) == "rate":
        assert scenario.pacing.arrivals is not None
        first = start if start is not None else scenario.pacing.arrivals.rate_per_s
        floor, ceiling = 1e-3, min(100_000.0, limits.max_load or math.inf)
    else:
        first = float(int(start if start is not None else scenario.users))
        most = MAX_CONCURRENCY if limits.max_load is None else int(limits.max_load)
        floor, ceiling = 1.0, float(max(1, min(MAX_CONCURRENCY, most)))
    if start is not None and first > ceiling:
        raise OptionsError(
            f"start ({start:g}) is above the highest load allowed ({ceiling:g}, max_load)",
            option="start",
        )
    first = min(first, ceiling)
    if not floor <= first:
        raise OptionsError(f"start must be at least {floor:g}, not {first:g}", option="start")
    return first, floor, ceiling


def _checked(
    scenario: Scenario | str | Path, slo: Slo | str | None, goal: float, limits: CapacityLimits
) -> Scenario:
    """``scenario`` with the SLO the search judges by; the options a search refuses."""
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)
    if isinstance(slo, str):
        slo = parse_slo(slo)
    slo = slo or scenario.slo
    if slo is None:
        raise OptionsError(
            "capacity needs an SLO: pass slo= (--slo) or give the scenario an [slo] table",
            option="slo",
        )
    if not 0.0 < goal < 1.0:
        raise OptionsError(
            f"goal must be a share between 0 and 1 (exclusive), not {goal}", option="goal"
        )
    if scenario.swept:
        raise OptionsError(
            "capacity searches the load itself: give a scenario without "
            "sweep axes (concurrency, prior_tokens)",
            option="scenario",
        )
    limits.check()
    return scenario.model_copy(update={"slo": slo})


@dataclass
class _Search:
    """One search's runs: each load's figures so far, and what the runs saw of the target."""

    scenario: Scenario
    target: Target | None
    goal: float
    limits: CapacityLimits
    sim: dict[str, Any] | None
    out: Path | None
    overwrite: bool
    on_point: Callable[[CapacityPoint], None] | None
    stop: asyncio.Event | None
    began: float = field(default_factory=time.monotonic)
    loads: dict[float, _Load] = field(default_factory=dict)
    model: str = ""
    profile: dict[str, Any] | None = None

    def out_of_bounds(self) -> str | None:
        if self.stop is not None and self.stop.is_set():
            return "stopped from outside (the stop event; Ctrl-C in the CLI)"
        seconds = self.limits.max_seconds
        if seconds is not None and time.monotonic() - self.began > seconds:
            return f"out of time ({seconds:g} s, max_seconds)"
        return None

    async def measure(self, load: float) -> CapacityPoint | str:
        """Run ``load`` until its verdict is known or its repetitions run out; why not,
        when a bound stopped the search first."""
        limits, slo = self.limits, self.scenario.slo
        assert slo is not None
        state = self.loads.setdefault(load, _Load(load))
        while True:  # each run adds a repetition or more, up to max_repetitions
            if (why := self.out_of_bounds()) is not None:
                return why
            batch = min(limits.batch, limits.max_repetitions - len(state.repetitions))
            run_dir = None
            if self.out is not None:
                run_dir = f"points/{_label(_axis(self.scenario), load)}-{len(state.runs) + 1}"
            result = await run_async(
                _at(self.scenario, load, batch),
                self.target,
                sim=self.sim,
                stop=self.stop,
                transcripts=False,
                out_dir=None if run_dir is None or self.out is None else self.out / run_dir,
                overwrite=self.overwrite,
            )
            self.model, self.profile = result.target.model, result.target.simulator_profile
            if result.goodput is None:
                why = missing_figure(result.records, slo) or "no measured request"
                raise OptionsError(f"the SLO cannot judge these runs: {why}", option="slo")
            state.add(result, run_dir)
            point = state.point(self.goal)
            if self.on_point is not None:
                self.on_point(point)
            if point.verdict != "cannot tell" or len(state.repetitions) >= limits.max_repetitions:
                return point


async def capacity_async(
    scenario: Scenario | str | Path,
    target: Target | None = None,
    *,
    slo: Slo | str | None = None,  # None: the scenario's [slo]
    goal: float = 0.95,  # session goodput to keep
    start: float | None = None,  # the first load measured (None: the scenario's)
    sim: dict[str, Any] | None = None,  # simulator profile overrides (no target)
    out_dir: str | Path | None = None,  # capacity.json, and each run in points/
    overwrite: bool = False,
    limits: CapacityLimits = CapacityLimits(),
    on_point: Callable[[CapacityPoint], None] | None = None,  # after each run
    stop: asyncio.Event | None = None,  # set: no new run starts; the search ends
) -> CapacityResult:
    """Search the highest load (concurrency, or arrival rate for an open-loop scenario) at
    which session goodput stays at or above ``goal`` (see the module doc). Each load runs
    against ``target`` (the embedded simulated server when None: a fresh one per run, with
    ``sim``'s profile overrides). ``on_point`` is called with each load's figures after each
    of its runs (verdict "cannot tell" while it is still measuring).
    """
    scenario = _checked(scenario, slo, goal, limits)
    assert scenario.slo is not None
    axis = _axis(scenario)
    load: float | None
    load, floor, ceiling = _bounds(scenario, start, limits)
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        if (out / CAPACITY_FILE).exists() and not overwrite:
            raise OutputExistsError(
                f"{out / CAPACITY_FILE} exists; choose another out_dir=, or pass overwrite=True",
                path=str(out / CAPACITY_FILE),
            )
        out.mkdir(parents=True, exist_ok=True)
    search = _Search(scenario, target, goal, limits, sim, out, overwrite, on_point, stop)
    verdicts: dict[float, PointVerdict] = {}
    stopped: str | None = None
    while load is not None:
        if len(verdicts) >= limits.max_points:
            stopped = (
                f"measured {limits.max_points} loads (max_points) before the knee was bracketed"
            )
            break
        point = await search.measure(load)
        if isinstance(point, str):
            stopped = point
            break
        verdicts[load] = point.verdict
        upcoming = next_load(
            verdicts, floor=floor, ceiling=ceiling, axis=axis, resolution=limits.resolution
        )
        load, stopped = upcoming.load, upcoming.stopped
    knee, first_failing = bracket(verdicts)
    result = CapacityResult(
        created_unix=time.time(),
        scenario=scenario,
        target="simulated server" if target is None else target.base_url,
        model=search.model,
        simulator_profile=search.profile,
        slo=scenario.slo,
        goal=goal,
        axis=axis,
        points=sorted((s.point(goal) for s in search.loads.values()), key=lambda p: p.load),
        knee=knee,
        first_failing=first_failing,
        stopped=stopped,
    )
    if out is not None:
        result.save(out, overwrite=True)
    return result


def capacity(
    scenario: Scenario | str | Path, target: Target | None = None, **options: Any
) -> CapacityResult:
    """Synchronous :func:`capacity_async` (starts its own event loop). Same arguments."""
    return run_loop(capacity_async(scenario, target, **options))
