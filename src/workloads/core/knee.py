"""The capacity search's policy: from the verdicts of the loads measured so far, the load to
measure next, and where the knee lies. Pure: a table of load → verdict in, a load out
(:mod:`workloads.runner.capacity` measures it).

Verdicts are "meets", "fails" or "cannot tell" (:class:`~workloads.model.capacity.CapacityPoint`).
The **bracket** runs from the highest load that met below the lowest that failed to that
lowest failing load; a load that could not tell lies inside it and splits it, but closes
nothing: a load too small to show a goal (C2's 60 sessions cannot show 95%) says nothing of
C3, which may. So the next load is the midpoint of the highest open gap of the bracket,
where a gap is open while it holds a load not measured (a whole concurrency; for a rate,
one more than ``resolution`` apart):

* above every load measured, while none failed: double, up to ``ceiling``;
* below every load measured, while none met: halve (the midpoint of 0 and the lowest),
  down to ``floor``, so "not found" comes only once every load below the lowest failing
  one was measured;
* between two loads measured: bisect, the upper midpoint first (more sessions a repetition).

Since every load measured above the lowest failing one is only ever measured while doubling,
every load that met lies below every load that failed.

    next_load({5.0: "fails"}, floor=1, ceiling=4096)             # Next(load=3.0, ...)
    next_load({5.0: "fails", 3.0: "meets", 4.0: "fails"}, ...)   # Next(load=None, ...)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from workloads.model.capacity import PointVerdict

__all__ = ["Next", "knee", "next_load"]


@dataclass(frozen=True, slots=True)
class Next:
    """The load to measure next (None: the search is done), and, when done at the highest
    load allowed without a load that failed, why (the report's "search stopped")."""

    load: float | None
    stopped: str | None = None


def knee(verdicts: Mapping[float, PointVerdict]) -> tuple[float | None, float | None]:
    """(the knee, the first failing load): the highest load that met below the lowest that
    failed, and the lowest load measured above the knee that did not meet (None: none)."""
    fails = min((x for x, v in verdicts.items() if v == "fails"), default=math.inf)
    met = max((x for x, v in verdicts.items() if v == "meets" and x < fails), default=None)
    above = [x for x, v in verdicts.items() if v != "meets" and (met is None or x > met)]
    return met, min(above, default=None)


def next_load(
    verdicts: Mapping[float, PointVerdict],
    *,
    floor: float,
    ceiling: float,
    axis: Literal["concurrency", "rate"] = "concurrency",
    resolution: float = 0.1,
) -> Next:
    """The next load to measure after ``verdicts`` (see the module doc): loads within
    [``floor``, ``ceiling``]; a rate's gap is closed when its ends are within 1 +
    ``resolution`` of each other."""
    if not verdicts:
        raise ValueError("next_load needs at least one load measured")
    fails = min((x for x, v in verdicts.items() if v == "fails"), default=None)
    met, _ = knee(verdicts)
    # The bracket's ends, None where open (nothing met below / nothing failed above), and
    # the loads that could not tell inside it.
    inside = sorted(
        x
        for x, v in verdicts.items()
        if v == "cannot tell" and (met is None or x > met) and (fails is None or x < fails)
    )
    ends: list[float | None] = [met, *inside, fails]
    gaps = list(itertools.pairwise(ends))
    for low, high in reversed(gaps):  # the highest open gap first
        if high is None:  # nothing failed: double, up to the ceiling
            assert low is not None
            if low < ceiling:
                return Next(min(ceiling, _round(2 * low, axis)))
            continue
        if low is None:  # nothing met below: halve, down to the floor
            if high > floor:
                down = math.ceil(high / 2) if axis == "concurrency" else high / 2
                return Next(max(floor, down))
            continue
        if axis == "concurrency" and high - low > 1:
            return Next(float(math.ceil((low + high) / 2)))
        if axis == "rate" and high / low > 1 + resolution:
            return Next(math.sqrt(low * high))
    stopped = None
    if fails is None:
        top = verdicts[max(verdicts)]
        stopped = (
            f"the highest load allowed ({ceiling:g}) meets the goal"
            if top == "meets"
            else f"the highest load allowed ({ceiling:g}) was not shown to fail"
        )
    return Next(None, stopped)


def _round(load: float, axis: str) -> float:
    return float(int(load)) if axis == "concurrency" else load
