"""Concurrency over time: how many requests were in flight, from the records' own stamps.

With lock-step pacing it is the scenario's ``users`` by construction; with free pacing and
with arrivals (an open-loop fleet) it is an outcome, and the figure people compare servers
by. A request is in flight from ``sent_ns`` (written) to ``done_ns`` (or its last known
stamp when it failed). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import pairwise

from workloads.model.records import TurnRecord
from workloads.model.summary import ConcurrencySummary

__all__ = ["concurrency", "in_flight"]


def in_flight(records: Iterable[TurnRecord]) -> list[tuple[int, int]]:
    """The step function of requests in flight: ``(t_ns, n)`` from each change on."""
    edges: list[tuple[int, int]] = []
    for r in records:
        end = r.done_ns or r.last_content_ns or r.first_content_ns or r.headers_ns
        if r.sent_ns is None or end is None or end < r.sent_ns:
            continue
        edges += [(r.sent_ns, 1), (end, -1)]
    edges.sort()  # at equal stamps an end (-1) sorts first: back-to-back is not overlap
    steps: list[tuple[int, int]] = []
    n = 0
    for t, delta in edges:
        n += delta
        if steps and steps[-1][0] == t:
            steps[-1] = (t, n)
        else:
            steps.append((t, n))
    return steps


def concurrency(records: Iterable[TurnRecord], *, points: int = 200) -> ConcurrencySummary | None:
    """Time-weighted mean and the max of requests in flight over the measured records' span,
    with up to ``points`` samples of the step function for a plot; None with no span, or
    when the records come from several hosts (each stamps with its own clock)."""
    measured = [r for r in records if not r.warmup]
    if len({r.host for r in measured}) > 1:
        return None
    steps = in_flight(measured)
    if len(steps) < 2 or steps[-1][0] <= steps[0][0]:
        return None
    start, end = steps[0][0], steps[-1][0]
    area = sum(n * (t1 - t0) for (t0, n), (t1, _) in pairwise(steps))
    samples: list[tuple[float, int]] = []
    i = 0
    for k in range(points):
        t = start + (end - start) * k // max(1, points - 1)
        while i + 1 < len(steps) and steps[i + 1][0] <= t:
            i += 1
        samples.append((round((t - start) / 1e9, 4), steps[i][1]))
    return ConcurrencySummary(
        mean=area / (end - start),
        max=max(n for _, n in steps),
        span_s=(end - start) / 1e9,
        samples=samples,
    )
