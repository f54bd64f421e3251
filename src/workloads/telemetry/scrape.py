"""One read of a server's self-description outside a run's window: ``/metrics`` as a
Prometheus snapshot, a JSON object (llama.cpp's ``/props``). Used by ``probe`` and ``fit``;
a run's window reads its counters through :mod:`workloads.telemetry.window`.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from workloads.telemetry.prometheus import Snapshot, parse_metrics
from workloads.wire.errors import READ_ERRORS, describe

__all__ = ["get_json", "scrape"]


async def scrape(http: aiohttp.ClientSession, url: str) -> tuple[Snapshot | None, str | None]:
    """(the snapshot, None) or (None, why not)."""
    try:
        async with http.get(url) as resp:
            if resp.status != 200:
                return None, f"HTTP {resp.status}"
            text = await resp.text()
            openmetrics = "openmetrics" in resp.headers.get("Content-Type", "")
    except READ_ERRORS as err:
        return None, describe(err, url)
    try:
        return parse_metrics(text, openmetrics=openmetrics), None
    except ValueError as err:
        return None, f"not Prometheus text ({err})"


async def get_json(http: aiohttp.ClientSession, url: str) -> dict[str, Any] | None:
    """The JSON object at ``url``; None when it answers otherwise or not at all."""
    try:
        async with http.get(url) as resp:
            if resp.status != 200:
                return None
            data = await resp.json(content_type=None)
    except READ_ERRORS:
        return None
    return data if isinstance(data, dict) else None
