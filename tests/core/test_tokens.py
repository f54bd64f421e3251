from __future__ import annotations

import asyncio
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fakes import LlamaCppLikeServer
from workloads.core import tokens
from workloads.core.tokens import EstimateTokenizer, fit
from workloads.wire.tokenize import LlamaCppTokenizer, VllmTokenizer, probe_tokenizer

CHAT = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "def f(x):\n    return x + 1\n\nWhat does f do?"},
]


def naive_lcp(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@given(st.lists(st.integers(0, 3), max_size=60), st.lists(st.integers(0, 3), max_size=60))
def test_common_prefix_length_matches_the_naive_loop(a, b):
    assert tokens.common_prefix_length(a, b) == naive_lcp(a, b)
    assert tokens.common_prefix_length(a, a + b) == len(a)


def measured(f):
    calls = []

    async def measure(n: int) -> int:
        calls.append(n)
        return f(n)

    return measure, calls


@settings(max_examples=100, deadline=None)
@given(
    ratio=st.floats(0.6, 1.8),
    offset=st.integers(0, 50),
    target_n=st.integers(0, 5000),
    guess=st.integers(0, 8000),
)
def test_fit_finds_a_hit_of_a_nondecreasing_measure_within_its_call_budget(
    ratio, offset, target_n, guess
):
    f = lambda n: offset + int(ratio * n)  # noqa: E731
    target = f(target_n)  # reachable by construction
    measure, calls = measured(f)
    found = asyncio.run(fit(measure, target, guess=guess, slope=1.0, max_calls=12))
    assert found.value == target == f(found.n)
    assert found.calls == len(set(calls)) <= 12


@given(target=st.integers(1, 400), guess=st.integers(0, 400))
def test_fit_settles_on_the_closest_value_when_no_size_hits(target, guess):
    measure, _ = measured(lambda n: 2 * n)  # every count is even
    found = asyncio.run(fit(measure, 2 * target + 1, guess=guess, max_calls=12))
    assert abs(found.value - (2 * target + 1)) == 1
    assert found.value == 2 * target  # under the target on a tie


def test_fit_reports_a_target_below_the_smallest_size():
    measure, _ = measured(lambda n: 10 + n)
    found = asyncio.run(fit(measure, 3, guess=50))
    assert (found.n, found.value) == (0, 10)


def test_the_estimate_counts_content_and_a_chatml_sized_allowance():
    est = EstimateTokenizer()
    body = sum(tokens.count(m["content"]) for m in CHAT)
    assert len(asyncio.run(est.render(CHAT, "generate"))) == body + 2 * 5 + 3
    assert len(asyncio.run(est.render(CHAT, "continue"))) == body + 5 + 4
    assert not est.exact and est.calls == 0


async def _shapes(tokenizer):
    async with tokenizer:
        full = await tokenizer.render(CHAT, "generate")
        prefix = await tokenizer.render(CHAT, "continue")
        plain = await tokenizer.encode(CHAT[-1]["content"])
    return full, prefix, plain


def test_vllm_shape_on_the_simulated_server(simulated_server):
    root = simulated_server.base_url.removesuffix("/v1")
    found = asyncio.run(probe_tokenizer(root, simulated_server.model))
    assert isinstance(found, VllmTokenizer)
    full, prefix, plain = asyncio.run(_shapes(found))
    # ChatML on cl100k: "continue" stops right after the content, before <|im_end|>.
    assert full[: len(prefix)] == prefix and len(full) == len(prefix) + 5
    assert prefix[-len(plain) :] == plain
    assert found.calls == 3 and found.seconds > 0


def test_llamacpp_shape_renders_with_apply_template_and_tokenize():
    with LlamaCppLikeServer() as server:
        root = server.base_url.removesuffix("/v1")
        found = asyncio.run(probe_tokenizer(root, server.model))
        assert isinstance(found, LlamaCppTokenizer)
        full, prefix, plain = asyncio.run(_shapes(found))
        template = server.tokenizer.template(CHAT)
        assert full == server.tokenizer.encode(template, add_special=True)
        assert full[0] == 1 and full[: len(prefix)] == prefix  # BOS, then a true prefix
        assert prefix[-len(plain) :] == plain


def test_a_target_without_tokenize_has_no_tokenizer():
    with LlamaCppLikeServer(tokenize=False) as server:
        root = server.base_url.removesuffix("/v1")
        assert asyncio.run(probe_tokenizer(root, server.model)) is None


def test_a_failing_tokenize_call_is_a_tokenize_error():
    async def call():
        async with VllmTokenizer("http://127.0.0.1:9", "m", timeout_s=2) as tok:
            await tok.encode("x")

    with pytest.raises(tokens.TokenizeError, match=r"127\.0\.0\.1:9/tokenize"):
        asyncio.run(call())


# --- the segment memo behind estimate sizing -------------------------------------------------

_PIECES = st.sampled_from(
    [
        "\n",
        "\n\n",
        "  ",
        "\t",
        "\r\n",
        "def",
        " f(x):",
        ")",
        ".",
        "'s",
        "123",
        "é",
        " ",
        "\u3000",
        "x",
        "    return",
        "#",
        "\x0c",
        "```",
        "αβ",
        "\u2028",
        ":\n",
    ]
)


@given(st.lists(_PIECES, max_size=40))
@settings(max_examples=400)
def test_segments_join_back_and_encode_exactly_as_the_whole_text(pieces):
    text = "".join(pieces)
    segs = tokens.segments(text)
    assert "".join(segs) == text
    enc = tokens.encoding()
    assert [i for s in segs for i in enc.encode_ordinary(s)] == enc.encode_ordinary(text)


def test_segments_encode_exactly_on_real_source_files():
    from workloads.core.corpus import load_corpus

    enc = tokens.encoding()
    for f in load_corpus("stdlib").files[:60]:
        segs = tokens.segments(f.text)
        assert [i for s in segs for i in enc.encode_ordinary(s)] == enc.encode_ordinary(f.text)


def test_the_estimate_re_encodes_only_what_is_new():
    tok = EstimateTokenizer()
    history = [{"role": "user", "content": "def f(x):\n    return x\n" * 400}]
    first = asyncio.run(tok.render(history, "generate"))
    assert tok.memo.missing([history[0]["content"]]) == []  # all of it is memoised now
    grown = [*history, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "go"}]
    assert tok.memo.missing([m["content"] for m in grown]) == ["ok", "go"]
    again = asyncio.run(tok.render(grown, "generate"))
    assert again[: len(first) - 3] == first[:-3]  # the generation prompt moved to the end


def test_a_bounded_memo_forgets_the_least_recently_used():
    memo = tokens.SegmentMemo(max_tokens=50)
    memo.learn(["alpha beta gamma\n" * 10])  # 40+ tokens
    memo.learn(["delta epsilon\n" * 10])
    assert memo.missing(["alpha beta gamma\n" * 10]) != []  # evicted to stay under 50 tokens
    assert memo.ids("delta epsilon\n" * 10) == tokens.encoding().encode_ordinary(
        "delta epsilon\n" * 10
    )


def test_the_encoding_keeps_no_python_copy_of_its_ranks_and_still_pickles_by_name():
    enc = tokens.encoding()
    assert "_mergeable_ranks" not in vars(enc)  # ~14 MB of RSS, needed only to pickle by value
    again = pickle.loads(pickle.dumps(enc))
    text = "Hello, world: the tables still encode and decode."
    assert again.encode_ordinary(text) == enc.encode_ordinary(text)
    assert enc.decode(enc.encode_ordinary(text)) == text


# --- encode(): recent texts remembered (corpus pieces, the simulator's re-sent histories) ---


@given(st.text(max_size=400))
def test_encode_is_tiktokens_encoding_first_and_again(text):
    plain = tokens.encoding().encode_ordinary(text)
    assert tokens.encode(text) == plain
    again = tokens.encode(text)
    assert again == plain
    again.append(7)  # the caller's list is its own
    assert tokens.encode(text) == plain


def test_what_encode_remembers_stays_within_its_bound(monkeypatch):
    monkeypatch.setattr(tokens, "_RECENT", tokens._Lru(800))
    texts = [f"def f{i}(x):\n    return x * {i}\n" * 4 for i in range(60)]
    for text in texts:
        tokens.encode(text)
    held = sum(len(ids) for ids in tokens._RECENT._items.values())
    assert held == tokens._RECENT._tokens <= 800
    assert texts[-1] in tokens._RECENT and texts[0] not in tokens._RECENT  # oldest out first
    assert [tokens.encode(t) for t in texts] == [
        tokens.encoding().encode_ordinary(t) for t in texts
    ]
