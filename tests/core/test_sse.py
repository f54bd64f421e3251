from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workloads.core.sse import ServerSentEvent, SSEDecoder


def decode_all(chunks: list[bytes]) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    events = []
    for chunk in chunks:
        events += decoder.feed(chunk)
    return events + decoder.close()


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, last = [], 0
    for p in points:
        pieces.append(data[last:p])
        last = p
    pieces.append(data[last:])
    return pieces


def ev(data: str, event: str | None = None, id: str = "", retry_ms: int | None = None):
    return ServerSentEvent(data.encode(), event, id, retry_ms)


payload_text = st.text(
    alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)),
    max_size=40,
)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    payloads=st.lists(payload_text, min_size=1, max_size=8),
    newline=st.sampled_from(["\n", "\r\n", "\r"]),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=30),
)
def test_events_are_independent_of_chunking(payloads, newline, cuts):
    stream = "".join(f"data: {p}{newline}{newline}" for p in payloads).encode()
    whole = decode_all([stream])
    assert [e.data for e in whole] == payloads
    assert decode_all(split(stream, cuts)) == whole
    assert decode_all([bytes([b]) for b in stream]) == whole


field_line = st.one_of(
    payload_text.map(lambda t: f"data: {t}"),
    payload_text.map(lambda t: f"data:{t}"),
    payload_text.map(lambda t: f": {t}"),  # comment
    payload_text.map(lambda t: f"event: {t}"),
    payload_text.map(lambda t: f"id: {t}"),
    st.integers(0, 10**6).map(lambda n: f"retry: {n}"),
    st.just("retry: soon"),  # ignored: not digits
    payload_text.map(lambda t: f"other: {t}"),  # unknown field: ignored
    st.just(""),  # dispatch
)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.lists(field_line, max_size=20),
    newline=st.sampled_from(["\n", "\r\n", "\r"]),
    bom=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=20),
)
def test_any_chunking_of_any_field_mix_gives_the_same_events(lines, newline, bom, cuts):
    stream = ("\ufeff" if bom else "") + "".join(line + newline for line in lines)
    data = stream.encode()
    whole = decode_all([data])
    assert decode_all(split(data, cuts)) == whole
    assert decode_all([bytes([b]) for b in data]) == whole
    # the BOM is never part of an event
    assert all(not e.raw.startswith(b"\xef\xbb\xbf") for e in whole) or not bom


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(max_size=64), max_size=20))
def test_arbitrary_bytes_never_crash(chunks):
    for event in decode_all(chunks):
        assert isinstance(event.data, str)


def test_multiline_data_comments_and_event_names():
    stream = b": keep-alive\nevent: delta\ndata: a\ndata: b\n\ndata:c\n\n"
    assert decode_all([stream]) == [ev("a\nb", "delta"), ev("c")]


def test_id_and_retry_fields_are_kept_and_carry_over():
    stream = b"id: 7\nretry: 1500\ndata: a\n\ndata: b\n\nid\nretry: x\ndata: c\n\n"
    assert decode_all([stream]) == [
        ev("a", id="7", retry_ms=1500),
        ev("b", id="7", retry_ms=1500),
        ev("c", id="", retry_ms=1500),
    ]


def test_a_leading_bom_is_dropped_even_split_across_reads():
    stream = b"\xef\xbb\xbfdata: x\n\n"
    assert decode_all([stream]) == [ev("x")]
    assert decode_all([stream[:1], stream[1:2], stream[2:]]) == [ev("x")]
    # only at the start: a BOM later is data
    assert decode_all([b"data: \xef\xbb\xbfy\n\n"]) == [ev("\ufeffy")]


def test_crlf_split_between_reads_is_one_line_break():
    assert decode_all([b"data: a\r", b"\n\r", b"\ndata: b\r\n\r\n"]) == [ev("a"), ev("b")]


def test_event_without_final_blank_line_is_flushed_on_close():
    assert decode_all([b"data: [DONE]"]) == [ev("[DONE]")]


def test_empty_data_line_still_dispatches_and_a_blank_line_alone_does_not():
    assert decode_all([b"\n\ndata:\n\n"]) == [ev("")]


def test_utf8_split_inside_a_character():
    stream = "data: héllo ✓\n\n".encode()
    cut = stream.index("✓".encode()) + 1
    assert decode_all([stream[:cut], stream[cut:]]) == [ev("héllo ✓")]


def test_events_over_one_megabyte_in_small_reads():
    big = "x" * (2 * 1024 * 1024)
    stream = f"data: {big}\n\n".encode()
    reads = [stream[i : i + 1024] for i in range(0, len(stream), 1024)]
    assert decode_all(reads) == [ev(big)]


def test_an_unterminated_line_is_kept_in_pieces_not_rejoined_on_every_read():
    # Linear cost, checked without a clock: re-joining the whole buffer on every read (the old
    # decoder) copied ~n²/2 bytes for an n-byte event; the pieces are joined once, at its end.
    decoder = SSEDecoder()
    reads = [b"data: "] + [b"y" * 1024] * 2048
    for read in reads:
        assert decoder.feed(read) == []
    assert len(decoder._pending) == len(reads)
    assert decoder.feed(b"\n\n") == [ServerSentEvent(b"y" * 1024 * 2048)]
    assert decoder._pending == []


def reference(data: bytes) -> list[ServerSentEvent]:
    """The WHATWG rules, line by line, on the whole stream: the oracle for the decoder's
    block-at-a-time fast path."""
    text = data.removeprefix(b"\xef\xbb\xbf").replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    events, lines = [], text.split(b"\n")
    buffer: list[bytes] = []
    name, ident, retry = None, "", None
    for line in lines[:-1] + ([lines[-1]] if lines[-1] else []):
        if not line:
            if buffer:
                events.append(ServerSentEvent(b"\n".join(buffer), name, ident, retry))
            buffer, name = [], None
            continue
        if line.startswith(b":"):
            continue
        field, _, value = line.partition(b":")
        value = value.removeprefix(b" ")
        if field == b"data":
            buffer.append(value)
        elif field == b"event":
            name = value.decode("utf-8", "replace") or None
        elif field == b"id" and b"\x00" not in value:
            ident = value.decode("utf-8", "replace")
        elif field == b"retry" and value.isdigit():
            retry = int(value)
    if buffer:
        events.append(ServerSentEvent(b"\n".join(buffer), name, ident, retry))
    return events


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.lists(field_line, max_size=30),
    newline=st.sampled_from(["\n", "\n", "\r\n", "\r"]),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=20),
)
def test_the_decoder_agrees_with_the_line_by_line_rules(lines, newline, cuts):
    data = "".join(line + newline for line in lines).encode()
    assert decode_all([data]) == reference(data)
    assert decode_all(split(data, cuts)) == reference(data)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.lists(
        st.one_of(field_line, field_line.map(lambda _: "data: {}"), field_line.map(lambda _: "")),
        max_size=40,
    ),
    newline=st.sampled_from(["\n", "\n", "\r\n"]),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=20),
)
def test_feed_data_gives_the_events_of_the_line_by_line_rules(lines, newline, cuts):
    # The hot path's split: whole events, then plain data events (a single data line each).
    data = "".join(line + newline for line in lines).encode()
    decoder, got = SSEDecoder(), []
    for piece in split(data, cuts):
        fields, plain = decoder.feed_data(piece)
        got += [(raw, event) for raw, event, _, _ in fields] + [(raw, None) for raw in plain]
    got += [(e.raw, e.event) for e in decoder.close()]
    assert got == [(e.raw, e.event) for e in reference(data)]
