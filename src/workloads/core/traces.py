"""Recorded traces, read and checked: values in, values out (the runner plays them).

Two formats, both JSON Lines (one object per line; blank lines are skipped):

* **Mooncake** (:func:`load_mooncake`): one request per line — ``timestamp`` (int, ms from
  the trace's start, non-decreasing), ``input_length`` and ``output_length`` (tokens),
  ``hash_ids`` (ints: ids of the prompt's 512-token blocks, the last possibly partial, so
  ``len(hash_ids) == ceil(input_length / 512)``). Requests whose ``hash_ids`` share a prefix
  share exactly those blocks. :func:`ideal_hit_rate` is what an unlimited prefix cache at
  512-token granularity would serve of it.
* **Agent steps** (:func:`load_agent_trace`): one step of a coding agent's session per line —
  ``session``, ``step`` (1-based, consecutive per session, in file order), ``kind``
  ("human" | "tool" | "subagent" | "compaction"), ``appended_tokens``, ``output_tokens``,
  ``pause_s``, and for a sub-agent's session ``parent`` and ``parent_step``. It becomes the
  plans :class:`workloads.core.agent.Step` describes.

A file is read line by line (never whole): larger than ``max_bytes`` it is refused before
reading; past ``max_requests`` requests (or ``max_duration_s`` of trace time) reading stops
and the trace says it was cut (``truncated``). Every problem is one :class:`TraceError`
line naming the file, the line and the field.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from workloads.core.agent import Step
from workloads.model.errors import TraceError
from workloads.model.records import StepKind, TurnRecord

__all__ = [
    "BLOCK_TOKENS",
    "MAX_TRACE_BYTES",
    "MooncakeRequest",
    "MooncakeTrace",
    "ideal_cached_tokens",
    "ideal_hit_rate",
    "load_agent_trace",
    "load_mooncake",
    "observed_hit_rate",
    "trace_format",
]

BLOCK_TOKENS = 512  # a Mooncake hash id stands for this many prompt tokens
MAX_TRACE_BYTES = 1 << 30  # 1 GiB: a longer file is refused, not read
_STEP_KINDS: tuple[StepKind, ...] = ("human", "tool", "subagent", "compaction")


@dataclass(frozen=True, slots=True)
class MooncakeRequest:
    """One request of a Mooncake trace."""

    timestamp_ms: int  # from the trace's start
    input_length: int  # prompt tokens
    output_length: int  # completion tokens
    hash_ids: tuple[int, ...]  # the prompt's 512-token blocks, the last possibly partial


@dataclass(frozen=True, slots=True)
class MooncakeTrace:
    """A Mooncake trace as read: its requests (in file order), the file's name and sha256,
    and whether reading stopped at a limit before the end of the file."""

    path: Path
    sha256: str
    requests: tuple[MooncakeRequest, ...]
    truncated: bool = False
    limit: str | None = None  # which limit cut it ("max_requests = N", "max_duration_s = S")


def _lines(path: Path, max_bytes: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of each non-blank line; TraceError for a bad file or line."""
    try:
        size = path.stat().st_size
    except OSError as err:
        raise TraceError(f"{path}: cannot read it ({err.strerror or err})") from err
    if size > max_bytes:
        raise TraceError(
            f"{path}: {size:,} bytes, over the limit of {max_bytes:,} bytes; cut "
            "the file (e.g. head -n 100000) before replaying it"
        )
    if size == 0:
        raise TraceError(f"{path}: the file is empty (one JSON object per line)")
    seen = False
    with path.open("rb") as f:
        for number, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                data = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                raise TraceError(f"{path}:{number}: not a JSON object ({err})") from err
            if not isinstance(data, dict):
                raise TraceError(f"{path}:{number}: not a JSON object (one per line)")
            seen = True
            yield number, data
    if not seen:
        raise TraceError(f"{path}: no request in it (only blank lines)")


def _int(data: dict[str, Any], name: str, where: str, *, low: int = 0) -> int:
    if name not in data:
        raise TraceError(f"{where}: field '{name}' is missing")
    value = data[name]
    if not isinstance(value, int) or isinstance(value, bool):
        raise TraceError(f"{where}: field '{name}' must be an integer (got {value!r})")
    if value < low:
        raise TraceError(f"{where}: field '{name}' must be at least {low} (got {value})")
    return value


def _float(data: dict[str, Any], name: str, where: str) -> float:
    if name not in data:
        raise TraceError(f"{where}: field '{name}' is missing")
    value = data[name]
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise TraceError(f"{where}: field '{name}' must be a number (got {value!r})")
    if value < 0:
        raise TraceError(f"{where}: field '{name}' must be at least 0 (got {value})")
    return float(value)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def trace_format(
    path: str | Path, *, max_bytes: int = MAX_TRACE_BYTES
) -> Literal["mooncake", "agent"]:
    """Which format ``path`` holds, from its first object's fields: ``hash_ids`` →
    "mooncake", ``session`` and ``step`` → "agent"."""
    p = Path(path)
    for number, data in _lines(p, max_bytes):
        if "hash_ids" in data:
            return "mooncake"
        if "session" in data and "step" in data:
            return "agent"
        raise TraceError(
            f"{p}:{number}: not a trace line: a Mooncake request has 'timestamp', "
            "'input_length', 'output_length' and 'hash_ids'; an agent step has 'session', "
            "'step', 'kind', ..."
        )
    raise AssertionError("unreachable")  # _lines raises for a file without objects


def load_mooncake(
    path: str | Path,
    *,
    max_requests: int = 100_000,
    max_duration_s: float | None = None,
    max_bytes: int = MAX_TRACE_BYTES,
) -> MooncakeTrace:
    """Read and check a Mooncake trace (see the module docstring), line by line.

    Reading stops after ``max_requests`` requests, or at the first request later than
    ``max_duration_s`` seconds of trace time; the trace is then ``truncated``.

        trace = load_mooncake("traces/mooncake-sample.jsonl")
        print(len(trace.requests), ideal_hit_rate(trace.requests))
    """
    p = Path(path)
    requests: list[MooncakeRequest] = []
    last = 0
    limit = None
    for number, data in _lines(p, max_bytes):
        where = f"{p}:{number}"
        if len(requests) >= max_requests:
            limit = f"max_requests = {max_requests}"
            break
        timestamp = _int(data, "timestamp", where)
        if timestamp < last:
            raise TraceError(
                f"{where}: field 'timestamp' goes back in time ({timestamp} after {last}); "
                "a trace's timestamps must not decrease (sort it by timestamp)"
            )
        if max_duration_s is not None and timestamp > max_duration_s * 1000:
            limit = f"max_duration_s = {max_duration_s:g}"
            break
        last = timestamp
        input_length = _int(data, "input_length", where, low=1)
        output_length = _int(data, "output_length", where, low=1)
        if "hash_ids" not in data:
            raise TraceError(f"{where}: field 'hash_ids' is missing")
        ids = data["hash_ids"]
        if not isinstance(ids, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in ids
        ):
            raise TraceError(f"{where}: field 'hash_ids' must be a list of integers")
        blocks = -(-input_length // BLOCK_TOKENS)
        if len(ids) != blocks:
            raise TraceError(
                f"{where}: field 'hash_ids' has {len(ids)} ids, but input_length "
                f"{input_length} needs ceil({input_length}/{BLOCK_TOKENS}) = {blocks}"
            )
        requests.append(MooncakeRequest(timestamp, input_length, output_length, tuple(ids)))
    return MooncakeTrace(
        path=p,
        sha256=_sha256(p),
        requests=tuple(requests),
        truncated=limit is not None,
        limit=limit,
    )


def ideal_cached_tokens(requests: Sequence[MooncakeRequest]) -> list[int]:
    """Per request, in order: the tokens an unlimited prefix cache of 512-token blocks
    would serve — its leading hash ids that any earlier request also had, × 512, capped at
    its input_length. Pure."""
    seen: set[int] = set()
    out: list[int] = []
    for request in requests:
        hits = 0
        for block in request.hash_ids:
            if block not in seen:
                break
            hits += 1
        out.append(min(hits * BLOCK_TOKENS, request.input_length))
        seen.update(request.hash_ids)
    return out


def ideal_hit_rate(requests: Sequence[MooncakeRequest]) -> float | None:
    """Σ ideal cached tokens / Σ input tokens over ``requests`` (token-weighted; None
    without requests). Pure."""
    total = sum(r.input_length for r in requests)
    if total == 0:
        return None
    return sum(ideal_cached_tokens(requests)) / total


def observed_hit_rate(records: Iterable[TurnRecord]) -> float | None:
    """Σ cached_tokens / Σ prompt_tokens over the valid measured records that report both
    (None: none does). Pure."""
    cached = prompt = 0
    for r in records:
        if r.warmup or not r.valid or r.cached_tokens is None or not r.prompt_tokens:
            continue
        cached += r.cached_tokens
        prompt += r.prompt_tokens
    return cached / prompt if prompt else None


# --- agent traces ------------------------------------------------------------------------


@dataclass
class _Session:
    """An agent trace's session while it is read."""

    lines: list[int] = field(default_factory=list)  # the line of each step
    rows: list[tuple[StepKind, int, int, float]] = field(default_factory=list)
    parent: tuple[int, int] | None = None  # (parent session, parent step)


def load_agent_trace(
    path: str | Path,
    opening_tokens: int,
    *,
    system_tokens: int | None = None,
    max_steps: int = 100_000,
    max_bytes: int = MAX_TRACE_BYTES,
) -> dict[int, tuple[Step, ...]]:
    """Read and check an agent trace (see the module docstring): the plans of its top-level
    sessions, by session id, each step's sub-agents in :attr:`Step.children`.

    ``prior_tokens`` of a step is ``opening_tokens`` plus Σ(appended + output) of the earlier
    steps of its session; after a compaction step the context is the system message plus
    the compaction's reply (its summary, in its message's framing), so the next step's
    prior is ``system_tokens + output_tokens + 8`` of the compaction, as a drawn plan's
    (:func:`workloads.core.agent.draw_plan`). A sub-agent's session starts from its
    parent's system message (``system_tokens``), as the runner plays it. ``system_tokens``
    defaults to ``opening_tokens`` (an opening that is all system message); the runner
    passes the scenario's ``shared_prefix_tokens``, as drawn plans count it. Its
    ``parent_step`` is the parent's step whose tool result the
    sub-agents' final replies are: they run before it (so that step is its "tool" step).

        plans = load_agent_trace("traces/agent-sample.jsonl", opening_tokens=8192)
    """
    p = Path(path)
    sessions: dict[int, _Session] = {}
    for steps, (number, data) in enumerate(_lines(p, max_bytes), 1):
        where = f"{p}:{number}"
        if steps > max_steps:
            raise TraceError(f"{where}: more than {max_steps:,} steps (the limit); cut the file")
        sid = _int(data, "session", where)
        step = _int(data, "step", where, low=1)
        kind = data.get("kind")
        if "kind" not in data:
            raise TraceError(f"{where}: field 'kind' is missing")
        if kind not in _STEP_KINDS:
            raise TraceError(
                f"{where}: field 'kind' must be one of {', '.join(_STEP_KINDS)} (got {kind!r})"
            )
        appended = _int(data, "appended_tokens", where)
        output = _int(data, "output_tokens", where, low=1)
        pause = _float(data, "pause_s", where)
        session = sessions.setdefault(sid, _Session())
        expected = len(session.rows) + 1
        if step != expected:
            raise TraceError(
                f"{where}: field 'step' is {step}; session {sid}'s next step is "
                f"{expected} (steps are 1-based and consecutive, in file order)"
            )
        has_parent = "parent" in data or "parent_step" in data
        if has_parent:
            parent = (_int(data, "parent", where), _int(data, "parent_step", where, low=1))
            if step == 1:
                session.parent = parent
            elif parent != session.parent:
                raise TraceError(
                    f"{where}: field 'parent' differs from session {sid}'s "
                    f"step 1 ({session.parent})"
                )
        if kind == "subagent" and step == 1 and not has_parent:
            raise TraceError(
                f"{where}: field 'parent' is missing (a sub-agent's step 1 "
                "names its parent session and parent_step)"
            )
        if kind == "subagent" and session.parent is None:
            raise TraceError(
                f"{where}: field 'kind' is 'subagent', but session {sid} has no "
                "parent (its step 1 must be a subagent step with parent)"
            )
        if step == 1 and session.parent is not None and kind != "subagent":
            raise TraceError(
                f"{where}: field 'kind' must be 'subagent' for a sub-agent's "
                "step 1 (it has a parent)"
            )
        session.lines.append(number)
        session.rows.append((kind, appended, output, pause))
    system = opening_tokens if system_tokens is None else system_tokens
    return _plans(p, sessions, opening_tokens, system)


def _plans(
    path: Path, sessions: dict[int, _Session], opening_tokens: int, system: int
) -> dict[int, tuple[Step, ...]]:
    """The sessions' plans, sub-agents nested under their parents' steps."""
    children: dict[tuple[int, int], list[int]] = {}
    for sid, session in sessions.items():
        if session.parent is None:
            continue
        parent, parent_step = session.parent
        where = f"{path}:{session.lines[0]}"
        if parent == sid or parent not in sessions:
            raise TraceError(
                f"{where}: field 'parent' is {parent}, not another session of the trace"
            )
        if parent_step > len(sessions[parent].rows):
            raise TraceError(
                f"{where}: field 'parent_step' is {parent_step}, but session "
                f"{parent} has {len(sessions[parent].rows)} steps"
            )
        children.setdefault(session.parent, []).append(sid)
    for sid, session in sessions.items():  # a chain of parents must end at a top session
        above, hops = session.parent, 0
        while above is not None and hops <= len(sessions):
            above, hops = sessions[above[0]].parent, hops + 1
        if hops > len(sessions):
            raise TraceError(
                f"{path}:{session.lines[0]}: field 'parent': session {sid}'s parents form a cycle"
            )

    def plan(sid: int) -> tuple[Step, ...]:
        out: list[Step] = []
        # The runner plays a sub-agent from its parent's system message, and a compaction
        # leaves the system message and the summary (its message's template framing, 8
        # tokens: core/agent.py's _SUMMARY_FRAMING): the loader counts as the runner sends.
        prior = system if sessions[sid].parent is not None else opening_tokens
        for turn, (kind, appended, output, pause) in enumerate(sessions[sid].rows, 1):
            nested = tuple(plan(c) for c in sorted(children.get((sid, turn), [])))
            out.append(
                Step(
                    turn=turn,
                    kind=kind,
                    new_tokens=appended,
                    output_tokens=output,
                    pause_s=pause,
                    prior_tokens=prior,
                    children=nested,
                )
            )
            prior = system + output + 8 if kind == "compaction" else (prior + appended + output)
        return tuple(out)

    return {sid: plan(sid) for sid in sorted(sessions) if sessions[sid].parent is None}
