"""TurnRecord — everything measured for one turn — and the append-only JSONL writer.

Records are written and flushed the moment a turn finishes, so Ctrl-C or a crash keeps every
turn measured so far. Times are integer ``perf_counter_ns`` values: only differences mean
anything, and the report converts them.
"""

from __future__ import annotations

import json
import queue
import threading
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Annotated, Any, Literal, Self

from pydantic import PlainSerializer, PlainValidator, WithJsonSchema, model_validator

from workloads.model.base import Frozen
from workloads.model.errors import (
    LEGACY_ERROR_KINDS,
    ErrorKind,
    ResultFormatError,
    legacy_error_kind,
)

__all__ = ["AttemptRecord", "RecordWriter", "StepKind", "TurnRecord", "read_records"]


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
    WithJsonSchema({"anyOf": [{"type": "array", "items": {"type": "integer"}},
                              {"type": "null"}]}),
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

    The lines are written and flushed by a thread of the writer's own, in order: a write that
    waits on the disk (the page cache throttled by other work) never holds the event loop,
    where chunks wait for their stamps. A line is on disk within milliseconds; leaving the
    ``with`` block writes what is queued. A failed write is raised by the next append, or
    at the block's end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] | None = None
        self._queue: queue.SimpleQueue[tuple[str, bool] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._error: OSError | None = None

    def __enter__(self) -> Self:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")
        self._thread = threading.Thread(target=self._drain, args=(self._file,), daemon=True,
                                        name=f"workloads-writer-{self.path.name}")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._error is not None:
            raise self._error

    def _drain(self, file: IO[str]) -> None:
        for item in iter(self._queue.get, None):  # ends at the None that __exit__ queues
            if self._error is not None:
                continue  # the first error is raised in the caller; later lines are lost
            line, flush = item
            try:
                file.write(line + "\n")
                if flush:
                    file.flush()
            except OSError as err:
                self._error = err

    def _append(self, line: str, *, flush: bool = True) -> None:
        assert self._thread is not None, f"use 'with {type(self).__name__}(path) as writer'"
        if self._error is not None:
            raise self._error
        self._queue.put((line, flush))


class RecordWriter(JsonlWriter):
    """Appends TurnRecords to a JSONL file, flushing after each one."""

    def write(self, record: TurnRecord) -> None:
        self._append(record.model_dump_json())

    def write_line(self, line: str) -> None:
        """Append one JSON line that is not a TurnRecord (the header, nonces, windows: see
        :mod:`workloads.model.results`), flushed at once."""
        self._append(line)


def read_records(path: Path) -> Iterator[TurnRecord]:
    """TurnRecords from a JSONL file. A torn last line (a crash mid-write) is skipped, and
    so are the lines that are not TurnRecords (those with a "kind": header, nonces, windows;
    :func:`workloads.model.results.read_records_file` reads them)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            if isinstance(data, dict) and "kind" in data:
                continue
            yield TurnRecord.model_validate(data)
        except (json.JSONDecodeError, ValueError) as err:
            if number == len(lines):
                return
            raise ResultFormatError(f"{path}:{number}: not a TurnRecord: {err}") from err
