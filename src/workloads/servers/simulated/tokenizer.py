"""The simulated model's tokenizer and chat template (ChatML-like, on tiktoken cl100k).

Each message is encoded segment by segment — role marker, role name, newline, content, end
marker — so the token sequence of a conversation is exactly the concatenation of its parts.
That makes prefix caching exact: the tokens the engine generated for a reply are the tokens
the reply encodes to when the client sends it back in the next turn's history. A reply's tool
calls are part of its text (:func:`workloads.core.tokens.assistant_text`, the Hermes markup),
so that holds for them too; the request's ``tools`` close the system block
(:func:`workloads.core.tokens.tools_text`), and a ``tool`` message is a block of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workloads.core import tokens

IM_START = 100264
IM_END = 100265
_SPECIAL_TEXT = {IM_START: "<|im_start|>", IM_END: "<|im_end|>"}


def encode(text: str) -> list[int]:
    """The ids of ``text`` (plain text; recent texts remembered: every turn re-sends its
    history)."""
    return tokens.encode(text)


def decode(ids: Sequence[int]) -> str:
    out: list[str] = []
    plain: list[int] = []
    for i in ids:
        if i in _SPECIAL_TEXT:
            out.append(tokens.encoding().decode(plain))
            plain = []
            out.append(_SPECIAL_TEXT[i])
        else:
            plain.append(i)
    out.append(tokens.encoding().decode(plain))
    return "".join(out)


def token_bytes(token: int) -> bytes:
    if token in _SPECIAL_TEXT:
        return _SPECIAL_TEXT[token].encode()
    return tokens.encoding().decode_single_token_bytes(token)


def render(
    messages: Sequence[dict[str, Any]],
    *,
    tools: Sequence[dict[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    continue_final_message: bool = False,
) -> list[int]:
    """Token ids of a chat, as the simulated model sees it."""
    newline = encode("\n")
    ids: list[int] = []
    texts = [tokens.message_text(m) if isinstance(m, dict) else "" for m in messages]
    roles = [str(m.get("role", "user")) if isinstance(m, dict) else "user" for m in messages]
    if tools:
        if roles and roles[0] == "system":
            texts[0] += tokens.tools_text(tools)
        else:
            ids += [IM_START, *encode("system"), *newline]
            ids += [*encode(tokens.tools_text(tools)), IM_END, *newline]
    for index, (role, text) in enumerate(zip(roles, texts, strict=True)):
        ids.append(IM_START)
        ids += encode(role)
        ids += newline
        ids += encode(text)
        if continue_final_message and index == len(messages) - 1:
            return ids
        ids.append(IM_END)
        ids += newline
    if add_generation_prompt:
        ids.append(IM_START)
        ids += encode("assistant")
        ids += newline
    return ids


def stable_completion(text: str, n_tokens: int) -> list[int]:
    """Exactly ``n_tokens`` ids whose decoded text encodes back to the same ids.

    A cut through a multi-byte character or a merge across the cut would otherwise make the
    reply re-encode differently in the next turn, and the prefix cache would miss for a
    reason no real engine has.
    """
    ids = encode(text)[:n_tokens]
    filler = encode(" ok")
    for _ in range(64):  # bounded; converges in a step or two
        if len(ids) < n_tokens:
            ids = ids + filler * (n_tokens - len(ids))
        again = encode(decode(ids))
        if again == ids and len(ids) == n_tokens:
            return ids
        ids = again[: max(0, min(len(again), n_tokens) - 1)]
    return (filler * n_tokens)[:n_tokens]
