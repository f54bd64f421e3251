"""A coding agent's session as a plan of steps: what triggers each step, how many tokens it
adds, how long its reply is, how long the agent waits before it, and the sub-agents it
spawns. Pure: a plan is drawn from the scenario's distributions with seeded generators
(:func:`draw_plan`) or read from an agent trace, and the runner plays it.
"""

from __future__ import annotations

from dataclasses import dataclass

from workloads.model.records import StepKind

__all__ = ["Step"]


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
    """

    turn: int
    kind: StepKind
    new_tokens: int
    output_tokens: int
    pause_s: float = 0.0
    prior_tokens: int = 0
    children: tuple[tuple[Step, ...], ...] = ()
