"""Incremental Server-Sent Events decoder: bytes in, events out. Pure; no I/O, no clock.

Framing follows the WHATWG EventSource rules: lines end in CRLF, LF or CR; a UTF-8 BOM at the
start of the stream is dropped; ``data:`` lines of one event are joined with LF; a blank line
dispatches the event; lines starting with ``:`` are comments; ``event``, ``id`` and ``retry``
are kept, other fields ignored. We frame from raw chunks rather than ``StreamReader.readline``
because readline's line cap breaks on large events (a usage chunk with long token arrays), and
because a chunk boundary may fall anywhere — inside a UTF-8 sequence or between CR and LF.

The decoder works on bytes and is linear in the bytes received however they are chunked: an
unterminated line is kept as a list of pieces and joined once, when its end arrives (joining
the buffer on every read made a 2 MB event in 1 KiB reads cost seconds). Splitting on bytes is
safe because CR and LF never occur inside a multi-byte UTF-8 sequence; text is decoded once
per field value, so a character split across reads is whole again.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Fields", "SSEDecoder", "ServerSentEvent"]

BOM = b"\xef\xbb\xbf"
Fields = tuple[bytes, str | None, str, int | None]  # an event's raw data, event, id, retry_ms


@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    """One dispatched event: ``raw`` is its data (lines joined with LF) as received.

    ``event`` is the event name (None for the default, "message"), ``id`` the last event id
    seen so far in the stream ("" when none), ``retry_ms`` the last valid ``retry`` field.
    """

    raw: bytes
    event: str | None = None
    id: str = ""
    retry_ms: int | None = None

    @property
    def data(self) -> str:
        """The data as text (invalid UTF-8 replaced, never an exception)."""
        return self.raw.decode("utf-8", "replace")


class SSEDecoder:
    """Feed it bytes as they arrive; it returns the events each chunk completes.

    decoder = SSEDecoder()
    for chunk in chunks:
        for event in decoder.feed(chunk):
            ...
    leftover = decoder.close()   # an event the stream ended without dispatching
    """

    __slots__ = ("_data", "_event", "_head", "_id", "_pending", "_pending_cr", "_retry")

    def __init__(self) -> None:
        self._head: bytes | None = b""  # the stream's first bytes until the BOM is ruled out
        self._pending: list[bytes] = []  # pieces of the line not yet terminated
        self._pending_cr = False  # the last chunk ended in CR: a leading LF is the same break
        self._data: list[bytes] = []
        self._event: str | None = None
        self._id = ""
        self._retry: int | None = None

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """Decode ``chunk`` and return every event it completes, in order."""
        return [ServerSentEvent(*fields) for fields in self.feed_fields(chunk)]

    def feed_fields(self, chunk: bytes) -> list[Fields]:
        """:meth:`feed` without the event objects: ``(raw, event, id, retry_ms)`` tuples."""
        if self._head is not None:
            chunk = self._strip_bom(chunk)
        events, chunk = self._open_event(chunk)
        if not chunk:
            return events
        blocks = chunk.split(b"\n\n")
        tail = blocks.pop()
        for block in blocks:
            if block.startswith(b"data: ") and b"\n" not in block:
                events.append((block[6:], None, self._id, self._retry))
            else:
                events += self._feed_lines(block + b"\n\n")
        if tail:
            events += self._feed_lines(tail)
        return events

    def feed_data(self, chunk: bytes) -> tuple[list[Fields], list[bytes]]:
        """:meth:`feed_fields` for a hot path that reads a few hundred thousand events a
        second: ``(fields, plain)``, the events ``chunk`` completes, ``fields`` first, then
        ``plain``: the data of events that are one ``data: `` line each (default event
        name, id and retry as before them), as bytes, without a Python step per event."""
        if self._head is not None:
            chunk = self._strip_bom(chunk)
        # The usual read: whole "data: " events, nothing pending. The pieces between the
        # "\n\ndata: " separators are the events exactly when the read holds no other LF
        # (counted in C) and no CR.
        if (
            chunk[:6] == b"data: "
            and chunk[-2:] == b"\n\n"
            and not self._pending
            and not self._data
            and self._event is None
            and not self._pending_cr
            and b"\r" not in chunk
        ):
            plain = chunk[6:-2].split(b"\n\ndata: ")
            if chunk.count(b"\n") == 2 * len(plain):
                return [], plain
        events, chunk = self._open_event(chunk)
        if not chunk:
            return events, []
        blocks = chunk.split(b"\n\n")
        tail = blocks.pop()
        end = len(chunk) - len(tail)
        # Every block is one "data: " line exactly when the LFs before the tail are only the
        # blank-line pairs and each pair is followed by "data: " (counted in C: a JSON
        # string never holds a raw LF, so these counts cannot be fooled by content).
        if (
            blocks
            and chunk.startswith(b"data: ")
            and chunk.count(b"\n", 0, end) == 2 * len(blocks)
            and chunk.count(b"\n\ndata: ", 0, end) == len(blocks) - 1
        ):
            plain = [block[6:] for block in blocks]
            if tail:
                self._feed_lines(tail)  # completes no event: no blank line in it
            return events, plain
        for block in blocks:
            events += self._feed_lines(block + b"\n\n")
        if tail:
            events += self._feed_lines(tail)
        return events, []

    def _open_event(self, chunk: bytes) -> tuple[list[Fields], bytes]:
        """Decode, line by line, what ``chunk`` holds of an event in progress (or all of it
        when it has CRs): ``(events, rest)``, ``rest`` starting at a clean event boundary.
        With LF line ends only (every inference server), a blank line leaves no line
        pending and no event half read, so the rest can be cut at blank lines."""
        if not chunk or self._pending_cr or b"\r" in chunk:
            return self._feed_lines(chunk), b""
        if self._pending or self._data or self._event is not None:
            end = chunk.find(b"\n\n")
            if end < 0:
                return self._feed_lines(chunk), b""
            return self._feed_lines(chunk[: end + 2]), chunk[end + 2 :]
        return [], chunk

    def _feed_lines(self, chunk: bytes) -> list[Fields]:
        """Decode ``chunk`` line by line (any line ends, any state)."""
        if not chunk:
            return []
        if self._pending_cr:
            self._pending_cr = False
            if chunk[0] == 10:  # b"\n"
                chunk = chunk[1:]
                if not chunk:
                    return []
        if b"\r" in chunk:
            self._pending_cr = chunk[-1] == 13  # b"\r"
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = chunk.split(b"\n")
        tail = lines.pop()
        if not lines:  # no line ended in this chunk
            if tail:
                self._pending.append(tail)
            return []
        if self._pending:
            self._pending.append(lines[0])
            lines[0] = b"".join(self._pending)
            self._pending = [tail] if tail else []
        elif tail:
            self._pending = [tail]
        events: list[Fields] = []
        data = self._data
        for line in lines:
            if line[:6] == b"data: ":  # the common line, inlined: the hot path of a stream
                data.append(line[6:])
            elif line:
                self._field(line)
            elif data:
                events.append(self._dispatch())
                data = self._data
            else:
                self._event = None
        return events

    def close(self) -> list[ServerSentEvent]:
        """End of stream: flush a final line and an event left without its blank line."""
        if self._head:  # a stream shorter than a BOM: its bytes are data, not a BOM
            head, self._head = self._head, None
            self._pending.append(head)
        if self._pending:
            line = b"".join(self._pending)
            self._pending = []
            self._field(line)
        if self._data:
            return [ServerSentEvent(*self._dispatch())]
        return []

    def _strip_bom(self, chunk: bytes) -> bytes:
        assert self._head is not None
        head = self._head + chunk
        if len(head) < len(BOM) and BOM.startswith(head):
            self._head = head  # could still be a BOM: wait for more
            return b""
        self._head = None
        return head[len(BOM) :] if head.startswith(BOM) else head

    def _dispatch(self) -> Fields:
        raw = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
        event = (raw, self._event, self._id, self._retry)
        self._data = []
        self._event = None
        return event

    def _field(self, line: bytes) -> None:
        if line[0] == 58:  # b":": a comment (keep-alives)
            return
        name, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace") or None
        elif name == b"id":
            if b"\x00" not in value:
                self._id = value.decode("utf-8", "replace")
        elif name == b"retry" and value.isdigit():
            self._retry = int(value)
