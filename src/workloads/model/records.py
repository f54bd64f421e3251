"""TurnRecord — everything measured for one turn — and the append-only JSONL writer.

Records are written and flushed the moment a turn finishes, so Ctrl-C or a crash keeps every
turn measured so far. Times are integer ``perf_counter_ns`` values: only differences mean
anything, and the report converts them.
"""

from __future__ import annotations

import contextlib
import errno
import os
from array import array
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import PlainSerializer, PlainValidator, WithJsonSchema, model_validator

from workloads.model.base import Frozen
from workloads.model.errors import (
    LEGACY_ERROR_KINDS,
    ErrorKind,
    OutputError,
    legacy_error_kind,
)

__all__ = ["AttemptRecord", "RecordWriter", "StepKind", "TurnRecord"]


def _compact_gaps(value: Any) -> array[int] | None:
    """chunk_gaps_us in memory: one machine integer a gap (8 bytes), not a Python int (36
    with its list slot), since a run keeps every record; JSON stays a list of integers."""
    if value is None or isinstance(value, array):
        return value
    if not isinstance(value, list | tuple) or any(type(v) is not int for v in value):
        raise ValueError("chunk_gaps_us: a list of integers (microseconds) or null")
    return array("q", value)


ChunkGaps = Annotated[
    Sequence[int] | None,
    PlainValidator(_compact_gaps),
    PlainSerializer(lambda gaps: None if gaps is None else list(gaps)),
    WithJsonSchema({"anyOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "null"}]}),
]

Status = Literal["ok", "error", "incomplete"]
# What triggered a step of a coding agent's session (format 4): a human request, a tool
# result, a sub-agent's own step, or a compaction (a summarisation request).
StepKind = Literal["human", "tool", "subagent", "compaction"]


class AttemptRecord(Frozen):
    """An earlier attempt at a turn that failed and was sent again: a resend (a pooled
    connection dead before any byte of the request was written) or a retry (the client's
    ``retry_on`` policy). Times are perf_counter_ns, like the record's."""

    started_ns: int
    sent_ns: int | None = None  # None: no byte of this attempt was written
    error_ns: int
    error_kind: ErrorKind
    error_message: str | None = None
    http_status: int | None = None
    retry_after_s: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _legacy_kind(cls, data: Any) -> Any:
        return _read_legacy_kind(data)


def _read_legacy_kind(data: Any) -> Any:
    """Records written before the fine-grained kinds carry "connect", "timeout", "http" or
    "protocol": read them as today's kind (the mapping is in model/errors.py)."""
    if isinstance(data, dict) and data.get("error_kind") in LEGACY_ERROR_KINDS:
        data = dict(data)
        data["error_kind"] = legacy_error_kind(
            data["error_kind"], data.get("http_status"), data.get("error_message")
        )
    return data


class TurnRecord(Frozen):
    """One turn of one session in one repetition (one JSONL line)."""

    repetition: int  # 0-based over the cell's repetitions, warm-ups first
    warmup: bool
    session: int  # 0-based
    turn: int  # 1-based
    status: Status
    error_kind: ErrorKind | None = None
    error_message: str | None = None
    http_status: int | None = None
    finish_reason: str | None = None
    valid: bool = False  # ok, complete, and of the exact requested length when one was asked
    prompt_tokens: int | None = None  # as the server counted them (usage)
    completion_tokens: int | None = None
    cached_tokens: int | None = None  # None = the server did not report it
    shareable_tokens: int | None = None  # prompt tokens equal to a prefix the server has seen
    shareable_exact: bool = False  # from the server's tokenizer, not an estimate
    configured_prior_tokens: int  # configured context before this turn's new content
    configured_prompt_tokens: int | None = None  # configured prompt: prior + turn_tokens
    tokenized_prompt_tokens: int | None = None  # the target's /tokenize count before sending
    cell: int = 0  # index into the scenario's cells (sweeps); 0 for a run without sweep axes
    pacing_lag_ns: int | None = None  # sent this late after its due time (pacing), if paced
    ttft_ns: int | None = None
    decode_tokens_per_s: float | None = None  # post-first streaming rate
    started_ns: int  # the client began the request (before any connection wait)
    sent_ns: int | None = None
    headers_ns: int | None = None  # response headers arrived (llama.cpp sends them at once)
    first_content_ns: int | None = None
    last_content_ns: int | None = None
    done_ns: int | None = None
    content_events: int = 0
    retry_after_s: float | None = None  # the server's Retry-After on a 429/503
    resends: int = 0  # re-sent on a fresh connection; the first attempt never reached the server
    request_id: str | None = None  # the server's id for the completion
    system_fingerprint: str | None = None
    timings: dict[str, Any] | None = None  # llama.cpp per-response timings, verbatim
    error_ns: int | None = None  # when the failure arrived (perf_counter_ns); None when ok
    retries: int = 0  # attempts re-sent by the retry_on policy (each one in attempts)
    attempts: tuple[AttemptRecord, ...] = ()  # earlier failed attempts, oldest first
    # Identity of what was sent and received (added 2026-12-01, optional): sha256 of the
    # request's messages as canonical JSON, and of the completion text; the texts themselves
    # are in the run's transcripts (workloads.core.transcripts), unless turned off.
    prompt_sha256: str | None = None
    completion_sha256: str | None = None
    # The completion loops or collapsed (workloads.core.degeneration): why; None when it does
    # not, or when there was no completion text to judge (degenerate is then None too).
    degenerate: bool | None = None
    degenerate_reason: str | None = None
    # Gaps between consecutive content chunks' arrivals, integer microseconds (n − 1 values
    # for n chunks): the inter-token latency distribution, compact. None: not recorded.
    chunk_gaps_us: ChunkGaps = None
    # Content chunks read together with later ones while the client's event loop stalled
    # (format 6.6; 0 in older files): each carries the stamp of its read's last byte, not
    # its own. The gaps that end at them are left out of chunk_gaps_us, and the decode rate
    # is None when the first chunk is one (wire/arrival.py).
    merged_chunks: int = 0
    # The host whose worker process sent this turn (--workers, --ray; format 3). Its stamps
    # are that host's monotonic clock: only compare them with records of the same host.
    # None: the run's own process sent it.
    host: str | None = None
    # The agent's step (format 4; None in older files and for trace-replayed requests): what
    # triggered it, the new tokens it was configured to add (drawn: a tool result or human
    # request), the output length asked for (drawn), the pause waited before it (think or
    # tool time, after time_scale), and, for a sub-agent's step, the session that spawned it.
    step_kind: StepKind | None = None
    new_tokens: int | None = None
    output_tokens: int | None = None
    pause_s: float | None = None
    parent_session: int | None = None
    # Tool calls in the reply (None: the request offered no tools), and the time to the first
    # chunk carrying content text (TTFT counts reasoning and tool-call deltas too; this one
    # does not; None when no content text came).
    tool_calls: int | None = None
    ttft_content_ns: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _legacy_kind(cls, data: Any) -> Any:
        return _read_legacy_kind(data)


class JsonlWriter:
    """An append-only JSON-lines file, opened by ``with``: what a killed run leaves on disk is
    every line written so far (records, transcripts).

    A write that fails (a full disk, a folder turned read-only) leaves the file cut back to
    its last whole line (a torn line would be a record half-written) and raises
    :class:`OutputError` naming the file; with ``on_error`` set, the error goes to it
    instead (the run stops itself: :class:`workloads.runner.cells.Run`). Either way the
    writer then writes nothing more, so the file keeps exactly what was written before.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.on_error: Callable[[OutputError], None] | None = None
        self.failure: OutputError | None = None  # the write that failed; then no more writes
        self._fd: int | None = None
        self._end = 0  # the file ends with a whole line here (bytes)
        self._pending: list[bytes] = []  # lines not flushed yet (transcripts' messages)

    def __enter__(self) -> Self:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Unbuffered, so that a failed write leaves nothing queued to be retried at close
            # and the offset of the last whole line is known exactly.
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
            self._end = os.fstat(self._fd).st_size
        except OSError as err:
            raise OutputError.writing(self.path, err) from err
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _append(self, line: str, *, flush: bool = True) -> bool:
        """Append ``line``; with ``flush``, write out every line appended so far. False when
        the file has failed (now or before): nothing more is written."""
        if self.failure is not None:
            return False
        assert self._fd is not None, f"use 'with {type(self).__name__}(path) as writer'"
        self._pending.append(line.encode() + b"\n")
        if not flush:
            return True
        data = b"".join(self._pending)
        self._pending.clear()
        try:
            view = memoryview(data)
            while view:  # a short write (the disk filling up) leaves a rest; bounded: each
                # pass writes at least a byte or raises
                written = os.write(self._fd, view)
                if written <= 0:
                    raise OSError(errno.EIO, "the write wrote nothing")
                view = view[written:]
        except OSError as err:
            self._fail(err)
            return False
        self._end += len(data)
        return True

    def _fail(self, err: OSError) -> None:
        assert self._fd is not None
        with contextlib.suppress(OSError):  # a device (/dev/full) cannot be cut; a file can
            os.ftruncate(self._fd, self._end)
        self._close()
        self.failure = OutputError.writing(self.path, err)
        if self.on_error is None:
            raise self.failure
        self.on_error(self.failure)


class RecordWriter(JsonlWriter):
    """Appends TurnRecords to a JSONL file, flushing after each one."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.records = 0  # TurnRecords this writer put in the file (whole lines)

    def write(self, record: TurnRecord) -> None:
        if self._append(record.model_dump_json()):
            self.records += 1

    def write_line(self, line: str) -> None:
        """Append one JSON line that is not a TurnRecord (the header, nonces, windows: see
        :mod:`workloads.model.results`), flushed at once."""
        self._append(line)
