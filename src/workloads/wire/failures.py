"""How one failed request is named and judged: aiohttp's exceptions and statuses → the
closed set of :data:`~workloads.model.errors.ErrorKind`, which kinds ``retry_on`` may name,
and whether a failed request provably never left (the only case sent again unasked).
Used by :mod:`workloads.wire.client`; pure, no I/O."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Collection
from typing import Any, get_args

import aiohttp

from workloads.model.errors import ErrorKind

__all__ = ["connect_kind", "retry_after", "retry_kinds", "status_kind", "unwritten"]

RETRY_ALIASES: dict[str, ErrorKind] = {"429": "http_429", "4xx": "http_4xx", "5xx": "http_5xx"}
NEVER_RETRIED = frozenset({"cancelled", "turn_deadline"})


def retry_kinds(retry_on: Collection[str]) -> frozenset[ErrorKind]:
    """The error kinds ``retry_on`` names: "429", "4xx", "5xx" or any error kind except
    cancelled and turn_deadline. ValueError names what is allowed."""
    allowed = set(get_args(ErrorKind)) - NEVER_RETRIED
    kinds: set[ErrorKind] = set()
    for name in retry_on:
        kind = RETRY_ALIASES.get(name.strip(), name.strip())
        if kind not in allowed:
            raise ValueError(
                f"retry_on: cannot retry on {name!r}; use 429, 4xx, 5xx or one of "
                + ", ".join(sorted(allowed))
            )
        kinds.add(kind)  # type: ignore[arg-type]  # checked against ErrorKind just above
    return frozenset(kinds)


def retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date; rare from inference servers


def status_kind(status: int) -> ErrorKind:
    if status == 429:
        return "http_429"
    if 400 <= status < 500:
        return "http_4xx"
    if 500 <= status < 600:
        return "http_5xx"
    return "http_other"


def connect_kind(err: aiohttp.ClientConnectorError) -> ErrorKind:
    if isinstance(err, aiohttp.ClientConnectorDNSError):
        return "name_resolution"
    if isinstance(err, aiohttp.ClientSSLError):  # certificate and handshake errors
        return "tls"
    cause = err.os_error
    if isinstance(cause, ConnectionRefusedError):
        return "connect_refused"
    if isinstance(cause, socket.gaierror):
        return "name_resolution"
    if isinstance(cause, ssl.SSLError):
        return "tls"
    if isinstance(cause, TimeoutError):
        return "connect_timeout"
    return "connect_failed"


def unwritten(err: BaseException, trace: dict[str, Any]) -> bool:
    """Provably no byte of the request went out: a *reused* connection aiohttp found closing
    when it came to write the first (coalesced headers + body) bytes. Anything else may have
    reached the server (it may have read and prefilled it), so it is a recorded failure."""
    if not trace.get("reused"):
        return False
    if "sent_ns" not in trace:
        return True  # failed before the write path began
    first_write = trace.get("chunks", 0) <= 1
    return (
        first_write
        and isinstance(err, aiohttp.ClientConnectionResetError)
        and str(err) == "Cannot write to closing transport"  # aiohttp's check before writing
    )
