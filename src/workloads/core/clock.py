"""Waiting on absolute deadlines (``perf_counter`` seconds): a chain of relative sleeps drifts,
so every pause in a run is computed from a start time and waited for with :func:`sleep_until`
(trio's ``sleep_until`` is the model)."""

from __future__ import annotations

import asyncio
import time

__all__ = ["sleep_until"]


async def sleep_until(deadline: float) -> float:
    """Sleep until ``perf_counter() >= deadline``; returns how late we woke (seconds)."""
    delay = deadline - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)
    return max(0.0, time.perf_counter() - deadline)
