"""Concurrency over time: how many requests were in flight, from the records' own stamps.

With lock-step pacing it is the scenario's ``users`` by construction; with free pacing and
with arrivals (an open-loop fleet) it is an outcome, and the figure people compare servers
by. A request is in flight from ``sent_ns`` (written) to ``done_ns`` (or its last known
stamp when it failed). Pure.

**Decode overlap** (:func:`decode_overlap`) asks the narrower question the aggregate rests
on: did a turn's streams *decode* together? A request the server queues is in flight but not
decoding; once admitted it decodes faster than it would beside the others, so the Σ of the
streams' post-first rates (the aggregate) rises while the server delivers less.
:func:`streams_decoding` gives the same from the other side: how many streams decoded at a
time on average.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import pairwise

from workloads.model.records import TurnRecord
from workloads.model.summary import ConcurrencySummary

__all__ = [
    "LOW_DECODE_OVERLAP",
    "concurrency",
    "decode_intervals",
    "decode_overlap",
    "in_flight",
    "streams_decoding",
]

# Below this decode overlap the aggregate is marked as overstating and wall throughput leads.
# Measured (five-user-coding, output_tokens=128, the simulator): 0.87 on cold turn 1 (its
# prefills finish one after another) and 0.98-0.99 on later turns with every session in the
# KV; 0.00 on every turn with kv_capacity_tokens=30000 (the KV holds about 3 of the 5
# sessions, the others wait), where the Σ read 2.2-3.1x the tokens decoded over the time
# any stream decoded. Half sits far from both.
LOW_DECODE_OVERLAP = 0.5


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


def decode_intervals(records: Iterable[TurnRecord]) -> list[tuple[int, int]]:
    """(first, last content chunk) of each valid record with a post-first rate: the streams
    a turn's aggregate sums, each while it decoded."""
    return [
        (r.first_content_ns, r.last_content_ns)
        for r in records
        if r.valid
        and r.decode_tokens_per_s is not None
        and r.first_content_ns is not None
        and r.last_content_ns is not None
        and r.last_content_ns > r.first_content_ns
    ]


def _one_host(records: Sequence[TurnRecord]) -> bool:
    return len({r.host for r in records}) <= 1


def decode_overlap(records: Iterable[TurnRecord]) -> float | None:
    """The decode overlap of one turn's streams (pass one (cell, repetition, turn)'s
    records): the mean, over its streams, of the share of a stream's decode time (first →
    last content chunk) during which every other stream was decoding too. 1 when all decode
    over the same interval; 0 when no moment had all of them decoding (a server that queued
    some). None with fewer than two streams, or stamps of several hosts' clocks.

        decode_overlap(records_of_turn)  # 0.98: the Σ of their rates is a throughput
    """
    mine = list(records)
    spans = decode_intervals(mine)
    if len(spans) < 2 or not _one_host(mine):
        return None
    together = max(0, min(last for _, last in spans) - max(first for first, _ in spans))
    return sum(together / (last - first) for first, last in spans) / len(spans)


def streams_decoding(records: Iterable[TurnRecord]) -> float | None:
    """How many of one turn's streams decoded at a time, on average over the time any of
    them decoded (time-weighted). The turn's streams count when all overlap; near 1 when the
    server ran them one after another. None as for :func:`decode_overlap`."""
    mine = list(records)
    spans = decode_intervals(mine)
    if len(spans) < 2 or not _one_host(mine):
        return None
    edges = sorted([(first, 1) for first, _ in spans] + [(last, -1) for _, last in spans])
    busy = area = n = 0
    for (t0, delta), (t1, _) in pairwise(edges):
        n += delta
        area += n * (t1 - t0)
        busy += (t1 - t0) if n else 0
    return area / busy if busy else None
