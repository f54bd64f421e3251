"""Exceptions raised by `workloads`.

Raised exceptions are for misuse and configuration problems. A failed *request* is never
raised out of a run: it becomes a TurnRecord with ``status="error"`` and an ``error_kind``
from :data:`ErrorKind`.

    WorkloadsError
    ├── ScenarioError          a scenario file or override is invalid (names file and field)
    │   └── TraceError         a trace file is invalid (names file, line and field)
    ├── OptionsError           arguments to a library call that cannot work (also ValueError)
    ├── TargetError            the target cannot be used (unreachable, no such model)
    ├── OutputError            the output directory cannot be claimed or written (also
    │   │                      OSError; names the file; ``errno`` 28 when the disk is full)
    │   └── OutputExistsError  it already holds a result (also FileExistsError)
    ├── ResultFormatError      a result file is unreadable or of an unknown format_version
    └── IncomparableError      two results cannot be compared without forcing

    RequestError               one request failed (internal to client/session; becomes data)

    ResultFormatWarning        a result loaded without fields this version does not know
                               (a newer writer's): they were dropped (a UserWarning)

Error kinds (:data:`ErrorKind`), the closed set of ways one request fails, in the order a
request meets them: connecting (``connect_refused``, ``connect_failed``, ``connect_timeout``,
``name_resolution``, ``tls``), the status (``http_429``, ``http_4xx``, ``http_5xx``,
``http_other``), the stream (``not_event_stream``, ``malformed``, ``error_event``,
``truncated``), the connection and the clock (``disconnected``, ``read_stall``,
``turn_deadline``, ``cancelled``). A record with an error kind has ``status="error"`` (or
``"incomplete"`` when cancelled) and ``valid=False``, and keeps every stamp and count measured
up to the failure plus ``error_ns``, when the failure arrived.

An **early stop** (an exact-length turn that ends with fewer tokens or a finish_reason other
than "length") is *not* an error kind: the server answered completely and correctly by the
protocol, so the record is ``status="ok"``, ``valid=False``, with the finish_reason and
completion_tokens that show it. Its reply is real (it goes into the history), its usage is
real (the window reconciles it), and only the rates leave it out. An error kind would claim a
failure the wire never saw and hide the record from reconciliation.
"""

from __future__ import annotations

import errno as _errno
from typing import Literal

ErrorKind = Literal[
    # Opening a connection (nothing of the request was written)
    "connect_refused",  # the host answered the connection attempt with a refusal (RST)
    "connect_failed",  # any other failure to connect: host or network unreachable, ...
    "connect_timeout",  # no connection within Timeouts.connect_s
    "name_resolution",  # the target's host name did not resolve (DNS)
    "tls",  # the TLS handshake failed: certificate, protocol version, plain HTTP port
    # The response status
    "http_429",  # 429 Too Many Requests; the record keeps Retry-After (retry_after_s)
    "http_4xx",  # any other 4xx: bad request, unknown model, authentication
    "http_5xx",  # 500-599: the server failed or is overloaded
    "http_other",  # a status that is none of 200, 4xx, 5xx: a 301/302/303 (not followed
    # for a POST), a 307/308 past 5 hops, or an odd 1xx/2xx
    # A 200 response that is not the stream it should be
    "not_event_stream",  # a Content-Type other than text/event-stream (a proxy's HTML
    # login page, a JSON reply from a server that ignored stream=true)
    "malformed",  # bytes that are not SSE, an event whose data is not a JSON object, or a
    # response HTTP itself cannot parse
    "error_event",  # the server put an error object (or an ``event: error``) in the stream
    "truncated",  # the body ended cleanly but without ``data: [DONE]``
    # The connection or the clock
    "disconnected",  # the connection closed or was reset after the request was written
    "read_stall",  # no byte for longer than Timeouts.read_gap_s
    "turn_deadline",  # the whole request took longer than Timeouts.turn_s (gate: gate_s)
    "cancelled",  # the run ended (deadline, Ctrl-C, SIGTERM) while the request was in flight
]

# Kinds written by workloads before the kinds above (format 1 records), with how each is
# read today: exactly where the old record holds the evidence (http_status, the message
# this code wrote), else the most common cause of the old kind. See legacy_error_kind.
LEGACY_ERROR_KINDS = frozenset({"connect", "timeout", "http", "protocol"})


def legacy_error_kind(kind: str, http_status: int | None, message: str | None) -> str:
    """The current :data:`ErrorKind` for a kind an older version wrote; others unchanged.

    - ``http``: by ``http_status``: 429 → http_429, 4xx → http_4xx, 5xx → http_5xx, else
      http_other.
    - ``protocol``: ``error_event`` when the message starts "error in stream" (what the old
      client wrote for an error object), else ``malformed``.
    - ``timeout``: ``turn_deadline`` when the message starts "request exceeded", else
      ``connect_timeout`` when it names a connection timeout, else ``read_stall``.
    - ``connect``: ``disconnected`` when the old client classed a dropped fresh connection
      so (its message names ServerDisconnectedError or a reset), ``name_resolution`` or
      ``tls`` when the message shows it, ``connect_refused`` when it shows a refusal, else
      ``connect_failed``.
    - ``disconnected`` and ``cancelled`` keep their names and meanings.
    """
    text = (message or "").lower()
    if kind == "http":
        if http_status == 429:
            return "http_429"
        if http_status is not None and 400 <= http_status < 500:
            return "http_4xx"
        if http_status is not None and 500 <= http_status < 600:
            return "http_5xx"
        return "http_other"
    if kind == "protocol":
        return "error_event" if text.startswith("error in stream") else "malformed"
    if kind == "timeout":
        if text.startswith("request exceeded"):
            return "turn_deadline"
        return "connect_timeout" if "connection timeout" in text else "read_stall"
    if kind == "connect":
        if "serverdisconnected" in text or "reset" in text:
            return "disconnected"
        if "refused" in text or "connect call failed" in text:
            return "connect_refused"
        if "name or service" in text or "name resolution" in text or "nodename" in text:
            return "name_resolution"
        if any(w in text for w in ("sslerror", "ssl error", "certificate", "handshake")):
            return "tls"
        return "connect_failed"
    return kind


class WorkloadsError(Exception):
    """Base class of every exception `workloads` raises on purpose."""


class ScenarioError(WorkloadsError):
    """A scenario is invalid. The message names the file (if any) and the field."""


class TraceError(ScenarioError):
    """A trace file (``run --trace``) is invalid: the message names the file, the line and
    the field. A ScenarioError, since the trace is what the run runs (exit 2 in the CLI)."""


class OptionsError(WorkloadsError, ValueError):
    """Arguments to a library call that are out of range or cannot work together. The
    message speaks of arguments as the library spells them (``workers=``); ``option`` names
    the argument so that the CLI can word it with its flag."""

    def __init__(self, message: str, *, option: str | None = None) -> None:
        super().__init__(message)
        self.option = option


class OutputError(WorkloadsError, OSError):
    """The output directory cannot be claimed or a file in it cannot be written (permission,
    a full disk: ``errno`` 28). The message and ``path`` name the file; what was written
    before the failure is kept, and no partial file is left."""

    def __init__(self, message: str, *, path: str | None = None, errno: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.errno = errno

    @classmethod
    def writing(
        cls, path: object, err: OSError, *, then: str = "", name: str | None = None
    ) -> OutputError:
        """The error for ``err``, met while writing ``path``: one line naming the file (or
        ``name``, e.g. "to --out DIR") and the system's reason, e.g. "cannot write
        runs/a/records.jsonl: No space left on device (ENOSPC)", followed by ``then`` (what
        was kept, the next step)."""
        reason = err.strerror or type(err).__name__
        code = _errno.errorcode.get(err.errno or 0)
        return cls(
            f"cannot write {name or path}: {reason}{f' ({code})' if code else ''}{then}",
            path=str(path),
            errno=err.errno,
        )


class OutputExistsError(OutputError, FileExistsError):
    """The output directory already holds a result (pass ``overwrite=True`` to replace it),
    or is a file."""


class TargetError(WorkloadsError):
    """The target cannot be used: unreachable, refuses the model, or not OpenAI-compatible."""


class ResultFormatError(WorkloadsError):
    """A result file cannot be read: not JSON, or a ``format_version`` this version lacks."""


class ResultFormatWarning(UserWarning):
    """A result file loaded, but it held fields this version of workloads does not know
    (written by a newer one): they were dropped, and the message names each by its path.
    Upgrade workloads to read them; silence it with
    ``warnings.simplefilter("ignore", workloads.ResultFormatWarning)``."""


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
