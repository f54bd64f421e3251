"""Waiting on absolute deadlines (``perf_counter`` seconds): a chain of relative sleeps drifts,
so every pause in a run is computed from a start time and waited for with :func:`sleep_until`
(trio's ``sleep_until`` is the model)."""

from __future__ import annotations

import asyncio
import time

__all__ = ["sleep_until", "sleep_until_or"]


async def sleep_until(deadline: float) -> float:
    """Sleep until ``perf_counter() >= deadline``; returns how late we woke (seconds)."""
    delay = deadline - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)
    return max(0.0, time.perf_counter() - deadline)


async def sleep_until_or(deadline: float, event: asyncio.Event) -> float | None:
    """:func:`sleep_until`, cut short by ``event``: how late we woke (seconds), or None when
    ``event`` was set first (or already). A stopped run starts no turn it was waiting on."""
    if event.is_set():
        return None
    delay = deadline - time.perf_counter()
    if delay > 0:
        try:
            async with asyncio.timeout(delay):
                await event.wait()
        except TimeoutError:
            pass
        else:
            return None
    if event.is_set():
        return None
    return max(0.0, time.perf_counter() - deadline)
