"""An HTTP/1.1 response, unframed from raw reads by llhttp (Node's parser, through
httptools): status line, headers, then the body (chunked transfer coding, Content-Length, or
until the connection closes). Pure: bytes in, body bytes out; no I/O, no clock.

The streaming chat client (:mod:`workloads.wire.stream`) feeds it every read of the socket
as it arrives and passes the body bytes straight on to the SSE decoder. llhttp hands each
chunk's payload to ``on_body``, which here is a list's ``append`` (a C call, no Python frame
per chunk); a read's payloads are joined once. One chunked read costs about a quarter of
what the hand-written parser this replaces cost (issue 19), and its framing rules are
llhttp's, which serves every Node.js HTTP client.

Framing follows RFC 9112 as llhttp reads it: a 1xx response before the real one is skipped;
204 and 304 have no body; chunk extensions and trailer fields are read and ignored (llhttp
refuses whitespace right after an extension's ``;``, which RFC 9112 allows); a response
with both Transfer-Encoding and Content-Length is read by its Transfer-Encoding and its
connection not reused; a folded header line (obs-fold) is one value, as in aiohttp and httpx;
anything else that does not parse (a bad chunk size, a duplicate Content-Length, a NUL in a
header value, a version other than 1.0 and 1.1) raises
:class:`MalformedHTTP` (the client's ``malformed`` kind), after the body that came before it.
"""

from __future__ import annotations

from dataclasses import dataclass

from httptools import HttpParserError, HttpParserUpgrade, HttpResponseParser

__all__ = ["MAX_HEAD_BYTES", "MalformedHTTP", "ResponseHead", "ResponseParser"]

MAX_HEAD_BYTES = 64 * 1024  # status line + headers (llhttp sets no limit; aiohttp's is 8190/line)
MAX_INFORMATIONAL = 100  # 1xx responses before the real one


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
        if parser.complete: ...           # the body has ended; parser.extra: bytes came after
        parser.eof()                      # the connection closed: True if that ends the body

    Raises :class:`MalformedHTTP`. (No HEAD requests: this client sends POSTs only.)
    """

    __slots__ = (
        "_head_bytes",
        "_headers",
        "_interim",
        "_parser",
        "_parts",
        "_reason",
        "_until_close",
        "complete",
        "error",
        "extra",
        "head",
        "informational",
        "on_body",
    )

    def __init__(self) -> None:
        self.head: ResponseHead | None = None
        self.informational = 0  # 1xx responses skipped
        self.complete = False
        self.extra = False  # bytes arrived after the end of this response
        # Broken framing found after some body in the same read: that body is returned
        # first (what arrived before the fault is measured), then this says why it stopped.
        self.error: MalformedHTTP | None = None
        self._parts: list[bytes] = []
        self.on_body = self._parts.append  # llhttp's body callback: a C call per chunk
        self._headers: dict[str, str] = {}
        self._reason = ""
        self._head_bytes = 0
        self._interim = False  # reading a 1xx response
        self._until_close = False
        # The parser calls this object back, a cycle: it is dropped once the response has
        # ended, so a finished response is freed by reference counting, not left to the
        # garbage collector (one cycle of ~10 objects per request otherwise).
        parser = HttpResponseParser(self)
        # Both Transfer-Encoding and Content-Length: read by the former (RFC 9112 6.3), and
        # the connection is not reused (on_headers_complete), as a request-smuggling shape.
        # Spaces between a chunk size and its ";extension" are RFC 9112's BWS; llhttp still
        # refuses them after the ";" (a server that sends chunk extensions at all is rare).
        # A folded header line (obs-fold, RFC 9112 5.2) is read as one value, as aiohttp's
        # response parser (llhttp's lenient headers, in its release mode) and httpx do; a NUL
        # in a value is still refused (on_header), as aiohttp does.
        parser.set_dangerous_leniencies(
            lenient_headers=True, lenient_chunked_length=True, lenient_spaces_after_chunk_size=True
        )
        self._parser: HttpResponseParser | None = parser

    def feed(self, data: bytes) -> bytes:
        """The body bytes in ``data`` (chunk framing removed), in order."""
        if self.error is not None:
            raise self.error
        parser = self._parser
        if parser is None:  # complete (a fault raised above)
            self.extra = self.extra or bool(data)
            return b""
        parts = self._parts
        try:
            parser.feed_data(data)
        except (HttpParserError, HttpParserUpgrade) as err:
            if self.complete:  # what follows the end is not read: the connection is closed
                self.extra = True
            else:
                self._parser = None
                self.error = _fault(err)
                if not parts:
                    raise self.error from None
        if self.head is None:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._parser = None
                self.error = MalformedHTTP(f"response head over {MAX_HEAD_BYTES} bytes")
                raise self.error
        if not parts:
            return b""
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        parts.clear()
        return body

    def eof(self) -> bool:
        """The connection closed. True when that is the end of a complete response (a body
        delimited by the close, or one already complete); False when it cut one short."""
        if self._until_close and not self.complete and self.error is None:
            self.complete = True
        return self.complete

    # --- llhttp's callbacks ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.complete:  # a second response: stop here (feed marks it extra)
            raise MalformedHTTP("bytes after the end of the response")

    def on_status(self, reason: bytes) -> None:
        self._reason = reason.decode("latin-1")

    def on_header(self, name: bytes, value: bytes) -> None:
        if b"\0" in value:
            raise MalformedHTTP("a NUL in a header value")
        key = name.decode("latin-1").lower()
        # a folded line's line break (if llhttp leaves it) and its indent are one space
        text = b" ".join(value.split()).decode("latin-1")
        headers = self._headers
        headers[key] = f"{headers[key]}, {text}" if key in headers else text

    def on_headers_complete(self) -> None:
        parser = self._parser
        assert parser is not None  # called by it
        status = parser.get_status_code()
        version = parser.get_http_version()
        headers, self._headers = self._headers, {}
        if version not in ("1.1", "1.0"):
            raise MalformedHTTP(f"HTTP/{version} is not HTTP/1.x")
        if 100 <= status < 200:
            if status == 101:
                raise MalformedHTTP("101 Switching Protocols: not an HTTP/1.1 response")
            self.informational += 1
            if self.informational > MAX_INFORMATIONAL:
                raise MalformedHTTP(f"more than {MAX_INFORMATIONAL} informational (1xx) responses")
            self._interim = True
            return
        coding = headers.get("transfer-encoding")
        length = headers.get("content-length")
        if status in (204, 304):
            framed = True
        elif coding is not None:  # without chunked last, the body ends with the connection
            framed = coding.rsplit(",", 1)[-1].strip().lower() == "chunked"
        else:
            framed = length is not None
        self._until_close = not framed
        keep_alive = (
            framed
            and parser.should_keep_alive()
            and not (coding is not None and length is not None)
        )
        self.head = ResponseHead(f"HTTP/{version}", status, self._reason, headers, keep_alive)

    def on_message_complete(self) -> None:
        if self._interim:  # the 1xx has ended; the real response follows
            self._interim = False
            self._reason = ""
            return
        self.complete = True
        self._parser = None  # the call in progress holds it to its end


def _fault(err: Exception) -> MalformedHTTP:
    """llhttp's reason, or the check of ours that stopped it in a callback."""
    cause = err.__context__
    if isinstance(cause, MalformedHTTP):
        return cause
    if isinstance(err, HttpParserUpgrade):
        return MalformedHTTP("a protocol upgrade: not an HTTP/1.1 response")
    return MalformedHTTP(str(err) or type(err).__name__)
