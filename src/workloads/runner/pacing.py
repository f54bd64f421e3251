"""When turns start: arrival times, and the pacings they serve.

Three pacings (``Pacing.mode``): ``lockstep`` — a barrier per turn: every session prepares
turn k, then all send it (each after its own think/tool time, if any); ``free`` — each
session on its own clock; ``arrivals`` — each session starts at its arrival time (a Poisson
process, :func:`arrival_times`) and then runs on its own clock. Think and tool times are
drawn into a session's plan (``Step.pause_s``, :func:`workloads.core.agent.draw_plan`).
Either way the wait before a turn is an absolute deadline (``perf_counter`` seconds) fixed
when the previous turn ended (or when the repetition or barrier began), and the work done
meanwhile — sizing the next prompt with the target's tokenizer — comes out of that wait
instead of adding to it. A chain of relative sleeps drifts; trio's ``sleep_until`` is the
model.
"""

from __future__ import annotations

import random

from workloads.model.scenario import Arrivals

__all__ = ["arrival_times"]


def arrival_times(arrivals: Arrivals, sessions: int, rng: random.Random) -> list[float]:
    """Seconds after the start at which sessions arrive: a Poisson process at
    ``rate_per_s`` (exponential gaps), at most ``sessions`` of them, none after
    ``duration_s``. The first arrives after one gap, as in any Poisson process. Pure."""
    out: list[float] = []
    at = 0.0
    for _ in range(sessions):
        at += rng.expovariate(arrivals.rate_per_s)
        if arrivals.duration_s is not None and at > arrivals.duration_s:
            break
        out.append(at)
    return out
