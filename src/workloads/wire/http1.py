"""An HTTP/1.1 response, parsed from raw reads: status line, headers, then the body framing
(chunked transfer coding, Content-Length, or until the connection closes). Pure: bytes in,
body bytes out; no I/O, no clock.

The streaming chat client (:mod:`workloads.wire.stream`) feeds it every read of the socket
as it arrives and passes the body bytes straight on to the SSE decoder. Written for that hot
path: a read that carries a hundred small HTTP chunks is unframed in one pass over the
buffer, and their payloads are joined once (aiohttp's ``StreamReader`` kept each chunk as a
separate buffer entry and paid several Python calls per chunk to hand them back).

Framing follows RFC 9112: a 1xx response before the real one is skipped; 204 and 304 have no
body; Transfer-Encoding wins over Content-Length (and then the connection is not reused);
chunk extensions and trailer fields are read and ignored; anything else that does not parse
raises :class:`MalformedHTTP` (the client's ``malformed`` kind).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MAX_HEAD_BYTES", "MalformedHTTP", "ResponseHead", "ResponseParser"]

MAX_HEAD_BYTES = 64 * 1024  # status line + headers (aiohttp's limit is 8190 per line)
MAX_LINE_BYTES = 64 * 1024  # a chunk-size line with its extensions, or one trailer field
BULK_BYTES = 1024  # a read longer than this may hold many chunks: try them in bulk
HEX = b"0123456789abcdefABCDEF"
CRLF = b"\r\n"
# Parser states.
_HEAD, _SIZE, _DATA, _DATA_END, _TRAILER, _LENGTH, _UNTIL_CLOSE, _DONE = range(8)


class MalformedHTTP(ValueError):
    """The bytes are not an HTTP/1.x response (or its body framing is broken)."""


@dataclass(frozen=True, slots=True)
class ResponseHead:
    """Status line and headers. ``headers`` maps lower-case names to values (repeated
    fields joined with ", "); ``keep_alive`` says whether the connection may carry another
    request once this body has ended."""

    version: str
    status: int
    reason: str
    headers: dict[str, str]
    keep_alive: bool

    def header(self, name: str) -> str | None:
        """A header's value by lower-case name, or None."""
        return self.headers.get(name)


class ResponseParser:
    """Feed it every read of one response; it returns the body bytes each read carried.

        parser = ResponseParser()
        body = parser.feed(read)       # b"" until the head is complete; then body bytes
        if parser.head is not None: ...   # status and headers, once complete
        if parser.complete: ...           # the body has ended; parser.extra = bytes after it
        parser.eof()                      # the connection closed: True if that ends the body

    Raises :class:`MalformedHTTP`. (No HEAD requests: this client sends POSTs only.)
    """

    __slots__ = (
        "_buf", "_remaining", "_state", "complete", "error", "extra", "head", "informational",
    )

    def __init__(self) -> None:
        self._state = _HEAD
        self._buf = b""  # bytes of an unfinished head, size line, or chunk end
        self._remaining = 0  # bytes of the current chunk or Content-Length body still due
        self.head: ResponseHead | None = None
        self.informational = 0  # 1xx responses skipped
        self.complete = False
        self.extra = b""  # bytes that arrived after the end of this response
        # Broken framing found after some body in the same read: that body is returned
        # first (what arrived before the fault is measured), then this says why it stopped.
        self.error: MalformedHTTP | None = None

    def feed(self, data: bytes) -> bytes:
        """The body bytes in ``data`` (chunk framing removed), in order."""
        if self.error is not None:
            raise self.error
        if self._buf:
            data = self._buf + data
            self._buf = b""
        state = self._state
        if state == _HEAD:
            data = self._feed_head(data)
            state = self._state
            if state == _HEAD or not data:
                return b""
        if state == _LENGTH:
            return self._feed_length(data)
        if state == _UNTIL_CLOSE:
            return data
        if state == _DONE:
            self.extra += data
            return b""
        parts: list[bytes] = []
        try:
            self._feed_chunked(data, parts)
        except MalformedHTTP as err:
            if not parts:
                raise
            self.error = err
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def eof(self) -> bool:
        """The connection closed. True when that is the end of a complete response (a body
        delimited by the close, or one already complete); False when it cut one short."""
        if self._state == _UNTIL_CLOSE:
            self._state = _DONE
            self.complete = True
        return self.complete

    # --- the head ------------------------------------------------------------------------

    def _feed_head(self, data: bytes) -> bytes:
        for _ in range(100):  # bounded: at most this many 1xx responses before the real one
            if len(data) >= 5 and not data.startswith(b"HTTP/"):
                raise MalformedHTTP(f"not an HTTP response: {data[:40]!r}")
            end = data.find(b"\r\n\r\n")
            if end < 0:
                if len(data) > MAX_HEAD_BYTES:
                    raise MalformedHTTP(f"response head over {MAX_HEAD_BYTES} bytes")
                self._buf = data
                return b""
            head = _parse_head(data[:end])
            data = data[end + 4 :]
            if 100 <= head.status < 200:
                if head.status == 101:
                    raise MalformedHTTP("101 Switching Protocols: not an HTTP/1.1 response")
                self.informational += 1
                continue
            self.head = head
            self._start_body(head)
            return data
        raise MalformedHTTP("more than 100 informational (1xx) responses")

    def _start_body(self, head: ResponseHead) -> None:
        headers = head.headers
        coding = headers.get("transfer-encoding")
        length = headers.get("content-length")
        if head.status in (204, 304):
            self._finish()
        elif coding is not None:
            if coding.rsplit(",", 1)[-1].strip().lower() == "chunked":
                self._state = _SIZE
            else:  # a coding without chunked last: the body ends with the connection
                self._state = _UNTIL_CLOSE
            if length is not None:  # both: a request-smuggling shape; never reuse it
                self.head = _closing(head)
        elif length is not None:
            values = {v.strip() for v in length.split(",")}
            value = values.pop() if len(values) == 1 else ""
            if not value.isdigit() or not value.isascii():
                raise MalformedHTTP(f"bad Content-Length: {length!r}")
            self._remaining = int(value)
            self._state = _LENGTH
            if self._remaining == 0:
                self._finish()
        else:
            self._state = _UNTIL_CLOSE
            self.head = _closing(head)

    def _finish(self) -> None:
        self._state = _DONE
        self.complete = True

    # --- bodies ----------------------------------------------------------------------------

    def _feed_length(self, data: bytes) -> bytes:
        remaining = self._remaining
        if len(data) < remaining:
            self._remaining = remaining - len(data)
            return data
        self._remaining = 0
        self.extra += data[remaining:]
        self._finish()
        return data[:remaining]

    def _feed_chunked(self, data: bytes, parts: list[bytes]) -> None:
        """Unframe every whole chunk in ``data`` into ``parts``; keep a partial size line or
        chunk end for the next read."""
        state = self._state
        remaining = self._remaining
        pos = 0
        size = len(data)
        find = data.find
        startswith = data.startswith
        bulk = size > BULK_BYTES
        while pos < size:
            if state == _DATA:
                end = pos + remaining
                if end > size:  # the chunk goes on in the next read
                    parts.append(data[pos:] if pos else data)
                    remaining = end - size
                    pos = size
                    break
                parts.append(data[pos:end])
                pos = end
                remaining = 0
                state = _DATA_END
            if state == _DATA_END:
                if startswith(CRLF, pos):
                    pos += 2
                    state = _SIZE
                elif size - pos < 2 and CRLF.startswith(data[pos:]):
                    break  # the CRLF is split across reads
                else:
                    raise MalformedHTTP(f"chunk not followed by CRLF: {data[pos:pos + 20]!r}")
            elif state == _SIZE:
                if bulk:  # once per read: the whole chunks from here, unframed in C
                    bulk = False
                    pos = _whole_chunks(data, pos, parts)
                    continue
                eol = find(CRLF, pos)
                if eol < 0:
                    if size - pos > MAX_LINE_BYTES:
                        raise MalformedHTTP(f"chunk-size line over {MAX_LINE_BYTES} bytes")
                    break
                line = data[pos:eol]
                known = _SIZES.get(line)
                remaining = _chunk_size(line) if known is None else known
                pos = eol + 2
                state = _DATA if remaining else _TRAILER
            elif state == _TRAILER:
                eol = find(CRLF, pos)
                if eol < 0:
                    if size - pos > MAX_LINE_BYTES:
                        raise MalformedHTTP(f"trailer field over {MAX_LINE_BYTES} bytes")
                    break
                if eol == pos:  # the blank line: the body has ended
                    pos += 2
                    self._state = _DONE
                    self.complete = True
                    self.extra += data[pos:]
                    self._remaining = 0
                    return
                pos = eol + 2  # a trailer field: read, not kept
        self._state = state
        self._remaining = remaining
        if pos < size:
            self._buf = data[pos:]


def _whole_chunks(data: bytes, pos: int, parts: list[bytes]) -> int:
    """Unframe the run of whole chunks from ``pos`` without a Python step per chunk: split
    at every CRLF, pair the pieces up as (size line, payload), and take the longest run of
    pairs whose sizes were seen before and equal their payloads' lengths. Returns where the
    run ends, for the chunk-by-chunk loop to go on from (a payload holding a CRLF, a new
    size, an extension, the last chunk)."""
    pieces = (data[pos:] if pos else data).split(CRLF)
    whole = (len(pieces) - 1) // 2  # each whole chunk is followed by its CRLF
    if whole < 2:
        return pos
    sizes = pieces[0 : 2 * whole : 2]
    payloads = pieces[1 : 2 * whole : 2]
    known = list(map(_SIZES.get, sizes))
    lengths = list(map(len, payloads))
    if known != lengths:  # the longest agreeing prefix, by bisection on C list compares
        low, high = 0, whole - 1
        while low < high:
            middle = (low + high + 1) // 2
            if known[:middle] == lengths[:middle]:
                low = middle
            else:
                high = middle - 1
        if low == 0:
            return pos
        whole = low
        sizes = sizes[:whole]
        payloads = payloads[:whole]
    parts += payloads
    return pos + sum(map(len, sizes)) + sum(map(len, payloads)) + 4 * whole


# Chunk-size lines already seen, to their sizes: a stream's chunks have a few sizes, and a
# dict look-up costs a third of checking and converting the hex again. Bounded.
_SIZES: dict[bytes, int] = {}
MAX_SIZES = 4096


def _chunk_size(line: bytes) -> int:
    """The size of a chunk-size line (hex, optional ``;extensions`` after it)."""
    digits = line
    if b";" in digits:
        digits = digits.split(b";", 1)[0].rstrip(b" \t")
    # int(x, 16) alone would accept "0x1f", "+1f", "1_f" and spaces: check the digits first.
    if not digits or len(digits) > 16 or digits.strip(HEX):
        raise MalformedHTTP(f"bad chunk size: {line[:40]!r}")
    size = int(digits, 16)
    if size and len(_SIZES) < MAX_SIZES and digits is line:  # not 0: the last chunk
        _SIZES[line] = size
    return size


def _parse_head(raw: bytes) -> ResponseHead:
    try:
        text = raw.decode("latin-1")
    except UnicodeDecodeError as err:  # latin-1 decodes every byte; kept for the type checker
        raise MalformedHTTP(str(err)) from err
    lines = text.split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code, _, reason = rest.partition(" ")
    if version not in ("HTTP/1.1", "HTTP/1.0") or len(code) != 3 or not code.isdigit():
        raise MalformedHTTP(f"bad status line: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    last = ""
    for line in lines[1:]:
        if line[:1] in (" ", "\t"):  # obsolete line folding: part of the previous field
            if not last:
                raise MalformedHTTP(f"folded line before any header: {line[:80]!r}")
            headers[last] += " " + line.strip()
            continue
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise MalformedHTTP(f"bad header line: {line[:80]!r}")
        last = name.lower()
        value = value.strip()
        headers[last] = f"{headers[last]}, {value}" if last in headers else value
    tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
    keep_alive = "keep-alive" in tokens if version == "HTTP/1.0" else "close" not in tokens
    return ResponseHead(version, int(code), reason, headers, keep_alive)


def _closing(head: ResponseHead) -> ResponseHead:
    return ResponseHead(head.version, head.status, head.reason, head.headers, False)
