"""A coding agent's session as a plan of steps: what triggers each step, how many tokens it
adds, how long its reply is, how long the agent waits before it, and the sub-agents it
spawns. Pure: a plan is drawn from the scenario's distributions with seeded generators
(:func:`draw_plan`) or read from an agent trace, and the runner plays it.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Any

from workloads.core import tokens
from workloads.core.corpus import stream_rng
from workloads.core.draws import draw_seconds, draw_tokens
from workloads.model.records import StepKind
from workloads.model.scenario import Scenario

__all__ = [
    "CODING_TOOLS",
    "MAX_CHILDREN",
    "TOOL_CALL_MIN_OUTPUT",
    "Step",
    "child_session",
    "draw_plan",
    "fleet_plan",
    "plan_steps",
    "planned_requests",
    "scaled",
    "session_plan",
    "tool_schemas",
    "top_sessions",
]

# A session spawns at most this many sub-agents in all (their session numbers are
# ``child_session``'s, unique in the repetition).
MAX_CHILDREN = 64
# Template tokens around the summary message that follows a compaction (its role markers).
_SUMMARY_FRAMING = 8
# The shortest reply a plan asks of a step whose reply must call a tool (a tool result follows
# it in the loop): a call's markup is ~25 tokens and its arguments some more. The simulated
# server writes content only below it (servers/simulated/tools.py).
TOOL_CALL_MIN_OUTPUT = 48


@dataclass(frozen=True, slots=True)
class Step:
    """One step (one request) of a session's plan.

    ``turn`` is 1-based within the session. ``kind``: what triggered it ("human": a human
    request after think time; "tool": the result of the previous reply's tool call, after
    tool time; "subagent": a step of a sub-agent's own session; "compaction": the agent asks
    the model to summarise its history, then continues from system + tools + summary).
    ``new_tokens``: what the step adds beyond what the server has seen, in the target's
    tokens, template framing included (the human request or tool result; a compaction's
    instruction). ``output_tokens``: the reply length asked for (``max_tokens``; forced with
    ``exact_output``). ``pause_s``: the wait before the step (think or tool time), with
    ``time_scale`` applied. ``prior_tokens``: the configured context before the step's new
    content. ``children``: the plans of the sub-agents this step's tool call spawns; they run
    concurrently before the step, and their final replies are its tool result.
    ``model``: the model a trace recorded for the step (None when drawn); reported beside
    the trace, while the request goes to the run's model.

    A step whose ``prior_tokens`` is smaller than the session's running context (the
    previous step's prior + new + output, not after a compaction) is sent from a history
    rebuilt to that prior: the runner keeps the opening (or, for a prior below it, the
    system message alone) and sizes the step's whole prompt to ``prior_tokens +
    new_tokens``. A trace whose context shrank without a compaction says so this way.
    """

    turn: int
    kind: StepKind
    new_tokens: int
    output_tokens: int
    pause_s: float = 0.0
    prior_tokens: int = 0
    children: tuple[tuple[Step, ...], ...] = ()
    model: str | None = None


def scaled(plan: tuple[Step, ...], scale: float) -> tuple[Step, ...]:
    """``plan`` with every pause (its sub-agents' too) multiplied by ``scale``. Pure."""
    if scale == 1.0:
        return plan
    return tuple(
        dataclasses.replace(
            step,
            pause_s=step.pause_s * scale,
            children=tuple(scaled(c, scale) for c in step.children),
        )
        for step in plan
    )


def child_session(users: int, parent: int, index: int) -> int:
    """The session number of ``parent``'s sub-agent number ``index`` (0-based, in spawn
    order): past every top-level session (``users``: how many a repetition numbers, see
    :func:`top_sessions`), unique in the repetition. Pure."""
    return users + parent * MAX_CHILDREN + index


def top_sessions(scenario: Scenario) -> int:
    """How many top-level session numbers a repetition of ``scenario`` may use: ``users``,
    or a fleet's ``max_sessions`` (its slots' sessions follow one another). Pure."""
    return scenario.fleet.max_sessions if scenario.fleet is not None else scenario.users


def plan_steps(plan: tuple[Step, ...]) -> int:
    """Steps in a plan, its sub-agents' steps included. Pure."""
    return sum(1 + sum(plan_steps(child) for child in step.children) for step in plan)


def session_plan(scenario: Scenario, cell: int, repetition: int, session: int) -> tuple[Step, ...]:
    """The plan session ``session`` of (``cell``, ``repetition``) plays: drawn with the
    generators seeded by ``content.seed`` and those coordinates (sizes and pauses apart).
    ``scenario`` is the cell's. Pure."""
    seed = scenario.content.seed
    return draw_plan(
        scenario,
        stream_rng(seed, "sizes", cell, repetition, session),
        stream_rng(seed, "pacing", cell, repetition, session),
    )


# A steady fleet draws at most this many candidate plans for a slot's first session (each
# kept with probability its length over ``turns``; the last one drawn is kept after).
_STEADY_DRAWS = 4096


def fleet_plan(scenario: Scenario, cell: int, session: int) -> tuple[Step, ...]:
    """The steps fleet session ``session`` of ``cell`` plays (``scenario``: the cell's, with
    a fleet). A later session, or any with ``fleet.start = "fresh"``, plays its whole plan
    (:func:`session_plan`, repetition 0: a fleet is one continuous repetition). A slot's
    first session (``session < users``) of a "steady" fleet is caught in mid-life, as at a
    random moment of a fleet that has run for long: by the inspection paradox of renewal
    processes the session in progress then is drawn in proportion to its length (candidate
    plans kept with probability ``len / turns``), and the moment falls uniformly among its
    steps (a compaction defers to the step after it). The steps from there are renumbered
    from 1 (step 1's ``prior_tokens``, the depth reached, is the history its first request
    carries); its pause is the part still to wait (a uniform share), and its sub-agents,
    spawned before the moment, are not played. Pure."""
    fleet = scenario.fleet
    assert fleet is not None
    if fleet.start == "fresh" or session >= scenario.users:
        return session_plan(scenario, cell, 0, session)
    seed = scenario.content.seed
    pick = stream_rng(seed, "steady", cell, session)
    plan: tuple[Step, ...] = ()
    for draw in range(_STEADY_DRAWS):
        plan = draw_plan(
            scenario,
            stream_rng(seed, "sizes", cell, 0, session, "steady", draw),
            stream_rng(seed, "pacing", cell, 0, session, "steady", draw),
        )
        if pick.random() * scenario.turns < len(plan):
            break
    start = pick.randrange(len(plan))
    while start < len(plan) - 1 and plan[start].kind == "compaction":
        start += 1
    first = dataclasses.replace(
        plan[start], turn=1, pause_s=plan[start].pause_s * pick.random(), children=()
    )
    return (
        first,
        *(dataclasses.replace(step, turn=i) for i, step in enumerate(plan[start + 1 :], 2)),
    )


# Past this many sessions in a run, planned_requests does not draw every plan to count them.
_COUNT_SESSIONS = 2048


def planned_requests(scenario: Scenario) -> int | None:
    """Requests the whole run sends, warm-ups, every cell and sub-agents included: exact
    (the plans are drawn) for a scenario with ``agent`` up to a few thousand sessions, the
    fixed shape's ``total_turns`` otherwise; None: an agent run too large to count, or one
    that plays a trace (its plans are in the file). Pure."""
    if scenario.agent is None:
        return scenario.total_turns()
    if scenario.agent.trace is not None or scenario.fleet is not None:
        return None  # a trace's plans are in its file; a fleet is bounded by time
    reps = scenario.repetitions.warmup + scenario.repetitions.measured
    cells = scenario.cells()
    if sum(c.concurrency for c in cells) * reps > _COUNT_SESSIONS:
        return None
    total = 0
    for cell in cells:
        here = scenario.for_cell(cell)
        for rep in range(reps):
            for session in range(cell.concurrency):
                total += plan_steps(session_plan(here, cell.index, rep, session))
    return total


def draw_plan(scenario: Scenario, sizes: random.Random, pauses: random.Random) -> tuple[Step, ...]:
    """One session's plan, drawn from ``scenario``: its opening first (``prior_tokens`` of
    turn 1), then every step's sizes from ``sizes`` and its pause from ``pauses`` (separate
    generators, so changing pauses never changes sizes). Pure given the generators.

    Without ``scenario.agent`` every turn adds ``turn_tokens`` (turn 1 is the human's, the
    others tool steps) and waits think time, plus tool time after turn 1: the fixed shape of
    the hand-made records, its pauses drawn think then tool, as runs always drew them (the
    same seed gives the same pauses).
    """
    s = scenario
    scale = s.pacing.time_scale
    think, tool = s.pacing.think_time, s.pacing.tool_time
    context = draw_tokens(s.opening_tokens, sizes)
    steps: list[Step] = []
    agent = s.agent
    if agent is None:
        for turn in range(1, s.turns + 1):
            new = draw_tokens(s.turn_tokens, sizes)
            out = draw_tokens(s.output_tokens, sizes)
            pause = draw_seconds(think, pauses)
            if turn > 1:
                pause += draw_seconds(tool, pauses)
            steps.append(
                Step(turn, "human" if turn == 1 else "tool", new, out, pause * scale, context)
            )
            context += new + out
        return tuple(steps)
    system = s.shared_prefix_tokens or 0  # what a compaction keeps (configured figures)
    left = 0  # steps left in the current human request
    opening_request = False  # this step is a human request (its loop's length drawn)
    children = 0
    length = s.turns
    if agent.steps_per_session is not None:
        length = min(max(1, draw_tokens(agent.steps_per_session, sizes)), s.turns)
    for turn in range(1, s.turns + 1):
        if left <= 0:  # a human request starts here, unless the session ends first
            left = max(1, draw_tokens(agent.steps_per_request, sizes))
            done = turn - 1
            # A session ends between human requests, never inside the autonomous loop of
            # one: once it has played its drawn length it starts no request (the first is
            # always played), so every loop keeps its steps-per-request draw; the played
            # length is the drawn one plus the last loop's overshoot.
            if done > 0 and done >= length:
                break
            opening_request = True
        compaction = agent.compaction
        if compaction is not None and turn > 1 and context > compaction.at_tokens:
            out = draw_tokens(compaction.summary_tokens, sizes)
            instruction = tokens.count(compaction.instruction) + _SUMMARY_FRAMING
            steps.append(Step(turn, "compaction", instruction, out, 0.0, context))
            context = system + out + _SUMMARY_FRAMING
            continue
        spawned: tuple[tuple[Step, ...], ...] = ()
        if opening_request:
            opening_request = False
            kind: StepKind = "human"
            new = draw_tokens(agent.request_tokens, sizes)
            pause = draw_seconds(think, pauses) * scale
        else:
            kind = "tool"
            new = draw_tokens(s.turn_tokens, sizes)
            pause = draw_seconds(tool, pauses) * scale
            sub = agent.subagents
            if sub is not None and sub.share > 0 and sizes.random() < sub.share:
                k = min(max(1, draw_tokens(sub.count, sizes)), MAX_CHILDREN - children)
                spawned = tuple(_child_plan(s, sizes, pauses, system) for _ in range(k))
                children += len(spawned)
                pause = 0.0  # the tool's run time is the sub-agents'
        left -= 1
        out = draw_tokens(s.output_tokens, sizes)
        if left > 0:  # a tool result follows: the reply must hold a call
            out = max(out, TOOL_CALL_MIN_OUTPUT)
        steps.append(Step(turn, kind, new, out, pause, context, spawned))
        context += new + out
    return tuple(steps)


def _child_plan(
    s: Scenario, sizes: random.Random, pauses: random.Random, system: int
) -> tuple[Step, ...]:
    """A sub-agent's steps: its task (the parent's system message is its whole opening),
    then tool steps."""
    sub = s.agent.subagents if s.agent is not None else None
    assert sub is not None
    n = max(1, draw_tokens(sub.steps, sizes))
    context = system
    steps: list[Step] = []
    last = min(n, s.turns)
    for turn in range(1, last + 1):
        new = draw_tokens(sub.task_tokens if turn == 1 else s.turn_tokens, sizes)
        out = draw_tokens(s.output_tokens, sizes)
        if turn < last:  # a tool result follows: the reply must hold a call
            out = max(out, TOOL_CALL_MIN_OUTPUT)
        pause = 0.0 if turn == 1 else draw_seconds(s.pacing.tool_time, pauses) * s.pacing.time_scale
        steps.append(Step(turn, "subagent", new, out, pause, context))
        context += new + out
    return tuple(steps)


def _tool(name: str, summary: str, **params: str) -> dict[str, Any]:
    properties = {p: {"type": "string", "description": d} for p, d in params.items()}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": summary,
            "parameters": {"type": "object", "properties": properties, "required": list(params)},
        },
    }


# A coding agent's tool set, shaped like the ones Claude Code and Codex send (names and
# parameters trimmed to what a benchmark needs; the schemas' size is what matters to the
# server: they sit in every request's system block).
CODING_TOOLS: tuple[dict[str, Any], ...] = (
    _tool(
        "read",
        "Read a file of the repository, with line numbers.",
        path="Path of the file, relative to the repository root.",
        offset="First line to read (1-based); the whole file when absent.",
        limit="How many lines to read; 2,000 at most.",
    ),
    _tool(
        "edit",
        "Replace one exact occurrence of old_text by new_text in a file.",
        path="Path of the file to change.",
        old_text="The exact text to replace.",
        new_text="The replacement text.",
    ),
    _tool(
        "write",
        "Create or overwrite a file with the given content.",
        path="Path of the file to write.",
        content="The file's whole new content.",
    ),
    _tool(
        "bash",
        "Run a shell command in the repository and return its output (truncated "
        "to 10 KiB or 256 lines, head and tail kept).",
        command="The command line.",
        timeout="Seconds before the command is killed.",
    ),
    _tool(
        "grep",
        "Search file contents with a regular expression.",
        pattern="The regular expression.",
        path="Directory or file to search.",
        glob="Only files matching this glob, e.g. *.py.",
    ),
    _tool(
        "glob",
        "List files whose paths match a glob pattern.",
        pattern="The pattern, e.g. src/**/*.py.",
    ),
    _tool(
        "task",
        "Start a sub-agent with its own context on a self-contained task; its "
        "final answer comes back as this tool's result.",
        description="A few words naming the task.",
        prompt="The task, in full.",
    ),
)


def tool_schemas(value: str | list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The ``tools`` a scenario sends: None for "none", the coding set for "coding", a list
    as it is. Pure."""
    if value == "none":
        return None
    if value == "coding":
        return [dict(t) for t in CODING_TOOLS]
    assert isinstance(value, list)
    return value or None
