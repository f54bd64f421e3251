"""What a target offers, and what a run will do about it.

    report = workloads.probe_target(workloads.Target("http://127.0.0.1:8080/v1"))
    report.check("cached_tokens").status        # "yes", "no", "partial" or "not reported"

``observe`` sends the few small requests and reads (I/O); ``conformance`` judges what was
seen (pure).
"""

from __future__ import annotations

from workloads.model.target import Target
from workloads.probe.conformance import Check, Support
from workloads.probe.observe import ProbeReport, probe, render
from workloads.wire.loop import run_loop

__all__ = [
    "Check",
    "ProbeReport",
    "Support",
    "probe",
    "probe_target",
    "probe_target_async",
    "render",
]


async def probe_target_async(
    target: Target, *, timeout_s: float = 60.0, metrics_url: str | None = None
) -> ProbeReport:
    """Probe ``target`` inside a running event loop; see :func:`probe_target`."""
    return await probe(target, timeout_s=timeout_s, metrics_url=metrics_url)


def probe_target(
    target: Target, *, timeout_s: float = 60.0, metrics_url: str | None = None
) -> ProbeReport:
    """Probe ``target`` with a few small requests and judge what it offers (starts its own
    event loop; inside one, await :func:`probe_target_async`).

        report = workloads.probe_target(workloads.Target("http://127.0.0.1:8080/v1"))
        for row in report.checks:
            print(row.name, row.status, row.evidence)

    Raises :class:`~workloads.TargetError` when ``/models`` does not answer.
    """
    return run_loop(probe_target_async(target, timeout_s=timeout_s, metrics_url=metrics_url))
