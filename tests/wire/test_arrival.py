"""Reads stamped by the kernel at arrival (wire/arrival.py), against real loopback sockets: a
peer socket in the test's thread writes while the event loop is held, so the bytes wait in
the receive queue, and the stamp must say when they arrived, not when they were read; and
one loop iteration must not read past its slice, whatever the number of ready sockets."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from fakes import KERNEL_STAMP_SLACK_NS, LoopTicks
from workloads.wire import arrival
from workloads.wire.arrival import StampedTransport, kernel_stamps, open_stamped
from workloads.wire.client import HttpChatClient
from workloads.wire.loop import run_loop

needs_stamps = pytest.mark.skipif(
    not kernel_stamps(), reason="this kernel does not stamp TCP reads"
)
clock = time.perf_counter_ns
HELD_S = 0.1  # the loop is held this long after the peer wrote
# the library's two loops (wire/loop.py), as tests/runner/test_session.py runs them
both_loops = pytest.mark.parametrize(
    "fast", [True, False], ids=["uvloop", "asyncio"], indirect=True
)


@pytest.fixture
def fast(request: pytest.FixtureRequest) -> bool:
    if request.param:
        pytest.importorskip("uvloop")
    return bool(request.param)


class Reads:
    """A receiver that keeps every read with its stamp and when it was handed over."""

    def __init__(self, busy_ns: int = 0) -> None:
        self.reads: list[tuple[bytes, int, int]] = []  # data, arrival stamp, handed over
        self.eof = False
        self.lost: list[Exception | None] = []
        self.lost_event = asyncio.Event()
        self.transport: Any = None
        self.busy_ns = busy_ns  # work per read (a parse), spun in the read

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def received(self, data: bytes, arrival_ns: int) -> None:
        self.reads.append((data, arrival_ns, clock()))
        end = clock() + self.busy_ns
        while clock() < end:
            pass

    def eof_received(self) -> bool:
        self.eof = True
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.append(exc)
        self.lost_event.set()

    def data(self) -> bytes:
        return b"".join(d for d, _, _ in self.reads)


@contextmanager
def listener() -> Iterator[socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        yield sock


async def connect(sock: socket.socket, make: Callable[[], Reads]) -> tuple[Reads, socket.socket]:
    receiver = await open_stamped(make, socket.AF_INET, 0, sock.getsockname())
    peer, _ = sock.accept()  # the connect is complete: accept does not block
    peer.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    assert isinstance(receiver, Reads)
    return receiver, peer


async def until(done: Callable[[], bool], timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not done():
            await asyncio.sleep(0.001)


@needs_stamps
@both_loops
def test_a_read_is_stamped_when_its_bytes_arrived_not_when_the_loop_read_them(
    fast: bool,
) -> None:
    async def main() -> None:
        with listener() as sock:
            receiver, peer = await connect(sock, Reads)
            with peer:
                sent = clock()
                peer.sendall(b"data: one\n\n")
                time.sleep(HELD_S)  # the loop is held: the bytes wait in the socket
                await until(lambda: bool(receiver.reads))
                receiver.transport.abort()
        (data, stamp, handed), *_ = receiver.reads
        assert data == b"data: one\n\n"
        assert handed - sent >= HELD_S * 1e9  # read late ...
        # ... stamped at arrival: loopback takes microseconds; the conversion's slack, and
        # 20 ms for a busy machine (still well under the hold)
        assert sent - KERNEL_STAMP_SLACK_NS <= stamp < sent + 20_000_000
        assert handed - stamp >= (HELD_S - 0.02) * 1e9

    run_loop(main(), fast=fast)


@needs_stamps
@both_loops
def test_one_loop_iteration_reads_for_one_slice_the_rest_the_next_with_their_stamps(
    fast: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """30 sockets ready at once, each read taking 200 µs: a loop iteration reads ~5 of them
    (the 1 ms slice, plus one), the loop's other callbacks run between, and every read still
    carries its arrival, before the loop was let go."""
    monkeypatch.setattr(arrival, "READ_SLICE_NS", 1_000_000)  # the default, whatever it becomes
    busy_ns = 200_000
    count = 30

    async def main() -> tuple[list[int], list[tuple[bytes, int, int]], int]:
        ticker = LoopTicks()  # counts the loop's iterations
        with listener() as sock:
            pairs = [await connect(sock, lambda: Reads(busy_ns)) for _ in range(count)]
            order: list[int] = []  # the iteration of each read
            for receiver, _ in pairs:
                receiver.received = _noting(receiver.received, order, ticker)  # type: ignore[method-assign,assignment]
            async with ticker:
                while ticker.ticks < 2:  # ticking: one tick at the head of each iteration
                    await asyncio.sleep(0)
                for _, peer in pairs:
                    peer.sendall(b"x" * 100)
                released = clock()
                time.sleep(HELD_S)  # every socket is ready when the loop next polls
                await until(lambda: all(r.reads for r, _ in pairs))
            reads = [read for r, _ in pairs for read in r.reads]
            for receiver, peer in pairs:
                receiver.transport.abort()
                peer.close()
        return order, reads, released

    order, reads, released = run_loop(main(), fast=fast)
    per_pass: dict[int, int] = {}
    for p in order:
        per_pass[p] = per_pass.get(p, 0) + 1
    most = 1_000_000 // busy_ns + 1
    assert len(order) == count
    assert max(per_pass.values()) <= most, per_pass
    assert len(per_pass) >= count // most, per_pass  # spread over iterations
    for _, stamp, handed in reads:  # the late ones keep their arrival stamps
        assert stamp < released + 20_000_000 < handed


@needs_stamps
@both_loops
def test_sockets_left_for_the_next_slice_are_read_before_sockets_ready_since(
    fast: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each socket's peer writes again as soon as its first read is handed over, so the
    sockets read first are ready again before the others were read once: every socket's
    first read still comes before any socket's second (the poll alone would report the
    sockets read first ahead of those it left unread, and read those again and again)."""
    monkeypatch.setattr(arrival, "READ_SLICE_NS", 1_000_000)
    count = 30

    async def main() -> list[int]:
        order: list[int] = []
        with listener() as sock:
            pairs = [await connect(sock, lambda: Reads(200_000)) for _ in range(count)]
            for i, (receiver, peer) in enumerate(pairs):
                receiver.received = _again(receiver.received, order, i, peer)  # type: ignore[method-assign,assignment]
            for _, peer in pairs:
                peer.sendall(b"first")
            time.sleep(HELD_S)
            await until(lambda: all(len(r.reads) >= 2 for r, _ in pairs))
            for receiver, peer in pairs:
                receiver.transport.abort()
                peer.close()
        return order

    order = run_loop(main(), fast=fast)
    seen: set[int] = set()
    firsts = []
    for i in order:
        firsts.append(i not in seen)
        seen.add(i)
    assert firsts[:count] == [True] * count, order


def _again(
    received: Callable[[bytes, int], None], order: list[int], i: int, peer: socket.socket
) -> Callable[[bytes, int], None]:
    def note(data: bytes, arrival_ns: int) -> None:
        order.append(i)
        received(data, arrival_ns)
        if data == b"first":
            peer.sendall(b"again")

    return note


def _noting(
    received: Callable[[bytes, int], None], order: list[int], ticker: LoopTicks
) -> Callable[[bytes, int], None]:
    def note(data: bytes, arrival_ns: int) -> None:
        order.append(ticker.ticks)
        received(data, arrival_ns)

    return note


@needs_stamps
@both_loops
def test_a_write_larger_than_the_socket_takes_is_written_whole_in_order(
    fast: bool,
) -> None:
    payload = bytes(range(256)) * (64 * 1024)  # 16 MiB: more than any socket buffer takes

    async def main() -> bytes:
        with listener() as sock:
            receiver, peer = await connect(sock, Reads)
            receiver.transport.write(payload[:3])
            receiver.transport.write(payload[3:])
            assert receiver.transport.get_write_buffer_size() > 0  # the rest waits
            got = bytearray()
            peer.setblocking(False)
            async with asyncio.timeout(30):
                while len(got) < len(payload):
                    try:
                        got += peer.recv(1 << 20)
                    except BlockingIOError:
                        await asyncio.sleep(0.001)  # the loop writes the rest meanwhile
            assert receiver.transport.get_write_buffer_size() == 0
            receiver.transport.abort()
            peer.close()
            return bytes(got)

    assert run_loop(main(), fast=fast) == payload


@needs_stamps
@both_loops
def test_the_peer_closing_is_an_eof_then_the_connection_is_lost_without_error(
    fast: bool,
) -> None:
    async def main() -> Reads:
        with listener() as sock:
            receiver, peer = await connect(sock, Reads)
            peer.sendall(b"last words")
            peer.close()
            async with asyncio.timeout(10):
                await receiver.lost_event.wait()
            assert receiver.transport.is_closing()
            return receiver

    receiver = run_loop(main(), fast=fast)
    assert receiver.data() == b"last words"
    assert receiver.eof
    assert receiver.lost == [None]


@needs_stamps
@both_loops
def test_a_reset_is_a_lost_connection_with_its_error(
    fast: bool,
) -> None:
    async def main() -> Reads:
        with listener() as sock:
            receiver, peer = await connect(sock, Reads)
            peer.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
            )
            peer.close()  # linger 0: a reset
            async with asyncio.timeout(10):
                await receiver.lost_event.wait()
            return receiver

    receiver = run_loop(main(), fast=fast)
    assert len(receiver.lost) == 1
    assert isinstance(receiver.lost[0], ConnectionResetError)
    assert not receiver.eof


@needs_stamps
def test_a_stamp_the_wall_clock_would_put_in_the_future_is_taken_as_now(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A step of the wall clock between the arrival and the read: the kernel's stamp is no
    use then, and the read is stamped when it is handed over, never later."""
    monkeypatch.setattr(arrival, "wall_clock", lambda: 0)  # every stamp "in the future"

    async def main() -> tuple[int, int, int]:
        with listener() as sock:
            receiver, peer = await connect(sock, Reads)
            with peer:
                peer.sendall(b"x")
                time.sleep(0.01)
                before = clock()
                await until(lambda: bool(receiver.reads))
                receiver.transport.abort()
        _, stamp, handed = receiver.reads[0]
        return before, stamp, handed

    before, stamp, handed = run_loop(main(), fast=False)
    assert before <= stamp <= handed


@needs_stamps
@both_loops
def test_the_first_content_is_stamped_when_the_server_wrote_it_though_the_loop_was_held(
    fast: bool,
) -> None:
    """The library's own client against the embedded simulated server (its own thread and
    loop): the client's loop is held from the moment the server has the request until 0.1 s
    after the server finished the one-token reply; the response's first-content stamp is
    still when the server wrote it, by the server's own clock (one process: one clock)."""
    from workloads.servers.simulated import SimulatedServer

    async def main(server: SimulatedServer) -> tuple[int | None, int]:
        async with HttpChatClient(server.base_url) as client:
            body = {"model": server.model, "messages": [{"role": "user", "content": "hi"}]}
            task = asyncio.create_task(client.stream_chat(body | {"max_tokens": 1, "stream": True}))
            await until(lambda: bool(server.truths()))  # the server has the request
            for _ in range(10_000):  # the loop is held (≤ 10 s); the server streams
                if server.truths()[0].finish_reason is not None:
                    break
                time.sleep(0.001)
            time.sleep(HELD_S)
            held_until = clock()
            response = await task
        assert response.error_kind is None, response.error_message
        conns = [c for pool in client._pools.values() for c in pool._open | set(pool._idle)]
        assert all(isinstance(c.transport, StampedTransport) for c in conns)
        return response.first_content_ns, held_until

    with SimulatedServer("fast", debug=True) as server:
        first_content, held_until = run_loop(main(server), fast=fast)
        (truth,) = server.truths()
    written = truth.first_written_ns
    assert written is not None and first_content is not None
    # Stamped at arrival: the server stamps just after its write (the kernel's stamp may come
    # tens of µs before: 1 ms); the finish and [DONE], written as the reply ended, share the
    # one read the loop made after the hold, whose stamp is the newest segment's: before the
    # hold's last 0.1 s (the loop's own stamp would be after it).
    assert written - 1_000_000 <= first_content < held_until - HELD_S * 1e9 / 2


@needs_stamps
def test_a_kernel_stamp_before_the_request_was_sent_is_taken_as_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A wall clock stepped back between the arrival and the read makes every kernel stamp
    read 10 s early: the connection (wire/stream.py ``Connection.received``) stamps no read
    before its request was sent, nor before the read before it."""
    from workloads.servers.simulated import SimulatedServer

    monkeypatch.setattr(arrival, "wall_clock", lambda: time.time_ns() + 10_000_000_000)

    async def main(server: SimulatedServer) -> Any:
        async with HttpChatClient(server.base_url) as client:
            body = {"model": server.model, "messages": [{"role": "user", "content": "hi"}]}
            return await client.stream_chat(body | {"max_tokens": 8, "stream": True})

    with SimulatedServer("fast") as server:
        response = run_loop(main(server), fast=False)
    assert response.error_kind is None, response.error_message
    stamps = [response.first_content_ns, *(response.content_ns or []), response.done_ns]
    assert all(s is not None and s >= response.sent_ns for s in stamps), stamps
    assert list(response.content_ns or []) == sorted(response.content_ns or [])


BLOCK_S = 0.2  # the client's loop is blocked this long (a callback that sleeps)
STEP_S = 0.005  # the simulator's decode step: a token, one chunk, every 5 ms


@both_loops
def test_a_blocked_loop_marks_the_chunks_it_merged_drops_their_gaps_and_keeps_a_true_rate(
    fast: bool,
) -> None:
    """The library's client against the embedded simulator streaming a token per chunk: the
    client's loop is blocked (``time.sleep`` in a callback) from the server's first chunk
    on for 0.2 s, so the chunks written meanwhile come out in one read with its one stamp
    (TTFT high, their gaps 0, the decode rate high: 433 tok/s for a true 323 in issue 35).
    The stall watch marks them: the record counts them, leaves their gaps out of ITL, and
    takes the decode rate from the merged read's last chunk on (a true one, not the inflated
    first-to-last)."""
    from workloads.runner.turn import RecordHead, record_from_response
    from workloads.servers.simulated import SimulatedServer

    async def main(server: SimulatedServer) -> Any:
        async with HttpChatClient(server.base_url) as client:
            body = {"model": server.model, "messages": [{"role": "user", "content": "hi"}]}
            task = asyncio.create_task(
                client.stream_chat(
                    body
                    | {"max_tokens": 96, "ignore_eos": True, "stream": True}
                    | {"stream_options": {"include_usage": True}}
                )
            )
            await until(lambda: bool(server.truths()))  # the server has the request
            blocked = asyncio.get_running_loop().create_future()

            def block() -> None:  # a callback that holds the loop
                for _ in range(10_000):  # ≤ 10 s, until the first chunk is written
                    if server.truths()[0].first_written_ns is not None:
                        break
                    time.sleep(0.001)
                time.sleep(BLOCK_S)
                blocked.set_result(None)

            asyncio.get_running_loop().call_soon(block)
            await blocked
            return await task

    with SimulatedServer("fast", sim={"step_fixed_s": STEP_S}) as server:
        response = run_loop(main(server), fast=fast)
        (truth,) = server.truths()
    assert response.error_kind is None, response.error_message
    head = RecordHead(repetition=0, warmup=False, session=0, turn=1, configured_prior_tokens=0)
    r = record_from_response(
        response, head, output_tokens=96, exact_output=False, shareable_tokens=None,
        shareable_exact=False,
    )  # fmt: skip
    merged = list(response.figures.merged)
    # the first chunk and those written during the block (≥ 1 more: the server's own thread
    # writes while the client sleeps) share one read after the stall: marked
    assert merged[0] == 0 and len(merged) >= 2, merged
    assert r.merged_chunks == len(merged)
    # one read: the first chunks, in a row (a busy machine may stall the loop again later)
    assert merged[:2] == [0, 1]
    # their gaps (0 within the read) are left out of ITL; the later gaps are all kept
    assert r.chunk_gaps_us is not None
    assert len(r.chunk_gaps_us) == r.content_events - len(merged)
    # the decode rate is true: taken from the merged read's last chunk (its stamp is its
    # arrival) to the end, not the inflated first-to-last one (completion − 1 over a span
    # that starts at the read after the stall, not at the first chunk's arrival)
    assert r.completion_tokens == truth.completion_tokens == 96
    assert truth.first_written_ns is not None and truth.last_written_ns is not None
    true_rate = 95 / ((truth.last_written_ns - truth.first_written_ns) / 1e9)
    assert response.first_content_ns is not None and response.last_content_ns is not None
    inflated = 95 / ((response.last_content_ns - response.first_content_ns) / 1e9)
    assert inflated > 1.2 * true_rate  # what the record would say without the mark
    assert r.decode_tokens_per_s is not None
    assert abs(r.decode_tokens_per_s - true_rate) < 0.1 * true_rate, (
        r.decode_tokens_per_s,
        true_rate,
    )
