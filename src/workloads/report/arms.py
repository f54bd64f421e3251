"""What ``compare`` says about each arm beside the match: whether it may get verdicts at all
(invalid or incomplete), whether it is a replay on a warm cache or a prediction, and what
differs between the two targets (server identity, simulator profile). Pure; text for the
comparison's lines.
"""

from __future__ import annotations

from typing import Any

from workloads.core.replay import judged, turn1_cache
from workloads.model.results import RunResult
from workloads.report.verdicts import turn1_text

__all__ = [
    "CACHE_VARIABLE",
    "arm_problems",
    "cache_notes",
    "cache_value",
    "prediction_line",
    "target_differences",
]

# The variable under test that names the target's prefix cache: a replay on a warm cache
# against a cold arm, compared on purpose.
CACHE_VARIABLE = "cache"
PROFILE_KEYS_LISTED = 8  # simulator profile keys named before "and N more"


def arm_problems(a: RunResult, b: RunResult) -> tuple[list[str], list[str]]:
    """Why an arm gets no verdict: (sentences for the first line, short tags for the rows),
    e.g. ("B is INVALID (the required correctness gate failed: arithmetic)", "B invalid")."""
    long: list[str] = []
    short: list[str] = []
    for name, result in (("A", a), ("B", b)):
        if result.invalid_reason:
            long.append(f"{name} is INVALID ({result.invalid_reason})")
            short.append(f"{name} invalid")
        if not result.complete:
            long.append(
                f"{name} is INCOMPLETE (interrupted: its figures cover only the turns "
                "measured before it stopped)"
            )
            short.append(f"{name} incomplete")
    return long, short


def prediction_line(a: RunResult, b: RunResult) -> str | None:
    """Which arm is a prediction (``workloads predict``) and which was measured, in one
    sentence; None when neither is. A prediction is compared like any arm: nothing is
    refused for it."""
    if a.predicted is None and b.predicted is None:
        return None

    def kind(result: RunResult) -> str:
        p = result.predicted
        if p is None:
            where = "the embedded simulated server" if result.target.simulated else "a server"
            return f"measured (a run on {where})"
        return (
            f"PREDICTED (workloads predict, profile {p.file or p.profile}, sha256 "
            f"{p.profile_sha256[:12]}, virtual time)"
        )

    return f"A is {kind(a)}; B is {kind(b)}"


def cache_notes(a: RunResult, b: RunResult, variable: str | None) -> list[str]:
    """One sentence per arm that is a replay on a warm cache; none when the cache is the
    declared variable under test."""
    if variable == CACHE_VARIABLE:
        return []
    out = []
    for name, result in (("A", a), ("B", b)):
        if result.replay is None:
            continue
        replay = judged(result.replay, result.records)
        if replay.cache == "warm":
            out.append(
                f"{name} is a replay on a warm cache: turn 1 cached {turn1_text(replay.turn1)}; "
                f"the recorded run's {turn1_text(replay.recorded_turn1)}. Its TTFT, prefill "
                f"and cache rows are a warm cache's (--variable {CACHE_VARIABLE} when that is "
                "what is compared)"
            )
    return out


def cache_value(result: RunResult) -> str:
    """An arm's value of the ``cache`` variable: a replay's state, or "as run", with its
    turn 1's hit rate."""
    t = turn1_cache(result.records)
    rate = (
        f"turn 1 cached {t.hit_rate:.1%}"
        if t is not None and t.hit_rate is not None
        else "turn 1 cached: not reported"
    )
    if result.replay is None:
        return f"as run ({rate})"
    state = judged(result.replay, result.records).cache or "not known"
    return f"{state} ({rate}, a replay)"


def _flat(profile: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in profile.items():
        if isinstance(value, dict):
            out |= _flat(value, f"{prefix}{key}.")
        else:
            out[prefix + key] = value
    return out


def target_differences(a: RunResult, b: RunResult) -> list[str]:
    """What differs between the arms' targets beyond the model (compared on its own): the
    server's identity and the simulator's profile, listed, never refused (a server flag may
    be the variable under test)."""
    ta, tb = a.target, b.target
    out = []
    if ta.simulated != tb.simulated and a.predicted is None and b.predicted is None:
        kinds = ["the simulated server" if t.simulated else "a real server" for t in (ta, tb)]
        out.append(f"A ran on {kinds[0]}, B on {kinds[1]}")
    for field in ("system_fingerprint", "version"):
        x, y = getattr(ta.server, field), getattr(tb.server, field)
        if x != y:
            shown = ["not reported" if v is None else repr(v) for v in (x, y)]
            out.append(f"server {field}: A {shown[0]} · B {shown[1]}")
    pa, pb = ta.simulator_profile, tb.simulator_profile
    if pa is not None and pb is not None and pa != pb:
        fa, fb = _flat(pa), _flat(pb)
        keys = sorted(k for k in fa.keys() | fb.keys() if fa.get(k) != fb.get(k))
        listed = "; ".join(
            f"{k} {fa.get(k)!r} vs {fb.get(k)!r}" for k in keys[:PROFILE_KEYS_LISTED]
        )
        more = (
            f"; and {len(keys) - PROFILE_KEYS_LISTED} more"
            if len(keys) > PROFILE_KEYS_LISTED
            else ""
        )
        out.append(f"simulator profiles differ: {listed}{more}")
    return out
