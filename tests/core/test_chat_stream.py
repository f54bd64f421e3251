"""The hot path folded by hand against the plain reading of every chunk: whatever the chunk
shapes, escapes and read boundaries, ChatStream says what ``said`` (the plain reading, by
``generated``) says, chunk by chunk."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workloads.core.chat_stream import ChatStream, Usage, generated
from workloads.model.errors import RequestError

text = st.text(max_size=8)  # any code point: quotes, backslashes, newlines, emoji
delta = st.one_of(
    st.fixed_dictionaries({"content": text}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": st.just("")}),
    st.fixed_dictionaries({"reasoning_content": text}),
    st.fixed_dictionaries({"tool_calls": st.just([{"index": 0}])}),
    st.fixed_dictionaries(
        {
            "content": st.lists(
                st.fixed_dictionaries({"type": st.just("text"), "text": text}), max_size=2
            )
        }
    ),
    st.fixed_dictionaries({"content": st.none()}),
    st.fixed_dictionaries(
        {
            "role": st.none(),
            "content": text,
            "reasoning_content": st.none(),
            "tool_calls": st.none(),
        }
    ),  # SGLang's nulls
    st.fixed_dictionaries({"content": text, "reasoning": text}),
)
choice = st.fixed_dictionaries(
    {"index": st.just(0), "delta": delta},
    optional={
        "finish_reason": st.sampled_from([None, "length", "stop", 1]),
        "logprobs": st.none(),
    },
)
chunk = st.fixed_dictionaries(
    {"id": st.just("c1"), "choices": st.lists(choice, min_size=0, max_size=1)},
    optional={
        "usage": st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {"prompt_tokens": st.integers(0, 10**6), "completion_tokens": st.integers(0, 10**6)}
            ),
        ),
        "timings": st.one_of(st.none(), st.fixed_dictionaries({"predicted_n": st.integers(0, 9)})),
        "model": text,
        "object": st.just("chat.completion.chunk"),
    },
)


def said(chunk: dict) -> tuple[str, bool, str | None, Usage | None]:
    """What one chunk of these says, worked out the plain way, apart from ChatStream's
    inlined path: content text, whether it carries generated content, finish_reason, usage."""
    choice = chunk["choices"][0] if chunk["choices"] else {}
    content, reasoning, calls = generated(choice["delta"]) if choice else ("", "", None)
    raw = chunk.get("usage")
    usage = None
    if raw is not None:
        usage = Usage(raw["prompt_tokens"], raw["completion_tokens"], cached_tokens=None)
    reason = choice.get("finish_reason")
    reason = reason if isinstance(reason, str) else None  # a number is no finish_reason
    return content, bool(content or reasoning or calls), reason, usage


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    chunks=st.lists(chunk, max_size=6),
    ascii_only=st.booleans(),
    cuts=st.lists(st.integers(0, 10**5), max_size=12),
)
def test_the_stream_says_what_each_chunk_says(chunks, ascii_only, cuts):
    wire = (
        b"".join(
            b"data: " + json.dumps(c, ensure_ascii=ascii_only).encode() + b"\n\n" for c in chunks
        )
        + b"data: [DONE]\n\n"
    )
    points = sorted({c % (len(wire) + 1) for c in cuts})
    reads = [wire[a:b] for a, b in zip([0, *points], [*points, len(wire)], strict=True)]
    stream = ChatStream()
    done = False
    for now, read in enumerate(reads, 1):
        if stream.feed(read, now):
            done = True
            break
    assert done and stream.saw_done
    parsed = [said(c) for c in chunks]
    # Each content chunk is stamped with the read that brought its blank line, the end of
    # its event: chunk by chunk, whichever path read it.
    ends, at = [], 0
    for _ in chunks:
        at = wire.index(b"\n\n", at) + 2
        ends.append(at)
    stamp = [sum(start < end for start in [0, *points]) for end in ends]  # reads begun
    stamps = [s for s, p in zip(stamp, parsed, strict=True) if p[1]]
    assert list(stream.content_ns) == stamps
    texts = [s for s, p in zip(stamp, parsed, strict=True) if p[0]]
    assert stream.first_text_ns == (texts[0] if texts else None)
    assert stream.first_content_ns == (stamps[0] if stamps else None)
    assert stream.last_content_ns == (stamps[-1] if stamps else None)
    assert stream.text == "".join(p[0] for p in parsed)
    assert stream.content_events == sum(p[1] for p in parsed)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert stream.content_events == sum(any(generated(d)) for d in deltas)
    assert stream.reasoning_text == "".join(generated(d)[1] for d in deltas)
    reasons = [p[2] for p in parsed if p[2] is not None]
    assert stream.finish_reason == (reasons[-1] if reasons else None)
    usages = [p[3] for p in parsed if p[3] is not None]
    assert stream.usage == (usages[-1] if usages else None)
    if stream.content_events:
        assert stream.first_content_ns is not None
        assert stream.first_content_ns <= stream.last_content_ns


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (b"data: {oops\n\n", "malformed"),
        (b"data: [1]\n\n", "malformed"),
        (b"data: \xff\xfe\n\n", "malformed"),
        (b'data: {"error": {"message": "overloaded"}}\n\n', "error_event"),
        (b"event: error\ndata: {}\n\n", "error_event"),
    ],
)
def test_what_is_not_a_chunk_raises_its_kind(data, kind):
    with pytest.raises(RequestError) as caught:
        ChatStream().feed(data, 1)
    assert caught.value.kind == kind


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (b'data: {"choices": [{"delta": {"content": "a"}}], "error": null}\n\n', "error_event"),
        (b'data: {"choices": [{"delta": {"content": "a"}}], "x": "\xff"}\n\n', "malformed"),
        (b'data: {"choices": [{"delta": {"content": "a"}}], "x": "\xed\xa0\x80"}\n\n', "malformed"),
        (b'data: {"choices": [{"delta": {"content": "\xc3\xa9"}}]}\n\n', None),
        (b'data: {"choices": [{"delta": {"content": "\xff"}}]}\n\n', "malformed"),
        (b'data: {"choices": [{"delta": {"content": "a"}}]} {}\n\n', "malformed"),
    ],
)
def test_a_chunk_after_the_first_is_judged_as_the_first(data, kind):
    """Past the first chunk (the common shape's typed path): an ``error`` member, even null,
    is an error event; bad JSON or bad UTF-8 anywhere in the chunk, a field the client does
    not read included, is malformed, as in the first chunk; good UTF-8 is read (None)."""
    stream = ChatStream()
    stream.feed(b'data: {"id": "c1", "choices": []}\n\n', 1)
    if kind is None:
        stream.feed(data, 2)
        assert stream.text == "é"
        return
    with pytest.raises(RequestError) as caught:
        stream.feed(data, 2)
    assert caught.value.kind == kind


def test_done_without_a_final_blank_line_is_found_at_close():
    stream = ChatStream()
    assert not stream.feed(b'data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: [DONE]', 1)
    assert stream.close(2) and stream.saw_done and stream.done_ns == 2 and stream.text == "a"


def test_every_content_chunk_keeps_its_arrival_for_the_itl_distribution():
    from workloads.core.chat_stream import ChatStream

    def chunk(text: str) -> bytes:
        return b'data: {"choices":[{"delta":{"content":"' + text.encode() + b'"}}]}\n\n'

    stream = ChatStream()
    stream.feed(b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n', 100)  # no content
    stream.feed(chunk("a") + chunk("b"), 200)  # two chunks in one read share its stamp
    stream.feed(chunk("c"), 450)
    assert list(stream.content_ns) == [200, 200, 450]
    assert stream.first_content_ns == 200 and stream.last_content_ns == 450


def test_records_of_a_real_run_carry_chunk_gaps(simulated_server):
    import workloads

    scenario = workloads.load_scenario("five-user-coding").with_overrides(
        [
            "users=2",
            "turns=1",
            "opening_tokens=300",
            "output_tokens=12",
            "repetitions.warmup=0",
            "repetitions.measured=1",
        ]
    )
    result = workloads.run(scenario, simulated_server.target)
    for r in result.records:
        assert r.chunk_gaps_us is not None and len(r.chunk_gaps_us) == r.content_events - 1
        assert all(g >= 0 for g in r.chunk_gaps_us)
    assert result.summary.run.itl_percentiles is not None


@pytest.mark.parametrize(
    ("delta", "output"),
    [
        ({"content": "Hel"}, ("Hel", "", None)),
        ({"role": "assistant", "content": ""}, ("", "", None)),
        ({"role": "assistant"}, ("", "", None)),
        (
            {"role": None, "content": "x", "reasoning_content": None, "tool_calls": None},
            ("x", "", None),
        ),
        ({"content": [{"type": "text", "text": "a"}, {"type": "image_url"}]}, ("a", "", None)),
        ({"content": None, "reasoning_content": "hm"}, ("", "hm", None)),
        ({"content": None, "reasoning_content": "", "reasoning": "hm"}, ("", "hm", None)),
        ({"tool_calls": [{"index": 0}]}, ("", "", [{"index": 0}])),
        ({"tool_calls": []}, ("", "", None)),
        ({"tool_calls": {"index": 0}}, ("", "", None)),  # not a list: not tool calls
        ({"content": 5, "reasoning_content": ["x"]}, ("", "", None)),
    ],
)
def test_what_a_delta_generated(delta, output):
    assert generated(delta) == output
    chunk = {"id": "c1", "choices": [{"index": 0, "delta": delta}]}
    stream = ChatStream()
    stream.feed(b"data: " + json.dumps(chunk).encode() + b"\n\n", 1)
    assert (stream.content_events == 1) == any(output)


def test_content_and_reasoning_in_one_delta_keep_both():
    chunk = {"id": "c1", "choices": [{"index": 0, "delta": {"content": "a", "reasoning": "r"}}]}
    stream = ChatStream()
    wire = b"".join(b"data: " + json.dumps(chunk).encode() + b"\n\n" for _ in range(3))
    stream.feed(wire, 1)
    assert stream.text == "aaa" and stream.reasoning_text == "rrr" and stream.content_events == 3
