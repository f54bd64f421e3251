"""Exceptions raised by `workloads`.

Raised exceptions are for misuse and configuration problems. A failed *request* is never
raised out of a run: it becomes a TurnRecord with ``status="error"`` and an ``error_kind``
from :data:`ErrorKind`.

    WorkloadsError
    ├── ScenarioError          a scenario file or override is invalid (names file and field)
    ├── TargetError            the target cannot be used (unreachable, no such model)
    ├── ResultFormatError      a result file is unreadable or of an unknown format_version
    └── IncomparableError      two results cannot be compared without forcing

    RequestError               one request failed (internal to client/session; becomes data)
"""

from __future__ import annotations

from typing import Literal

ErrorKind = Literal[
    "connect",  # could not open a connection
    "timeout",  # connect timeout, or no byte for longer than the read-gap timeout
    "http",  # the server answered with a non-200 status
    "disconnected",  # the connection closed mid-stream
    "protocol",  # malformed SSE or JSON, or an error object inside a 200 stream
    "cancelled",  # the run ended (deadline, Ctrl-C) while the request was in flight
]



class WorkloadsError(Exception):
    """Base class of every exception `workloads` raises on purpose."""


class ScenarioError(WorkloadsError):
    """A scenario is invalid. The message names the file (if any) and the field."""


class TargetError(WorkloadsError):
    """The target cannot be used: unreachable, refuses the model, or not OpenAI-compatible."""


class ResultFormatError(WorkloadsError):
    """A result file cannot be read: not JSON, or a ``format_version`` this version lacks."""


class IncomparableError(WorkloadsError):
    """Two results differ in scenario, model or prompt tokens; pass ``force=True`` to compare."""


class RequestError(Exception):
    """One request failed. Internal: the session turns it into a TurnRecord.

    ``sent`` is False only when the request provably never reached the server (the pooled
    connection was already closed before any byte of the request went out or any byte of
    a response came back); such a request is safe to send again.
    """

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        http_status: int | None = None,
        sent: bool = True,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.http_status = http_status
        self.sent = sent
        self.retry_after_s = retry_after_s
