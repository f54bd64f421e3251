"""One turn's request and record, as values: the request body, the TurnRecord derived
from the response, its identity hashes, and the token trace the what-if oracle replays.
Pure: the session (runner/session.py) does the sending.
"""

from __future__ import annotations

import hashlib
import json
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from workloads.core import stats
from workloads.core.agent import Step
from workloads.core.degeneration import degeneration
from workloads.core.tokens import Message
from workloads.model.records import Status, TurnRecord
from workloads.model.scenario import Scenario, nominal
from workloads.model.transcripts import prompt_hash, text_hash
from workloads.wire.client import ChatResponse

__all__ = [
    "Exchange",
    "PromptHasher",
    "RecordHead",
    "TokenTrace",
    "build_body",
    "identity",
    "record_from_response",
    "step_fields",
]

# What was sent and what came back of one turn, for the transcripts: (its record, the
# messages sent, the completion text or None when no reply reached us, each message's
# digest when the sender's PromptHasher kept them, else None).
Exchange = Callable[[TurnRecord, list[Message], str | None, list[str] | None], None]


class PromptHasher:
    """:func:`~workloads.model.transcripts.prompt_hash` of a session's prompts, and the
    transcripts' digest of each message, each prompt costing only its new messages: the
    canonical JSON of a list is ``[`` + its items' canonical JSON joined by ``,`` + ``]``, so
    the sha256 state after the last prompt's messages is carried over (copied) to a prompt
    that starts with them.

    The prefix carried over is checked by content, not by object: each message hashed is
    kept as a snapshot (:func:`_snapshot`), and a message counts as hashed only while it is
    equal to its snapshot, so one changed in place (new content, a tool call appended, a key
    added) is hashed again whatever object it is. The check is cheap because a session's
    history shares its strings from turn to turn and Python compares a string with itself by
    identity: ~0.3 µs a message, where hashing a 2 KB one costs ~16 µs. The same digests, to
    the bit, as ``prompt_hash`` and the transcripts' (tests/runner/test_turn.py); at a
    100K-token history it is O(new) instead of one ``json.dumps`` of ~400 KB with sorted keys
    (~2.5 ms) per turn, and the transcripts reuse the digests (~4 ms more)."""

    def __init__(self) -> None:
        # (the message's snapshot, the state after it, its own digest), the last prompt's
        self._seen: list[tuple[_Snapshot, Any, str]] = []

    def __call__(self, messages: Sequence[Message]) -> str:
        seen = self._seen
        kept = 0
        for message, (snapshot, _, _) in zip(messages, seen, strict=False):
            if not snapshot.matches(message):
                break
            kept += 1
        del seen[kept:]
        state = seen[-1][1] if seen else hashlib.sha256(b"[")
        for message in messages[kept:]:
            data = _canonical(message)
            state = state.copy()
            if seen:
                state.update(b",")
            state.update(data)
            seen.append((_snapshot(message), state, hashlib.sha256(data).hexdigest()))
        whole = state.copy()
        whole.update(b"]")
        return whole.hexdigest()

    @property
    def digests(self) -> list[str]:
        """The last prompt's messages' digests, in order: the names the transcripts give
        them (``sha256`` of each message's canonical JSON)."""
        return [digest for _, _, digest in self._seen]


def _canonical(value: object) -> bytes:
    """model/transcripts' canonical JSON (sorted keys, compact, UTF-8)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """A message as it was hashed: equal to a message later exactly when the two have the
    same canonical JSON."""

    value: object
    plain: bool  # ``value`` is a deep copy of strings and None in dicts and lists

    def matches(self, message: object) -> bool:
        if self.plain:  # Python's equality is JSON's on strings and None (C speed)
            return bool(message == self.value)
        return _frozen(message) == self.value


def _snapshot(message: object) -> _Snapshot:
    copy = _plain_copy(message)
    if copy is not _NOT_PLAIN:
        return _Snapshot(copy, True)
    return _Snapshot(_frozen(message), False)


_NOT_PLAIN = object()


def _plain_copy(value: object) -> object:
    """A deep copy of ``value`` when it holds only strings and None in dicts (string keys)
    and lists, as chat messages do; else ``_NOT_PLAIN``."""
    if type(value) is str or value is None:
        return value
    if type(value) is dict:
        out: dict[str, object] = {}
        for k, v in value.items():
            item = v if type(v) is str else _plain_copy(v)
            if type(k) is not str or item is _NOT_PLAIN:
                return _NOT_PLAIN
            out[k] = item
        return out
    if type(value) is list:
        items = [_plain_copy(v) for v in value]
        return _NOT_PLAIN if any(i is _NOT_PLAIN for i in items) else items
    return _NOT_PLAIN


def _frozen(value: object) -> object:
    """Any other JSON value's snapshot: containers copied, strings and None as they are,
    other scalars tagged by type and ``repr`` (``1``, ``1.0`` and ``True`` are equal in Python,
    not in JSON; nor are ``0.0`` and ``-0.0``). A dict with a key that is not a string (``1``
    and ``True`` are one key to Python, two to JSON) is equal to nothing."""
    if type(value) is str or value is None:
        return value
    if isinstance(value, dict):
        if not all(type(k) is str for k in value):
            return _Unequal()
        return (dict, {k: _frozen(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return (list, [_frozen(v) for v in value])
    return (type(value), repr(value))


class _Unequal:
    """Equal to nothing, itself included (a fresh one each time: containers compare their
    items by identity first)."""

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = None  # type: ignore[assignment]


def identity(
    messages: list[Message], reply: str | None, hasher: PromptHasher | None = None
) -> dict[str, object]:
    """A record's identity fields: prompt and completion hashes, and whether the completion
    is degenerate (None without a reply). ``hasher``: a session's, so a growing history is
    hashed by its new messages only. Pure but for the hasher's state."""
    reason = degeneration(reply) if reply is not None else None
    return {
        "prompt_sha256": prompt_hash(messages) if hasher is None else hasher(messages),
        "completion_sha256": None if reply is None else text_hash(reply),
        "degenerate": None if reply is None else reason is not None,
        "degenerate_reason": reason,
    }


def build_body(
    scenario: Scenario,
    model: str,
    messages: list[Message],
    *,
    output_tokens: int | None = None,
    tools: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The request body for one turn: ``output_tokens`` is the step's (drawn) reply length,
    default the scenario's; ``tools`` go with ``tool_choice: "auto"``."""
    n = nominal(scenario.output_tokens) if output_tokens is None else output_tokens
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": n,
    }
    if tools:
        body["tools"] = tools
        body["tool_choice"] = "auto"
    if scenario.exact_output:
        # Exactly output_tokens, every turn: vLLM and SGLang honour both, llama.cpp ignore_eos.
        body["ignore_eos"] = True
        body["min_tokens"] = n
    body.update(scenario.sampling.model_dump(exclude_none=True))
    body.update(scenario.extra_body)
    return body


@dataclass(frozen=True)
class RecordHead:
    """What a turn's record says before any response: which turn it is, the prompt it was
    configured (and tokenized) to, and how late it was sent. Every record of the turn, a
    cancelled one too, starts from it."""

    repetition: int
    warmup: bool
    session: int
    turn: int
    configured_prior_tokens: int
    configured_prompt_tokens: int | None = None
    tokenized_prompt_tokens: int | None = None
    cell: int = 0
    pacing_lag_ns: int | None = None

    def fields(self) -> dict[str, Any]:
        """The TurnRecord fields it fills."""
        return dict(vars(self))  # flat values: no deep copy (turn-end work is on the loop)


def _rate_after_merged_start(
    completion: int, merged: Sequence[int], content_ns: Sequence[int] | None, last: int
) -> float | None:
    """The decode rate of a reply whose first read merged chunks 0..m after a client stall
    (wire/arrival.py): chunk 0 carries chunk m's stamp, so the span from it is not known,
    but chunk m's is its arrival (a read's stamp is its last byte's). The rate is taken from
    chunk m on: the tokens after it (the completion's, pro rata over the chunks after the
    first) over the time from it to the last chunk. None when the whole reply came in that
    read (no span left)."""
    end = 0
    while end + 1 < len(merged) and merged[end + 1] == merged[end] + 1:
        end += 1
    m = merged[end]  # chunks 0..m came in the first read
    if content_ns is None or m + 1 >= len(content_ns) or completion < 2:
        return None
    span = last - content_ns[m]
    if span <= 0:
        return None
    chunks_after = len(content_ns) - 1 - m
    tokens_after = (completion - 1) * chunks_after / (len(content_ns) - 1)
    return tokens_after / (span / 1e9)


def record_from_response(
    response: ChatResponse,
    head: RecordHead,
    *,
    output_tokens: int,
    exact_output: bool,
    shareable_tokens: int | None,
    shareable_exact: bool,
    step: Step | None = None,
    parent_session: int | None = None,
    tools_offered: bool = False,
    replayed: bool = False,  # a replay's turn: the recorded run sent this very prompt
) -> TurnRecord:
    """Derive a TurnRecord from a ChatResponse. Pure. With exact output a turn is valid at
    exactly ``output_tokens``, finished by length (or by its tool calls, which vLLM reports
    as finish_reason "tool_calls")."""
    figures = response.figures  # the stream's own figures, read once into the record
    usage = figures.usage
    completion = usage.completion_tokens if usage else None
    ttft = None
    if figures.first_content_ns is not None and response.sent_ns is not None:
        ttft = figures.first_content_ns - response.sent_ns
    rate = None
    first, last = figures.first_content_ns, figures.last_content_ns
    merged = figures.merged
    if completion is not None and completion > 1 and first is not None and last is not None:
        rate = (completion - 1) / ((last - first) / 1e9) if last > first else None
    if rate is not None and merged and merged[0] == 0 and last is not None:
        rate = _rate_after_merged_start(completion or 0, merged, figures.content_ns, last)
    status: Status = "ok" if response.ok else "error"
    if response.error_kind == "cancelled":
        status = "incomplete"
    valid = status == "ok" and completion is not None
    if exact_output:
        valid = (
            valid
            and figures.finish_reason in ("length", "tool_calls")
            and completion == output_tokens
        )
    prompt = usage.prompt_tokens if usage else None
    if replayed:  # the whole prompt is shareable (docs/architecture.md, "Shareable prefix")
        shareable_tokens, shareable_exact = prompt, prompt is not None
    if shareable_tokens is not None and prompt is not None:
        shareable_tokens = min(shareable_tokens, prompt)
    return TurnRecord(
        **head.fields(),
        status=status,
        error_kind=response.error_kind,
        error_message=response.error_message,
        http_status=response.http_status,
        finish_reason=figures.finish_reason,
        valid=valid,
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached_tokens=usage.cached_tokens if usage else None,
        shareable_tokens=shareable_tokens,
        shareable_exact=shareable_exact,
        ttft_ns=ttft,
        decode_tokens_per_s=rate,
        started_ns=response.started_ns,
        sent_ns=response.sent_ns,
        headers_ns=response.headers_ns,
        retry_after_s=response.retry_after_s,
        first_content_ns=figures.first_content_ns,
        last_content_ns=figures.last_content_ns,
        done_ns=response.done_ns,
        content_events=figures.content_events,
        chunk_gaps_us=stats.chunk_gaps_us(figures.content_ns, merged),
        merged_chunks=len(merged),
        resends=response.resends,
        request_id=figures.request_id,
        system_fingerprint=figures.system_fingerprint,
        timings=figures.timings,
        error_ns=response.error_ns,
        retries=response.retries,
        attempts=tuple(response.attempts),
        **step_fields(step, parent_session),
        tool_calls=len(figures.tool_calls or ()) if tools_offered else None,
        ttft_content_ns=(
            figures.first_text_ns - response.sent_ns
            if figures.first_text_ns is not None and response.sent_ns is not None
            else None
        ),
    )


def step_fields(step: Step | None, parent_session: int | None) -> dict[str, Any]:
    """A record's fields about its step of the plan (none without one). Pure."""
    if step is None:
        return {"parent_session": parent_session}
    return {
        "step_kind": step.kind,
        "new_tokens": step.new_tokens,
        "output_tokens": step.output_tokens,
        "pause_s": step.pause_s,
        "parent_session": parent_session,
    }


@dataclass
class TokenTrace:
    """One sent turn in the target's token ids: what the what-if cache oracle replays."""

    sent_ns: int
    turn: int
    prompt: array[int]
    completion: array[int] = field(default_factory=lambda: array("i"))
    # In the observed per-turn hit rate too (valid, cached tokens reported, a user's own
    # session's): the oracle's per-turn figures are over the same requests; the others are
    # replayed but not counted.
    counted: bool = True
    # A turn sized by estimate (quiet sizing, or a failed /tokenize call): the messages sent,
    # rendered to ``prompt`` by the target after the window; None once rendered.
    messages: list[Message] | None = None
    reply: str = ""  # the reply text, encoded to ``completion`` when no later turn did
    # A reply with tool calls: its text is the content alone, while the server generated (and
    # cached) the calls' markup too. The oracle then takes the reply as the session's next
    # prompt carries it, this many tokens (usage's completion_tokens): Session.finish_trace.
    calls_tokens: int | None = None
