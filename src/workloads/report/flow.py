"""The report's line on how an agent's sessions flowed (core/flow.py): sessions, the longest,
compactions, steps per human request, and how often steps followed the replies they need.
Pure: text.
"""

from __future__ import annotations

from workloads.core.flow import session_flow
from workloads.model.results import RunResult
from workloads.report.text import plural

__all__ = ["flow_line"]


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.1%} of {whole:,}" if whole else "none"


def flow_line(result: RunResult) -> str | None:
    """ "sessions: 31 (longest 212 steps, 2 compactions) · 8.4 steps per human request
    (mean of 57) · tool results after a reply with tool calls 99.6% of 412 · human requests
    after a reply without 100.0% of 26"; None without agent steps."""
    flow = session_flow(result.records, result.scenario)
    if flow is None:
        return None
    parts = [
        f"sessions: {flow.sessions:,} (longest {plural(flow.longest_session, 'step')}, "
        f"{plural(flow.compactions, 'compaction')})"
    ]
    if flow.steps_per_request is not None:
        planned = (
            ""
            if flow.planned_steps_per_request is None
            else f"; {flow.planned_steps_per_request:.1f} in these sessions' whole plans, "
            "whose loops the run's end may cut"
        )
        parts.append(
            f"{flow.steps_per_request:.1f} steps per human request "
            f"(mean of {flow.human_requests:,}{planned})"
        )
    if flow.tool_steps or flow.human_steps:
        parts.append(
            "tool results after a reply with tool calls "
            f"{_share(flow.tool_after_calls, flow.tool_steps)}"
        )
        parts.append(
            "human requests after a reply without "
            f"{_share(flow.human_after_text, flow.human_steps)}"
        )
    return " · ".join(parts)
