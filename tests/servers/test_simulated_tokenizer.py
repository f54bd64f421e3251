"""The simulated model's tokenizer keeps recent texts' ids (every turn re-sends its history):
what it returns is tiktoken's encoding whether remembered or not, a caller cannot change what
it remembers, and what it holds stays within its bound."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from workloads.core import tokens
from workloads.servers.simulated import tokenizer


@given(st.text(max_size=400))
def test_encode_is_tiktokens_encoding_first_and_again(text):
    plain = tokens.encoding().encode_ordinary(text)
    assert tokenizer.encode(text) == plain
    again = tokenizer.encode(text)
    assert again == plain
    again.append(7)  # the caller's list is its own
    assert tokenizer.encode(text) == plain


def test_what_it_remembers_stays_within_its_bound(monkeypatch):
    monkeypatch.setattr(tokenizer, "_MEMO_TOKENS", 800)
    texts = [f"def f{i}(x):\n    return x * {i}\n" * 4 for i in range(60)]
    for text in texts:
        tokenizer.encode(text)
    held = sum(len(ids) for ids in tokenizer._memo.values())
    assert held == tokenizer._memo_held <= 800
    assert texts[-1] in tokenizer._memo and texts[0] not in tokenizer._memo  # oldest out first
    assert [tokenizer.encode(t) for t in texts] == [
        tokens.encoding().encode_ordinary(t) for t in texts
    ]
