"""Tool calls and reasoning in the simulated model's replies, and how they stream.

A reply that calls tools is one text, the way a Hermes-style template writes it: a little
content, then each call as :func:`workloads.core.tokens.assistant_text` renders it. The engine
generates that text's ids, exactly as many as asked; the stream splits them, as vLLM's hermes
tool parser does, into ``delta.content``, a ``tool_calls`` delta with the call's id and name
once the name is generated, and ``tool_calls`` deltas with pieces of the arguments; the markup
between them streams nothing. Sent back as the client assembled it (content + ``tool_calls``
with the same arguments string), the reply renders to the ids the engine generated, so the
prefix cache stays exact.

Reasoning (``delta.reasoning_content``, vLLM's reasoning parser) is the reply's first tokens;
it counts in ``completion_tokens`` but is not part of the content, so it never comes back in
the history (templates of thinking models drop it).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from workloads.core.agent import TOOL_CALL_MIN_OUTPUT
from workloads.core.corpus import Corpus
from workloads.servers.simulated import tokenizer
from workloads.servers.simulated.profiles import Profile
from workloads.servers.simulated.replies import plan_reply

__all__ = [
    "MIN_TOOL_REPLY_TOKENS",
    "THINKING_TOKENS",
    "ReplyStream",
    "ToolReply",
    "plan_tool_reply",
    "reasoning_tokens",
]

# below this a reply is content only (a call's markup is ~25 tokens): what a plan asks at least
# of a reply that must call a tool
MIN_TOOL_REPLY_TOKENS = TOOL_CALL_MIN_OUTPUT
THINKING_TOKENS = 64  # reasoning of a request that asks enable_thinking from a profile with 0
_CALL_OPEN = '\n<tool_call>\n{"name": '
_CALL_MID = ', "arguments": '
_CALL_CLOSE = "}\n</tool_call>"
# Argument filler: each is one cl100k token alone and after a space, and plain letters, so a
# word more is a token more and JSON escaping leaves the text as it is.
_WORDS = [
    "the",
    "file",
    "line",
    "test",
    "path",
    "value",
    "code",
    "change",
    "read",
    "check",
    "open",
    "list",
    "make",
    "call",
    "send",
    "find",
    "fix",
    "run",
    "case",
    "step",
    "name",
    "type",
    "data",
    "item",
    "part",
    "node",
    "text",
]
_TOOL_SALT = 0x7001C0DE
_REASONING_SALT = 0x7417C


def reasoning_tokens(profile: Profile, body: dict[str, Any], length: int) -> int:
    """How many of a ``length``-token reply's first tokens are reasoning: the profile's
    ``reasoning_tokens`` (THINKING_TOKENS when it is 0 and the request's
    ``chat_template_kwargs`` has ``enable_thinking: true``; none with ``false``), leaving at
    least one token of content."""
    kwargs = body.get("chat_template_kwargs")
    thinking = kwargs.get("enable_thinking") if isinstance(kwargs, dict) else None
    wanted = profile.reasoning_tokens
    if thinking is False:
        wanted = 0
    elif thinking is True and wanted == 0:
        wanted = THINKING_TOKENS
    return max(0, min(wanted, length - 1))


def plan_reasoning(corpus: Corpus, seed: int, n: int) -> list[int]:
    """``n`` stable ids of reasoning text (none for 0)."""
    return plan_reply(corpus, seed ^ _REASONING_SALT, n) if n > 0 else []


@dataclass(frozen=True, slots=True)
class _Call:
    index: int
    id: str
    name: str
    arguments: str
    name_end: int  # offsets in the reply text: the end of the quoted name,
    args_start: int  # and the arguments string
    args_end: int


@dataclass(frozen=True, slots=True)
class ToolReply:
    """A reply that ends in tool calls: its text (content, then the calls' markup), where
    the content ends, and each call with its offsets in the text."""

    text: str
    content_end: int
    calls: tuple[_Call, ...]

    @property
    def content(self) -> str:
        return self.text[: self.content_end]

    def tool_calls(self) -> list[dict[str, Any]]:
        """The calls as an OpenAI message carries them."""
        return [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in self.calls
        ]


def _offered(tools: Any, tool_choice: Any) -> list[tuple[str, str]]:
    """(name, argument key) of each function the request lets the model call."""
    if tool_choice == "none" or not isinstance(tools, list):
        return []
    wanted = None
    if isinstance(tool_choice, dict):
        function = tool_choice.get("function")
        wanted = function.get("name") if isinstance(function, dict) else None
    out = []
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            continue
        if wanted is not None and function["name"] != wanted:
            continue
        parameters = function.get("parameters")
        properties = parameters.get("properties") if isinstance(parameters, dict) else None
        key = next(iter(properties), "input") if isinstance(properties, dict) else "input"
        out.append((function["name"], str(key)))
    return out


def _build(
    content: str, picks: Sequence[tuple[str, str]], words: Sequence[list[str]], ids: Sequence[str]
) -> ToolReply:
    text = content
    calls = []
    for index, ((name, key), filler) in enumerate(zip(picks, words, strict=True)):
        arguments = json.dumps({key: " ".join(filler)})
        name_end = len(text) + len(_CALL_OPEN) + len(json.dumps(name))
        args_start = name_end + len(_CALL_MID)
        calls.append(
            _Call(
                index,
                ids[index],
                name,
                arguments,
                name_end,
                args_start,
                args_start + len(arguments),
            )
        )
        text += _CALL_OPEN + json.dumps(name) + _CALL_MID + arguments + _CALL_CLOSE
    return ToolReply(text=text, content_end=len(content), calls=tuple(calls))


def plan_tool_reply(
    corpus: Corpus,
    profile: Profile,
    body: dict[str, Any],
    *,
    seed: int,
    n_tokens: int,
    request_id: str,
) -> ToolReply | None:
    """A reply of exactly ``n_tokens`` tokens that ends in tool calls, or None: the request
    offers no tools (or ``tool_choice`` is "none"), the draw (``tool_call_share``, unless
    ``tool_choice`` is "required" or names a function) says content only, the reply is too
    short to hold a call, or no size of the arguments hits the count exactly (bounded)."""
    offered = _offered(body.get("tools"), body.get("tool_choice"))
    if not offered or n_tokens < MIN_TOOL_REPLY_TOKENS:
        return None
    rng = random.Random(seed ^ _TOOL_SALT)
    forced = body.get("tool_choice") == "required" or isinstance(body.get("tool_choice"), dict)
    if rng.random() >= profile.tool_call_share and not forced:
        return None
    k = rng.randint(2, 4) if rng.random() < profile.parallel_tool_call_share else 1
    k = min(k, max(1, (n_tokens - 8) // 40))  # each call gets room for its markup and some
    picks = [rng.choice(offered) for _ in range(k)]
    words = [[rng.choice(_WORDS)] for _ in range(k)]
    ids = [
        "call_" + hashlib.sha256(f"{request_id}:{seed}:{i}".encode()).hexdigest()[:24]
        for i in range(k)
    ]
    content_ids = plan_reply(corpus, seed, max(4, n_tokens // 4))
    content = tokenizer.decode(content_ids)
    for attempt in range(24):  # bounded: each pass moves the count toward n_tokens
        reply = _build(content, picks, words, ids)
        have = len(tokenizer.encode(reply.text))
        if have == n_tokens:
            return reply
        if have < n_tokens:  # one filler word is one token more
            for j in range(n_tokens - have):
                words[(attempt + j) % k].append(rng.choice(_WORDS))
            continue
        excess = have - n_tokens
        for filler in words:  # take filler back first, keeping one word a call
            take = min(excess, len(filler) - 1)
            del filler[len(filler) - take :]
            excess -= take
        if excess and content_ids:  # then shorten the content, whole tokens, clean UTF-8
            content_ids = content_ids[: max(0, len(content_ids) - excess)]
            content = b"".join(map(tokenizer.token_bytes, content_ids)).decode("utf-8", "ignore")
        elif excess and len(picks) > 1:  # then drop a call
            picks, words, ids = picks[:-1], words[:-1], ids[:-1]
            k -= 1
        elif excess:
            return None
    return None


@dataclass(slots=True)
class ReplyStream:
    """Splits a reply's generated text (after its reasoning), as it streams, into vLLM-shaped
    deltas: content, and the tool calls of ``reply`` when it has any. Feed it the decoded
    text in order."""

    reply: ToolReply | None
    pos: int = 0  # characters of the reply text seen so far
    announced: int = 0  # calls whose name delta went out

    def feed(self, text: str) -> list[dict[str, Any]]:
        """The deltas that ``text``, the next piece of the reply, streams."""
        a, b = self.pos, self.pos + len(text)
        self.pos = b
        reply = self.reply
        if reply is None:
            return [{"content": text}] if text else []
        out: list[dict[str, Any]] = []
        if a < reply.content_end:
            out.append({"content": text[: reply.content_end - a]})
        for call in reply.calls:
            if call.index == self.announced and b >= call.name_end:
                self.announced += 1
                out.append(
                    {
                        "tool_calls": [
                            {
                                "index": call.index,
                                "id": call.id,
                                "type": "function",
                                "function": {"name": call.name, "arguments": ""},
                            }
                        ]
                    }
                )
            lo, hi = max(a, call.args_start), min(b, call.args_end)
            if lo < hi:
                out.append(
                    {
                        "tool_calls": [
                            {
                                "index": call.index,
                                "function": {"arguments": reply.text[lo:hi]},
                            }
                        ]
                    }
                )
        return out
