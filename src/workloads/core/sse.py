"""Incremental Server-Sent Events decoder: bytes in, events out. Pure; no I/O, no clock.

Framing follows the WHATWG EventSource rules: lines end in CRLF, LF or CR; ``data:`` lines
of one event are joined with LF; a blank line dispatches the event; lines starting with
``:`` are comments. We frame from raw chunks rather than ``StreamReader.readline`` because
readline's line cap breaks on large events (a usage chunk with long token arrays), and
because a chunk boundary may fall anywhere — inside a UTF-8 sequence or between CR and LF.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass

__all__ = ["SSEDecoder", "ServerSentEvent"]


@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    """One dispatched event: its ``data`` (lines joined with LF) and optional ``event`` name."""

    data: str
    event: str | None = None


class SSEDecoder:
    """Feed it bytes as they arrive; it returns the events each chunk completes.

        decoder = SSEDecoder()
        for chunk in chunks:
            for event in decoder.feed(chunk):
                ...
        leftover = decoder.close()   # an event the stream ended without dispatching
    """

    def __init__(self) -> None:
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""
        self._pending_cr = False  # the last chunk ended in CR: a following LF is the same break
        self._data: list[str] = []
        self._event: str | None = None

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """Decode ``chunk`` and return every event it completes, in order."""
        text = self._text.decode(chunk)
        if not text:
            return []
        if self._pending_cr and text.startswith("\n"):
            text = text[1:]
        self._pending_cr = text.endswith("\r")
        self._buffer += text
        events: list[ServerSentEvent] = []
        lines = self._buffer.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        self._buffer = lines.pop()  # the unterminated tail waits for more bytes
        for line in lines:
            event = self._line(line)
            if event is not None:
                events.append(event)
        return events

    def close(self) -> list[ServerSentEvent]:
        """End of stream: flush a final line and an event left without its blank line."""
        tail = self._buffer + self._text.decode(b"", final=True)
        self._buffer = ""
        events: list[ServerSentEvent] = []
        if tail:
            event = self._line(tail)
            if event is not None:
                events.append(event)
        event = self._line("")
        if event is not None:
            events.append(event)
        return events

    def _line(self, line: str) -> ServerSentEvent | None:
        if not line:
            if not self._data:
                self._event = None
                return None
            event = ServerSentEvent("\n".join(self._data), self._event)
            self._data = []
            self._event = None
            return event
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        return None  # id and retry do not matter to a chat completion stream
