"""Reads stamped by the kernel when their bytes arrived, and a bound on the reads of one
event-loop iteration: the plain-TCP connections' transport (Linux).

A read stamped when the event loop hands it over carries the loop's backlog: at C256 with a
token every 10 ms per stream, one core reads ~25,600 chunks a second, a step's chunks arrive
together, and one loop iteration read 14–214 sockets back to back (4–13 ms on a loaded
gVisor host, ~34 µs a read: benchmarks/RESULTS.md, "What the mid-run iterations over 4 ms
ran"); the last socket's chunk was stamped that long after it arrived, and every timer of
the loop (a session's next send, the self-watch) waited as long.

Here the kernel stamps each read instead (``SO_TIMESTAMPNS``: the socket's receive queue
notes when each segment arrived, ``recvmsg`` hands the newest one of the read over; a segment
merged into the one before takes its time), so a read's stamp is when its last byte arrived,
whatever the loop was doing meanwhile. The stamp is CLOCK_REALTIME; it is brought to the
library's clock (``perf_counter_ns``) by how long ago it was, read on both clocks together
just after the read: a few µs either way (the two clock reads; measured in a VM) unless the
wall clock steps between the arrival and the read, and a stamp that would lie in the future
(such a step) is taken as "now". Chunks read
together share the stamp of the last one's arrival, as chunks of one read always did. A read
that comes without the kernel's stamp (Linux turns receive stamping on for the host a moment
after the first socket asks) is stamped when it is read, as the loop's transports do.

Since a read's stamp no longer depends on when it is read, the loop stops reading after
:data:`READ_SLICE_NS` of read work: the sockets still ready are read first in the next
iteration (their stamps unchanged), after the loop's timers have run. A loop iteration thus
reads for at most the slice plus one read, however many streams are open.

Only where the kernel can stamp: Linux, plain TCP (an ``http`` target, directly or through
an HTTP proxy). TLS connections (``https``, a CONNECT tunnel) keep the event loop's
transports, whose TLS layer reads the socket, and the loop's stamps.

What a stamp cannot say: when the loop stalls (a long callback, a blocked thread), the
chunks that arrive meanwhile wait in the receive queue and come out in one read, all with
the last one's stamp. Per-segment stamps are not to be had: the kernel merges a segment into
the queued one before it and keeps the newer stamp, so a 1-byte ``MSG_PEEK`` or reads cut at
the segments' own boundaries all return the last arrival's stamp (four 200-byte segments
written 50 ms apart on loopback, read after: four reads, one stamp; ``SO_TIMESTAMPING`` with
``SOF_TIMESTAMPING_RX_SOFTWARE`` the same), and a peek costs a system call a read (+0.6 µs
on a 2.8 µs send-and-read, measured in a VM). What can be known is whether the loop stalled
while a read's bytes arrived: :class:`StallWatch` wakes every :data:`WATCH_NS` and notes
each wake later than :data:`STALL_NS`; a read that carries several content chunks with a
stall that ended just before it (the loop catching up) is *merged* (wire/stream.py marks
the chunks). A stall shorter than ``WATCH_NS + STALL_NS`` may go unseen, so the chunks of
an unmarked read arrived within that of their stamp.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import platform
import socket
import struct
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

from yarl import URL

from workloads.core.clock import of_this_loop

__all__ = [
    "KERNEL_STAMPS",
    "LOOP_STAMPS",
    "READ_SLICE_NS",
    "STALL_NS",
    "WATCH_NS",
    "Receiver",
    "StallWatch",
    "StampedTransport",
    "arrival_stamps",
    "kernel_stamped",
    "kernel_stamps",
    "open_stamped",
    "stall_watch",
]

# Read work one loop iteration does, at most (plus one read): as the send slice's budget
# (core/send_slice.py), so sends and reads together hold the loop ~2 ms at most.
READ_SLICE_NS = 1_000_000
READ_BYTES = 65_536  # what one read takes at most (uvloop's read buffer is as large)
PROBE_TRIES = 10  # kernel_stamps(): bytes sent before a kernel is taken not to stamp ...
PROBE_PAUSE_S = 0.002  # ... this far apart (20 ms at most, once per process)
# SO_TIMESTAMPNS (the "old" option: a struct timespec of the process's own width) as
# asm-generic/socket.h numbers it, which every Linux architecture but alpha, mips, parisc
# and sparc uses; its control message has the same number (SCM_TIMESTAMPNS).
SO_TIMESTAMPNS = 35
_GENERIC_SOCKET_H = ("x86", "i386", "i686", "amd64", "aarch64", "arm", "ppc", "s390", "riscv")
_TIMESPEC = struct.Struct("@ll")  # tv_sec, tv_nsec
_TIMESPEC_SIZE = _TIMESPEC.size
_unpack_timespec = _TIMESPEC.unpack
_ANCILLARY_BYTES = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
clock = time.perf_counter_ns
wall_clock = time.time_ns
# The stall watch: a wake every 2 ms (500 timer callbacks a second while connections are
# open: ~0.2% of a core at ~4 µs each) counts as a stall when over 2 ms late, twice the
# loop timers' own millisecond (runner/monitor.py, TIMER_SLACK_S); a stall under 4 ms may
# pass unseen.
WATCH_NS = 2_000_000
STALL_NS = 2_000_000
STALLS_KEPT = 64  # the latest stalls, for reads whose window began before them
# The result environment's "arrival_stamps": who stamped the run's streamed reads.
KERNEL_STAMPS = "kernel"
LOOP_STAMPS = "event loop"


class Receiver(Protocol):
    """What a stamped transport hands its reads to (wire/stream.py's ``Connection``): the
    asyncio protocol's calls, but each read comes with its arrival stamp."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None: ...
    def received(self, data: bytes, arrival_ns: int) -> None: ...
    def eof_received(self) -> bool | None: ...
    def connection_lost(self, exc: Exception | None) -> None: ...


@functools.cache
def kernel_stamps() -> bool:
    """Whether this process's TCP reads carry the kernel's arrival stamp: Linux on an
    architecture that numbers ``SO_TIMESTAMPNS`` as most do, and a kernel (or sandbox) that
    hands the stamp over — tried once per process on a loopback connection of its own, a
    byte at a time: a sandbox may take the option and never stamp, and Linux turns receive
    stamping on for the whole host a moment after the first socket asks (a deferred work
    item), so the first byte may come unstamped (here: 2 processes in 30, each stamped by the
    second byte)."""
    if sys.platform != "linux" or not _ANCILLARY_BYTES:
        return False
    if not platform.machine().lower().startswith(_GENERIC_SOCKET_H):
        return False
    try:
        with socket.create_server(("127.0.0.1", 0)) as listener:
            listener.settimeout(1.0)
            with socket.create_connection(listener.getsockname(), timeout=1.0) as probe:
                probe.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
                peer, _ = listener.accept()
                with peer:
                    for _ in range(PROBE_TRIES):
                        peer.sendall(b"x")
                        _, ancillary, _, _ = probe.recvmsg(1, _ANCILLARY_BYTES)
                        if any(kind == SO_TIMESTAMPNS for _, kind, _ in ancillary):
                            return True
                        time.sleep(PROBE_PAUSE_S)
    except OSError:  # no loopback, no such option: the loop stamps
        return False
    return False


def kernel_stamped(*, tls: bool) -> bool:
    """Whether the pool's connections (wire/stream.py) are read here, stamped by the kernel:
    plain TCP where :func:`kernel_stamps` holds. TLS keeps the loop's transports."""
    return not tls and kernel_stamps()


def arrival_stamps(url: str) -> str:
    """Who stamps the library's streamed reads from ``url``: :data:`KERNEL_STAMPS` or
    :data:`LOOP_STAMPS` (the result's environment, ``arrival_stamps``)."""
    return KERNEL_STAMPS if kernel_stamped(tls=URL(url).scheme == "https") else LOOP_STAMPS


class StallWatch:
    """When one event loop could not read: its stalls, as (start, end) perf_counter_ns.

    A timer wakes every :data:`WATCH_NS` while a connection holds the watch; a wake later
    than :data:`STALL_NS` notes a stall from its due time to the wake. :meth:`stalled` says
    whether one overlapped a window, the one under way included (a read can come before the
    late wake in the same iteration: asyncio runs the poll's callbacks before its timers).

        watch = stall_watch()
        watch.hold()
        ...
        merged = watch.stalled(previous_stamp, stamp)
        watch.release()
    """

    __slots__ = ("_due", "_handle", "_holders", "loop", "stalls")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.stalls: collections.deque[tuple[int, int]] = collections.deque(maxlen=STALLS_KEPT)
        self._holders = 0
        self._due = 0  # the next wake's due time; 0: not watching
        self._handle: asyncio.TimerHandle | None = None

    def hold(self) -> None:
        """A connection is open: watch (from the first holder on)."""
        self._holders += 1
        if self._handle is None:
            self._arm(clock())

    def release(self) -> None:
        """A connection closed: the last one stops the watch."""
        self._holders -= 1
        if self._holders <= 0 and self._handle is not None:
            self._holders = 0
            self._handle.cancel()
            self._handle = None
            self._due = 0

    def _arm(self, now: int) -> None:
        self._due = now + WATCH_NS
        self._handle = self.loop.call_later(WATCH_NS / 1e9, self._wake)

    def _wake(self) -> None:
        now = clock()
        if now - self._due > STALL_NS:
            self.stalls.append((self._due, now))
        self._arm(now)  # from now: a stall is one late wake, not a train of them

    def stalled(self, since_ns: int, until_ns: int) -> bool:
        """Whether a read made now, of bytes that arrived in ``(since_ns, until_ns]``, is the
        loop catching up after a stall (over :data:`STALL_NS`) that began before its last
        byte arrived: a wake overdue now that was due before it, or a noted stall that ended
        after the read before and at most ``WATCH_NS + STALL_NS`` ago (the loop ran freely
        since an older one: a byte arriving after it was read at once, as any read is)."""
        now = clock()
        due = self._due
        if due and due < until_ns and now - due > STALL_NS:
            return True
        recent = max(since_ns, now - WATCH_NS - STALL_NS)
        return any(end > recent and start < until_ns for start, end in self.stalls)


_watches: dict[asyncio.AbstractEventLoop, StallWatch] = {}


def stall_watch() -> StallWatch:
    """This loop's :class:`StallWatch` (one per loop, made on first use)."""
    return of_this_loop(_watches, StallWatch)[1]


class _ReadSlice:
    """One event loop's read work since its slice began, and the sockets waiting for the
    next slice. Once :data:`READ_SLICE_NS` of reading is spent, a socket the loop finds
    ready joins the line instead of being read; the next iteration's slice reads the line
    first, in the order it formed, then what its poll finds. First come, first read: a
    socket that waited is not passed over again by sockets that became ready after it (the
    poll reports a socket left unread behind fresh ones), so no stream's reads pile up
    while others are read. (Read work, not time since the iteration's first read: that
    needs a callback every iteration with a read, a loop pass of its own each; tried, it
    read +34% stream CPU a token over the loop's stamps at C256 on the lent host, against
    +6–24% for this accounting: benchmarks/RESULTS.md.)"""

    __slots__ = ("line", "loop", "shut", "spent_ns")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.spent_ns = 0
        self.shut = False
        self.line: collections.deque[StampedTransport] = collections.deque()

    def close(self) -> None:
        """Spent: the rest waits for the next iteration (``call_soon``: after this one's
        timers; uvloop: its idle phase, before the poll; asyncio: first of the ready
        callbacks, before the reads the poll found)."""
        self.shut = True
        self.loop.call_soon(self.reopen)

    def reopen(self) -> None:
        self.spent_ns = 0
        self.shut = False
        line = self.line
        while line and not self.shut:  # bounded: each pass takes one from the line
            transport = line.popleft()
            transport.queued = False
            if not transport.is_closing():
                transport.read_ready()


_slices: dict[asyncio.AbstractEventLoop, _ReadSlice] = {}


class StampedTransport(asyncio.Transport):
    """A connected TCP socket read with ``recvmsg`` (each read with the kernel's arrival
    stamp) from the event loop's reader callback, and written with ``send`` (the rest kept
    and written when the socket takes it). ``close`` is ``abort``: the pool never half-closes
    a connection, and a request not written whole is lost either way."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        receiver: Receiver,
        read_slice: _ReadSlice,
    ) -> None:
        super().__init__({"socket": sock, "peername": sock.getpeername()})
        self._loop = loop
        self._sock = sock
        self._recvmsg = sock.recvmsg
        self._fd = sock.fileno()
        self._receiver = receiver
        self._slice = read_slice
        self._pending = bytearray()  # written, not yet taken by the socket
        self._closing = False
        self.queued = False  # in the read slice's line
        receiver.connection_made(self)
        loop.add_reader(self._fd, self.read_ready)

    # --- reading --------------------------------------------------------------------------

    def read_ready(self) -> None:
        """The loop's reader callback (and the read slice's, for a socket in its line)."""
        read_slice = self._slice
        if read_slice.shut:  # the slice is spent: read in a later one, same stamp
            if not self.queued and not self._closing:
                self.queued = True
                read_slice.line.append(self)
            return
        start = clock()
        try:
            data, ancillary, _, _ = self._recvmsg(READ_BYTES, _ANCILLARY_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:  # reset, ...: the connection is lost
            self._shut(exc)
            return
        arrival = now = clock()
        if ancillary:
            _, kind, raw = ancillary[0]
            if kind == SO_TIMESTAMPNS and len(raw) == _TIMESPEC_SIZE:
                seconds, nanoseconds = _unpack_timespec(raw)
                ago = wall_clock() - seconds * 1_000_000_000 - nanoseconds
                if ago > 0:  # else a wall-clock step: now
                    arrival = now - ago
        if data:
            self._receiver.received(data, arrival)
        else:  # the peer closed its side
            self._loop.remove_reader(self._fd)
            if not self._receiver.eof_received():
                self._shut(None)
        spent = read_slice.spent_ns + clock() - start
        read_slice.spent_ns = spent
        if spent >= READ_SLICE_NS and not read_slice.shut:
            read_slice.close()

    # --- writing --------------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing:
            return  # as asyncio's: a write after close is dropped
        if not self._pending:
            try:
                sent = self._sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                self._shut(exc)
                return
            if sent == len(data):
                return
            data = memoryview(data)[sent:]
            self._loop.add_writer(self._fd, self._write_ready)
        self._pending += data

    def _write_ready(self) -> None:
        try:
            sent = self._sock.send(self._pending)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._shut(exc)
            return
        del self._pending[:sent]
        if not self._pending:
            self._loop.remove_writer(self._fd)

    def get_write_buffer_size(self) -> int:
        return len(self._pending)

    # --- closing --------------------------------------------------------------------------

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self._shut(None)

    def abort(self) -> None:
        self._shut(None)

    def _shut(self, exc: Exception | None) -> None:
        if self._closing:
            return
        self._closing = True
        self._loop.remove_reader(self._fd)
        self._loop.remove_writer(self._fd)
        self._pending.clear()
        # as asyncio's transports: the protocol hears of it in a later callback
        self._loop.call_soon(self._lost, exc)

    def _lost(self, exc: Exception | None) -> None:
        try:
            self._receiver.connection_lost(exc)
        finally:
            self._sock.close()


async def open_stamped(
    make: Callable[[], Receiver], family: int, proto: int, address: tuple[Any, ...]
) -> Receiver:
    """Connect a TCP socket to ``address`` and read it through a :class:`StampedTransport`;
    returns the receiver ``make`` made. Raises OSError as ``loop.create_connection`` does."""
    loop, read_slice = of_this_loop(_slices, _ReadSlice)
    sock = socket.socket(family, socket.SOCK_STREAM, proto)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as asyncio's
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        await loop.sock_connect(sock, address)
        receiver = make()
        StampedTransport(loop, sock, receiver, read_slice)
    except BaseException:
        sock.close()
        raise
    return receiver
