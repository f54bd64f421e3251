"""How an agent's sessions flowed, from their records: whether each step followed the reply it
needs (a tool result one that called tools, a human request one that did not), how many
steps a human request caused, how long sessions ran and how often they compacted. Pure:
records in, :class:`SessionFlow` out (the report computes it from a result's records; it is
not saved).

A session is its records of one (cell, repetition, session) — of one (cell, session) in a
fleet, whose sessions span its windows; sub-agents' sessions are left out (their steps
follow their own task). Records of every window count, the warm-up's too: a session's shape
is the plan's and the model's, not the window's.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from workloads.core.agent import Step, fleet_plan
from workloads.model.records import TurnRecord
from workloads.model.scenario import Scenario

__all__ = ["SessionFlow", "planned_steps_per_request", "session_flow"]

# Past this many sessions the report does not draw their plans again.
_PLANNED_SESSIONS = 2048


@dataclass(frozen=True, slots=True)
class SessionFlow:
    """How the users' own agent sessions flowed (see the module docstring)."""

    sessions: int
    longest_session: int  # steps the longest session played (its last turn)
    compactions: int
    human_requests: int
    # Steps (compactions apart) per human request, itself included: the sessions' steps over
    # their human requests, the steps before a session's first request counted (a fleet's
    # session caught in mid-life starts inside a loop), so a window of a steady fleet reads
    # the plans' mean though it cuts loops at both ends (a ratio of renewal counts).
    steps_per_request: float | None
    # Its 95% interval: percentiles of the same ratio over sessions resampled whole (a
    # session's loops are not independent of one another); None under 2 sessions.
    steps_per_request_band: tuple[float, float] | None
    tool_steps: int  # tool steps whose previous reply is known (tools offered), not a summary
    tool_after_calls: int  # of them, those after a reply with tool calls
    human_steps: int  # human steps past a session's first whose previous reply is known
    human_after_text: int  # of them, those after a reply without tool calls
    # A fleet's: the mean steps per human request of the steps these sessions would have
    # played with no end to the run (their plans from their first played step; None
    # otherwise).
    planned_steps_per_request: float | None = None


def planned_steps_per_request(plans: Iterable[tuple[Step, ...]]) -> float | None:
    """The steps per human request over ``plans`` (compactions are not steps of a request;
    steps before a plan's first request count, as :attr:`SessionFlow.steps_per_request`
    counts them); None without a human request. Pure."""
    steps = requests = 0
    for plan in plans:
        for step in plan:
            steps += step.kind != "compaction"
            requests += step.kind == "human"
    return steps / requests if requests else None


# Resamples of the sessions for the steps-per-request interval (a fixed seed: the same
# records give the same interval).
_RESAMPLES = 2000


def _ratio_band(counts: list[tuple[int, int]]) -> tuple[float, float] | None:
    """The 2.5th and 97.5th percentiles of Σ steps / Σ requests over ``counts`` (one pair a
    session) resampled whole, with replacement; None under 2 sessions or no request."""
    if len(counts) < 2 or not any(r for _, r in counts):
        return None
    rng = random.Random(0)
    ratios: list[float] = []
    for _ in range(_RESAMPLES):
        steps = requests = 0
        for played, asked in rng.choices(counts, k=len(counts)):
            steps += played
            requests += asked
        if requests:
            ratios.append(steps / requests)
    ratios.sort()
    return ratios[int(0.025 * (len(ratios) - 1))], ratios[int(0.975 * (len(ratios) - 1))]


def session_flow(
    records: Iterable[TurnRecord], scenario: Scenario | None = None
) -> SessionFlow | None:
    """The flow of the users' own agent sessions in ``records`` (None: no record has a
    step kind). ``scenario``: the run's; a fleet's sessions are numbered per cell, not per
    repetition, and drawn plans give :attr:`SessionFlow.planned_steps_per_request`. Pure."""
    fleet = scenario is not None and scenario.fleet is not None
    sessions: dict[tuple[int, int, int], list[TurnRecord]] = defaultdict(list)
    for r in records:
        if r.step_kind is None or r.parent_session is not None:
            continue
        sessions[(r.cell, 0 if fleet else r.repetition, r.session)].append(r)
    if not sessions:
        return None
    tool_steps = tool_after_calls = human_steps = human_after_text = 0
    counts: list[tuple[int, int]] = []  # each session's (steps, human requests)
    compactions = 0
    longest = 0
    for steps in sessions.values():
        steps.sort(key=lambda r: r.turn)
        longest = max(longest, steps[-1].turn)
        played = requests = 0
        for before, r in zip([None, *steps], steps, strict=False):
            if r.step_kind == "compaction":
                compactions += 1
                continue
            played += 1
            requests += r.step_kind == "human"
            if (
                before is None
                or before.turn != r.turn - 1
                or before.tool_calls is None
                or before.step_kind == "compaction"
            ):
                # the reply before it is not known, tools were not offered, or it is a
                # compaction's summary (the history starts afresh from it)
                continue
            if r.step_kind == "tool":
                tool_steps += 1
                tool_after_calls += before.tool_calls > 0
            elif r.step_kind == "human":
                human_steps += 1
                human_after_text += before.tool_calls == 0
        counts.append((played, requests))
    planned = None
    agent = scenario.agent if scenario is not None else None
    # A fleet's sessions play until the run's end cuts them; others play their whole plans
    # (and an older run's were drawn by an older draw_plan).
    drawn = fleet and agent is not None and agent.trace is None
    if scenario is not None and drawn and len(sessions) <= _PLANNED_SESSIONS:
        cells = {c.index: scenario.for_cell(c) for c in scenario.cells()}
        planned = planned_steps_per_request(
            fleet_plan(cells[cell], cell, session) for cell, _, session in sessions if cell in cells
        )
    requests = sum(r for _, r in counts)
    return SessionFlow(
        planned_steps_per_request=planned,
        sessions=len(sessions),
        longest_session=longest,
        compactions=compactions,
        human_requests=requests,
        steps_per_request=sum(p for p, _ in counts) / requests if requests else None,
        steps_per_request_band=_ratio_band(counts),
        tool_steps=tool_steps,
        tool_after_calls=tool_after_calls,
        human_steps=human_steps,
        human_after_text=human_after_text,
    )
