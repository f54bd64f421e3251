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
    """ "sessions: 31 (longest 212 steps, 2 compactions) · 8.4 [6.9-10.2] steps per human
    request (of 57 requests) · tool results after a reply with tool calls 99.6% of 412 ·
    human requests after a reply without 100.0% of 26"; None without agent steps (the
    interval: sessions resampled whole, 95%)."""
    flow = session_flow(result.records, result.scenario)
    if flow is None:
        return None
    parts = [
        f"sessions: {flow.sessions:,} (longest {plural(flow.longest_session, 'step')}, "
        f"{plural(flow.compactions, 'compaction')})"
    ]
    if flow.steps_per_request is not None:
        band = flow.steps_per_request_band
        interval = "" if band is None else f" [{band[0]:.1f}-{band[1]:.1f}]"
        planned = (
            ""
            if flow.planned_steps_per_request is None
            else f"; {flow.planned_steps_per_request:.1f} in these sessions' plans played to "
            "their end"
        )
        parts.append(
            f"{flow.steps_per_request:.1f}{interval} steps per human request "
            f"(of {plural(flow.human_requests, 'request')}{planned})"
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
