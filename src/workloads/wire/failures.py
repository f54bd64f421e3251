"""How one failed request is named: statuses and failures to connect → the closed set of
:data:`~workloads.model.errors.ErrorKind`, and which kinds ``retry_on`` may name. Used by
:mod:`workloads.wire.client` and :mod:`workloads.wire.stream`; pure, no I/O."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Collection
from typing import get_args

from workloads.model.errors import ErrorKind

__all__ = ["connect_kind", "retry_after", "retry_kinds", "status_kind"]

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


def connect_kind(err: BaseException) -> ErrorKind:
    """The kind of a failure to resolve, connect or shake hands (an OSError, or the
    TimeoutError of the connect timeout)."""
    if isinstance(err, socket.gaierror):
        return "name_resolution"
    if isinstance(err, ssl.SSLError | ssl.CertificateError):  # certificate and handshake
        return "tls"
    if isinstance(err, ConnectionRefusedError):
        return "connect_refused"
    if isinstance(err, TimeoutError):
        return "connect_timeout"
    return "connect_failed"
