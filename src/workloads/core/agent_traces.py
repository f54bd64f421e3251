"""The public agent corpora, read as published: values in, values out (the runner plays
the plans as any agent trace's).

Three formats, recognised by :func:`published_format` from the file's first object:

* **WEKA** (github callanjfox/kv-cache-tester, ``traces/trace_*.json``): one JSON document
  per file, one conversation: ``id``, ``block_size`` (64), ``hash_id_scope``,
  ``tool_tokens``, ``system_tokens`` and ``requests``, each with ``t`` (seconds from the
  conversation's start), ``in``, ``out``, ``hash_ids`` (ids of its whole ``block_size``
  blocks: ``floor(in / block_size)`` of them in the published files), ``input_types``,
  ``stop``, ``think_time`` and ``api_time`` (optional), ``model``; or a ``type:
  "subagent"`` entry with its own ``system_tokens``, ``tool_tokens`` and ``requests`` (their
  ``t`` from the sub-agent's start).
* **TraceLab** round traces (github uw-syfi/TraceLab, ``round_trace.jsonl`` and the corpus
  release's ``syfi_coding_trace.jsonl``): one LLM round per line: ``session_id``,
  ``round_index``, ``model``, ``input_tokens_total`` = ``prefix_tokens`` (what the
  provider's cache served) + ``newly_append_tokens``, ``output_tokens``,
  ``first_input_event_type`` ("user_message", "tool_result"), ``timing_events`` (ISO
  timestamps). Rounds are ordered by ``round_index`` then file order (the release repeats
  some (session, round_index) pairs: the later row is skipped and counted).
* **AIPerf multi-turn Mooncake** (github ai-dynamo/aiperf, ``MooncakeTrace``): one turn per
  line: ``session_id``, ``input_length``, ``output_length``, optional ``delay`` (ms before
  the turn), ``timestamp`` (ms) and ``hash_ids`` (512-token blocks, the last partial).

Every step's input size is the whole prompt the trace recorded (``in``,
``input_tokens_total``, ``input_length``): a step that grows the context has prior = the
previous prompt + its reply; one whose input is smaller (a context that shrank without a
compaction marker) gets a prior below the running context, which the runner honours by
rebuilding the history (:class:`workloads.core.agent.Step`). A session's opening is the
trace's prefix before its first request's new content: WEKA ``system_tokens +
tool_tokens``, TraceLab round 0's ``prefix_tokens``, AIPerf none. Pauses: WEKA
``think_time`` (else the gap between requests less the previous ``api_time``), TraceLab the
gap from a round's last timing event to the next round's first, AIPerf ``delay``; a
session's arrival (from the trace's start) is its first step's pause. A recorded reply of 0
tokens (27 of 48,658 requests in the published WEKA files) is asked for as 1.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from workloads.core.agent import Step
from workloads.core.traces import MAX_TRACE_BYTES, _float, _int, _lines, _sha256, trace_format
from workloads.model.errors import TraceError
from workloads.model.records import StepKind

__all__ = ["PublishedTrace", "TracedSession", "any_format", "load_published", "published_format"]

PublishedFormat = Literal["weka", "tracelab", "aiperf"]
AIPERF_BLOCK_TOKENS = 512  # aiperf's prompt block_size default (common/config/prompt_config.py)


@dataclass(frozen=True, slots=True)
class TracedSession:
    """One top-level session of a published trace: its id there and its plan (turn 1's
    ``pause_s`` is its arrival from the trace's start, before ``time_scale``)."""

    key: str
    plan: tuple[Step, ...]


@dataclass(frozen=True, slots=True)
class PublishedTrace:
    """A published agent trace as read.

    ``ideal_hit_rate``: what an unlimited prefix cache at the trace's block size would serve
    of its inputs, from the hash ids (WEKA, AIPerf with hash ids; None without them).
    ``recorded_hit_rate``: what the recording's own provider cache served (TraceLab's Σ
    prefix_tokens / Σ input_tokens_total). ``models``: (model, steps) as recorded."""

    path: Path
    sha256: str
    format: PublishedFormat
    sessions: tuple[TracedSession, ...]
    block_tokens: int | None
    ideal_hit_rate: float | None
    recorded_hit_rate: float | None
    models: tuple[tuple[str, int], ...]
    skipped: int = 0  # rows left out (TraceLab's repeated rounds)


def published_format(first: dict[str, Any]) -> PublishedFormat | None:
    """The published format a trace's first object is in; None: none of them."""
    if "requests" in first and ("block_size" in first or "tool_tokens" in first):
        return "weka"
    if "round_index" in first and "input_tokens_total" in first:
        return "tracelab"
    if "session_id" in first and "input_length" in first:
        return "aiperf"
    return None


def any_format(
    path: str | Path, *, max_bytes: int = MAX_TRACE_BYTES
) -> Literal["mooncake", "agent", "weka", "tracelab", "aiperf"]:
    """Which of the trace formats ``run --trace`` reads ``path`` holds, from its first
    object (TraceError: none)."""
    p = Path(path)
    found = published_format(_first(p, max_bytes))
    return found if found is not None else trace_format(p, max_bytes=max_bytes)


def load_published(
    path: str | Path, *, max_steps: int = 100_000, max_bytes: int = MAX_TRACE_BYTES
) -> PublishedTrace:
    """Read and check a published agent trace (see the module docstring); TraceError: one
    line naming the file, the line and the field.

        trace = load_published("traces/weka-sample.json")
        print(len(trace.sessions), trace.ideal_hit_rate)
    """
    p = Path(path)
    first = _first(p, max_bytes)
    kind = published_format(first)
    if kind == "weka":
        sessions, hashed, block = _weka(p, max_bytes)
        recorded = None
    elif kind == "tracelab":
        sessions, recorded, skipped = _tracelab(p, max_bytes)
        hashed, block = [], None
    elif kind == "aiperf":
        sessions, hashed = _aiperf(p, max_bytes)
        recorded, block = None, AIPERF_BLOCK_TOKENS
    else:
        raise TraceError(f"{p}:1: not a published agent trace (WEKA, TraceLab or AIPerf)")
    steps = [s for session in sessions for s in _all_steps(session.plan)]
    if len(steps) > max_steps:
        raise TraceError(f"{p}: {len(steps):,} steps, over the limit of {max_steps:,}")
    models = Counter(s.model for s in steps if s.model)
    return PublishedTrace(
        path=p,
        sha256=_sha256(p),
        format=kind,
        sessions=tuple(sessions),
        block_tokens=block if hashed else None,
        ideal_hit_rate=_ideal(hashed, block) if hashed and block else None,
        recorded_hit_rate=recorded,
        models=tuple(models.most_common()),
        skipped=skipped if kind == "tracelab" else 0,
    )


def _all_steps(plan: tuple[Step, ...]) -> Iterator[Step]:
    for step in plan:
        yield step
        for child in step.children:
            yield from _all_steps(child)


def _first(path: Path, max_bytes: int) -> dict[str, Any]:
    """The file's first object: a whole-document file (WEKA, pretty-printed or not) or the
    first line of a JSON Lines one."""
    try:
        for _, data in _lines(path, max_bytes):
            return data
    except TraceError as line_error:
        try:
            return _document(path, max_bytes)
        except TraceError:
            raise line_error from None
    raise AssertionError("unreachable")  # _lines raises for a file without objects


def _document(path: Path, max_bytes: int) -> dict[str, Any]:
    if path.stat().st_size > max_bytes:
        raise TraceError(f"{path}: over the limit of {max_bytes:,} bytes")
    try:
        data = json.loads(path.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise TraceError(f"{path}:{err.lineno}: not a JSON document ({err.msg})") from err
    if not isinstance(data, dict):
        raise TraceError(f"{path}:1: not a JSON object")
    return data


# --- steps from absolute input sizes -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Row:
    kind: StepKind
    input: int  # the whole prompt, as recorded
    output: int
    pause: float
    model: str | None
    children: tuple[tuple[Step, ...], ...] = ()


def _plan(rows: list[_Row], opening: int) -> tuple[Step, ...]:
    """Steps whose prompts are the rows' inputs: prior = the running context (previous
    prompt + reply) when the input holds it, else the opening (or the input, when smaller):
    a prior below the running context, which the runner rebuilds the history to."""
    steps: list[Step] = []
    running = None
    for turn, row in enumerate(rows, 1):
        grows = running is not None and row.input >= running
        prior = running if grows and running is not None else min(opening, row.input)
        steps.append(
            Step(
                turn=turn,
                kind=row.kind,
                new_tokens=row.input - prior,
                output_tokens=row.output,
                pause_s=row.pause,
                prior_tokens=prior,
                children=row.children,
                model=row.model,
            )
        )
        running = row.input + row.output
    return tuple(steps)


def _str(data: dict[str, Any], name: str, where: str) -> str:
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise TraceError(f"{where}: field '{name}' must be a string (got {value!r})")
    return str(value)


def _ids(data: dict[str, Any], name: str, where: str) -> tuple[int, ...]:
    ids = data.get(name)
    if not isinstance(ids, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in ids
    ):
        raise TraceError(f"{where}: field '{name}' must be a list of integers")
    return tuple(ids)


def _ideal(requests: list[tuple[int, tuple[int, ...]]], block: int) -> float | None:
    """Σ over requests (input, hash ids), in trace order, of the leading ids any earlier
    request had × ``block`` (capped at the input) / Σ inputs. Pure."""
    seen: set[int] = set()
    served = total = 0
    for size, ids in requests:
        hits = 0
        for i in ids:
            if i not in seen:
                break
            hits += 1
        served += min(hits * block, size)
        total += size
        seen.update(ids)
    return served / total if total else None


# --- WEKA ----------------------------------------------------------------------------------


def _weka(path: Path, max_bytes: int) -> tuple[list[TracedSession], list[Any], int]:
    doc = _document(path, max_bytes)
    where = f"{path}:1"
    block = _int(doc, "block_size", where, low=1)
    opening = _int(doc, "system_tokens", where) + _int(doc, "tool_tokens", where)
    requests = doc.get("requests")
    if not isinstance(requests, list) or not requests:
        raise TraceError(f"{where}: field 'requests' must be a non-empty list")
    hashed: list[tuple[float, int, tuple[int, ...]]] = []
    key = _str(doc, "id", where) if "id" in doc else path.stem
    rows, loose = _weka_rows(requests, "requests", where, block, opening, hashed, 0.0)
    sessions = [TracedSession(key, _plan(rows, opening))]
    for t, plan in loose:  # sub-agents after the parent's last request: sessions of their own
        moved = dataclasses.replace(plan[0], pause_s=t, kind="human")
        sessions.append(TracedSession(f"{key}/{len(sessions)}", (moved, *plan[1:])))
    hashed.sort(key=lambda h: h[0])  # arrival order: sub-agents interleave with the parent
    return sessions, [(size, ids) for _, size, ids in hashed], block


def _weka_rows(
    requests: list[Any],
    field_name: str,
    where: str,
    block: int,
    opening: int,
    hashed: list[tuple[float, int, tuple[int, ...]]],
    base_t: float,
    *,
    subagent: bool = False,
) -> tuple[list[_Row], list[tuple[float, tuple[Step, ...]]]]:
    """One conversation's rows (its sub-agents nested under the request after them) and the
    sub-agents that follow its last request ((start, plan))."""
    rows: list[_Row] = []
    waiting: list[tuple[float, tuple[Step, ...]]] = []
    last_t = last_api = None
    for i, request in enumerate(requests):
        own = f"{where}: {field_name}[{i}]"
        if not isinstance(request, dict):
            raise TraceError(f"{where}: field '{field_name}[{i}]' must be an object")
        t = _float(request, "t", own)
        if request.get("type") == "subagent":
            if subagent:
                raise TraceError(f"{own}: a sub-agent inside a sub-agent is not read")
            inner = request.get("requests")
            if not isinstance(inner, list) or not inner:
                raise TraceError(f"{own}: field 'requests' must be a non-empty list")
            sub_open = _int(request, "system_tokens", own) + _int(request, "tool_tokens", own)
            sub_rows, _ = _weka_rows(
                inner,
                f"{field_name}[{i}].requests",
                where,
                block,
                sub_open,
                hashed,
                base_t + t,
                subagent=True,
            )
            waiting.append((base_t + t, _plan(sub_rows, sub_open)))
            continue
        size = _int(request, "in", own, low=1)
        out = max(1, _int(request, "out", own))
        ids = _ids(request, "hash_ids", own)
        if len(ids) > -(-size // block):
            raise TraceError(
                f"{own}: field 'hash_ids' has {len(ids)} ids, more than in = {size} "
                f"needs at block_size {block}"
            )
        hashed.append((base_t + t, size, ids))
        if "think_time" in request:
            pause = _float(request, "think_time", own)
        elif last_t is not None:
            pause = max(0.0, t - last_t - (last_api or 0.0))
        else:
            pause = 0.0
        if not rows and not subagent:
            pause = t  # the conversation's first request: its arrival
        last_t = t
        api = request.get("api_time")
        last_api = (
            float(api) if isinstance(api, (int, float)) and not isinstance(api, bool) else None
        )
        types = request.get("input_types") or []
        kind: StepKind = "subagent" if subagent else "human"
        if not subagent and rows and "tool_result" in types:
            kind = "tool"
        model = request.get("model") if isinstance(request.get("model"), str) else None
        children = tuple(plan for _, plan in waiting)
        if children:
            pause = 0.0  # the tool's run time is the sub-agents'
        waiting = []
        rows.append(_Row(kind, size, out, pause, model, children))
    return rows, waiting


# --- TraceLab ------------------------------------------------------------------------------


def _when(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _tracelab(path: Path, max_bytes: int) -> tuple[list[TracedSession], float | None, int]:
    by_session: dict[str, list[tuple[int, int, dict[str, Any]]]] = {}
    prefix = total = 0
    for number, data in _lines(path, max_bytes):
        where = f"{path}:{number}"
        sid = _str(data, "session_id", where)
        key = "/".join(str(data[k]) for k in ("project", "session_file") if k in data)
        index = _int(data, "round_index", where)
        size = _int(data, "input_tokens_total", where, low=1)
        cached = _int(data, "prefix_tokens", where)
        if cached > size:
            raise TraceError(
                f"{where}: field 'prefix_tokens' is {cached}, more than input_tokens_total {size}"
            )
        _int(data, "output_tokens", where)
        events = data.get("timing_events", [])
        if not isinstance(events, list):
            raise TraceError(f"{where}: field 'timing_events' must be a list")
        prefix += cached
        total += size
        by_session.setdefault(f"{key}/{sid}" if key else sid, []).append((index, number, data))
    skipped = 0
    starts: dict[str, float | None] = {}
    rows_of: dict[str, list[_Row]] = {}
    openings: dict[str, int] = {}
    for sid, rounds in by_session.items():
        rounds.sort(key=lambda r: (r[0], r[1]))
        rows: list[_Row] = []
        seen: set[int] = set()
        last_end = None
        for index, _, data in rounds:
            if index in seen:
                skipped += 1
                continue
            seen.add(index)
            stamps = [
                s
                for e in data.get("timing_events") or []
                if isinstance(e, dict) and (s := _when(e.get("timestamp"))) is not None
            ]
            begin = min(stamps) if stamps else None
            if not rows:
                starts[sid] = begin
                openings[sid] = data["prefix_tokens"]
            pause = (
                max(0.0, begin - last_end) if begin is not None and last_end is not None else 0.0
            )
            last_end = max(stamps) if stamps else last_end
            first_type = data.get("first_input_event_type")
            kind: StepKind = "tool" if rows and first_type == "tool_result" else "human"
            model = data.get("model") if isinstance(data.get("model"), str) else None
            out = max(1, data["output_tokens"])
            rows.append(_Row(kind, data["input_tokens_total"], out, pause, model))
        rows_of[sid] = rows
    known = [s for s in starts.values() if s is not None]
    origin = min(known) if known else 0.0
    sessions = []
    for sid, rows in rows_of.items():
        arrival = (starts[sid] or origin) - origin
        rows[0] = _Row(rows[0].kind, rows[0].input, rows[0].output, arrival, rows[0].model)
        sessions.append(TracedSession(sid, _plan(rows, openings[sid])))
    sessions.sort(key=lambda s: s.plan[0].pause_s)
    return sessions, (prefix / total if total else None), skipped


# --- AIPerf --------------------------------------------------------------------------------


def _aiperf(
    path: Path, max_bytes: int
) -> tuple[list[TracedSession], list[tuple[int, tuple[int, ...]]]]:
    by_session: dict[str, list[_Row]] = {}
    arrivals: dict[str, float] = {}
    hashed: list[tuple[float, int, tuple[int, ...]]] = []
    for number, data in _lines(path, max_bytes):
        where = f"{path}:{number}"
        sid = _str(data, "session_id", where)
        size = _int(data, "input_length", where, low=1)
        out = max(1, _int(data, "output_length", where))
        delay = _int(data, "delay", where) / 1000 if "delay" in data else 0.0
        rows = by_session.setdefault(sid, [])
        if not rows:
            stamp = _int(data, "timestamp", where) / 1000 if "timestamp" in data else 0.0
            arrivals[sid] = stamp + delay
        at = arrivals[sid] + len(rows)  # order within a session is file order
        if "hash_ids" in data:
            ids = _ids(data, "hash_ids", where)
            blocks = math.ceil(size / AIPERF_BLOCK_TOKENS)
            if len(ids) != blocks:
                raise TraceError(
                    f"{where}: field 'hash_ids' has {len(ids)} ids, but input_length {size} "
                    f"needs ceil({size}/{AIPERF_BLOCK_TOKENS}) = {blocks}"
                )
            hashed.append((at, size, ids))
        pause = arrivals[sid] if not rows else delay
        rows.append(_Row("human", size, out, pause, None))
    sessions = [TracedSession(sid, _plan(rows, 0)) for sid, rows in by_session.items()]
    sessions.sort(key=lambda s: s.plan[0].pause_s)
    hashed.sort(key=lambda h: h[0])
    return sessions, [(size, ids) for _, size, ids in hashed]
