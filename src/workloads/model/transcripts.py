"""Transcripts: the exact request messages and the full completion text of every turn,
appended and flushed per turn to ``DIR/transcripts.jsonl`` beside records.jsonl.

Content-addressed, so a long history does not cost its whole length on every turn: each
distinct message is written once, as ``{"sha256": H, "message": {...}}`` the first time it
is seen, and each turn is one line naming its messages by hash::

    {"sha256": "9f…", "message": {"role": "system", "content": "…"}}
    {"turn": {"cell": 0, "repetition": 1, "warmup": false, "session": 0, "turn": 2,
              "prompt_sha256": "…", "messages": ["9f…", "1c…", …],
              "completion_sha256": "…", "completion": "4a…"}}

The completion is stored as an assistant message (so the next turn, which sends it back in
its history, reuses the line). ``prompt_sha256`` is :func:`prompt_hash` of the messages sent;
TurnRecords carry it and ``completion_sha256`` even when transcripts are off.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workloads.model.errors import ResultFormatError
from workloads.model.records import JsonlWriter

__all__ = [
    "TRANSCRIPTS_FILE",
    "Transcript",
    "TranscriptWriter",
    "prompt_hash",
    "read_transcripts",
    "text_hash",
]

TRANSCRIPTS_FILE = "transcripts.jsonl"

TurnKey = tuple[int, int, int, int]  # (cell, repetition, session, turn)


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def prompt_hash(messages: Sequence[dict[str, Any]]) -> str:
    """sha256 of a request's messages as canonical JSON: equal exactly when the prompts are
    byte-identical."""
    return hashlib.sha256(_canonical(list(messages))).hexdigest()


def text_hash(text: str) -> str:
    """sha256 of a completion's text (UTF-8)."""
    return hashlib.sha256(text.encode()).hexdigest()


def _message_hash(message: dict[str, Any]) -> str:
    return hashlib.sha256(_canonical(message)).hexdigest()


@dataclass(frozen=True)
class Transcript:
    """One turn as sent and received."""

    cell: int
    repetition: int
    warmup: bool
    session: int
    turn: int
    messages: list[dict[str, Any]]
    completion: str | None  # None: no reply reached us
    prompt_sha256: str
    completion_sha256: str | None


class TranscriptWriter(JsonlWriter):
    """Appends turns to a transcripts file, each distinct message once, flushing per turn. A
    turn and the new messages it names go out in one write, so a failed write (a full disk)
    leaves the file ending with the previous whole turn."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._seen: set[str] = set()

    def _store(self, message: dict[str, Any], digest: str | None = None) -> str:
        if digest is None:
            digest = _message_hash(message)
        if digest not in self._seen:
            self._seen.add(digest)
            self._append(
                json.dumps({"sha256": digest, "message": dict(message)}, ensure_ascii=False),
                flush=False,
            )  # the turn line that names it flushes
        return digest

    def write(
        self,
        *,
        cell: int,
        repetition: int,
        warmup: bool,
        session: int,
        turn: int,
        messages: Sequence[dict[str, Any]],
        completion: str | None,
        prompt_sha256: str | None = None,
        digests: Sequence[str] | None = None,
    ) -> None:
        """Append one turn (its new messages first, then the turn line) and flush.

        ``prompt_sha256`` (:func:`prompt_hash` of ``messages``) and ``digests`` (each
        message's sha256, as this file names them) when the caller has them already: a
        session's record carries the one and its hasher kept the other
        (runner/turn.PromptHasher), so a long history is not serialised and hashed again
        here (~4 ms a turn at 100K tokens)."""
        if digests is None:
            digests = [_message_hash(m) for m in messages]
        elif len(digests) != len(messages):
            raise ValueError(f"{len(digests)} digests for {len(messages)} messages")
        names = [self._store(m, d) for m, d in zip(messages, digests, strict=True)]
        reply = None
        if completion is not None:
            reply = self._store({"role": "assistant", "content": completion})
        line = {
            "cell": cell,
            "repetition": repetition,
            "warmup": warmup,
            "session": session,
            "turn": turn,
            "prompt_sha256": prompt_hash(messages) if prompt_sha256 is None else prompt_sha256,
            "messages": names,
            "completion_sha256": None if completion is None else text_hash(completion),
            "completion": reply,
        }
        self._append(json.dumps({"turn": line}))


def read_transcripts(path: Path) -> dict[TurnKey, Transcript]:
    """Every turn of a transcripts file by (cell, repetition, session, turn). A torn last line
    (a crash mid-write) is skipped; a message a turn names but the file lacks is an error."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError as err:
        raise ResultFormatError(
            f"{path}: no transcripts (was the run made with transcripts=False, or before "
            "workloads wrote them?)"
        ) from err
    store: dict[str, dict[str, Any]] = {}
    out: dict[TurnKey, Transcript] = {}
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            item = json.loads(text)
        except json.JSONDecodeError as err:
            if number == len(lines):
                break
            raise ResultFormatError(f"{path}:{number}: not JSON: {err}") from err
        if "message" in item:
            store[item["sha256"]] = item["message"]
            continue
        t = item["turn"]
        try:
            messages = [store[h] for h in t["messages"]]
            reply = store[t["completion"]]["content"] if t["completion"] else None
        except KeyError as err:
            raise ResultFormatError(
                f"{path}:{number}: names message {err} not stored before it"
            ) from err
        key = (t["cell"], t["repetition"], t["session"], t["turn"])
        out[key] = Transcript(
            cell=t["cell"],
            repetition=t["repetition"],
            warmup=t["warmup"],
            session=t["session"],
            turn=t["turn"],
            messages=messages,
            completion=reply,
            prompt_sha256=t["prompt_sha256"],
            completion_sha256=t["completion_sha256"],
        )
    return out
