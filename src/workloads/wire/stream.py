"""The streamed request's path below any HTTP library: the connection pool, the request
write, and the response read, parsed where the bytes arrive.

Each connection is an :class:`asyncio.Protocol`. Its ``received`` takes each read with its
arrival stamp (``perf_counter_ns``): the kernel's, over plain TCP on Linux
(:mod:`workloads.wire.arrival`: when the read's last byte arrived, whatever the loop was
doing), else the moment the event loop's transport hands it over (``data_received``: TLS);
it unframes the HTTP body (:mod:`workloads.wire.http1`, llhttp), decodes a gzip or deflate
body a server sent though the request asked for none (``zlib``, incrementally: the stamps
stay per read) and folds it into the :class:`~workloads.core.chat_stream.ChatStream` at
once: no task wakes up between a byte's read and its parse, and a paced token costs one
callback, not a callback plus a reader task's wake-up. The waiting request task wakes once,
when the response is over (``[DONE]``, the end of the body, a failure) or the read gap runs
out.

Failures are set on the :class:`Exchange` as a :class:`~workloads.model.errors.RequestError`
with the kind of the closed set; :mod:`workloads.wire.client` turns them into the response.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
import zlib
from collections.abc import Callable
from typing import Any, cast

from workloads.core.chat_stream import ChatStream
from workloads.core.send_slice import send_slice
from workloads.model.errors import RequestError
from workloads.wire.arrival import kernel_stamped, open_stamped, stall_watch
from workloads.wire.failures import connect_kind, retry_after, status_kind
from workloads.wire.http1 import MalformedHTTP, ResponseHead, ResponseParser
from workloads.wire.transport import Proxy, open_tunnel, plain_http_hint, tls_message

__all__ = ["SETTLE_S", "Connection", "Exchange", "Pool"]

# How long a connection rests after its response before it carries another request.
SETTLE_S = 0.005

DNS_TTL_S = 10.0  # aiohttp's default DNS cache life: a host is resolved once per this
FILL_AT_ONCE = 32  # connections Pool.fill opens at a time (a server's accept queue is finite)
ERROR_DETAIL_BYTES = 2048  # of a non-200 body, or of a 200 that is not an event stream
ERROR_MESSAGE_CHARS = 300  # of a non-200 body, in the turn's error message
# A 200 without Content-Type, or labelled text/event-stream, is an event stream unless its
# body starts like one of these: JSON (an error object) or HTML (a proxy's page). An event
# stream starts with a field name, a comment (":") or a blank line.
NOT_EVENTS = frozenset(b"{[<")
# zlib's window bits for each content coding a server may send anyway: gzip (+32: a gzip or
# zlib header), deflate (zlib framing, or raw deflate as some servers send it: the first
# byte decides).
RAW_OR_ZLIB = 0
CODINGS = {"gzip": zlib.MAX_WBITS | 32, "x-gzip": zlib.MAX_WBITS | 32, "deflate": RAW_OR_ZLIB}
clock = time.perf_counter_ns


class Exchange:
    """One request written on one connection, and its response as it arrives.

    ``finished`` is set, and ``waiter`` resolved, when the turn's response is over: ``error``
    then says how it failed (None: ``[DONE]`` arrived). The connection may go on reading
    the end of the HTTP body after that (``draining``), to be reused once it is complete.
    """

    __slots__ = (
        "_gap_ns",
        "_timer",
        "conn",
        "decoder",
        "detail",
        "detail_limit",
        "draining",
        "error",
        "finished",
        "head",
        "headers_ns",
        "last_ns",
        "parser",
        "received",
        "reused",
        "sent_ns",
        "sniff",
        "stream",
        "waiter",
        "written_ns",
    )

    def __init__(self, conn: Connection, read_gap_s: float, *, reused: bool) -> None:
        self.conn = conn
        self.reused = reused  # sent on a kept-alive connection
        self.waiter: asyncio.Future[None] = conn.loop.create_future()
        self.parser = ResponseParser()
        self.head: ResponseHead | None = None
        self.sent_ns = 0  # just before the request was handed to the transport
        self.written_ns = 0  # just after
        self.headers_ns: int | None = None
        self.last_ns = 0  # the last read's arrival (the read gap counts from it)
        self.received = 0  # bytes read
        self.stream: ChatStream | None = None  # once a 200 event stream began
        self.detail = b""  # the start of a body that is not the event stream
        self.detail_limit = 0
        self.sniff = False  # a 200 without Content-Type: its first body byte decides
        self.decoder: Any = None  # a zlib decompressobj, for a gzip or deflate body
        self.error: RequestError | None = None
        self.finished = False
        self.draining = False
        self._gap_ns = round(read_gap_s * 1e9)
        self._timer: asyncio.TimerHandle | None = None

    def write(self, request: bytes) -> None:
        """Write the request; the read gap starts counting once it is written."""
        # Stamped before the write: a server on the same host may read the request (and
        # stamp its arrival) before transport.write returns, and TTFT would read short.
        self.sent_ns = clock()
        self.conn.transport.write(request)
        self.written_ns = self.last_ns = clock()
        loop = self.conn.loop
        self._timer = loop.call_at(loop.time() + self._gap_ns / 1e9, self._check_gap)

    # --- called by the connection, where the bytes arrive -------------------------------------

    def feed(self, data: bytes, now: int) -> None:
        since = self.last_ns  # this read's bytes arrived after the read before it
        self.last_ns = now
        self.received += len(data)
        try:
            body = self.parser.feed(data)
            if self.finished:  # draining the end of the body after [DONE]
                if self.parser.complete:
                    self._settle()
                return
            if self.head is None:
                head = self.parser.head
                if head is None:
                    return
                self._headed(head, now)
                if self.finished:
                    return
            if body and self.decoder is not None:
                body = self._decode(body)
            stream = self.stream
            if stream is not None:
                if body and self._fold(stream, body, now, since):
                    self._finish(None)
                elif self.parser.complete:
                    self._body_ended(stream, now)
            elif self.sniff:
                if body or self.parser.complete:
                    self._sniffed(body, now, since)
            elif self.detail_limit:
                self._add_detail(body)
            if self.parser.error is not None:  # after the body that came before it
                raise self.parser.error
        except MalformedHTTP as err:
            self._broken(RequestError("malformed", f"bad HTTP response: {err}"))
        except RequestError as err:  # the stream's own failures: malformed, error_event
            self._broken(err)

    def ended(self, now: int, exc: BaseException | None) -> None:
        """The connection closed (``exc`` None: the server closed it)."""
        if self.finished:
            self._stop_timer()
            return
        why = f": {type(exc).__name__}: {exc}" if exc is not None else " by the server"
        try:
            complete = self.parser.eof()
            stream = self.stream
            if self.head is None:
                # Written, then dropped before a response: the server may have read it
                # (and prefilled it), so it is never sent again unasked.
                self._finish(
                    RequestError("disconnected", f"connection closed before any response{why}")
                )
            elif stream is not None and complete:
                self._body_ended(stream, now)  # a body that ends with the connection
            elif stream is None and (self.detail_limit or self.sniff):
                self._finish_detail()
            else:
                self._finish(
                    RequestError("disconnected", f"connection closed after the response began{why}")
                )
        except RequestError as err:
            self._finish(err)

    def abandon(self) -> None:
        """The request task stopped waiting (cancelled, or its turn deadline passed): the
        connection is closed, since the response it carries is not read to its end."""
        if not self.finished:
            self.finished = True
            self._stop_timer()
            self.conn.close()

    # --- the response's course -----------------------------------------------------------------

    def _headed(self, head: ResponseHead, now: int) -> None:
        self.head = head
        self.headers_ns = now
        encoding = head.header("content-encoding")
        if encoding is not None and (coding := encoding.strip().lower()) not in ("", "identity"):
            bits = CODINGS.get(coding)
            if bits is None and head.status != 200:  # the status says what failed
                self.detail = f"(a body in Content-Encoding {encoding!r})".encode()
                self.detail_limit = len(self.detail)
                self._finish_detail()
                return
            if bits is None:  # br, zstd, a list of codings: not ours to guess
                self._finish(
                    RequestError(
                        "malformed",
                        f"a body in Content-Encoding {encoding!r}, which the client "
                        "does not decode (it asked for identity; gzip and deflate are decoded)",
                        http_status=head.status,
                    )
                )
                return
            self.decoder = RAW_OR_ZLIB if bits is RAW_OR_ZLIB else zlib.decompressobj(bits)
        if head.status != 200:
            self.detail_limit = ERROR_DETAIL_BYTES
            return
        content_type = head.header("content-type")
        if content_type is None or content_type.split(";", 1)[0].strip().lower() == (
            "text/event-stream"
        ):
            # An event stream unless its body starts like JSON or HTML: a gateway's error
            # object labelled text/event-stream keeps its text (not "truncated", text lost).
            self.sniff = True
        else:
            self.detail_limit = ERROR_DETAIL_BYTES

    def _decode(self, body: bytes) -> bytes:
        """A read of a gzip or deflate body, decoded (zlib keeps the state between reads)."""
        decoder = self.decoder
        if decoder is RAW_OR_ZLIB:  # aiohttp's test: zlib framing's first byte says method 8
            bits = zlib.MAX_WBITS if body[0] & 0x0F == 8 else -zlib.MAX_WBITS
            decoder = self.decoder = zlib.decompressobj(bits)
        try:
            return decoder.decompress(body)  # type: ignore[no-any-return]
        except zlib.error as err:
            raise RequestError(
                "malformed", f"a compressed body that does not decode: {err}"
            ) from err

    def _fold(self, stream: ChatStream, body: bytes, now: int, since: int) -> bool:
        """Fold a read into the stream (True: ``[DONE]``). A read that carried several
        content chunks while the loop stalled (wire/arrival.py) may hold chunks that arrived
        apart, all with its stamp: they are marked merged."""
        before = stream.content_events
        done = stream.feed(body, now)
        if stream.content_events - before > 1 and self.conn.watch.stalled(since, now):
            stream.merge(before)
        return done

    def _sniffed(self, body: bytes, now: int, since: int) -> None:
        """A 200 without Content-Type or labelled an event stream: an event stream unless its
        body looks like JSON or HTML (an error object, a proxy's page), whose text then
        becomes the error."""
        start = body.lstrip()
        if not start and not self.parser.complete:
            return  # only whitespace so far
        self.sniff = False
        if (self.parser.complete and not start) or start[0] in NOT_EVENTS:
            self.detail_limit = ERROR_DETAIL_BYTES
            self._add_detail(body)
            return
        stream = self.stream = ChatStream()
        if self._fold(stream, body, now, since):
            self._finish(None)
        elif self.parser.complete:
            self._body_ended(stream, now)

    def _body_ended(self, stream: ChatStream, now: int) -> None:
        if stream.close(now):
            self._finish(None)
        else:
            self._finish(
                RequestError(
                    "truncated",
                    "the stream ended without data: [DONE]"
                    + ("" if stream.finish_reason else " and without a finish_reason"),
                )
            )

    def _add_detail(self, body: bytes) -> None:
        """Keep the start of a body that is not the event stream; the answer is known once
        the body has ended or the start is long enough."""
        self.detail += body[: self.detail_limit - len(self.detail)]
        if len(self.detail) >= self.detail_limit or self.parser.complete:
            self._finish_detail()

    def _finish_detail(self) -> None:
        head = self.head
        assert head is not None
        # Redacted before it is cut: a secret the server echoed across the cut would leave
        # its start in the record.
        text = self.conn.pool.redact(self.detail.decode("utf-8", "replace").strip())
        if head.status != 200:
            self._finish(
                RequestError(
                    status_kind(head.status),
                    f"HTTP {head.status}: {text[:ERROR_MESSAGE_CHARS]}",
                    http_status=head.status,
                    retry_after_s=retry_after(head.header("retry-after")),
                )
            )
        else:
            content_type = head.header("content-type")
            what = "no Content-Type" if content_type is None else f"Content-Type {content_type!r}"
            self._finish(
                RequestError(
                    "not_event_stream",
                    f"HTTP 200 with {what}, not an event stream (an error, a proxy's page, or a "
                    f"server that ignored stream=true): {text}",
                )
            )

    def _finish(self, error: RequestError | None) -> None:
        """The turn's answer is known: wake the request task once."""
        if self.finished:
            return
        self.finished = True
        self.error = error
        if not self.waiter.done():
            self.waiter.set_result(None)
        if error is None and not self.parser.complete:
            self.draining = True  # [DONE] came before the body's end: read on, then reuse
            return
        self._settle()

    def _broken(self, error: RequestError) -> None:
        if self.finished:  # the end of a body being drained did not parse: not reused
            self.draining = False
            self._stop_timer()
            self.conn.close()
        else:
            self._finish(error)

    def _settle(self) -> None:
        """The response is over on the wire: the connection goes back to the pool when it
        may carry another request, else it is closed."""
        self._stop_timer()
        self.draining = False
        head = self.head
        reusable = (
            self.parser.complete
            and not self.parser.extra
            and head is not None
            and head.keep_alive
            and (self.error is None or self.error.kind.startswith("http_"))
        )
        if reusable:
            self.conn.idle()
        else:
            self.conn.close()

    def _check_gap(self) -> None:
        self._timer = None
        if self.finished and not self.draining:
            return
        waited = clock() - self.last_ns
        if waited < self._gap_ns:
            loop = self.conn.loop
            self._timer = loop.call_at(loop.time() + (self._gap_ns - waited) / 1e9, self._check_gap)
            return
        if self.draining:  # the body's end never came: this connection is not reused
            self.draining = False
            self.conn.close()
            return
        self._finish(
            RequestError(
                "read_stall",
                f"no data for too long: nothing read for {self._gap_ns / 1e9:g} s "
                "(timeouts.read_gap_s)",
            )
        )

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class Connection(asyncio.Protocol):
    """One HTTP/1.1 connection of the pool; the exchange in flight gets every read."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.loop = pool.loop
        self.transport: asyncio.Transport
        self.exchange: Exchange | None = None
        self.closed = False
        self.idle_since = 0.0  # loop time it was last returned to the pool (or opened idle)
        self.carried = False  # has carried a request (a pre-opened one has not, yet)
        self.watch = stall_watch()  # held while connected: merged reads (wire/arrival.py)
        self.watching = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A read-write transport (uvloop's do not subclass asyncio.Transport: no isinstance).
        self.transport = cast(asyncio.Transport, transport)
        if not self.watching:
            self.watching = True
            self.watch.hold()

    def data_received(self, data: bytes) -> None:
        self.received(data, clock())  # first thing: the arrival stamp

    def received(self, data: bytes, now: int) -> None:
        """A read and its arrival stamp: the event loop's (``data_received``) or the
        kernel's (wire/arrival.py), never before the request was sent nor before the
        previous read (a wall-clock step could place a kernel stamp there)."""
        exchange = self.exchange
        if exchange is None:  # bytes no request asked for: this connection is not reused
            self.close()
            return
        floor = exchange.last_ns if exchange.received else exchange.sent_ns
        exchange.feed(data, now if now > floor else floor)

    def eof_received(self) -> bool:
        if self.exchange is not None:
            self.exchange.ended(clock(), None)
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.watching:
            self.watching = False
            self.watch.release()
        self.pool.forget(self)
        if self.exchange is not None:
            self.exchange.ended(clock(), exc)
            self.exchange = None

    def start(self, request: bytes, read_gap_s: float, *, reused: bool) -> Exchange:
        """Write ``request`` now and return the exchange that reads its response."""
        exchange = Exchange(self, read_gap_s, reused=reused)
        self.exchange = exchange
        self.carried = True
        exchange.write(request)
        return exchange

    def idle(self) -> None:
        self.exchange = None
        self.pool.put_back(self)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.transport.abort()


class Pool:
    """Connections to one origin: idle ones are reused (newest first) until ``keepalive_s``
    old; with ``reuse`` off every request gets a connection of its own. The origin (or the
    proxy) is looked up once per :data:`DNS_TTL_S`: connections opened together share one
    look-up. :meth:`fill` opens idle connections ahead of the requests that will use them."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        tls: bool,
        connect_s: float,
        keepalive_s: float,
        reuse: bool,
        ssl_context: ssl.SSLContext | None = None,
        proxy: Proxy | None = None,
        redact: Callable[[str], str] = str,  # secrets out of an echoed body (Transport's)
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.host = host
        self.port = port
        # Verified, as aiohttp's, unless the transport's context says otherwise (ca_bundle,
        # insecure: workloads.wire.transport).
        self.tls = (ssl_context or ssl.create_default_context()) if tls else None
        # Through a proxy: connect to it; an https origin through a CONNECT tunnel.
        self.proxy = proxy
        self.redact = redact
        self.connect_s = connect_s
        self.keepalive_s = keepalive_s
        self.reuse = reuse
        self._idle: list[Connection] = []
        self._open: set[Connection] = set()
        self._addresses: list[tuple[Any, ...]] = []
        self._resolved_at = -DNS_TTL_S
        self._resolving: asyncio.Task[list[tuple[Any, ...]]] | None = None  # the one look-up
        self.opened = 0  # connections this pool opened

    async def acquire(self) -> tuple[Connection, bool]:
        """A live connection and whether it was reused. Raises RequestError (connect_*,
        name_resolution, tls) when a new one cannot be opened."""
        idle = self._idle
        while idle:
            conn = idle.pop()
            now = self.loop.time()
            if not self.reuse or not self._usable(conn, now):
                conn.close()  # may be closing at the server right now: never send on it
                continue
            if conn.carried and now - conn.idle_since < SETTLE_S:
                # Just back from a response: a server that closes the connection after a
                # streamed response (llama.cpp) may not have sent its FIN yet, or we may not
                # have read it (a busy CPU). Let it settle, so the request is not written on
                # a connection the server is closing (that loss cannot be re-sent: the server
                # may have read it). Before ``sent_ns``: no figure includes this wait.
                await asyncio.sleep(SETTLE_S - (now - conn.idle_since))
                for _ in range(2):  # and passes for a close the peer began meanwhile: one
                    await asyncio.sleep(0)  # to send its FIN (same loop), one to read it
                if conn.closed or conn.transport.is_closing():
                    continue
            return conn, True
        # Opening a connection (the socket, the connect: 0.2 ms on an idle host, up to ~17 ms
        # on a loaded gVisor one) is send work too (core/send_slice.py): a repetition's
        # connections are opened ahead (fill), but one that did not open, or a server that
        # closes after every response, leaves turns that open theirs while others stream.
        await send_slice()
        return await self._open_one(), False

    def _usable(self, conn: Connection, now: float) -> bool:
        """Whether an idle connection may carry a request: open at both ends, and idle for no
        longer than ``keepalive_s`` (the one rule of :meth:`acquire` and :meth:`idle`)."""
        return (
            not conn.closed
            and not conn.transport.is_closing()
            and now - conn.idle_since <= self.keepalive_s
        )

    def idle(self) -> int:
        """Idle connections that a request could take now."""
        now = self.loop.time()
        return sum(1 for conn in self._idle if self._usable(conn, now))

    async def fill(self, count: int) -> int:
        """Open connections, :data:`FILL_AT_ONCE` at a time, until ``count`` are idle, within
        the connect timeout in all; returns how many are idle then. A connection that does not
        open is no error here: the request that would have taken it opens its own (and
        records any failure). Idle, a pre-opened connection is as a kept-alive one: past
        ``keepalive_s``, or closed by the server, it is dropped, never written on."""
        if not self.reuse:
            return 0
        wanted = count - self.idle()
        if wanted <= 0:
            return self.idle()
        left = wanted

        async def opener() -> None:
            nonlocal left
            while left > 0 and self.reuse:  # bounded: each pass takes one from ``left``
                left -= 1
                try:
                    conn = await self._open_one()
                except RequestError:  # the target refuses, or cannot be reached: no more
                    left = 0
                    return
                self.put_back(conn)

        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.connect_s):
                async with asyncio.TaskGroup() as tg:
                    for _ in range(min(wanted, FILL_AT_ONCE)):
                        tg.create_task(opener())
        return self.idle()

    async def _open_one(self) -> Connection:
        """A new connection, or RequestError (connect_*, name_resolution, tls)."""
        try:
            async with asyncio.timeout(self.connect_s):
                conn = await self._connect()
        except TimeoutError as err:
            hint = await plain_http_hint(self._origin(), self.proxy) if self.tls else ""
            raise RequestError(
                "connect_timeout",
                f"cannot connect to {self._origin()}: no connection within "
                f"{self.connect_s:g} s{hint}",
            ) from err
        except OSError as err:  # gaierror, SSLError, ConnectionRefusedError, ...
            raise RequestError(
                connect_kind(err),
                tls_message(err, self._origin())
                or (
                    f"cannot connect to {self._origin()}{self._via()}: {type(err).__name__}: {err}"
                ),
            ) from err
        self.opened += 1
        return conn

    def put_back(self, conn: Connection) -> None:
        if self.reuse and not conn.closed:
            conn.idle_since = self.loop.time()
            self._idle.append(conn)
        else:
            conn.close()

    def forget(self, conn: Connection) -> None:
        self._open.discard(conn)

    def stop_reusing(self) -> None:
        """From now on every request gets its own connection; idle ones are closed."""
        self.reuse = False
        for conn in self._idle:
            conn.close()
        self._idle.clear()

    def close(self) -> None:
        for conn in list(self._open):
            conn.close()
        self._open.clear()
        self._idle.clear()
        if self._resolving is not None:
            self._resolving.cancel()
            self._resolving = None

    async def _addresses_now(self) -> list[tuple[Any, ...]]:
        """The origin's (or the proxy's) addresses: looked up at most once per
        :data:`DNS_TTL_S`, and once for all the connections that ask while it runs (a
        repetition's first turns open theirs together: one look-up each went to the
        executor)."""
        loop = self.loop
        if self._addresses and loop.time() - self._resolved_at <= DNS_TTL_S:
            return self._addresses
        if self._resolving is None:
            self._resolving = loop.create_task(self._look_up())
            self._resolving.add_done_callback(_retrieved)
        # shielded: one caller's connect timeout does not cancel the others' look-up
        return await asyncio.shield(self._resolving)

    async def _look_up(self) -> list[tuple[Any, ...]]:
        loop = self.loop
        proxy = self.proxy
        try:
            addresses = await loop.getaddrinfo(
                proxy.host if proxy else self.host,
                proxy.port if proxy else self.port,
                type=socket.SOCK_STREAM,
            )
        finally:
            self._resolving = None  # a failed look-up is tried again by the next connection
        self._addresses = addresses
        self._resolved_at = loop.time()
        return addresses

    async def _connect(self) -> Connection:
        loop = self.loop
        proxy = self.proxy
        addresses = await self._addresses_now()
        factory: Callable[[], Connection] = lambda: Connection(self)  # noqa: E731
        last: OSError | None = None
        for family, _, proto, _, address in addresses:  # as aiohttp: each in turn
            try:
                if proxy is not None and self.tls is not None:
                    conn = factory()
                    await open_tunnel(
                        proxy,
                        self.host,
                        self.port,
                        self.tls,
                        conn,
                        family=family,
                        proto=proto,
                        address=address,
                    )
                elif kernel_stamped(tls=self.tls is not None):  # reads stamped at arrival
                    conn = cast(Connection, await open_stamped(factory, family, proto, address))
                else:  # TLS, or a platform whose kernel does not stamp: the loop's transport
                    _, conn = await loop.create_connection(
                        factory,
                        host=address[0],
                        port=address[1],
                        family=family,
                        proto=proto,
                        ssl=self.tls if proxy is None else None,
                        server_hostname=self.host if self.tls and proxy is None else None,
                    )
            except OSError as err:
                last = err
                continue
            self._open.add(conn)
            return conn
        if last is None:
            raise OSError(f"{self.host} resolved to no address")
        raise last

    def _origin(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    def _via(self) -> str:
        return f" through proxy {self.proxy.url}" if self.proxy is not None else ""


def _retrieved(task: asyncio.Task[Any]) -> None:
    """A look-up's failure is its callers' (each gets it raised); seen here too, so a look-up
    nobody awaits any more (all timed out) is not reported as never retrieved."""
    if not task.cancelled():
        task.exception()
