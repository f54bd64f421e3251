from __future__ import annotations

from hypothesis import given
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


payload_text = st.text(
    alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)),
    max_size=40,
)


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


def test_multiline_data_comments_and_event_names():
    stream = b": keep-alive\nevent: delta\ndata: a\ndata: b\n\ndata:c\n\n"
    assert decode_all([stream]) == [ServerSentEvent("a\nb", "delta"), ServerSentEvent("c")]


def test_event_without_final_blank_line_is_flushed_on_close():
    assert decode_all([b"data: [DONE]"]) == [ServerSentEvent("[DONE]")]


def test_utf8_split_inside_a_character():
    stream = "data: héllo ✓\n\n".encode()
    cut = stream.index("✓".encode()) + 1
    assert decode_all([stream[:cut], stream[cut:]]) == [ServerSentEvent("héllo ✓")]
