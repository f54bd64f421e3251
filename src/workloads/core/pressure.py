"""Pause pressure: what other sessions wrote into the server's KV cache while a session
paused before a human request. Pure: records in, token counts out.

A coding agent's human request past its session's first step comes **after a pause** (the
human's think time): its prefix was cached when the session's previous step ran, and it
is still cached only if the server did not evict it meanwhile. A prefix cache evicts the
least recently used blocks when it needs room (vLLM, SGLang and the embedded simulator,
``core/kvcache.py``), so what decides it is how much other sessions wrote into the KV over
the pause: the step's **pause pressure**. Running requests hold part of the KV; idle
prefixes share the rest (the **KV room**: capacity × (1 − the mean KV usage over the
window)), least recently used first out. Past a pressure of one KV room, the prefix is
gone; well within it, it stays.

Per step after a pause, over the interval from the end of the session's previous step's
stream (``done_ns``; else its last content, else its error) to this step's send
(``sent_ns``), Σ over every request of another session of the tokens it wrote during the
interval:

* its uncached prompt tokens (``prompt_tokens − cached_tokens``: what the server had to
  compute and store), spread evenly over its prefill (sent → first content);
* its completion tokens, spread evenly over its decode (first → last content).

Prorated, not counted by send time: a long reply streaming through the pause writes its
tokens during it even when it was sent before. A request whose usage is not known (it
reached the server, answered 200 or was cut off, and no usage came; or cached tokens not
reported) makes the pressure of every pause it overlaps unknown (None): unknown is not
zero. A request the server refused (an HTTP error, a connect failure) wrote nothing. Stamps
are one host's clock: records of several hosts (a Ray run) have no pressure.

Only this run's requests are seen: a server that also serves other traffic evicts more.
Warm-up requests count like measured ones (they wrote into the same KV).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypedDict

from workloads.model.figures import ServerTelemetry
from workloads.model.records import TurnRecord
from workloads.model.results import TargetInfo

__all__ = [
    "KvFigures",
    "after_pause",
    "first_step",
    "kv_capacity_tokens",
    "kv_figures",
    "kv_room_tokens",
    "kv_usage",
    "step_pressures",
]

Session = tuple[int, int, int]  # (cell, repetition, session)


def first_step(r: TurnRecord) -> bool:
    """A session's first step (turn 1, of a user's session or a sub-agent's): cold but for
    a shared system prefix, by construction."""
    return r.turn == 1


def after_pause(r: TurnRecord) -> bool:
    """A human request past its session's first step: sent after the human's think time."""
    return r.step_kind == "human" and not first_step(r)


def kv_capacity_tokens(server: ServerTelemetry | None, target: TargetInfo) -> int | None:
    """The server's KV capacity in tokens: as its metrics said over the window (vLLM's
    ``cache_config_info``), else as the user gave it (``--kv-capacity``), else the
    simulated server's profile; None when none says."""
    if server is not None and server.kv_capacity_tokens is not None:
        return server.kv_capacity_tokens
    if target.kv_capacity_tokens is not None:
        return target.kv_capacity_tokens
    capacity = (target.simulator_profile or {}).get("kv_capacity_tokens")
    return capacity if isinstance(capacity, int) else None


def kv_usage(server: ServerTelemetry | None) -> float | None:
    """The mean fraction of the KV that running requests held over the window (the
    ``kv_usage`` gauge, vLLM's ``kv_cache_usage_perc``: idle cached blocks count as free);
    None unless a sample fell inside the window."""
    gauge = server.gauges.get("kv_usage") if server is not None else None
    return gauge.mean if gauge is not None and gauge.inside else None


class KvFigures(TypedDict):
    """What :func:`workloads.core.aggregate.summarize` compares the pause pressure with."""

    kv_capacity_tokens: int | None
    kv_usage: float | None


def kv_figures(server: ServerTelemetry | None, target: TargetInfo) -> KvFigures:
    """The KV capacity and mean usage of a window (``summarize``'s keywords)."""
    return {"kv_capacity_tokens": kv_capacity_tokens(server, target), "kv_usage": kv_usage(server)}


def kv_room_tokens(capacity: int | None, usage: float | None) -> int | None:
    """The KV's room for idle prefixes: what running requests did not hold, on average
    (``capacity`` × (1 − ``usage``)), or the whole capacity where the usage is not known.
    An idle prefix sits in the free blocks, least recently used first out: it is evicted
    about when other requests have written this much since it went idle."""
    if capacity is None:
        return None
    return capacity if usage is None else round(capacity * (1 - min(max(usage, 0.0), 1.0)))


@dataclass(frozen=True, slots=True)
class _Span:
    """``tokens`` written evenly over [start, end] (all at once when start == end)."""

    start: int
    end: int
    tokens: float

    def within(self, a: int, b: int) -> float:
        """The tokens written in (a, b]."""
        if self.end == self.start:
            return self.tokens if a < self.start <= b else 0.0
        lo, hi = max(a, self.start), min(b, self.end)
        return self.tokens * (hi - lo) / (self.end - self.start) if hi > lo else 0.0


def _end(r: TurnRecord) -> int | None:
    """When a request's stream ended: done, else its last content, else its error."""
    for t in (r.done_ns, r.last_content_ns, r.error_ns):
        if t is not None:
            return t
    return None


def _writes(r: TurnRecord) -> tuple[list[_Span], tuple[int, int] | None]:
    """What ``r`` wrote into the KV, as spans, and the interval over which what it wrote is
    unknown (None: known, or nothing written)."""
    if r.sent_ns is None:
        return [], None  # never written to the server
    end = _end(r)
    if r.prompt_tokens is None or r.cached_tokens is None:
        reached = r.http_status == 200 or r.status == "incomplete" or r.prompt_tokens is not None
        if not reached:
            return [], None  # refused: an HTTP error or a connect failure
        return [], (r.sent_ns, max(r.sent_ns, end if end is not None else r.sent_ns))
    first = r.first_content_ns if r.first_content_ns is not None else end
    first = r.sent_ns if first is None else max(first, r.sent_ns)
    last = r.last_content_ns if r.last_content_ns is not None else end
    last = first if last is None else max(last, first)
    return [
        _Span(r.sent_ns, first, float(r.prompt_tokens - r.cached_tokens)),
        _Span(first, last, float(r.completion_tokens or 0)),
    ], None


def _cumulative(spans: Iterable[_Span], times: Iterable[int]) -> dict[int, float]:
    """F(t) = the tokens ``spans`` wrote up to t (inclusive), at each of ``times``: one sweep
    over the spans' edges (a ramp's slope starts at its start and ends at its end)."""
    events: list[tuple[int, float, float]] = []  # (time, slope change, jump)
    for s in spans:
        if s.tokens == 0:
            continue
        if s.end == s.start:
            events.append((s.start, 0.0, s.tokens))
        else:
            rate = s.tokens / (s.end - s.start)
            events += [(s.start, rate, 0.0), (s.end, -rate, 0.0)]
    events.sort()
    out: dict[int, float] = {}
    value = slope = 0.0
    now = events[0][0] if events else 0
    i = 0
    for t in sorted(set(times)):
        while i < len(events) and events[i][0] <= t:
            at, change, jump = events[i]
            value += slope * (at - now) + jump
            slope += change
            now = at
            i += 1
        out[t] = value + slope * (t - now) if t > now else value
    return out


def step_pressures(records: Sequence[TurnRecord]) -> list[tuple[TurnRecord, int | None]]:
    """Each valid measured step after a pause with cached tokens known, and its pause
    pressure in tokens (None: not known — its previous step has no end, a request
    overlapping the pause has unknown usage, or the records span several hosts' clocks).
    ``records``: every request of the run (or of one cell), warm-ups included."""
    steps = [
        r
        for r in records
        if not r.warmup
        and r.valid
        and after_pause(r)
        and r.cached_tokens is not None
        and r.sent_ns is not None
    ]
    if not steps:
        return []
    if len({r.host for r in records}) > 1:  # aggregate.one_clock: stamps of several hosts
        return [(r, None) for r in steps]
    by_turn = {(r.cell, r.repetition, r.session, r.turn): r for r in records}
    spans: list[_Span] = []
    own_spans: dict[Session, list[_Span]] = defaultdict(list)
    unknown: list[tuple[int, int]] = []
    own_unknown: dict[Session, list[tuple[int, int]]] = defaultdict(list)
    for r in records:
        written, blind = _writes(r)
        spans += written
        own_spans[(r.cell, r.repetition, r.session)] += written
        if blind is not None:
            unknown.append(blind)
            own_unknown[(r.cell, r.repetition, r.session)].append(blind)
    starts = sorted(s for s, _ in unknown)
    ends = sorted(e for _, e in unknown)

    def blind_over(a: int, b: int, own: list[tuple[int, int]]) -> bool:
        # Unknown intervals overlapping (a, b): those starting before b minus those ended
        # by a (which started before b too), less the session's own.
        others = bisect.bisect_left(starts, b) - bisect.bisect_right(ends, a)
        return others > sum(1 for s, e in own if s < b and e > a)

    pauses: list[tuple[TurnRecord, tuple[int, int] | None]] = []
    for r in steps:
        before = by_turn.get((r.cell, r.repetition, r.session, r.turn - 1))
        a = _end(before) if before is not None else None
        assert r.sent_ns is not None
        pauses.append((r, None if a is None or a > r.sent_ns else (a, r.sent_ns)))
    cumulative = _cumulative(spans, (t for _, p in pauses if p for t in p))
    out: list[tuple[TurnRecord, int | None]] = []
    for r, pause in pauses:
        key = (r.cell, r.repetition, r.session)
        if pause is not None and pause[0] == pause[1]:
            out.append((r, 0))  # no pause at all: nothing written
            continue
        if pause is None or blind_over(*pause, own_unknown[key]):
            out.append((r, None))
            continue
        a, b = pause
        own = sum(s.within(a, b) for s in own_spans[key])
        out.append((r, max(0, round(cumulative[b] - cumulative[a] - own))))
    return out
