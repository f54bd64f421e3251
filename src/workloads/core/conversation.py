"""One session's chat history and its nonces. Pure: values in, values out.

Message layout (roles alternate, which strict chat templates such as Gemma's require)::

    system     nonce line, then the system prompt + tool schema (+ shared repository files)
    user       [session nonce line, when nonce = "run"] task + repository files  <- opening
               + turn 1's new content (a tool result, or a question in chat style)
    assistant  the server's reply to turn 1, verbatim (its content and tool_calls)
    tool       one per tool call of that reply (``tool_call_id``): a tool step's result
               goes in the first, the others hold a short result
    user       turn 2's new content (a reply without tool calls, or a human request)
    ...

A compaction replaces everything after the system message by one user message holding the
model's summary (:meth:`Conversation.compact`).

``nonce = "session"`` starts the system message with the session's nonce, so no two sessions
(and no two repetitions) share more than the template's first few tokens. ``nonce = "run"``
starts it with the repetition's run nonce instead: the whole system message is byte-identical
across that repetition's sessions, and the session nonce opens the user message. An opening
of 0 tokens has no messages at all; the session nonce then opens turn 1's content.

How long each piece is (``n_system``, ``n_user``, a turn's ``n``) is decided by the caller,
which measures the rendered chat with the target's tokenizer (``runner/sizing.py``).
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from workloads.core.corpus import Corpus, Style, TextStream
from workloads.core.tokens import Message

__all__ = [
    "NONCE_WORDS",
    "SHORT_RESULT",
    "SUMMARY_HEAD",
    "Conversation",
    "Nonces",
    "complete_calls",
    "make_nonces",
    "probe_nonce",
]

# The result of a tool call whose output is not the step's sized content (the other calls of
# a parallel reply; every call before a human request or a compaction).
SHORT_RESULT = "Done."
# What the summary message after a compaction starts with.
SUMMARY_HEAD = "This session continues from an earlier conversation, summarised here:\n\n"


# Short common words, one token after a space in cl100k and, being plain English of at most
# four letters, in the other common tokenizers too (even 32K-entry vocabularies): a nonce
# made of them has a stable token count whatever the entropy, so sizing done on one
# repetition still holds on the next. Random hex would not (its count changes with the
# digits), nor would long words (a smaller vocabulary splits "squirrel").
NONCE_WORDS = (
    "ash",
    "bay",
    "bean",
    "bee",
    "bell",
    "bird",
    "boat",
    "bone",
    "book",
    "bowl",
    "box",
    "bush",
    "cake",
    "calf",
    "cane",
    "cap",
    "card",
    "cart",
    "cat",
    "cave",
    "clay",
    "coat",
    "coin",
    "cone",
    "cord",
    "corn",
    "cow",
    "crab",
    "crow",
    "cup",
    "dart",
    "dawn",
    "deer",
    "desk",
    "dew",
    "dish",
    "dog",
    "door",
    "dove",
    "drum",
    "duck",
    "dust",
    "echo",
    "egg",
    "elm",
    "fan",
    "farm",
    "fern",
    "fig",
    "fish",
    "flag",
    "fog",
    "foot",
    "fork",
    "fox",
    "frog",
    "gate",
    "gem",
    "goat",
    "gold",
    "gown",
    "hat",
    "hay",
    "hen",
    "hill",
    "hive",
    "horn",
    "ink",
    "iris",
    "iron",
    "jade",
    "jam",
    "jar",
    "jet",
    "key",
    "kite",
    "lake",
    "lamb",
    "lamp",
    "leaf",
    "lime",
    "lion",
    "lock",
    "map",
    "mast",
    "mint",
    "mole",
    "moon",
    "moss",
    "moth",
    "nest",
    "net",
    "nut",
    "oak",
    "owl",
    "ox",
    "palm",
    "pan",
    "pea",
    "pear",
    "pen",
    "pig",
    "pine",
    "pipe",
    "plum",
    "pond",
    "pot",
    "rail",
    "rain",
    "ram",
    "reef",
    "ring",
    "road",
    "rock",
    "roof",
    "rope",
    "rose",
    "ruby",
    "rug",
    "sail",
    "salt",
    "sand",
    "seal",
    "seed",
    "ship",
    "shoe",
    "silk",
    "sky",
    "snow",
    "sock",
    "soup",
    "star",
    "stem",
    "sun",
    "tea",
    "tent",
    "tide",
    "tree",
    "vase",
    "vine",
    "wall",
    "wave",
    "well",
    "wind",
    "wing",
    "wolf",
    "wood",
    "wool",
    "yak",
    "yarn",
    "zinc",
)
_WORDS_PER_NONCE = 7  # 151^7: about 50 bits of entropy per nonce


@dataclass(frozen=True, slots=True)
class Nonces:
    """One repetition's nonces: ``run`` (shared by its sessions, nonce = "run") and one per
    session."""

    run: str | None
    sessions: list[str]


def _words(digest: bytes, first: int) -> list[str]:
    """Nonce words: the first is ``NONCE_WORDS[first]``, the rest come from ``digest``."""
    value = int.from_bytes(digest, "big")
    out = [NONCE_WORDS[first % len(NONCE_WORDS)]]
    for _ in range(_WORDS_PER_NONCE - 1):
        value, index = divmod(value, len(NONCE_WORDS))
        out.append(NONCE_WORDS[index])
    return out


def make_nonces(
    entropy: bytes,
    *,
    cell: int,
    repetition: int,
    users: int,
    mode: Literal["session", "run"],
) -> Nonces:
    """Fresh nonces for one repetition of one cell, derived from ``entropy`` (per run).

    Distinct by construction within a run: each ends with its ``#cell.repetition.session``
    coordinates, and within a repetition the sessions' first words differ (up to
    ``len(NONCE_WORDS)`` sessions), so prompts diverge on the nonce's first token. Fresh
    across runs: the words come from ``entropy``.
    """
    base = hashlib.sha256(entropy + f":{cell}:{repetition}".encode()).digest()
    offset = base[0]  # where this repetition's first words start in NONCE_WORDS

    def nonce(key: str, first: int, suffix: str) -> str:
        digest = hashlib.sha256(base + key.encode()).digest()
        return " ".join(_words(digest, first)) + suffix

    sessions = [
        nonce(f":session:{s}", offset + s, f" #{cell}.{repetition}.{s}") for s in range(users)
    ]
    run = nonce(":run", base[1], f" #{cell}.{repetition}") if mode == "run" else None
    return Nonces(run=run, sessions=sessions)


def probe_nonce(nonces: Nonces) -> str:
    """A nonce that differs from every session's from its first word on: the stand-in
    "other session" for measuring the shared prefix when there is only one user."""
    first = {s.split()[0] for s in nonces.sessions}
    word = next((w for w in NONCE_WORDS if w not in first), "x")
    return " ".join([word, *nonces.sessions[0].split()[1:-1]]) + " #probe"


def complete_calls(tool_calls: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The tool calls of a reply an agent can run and a server can render again: those whose
    arguments are a whole JSON object. A call cut by ``max_tokens`` has arguments that do
    not parse; an agent cannot run it, and servers refuse a history that holds it
    (llama.cpp answers HTTP 500 "Failed to parse tool call arguments as JSON", vLLM parses
    them too), so it stays out of the history. Pure."""
    complete = []
    for call in tool_calls or []:
        arguments = (call.get("function") or {}).get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                continue
        if isinstance(arguments, dict):
            complete.append(call)
    return complete


@dataclass
class Conversation:
    """The growing history of one session in one repetition."""

    corpus: Corpus
    style: Style
    seed: int
    session: int
    nonce: str
    run_nonce: str | None
    messages: list[Message] = field(default_factory=list)
    _system: TextStream | None = None
    _user: TextStream | None = None
    # The stream of the turn being sized (one: an earlier turn's held its token ids and
    # file text to the session's end), and what each turn's stream was made from, so one
    # asked for again is made again with the same text.
    _system_message: tuple[tuple[str, int], Message] | None = None  # opening()'s last
    _turns: dict[int, TextStream] = field(default_factory=dict)
    _made: dict[int, tuple[Style, str | None, str | None]] = field(default_factory=dict)
    # The agent's step kinds by turn ("human" content is a person's request; "tool" and
    # the others a tool result) and text a turn's content starts with (sub-agents' results).
    kinds: dict[int, str] = field(default_factory=dict)
    heads: dict[int, str] = field(default_factory=dict)

    def _streams(self) -> tuple[TextStream, TextStream]:
        """The opening's text streams, made again when asked for after :meth:`set_opening`
        let them go (a stream is a function of the seed and session: the same text)."""
        if self._system is None or self._user is None:
            self._system = self.corpus.system_stream(self.style, self.seed)
            self._user = self.corpus.user_stream(self.style, self.seed, self.session)
        return self._system, self._user

    # --- the opening -------------------------------------------------------------------

    def opening(
        self, n_system: int, n_user: int, pad: str = "", *, nonce: str | None = None
    ) -> list[Message]:
        """The opening context with ``n_system`` / ``n_user`` tiktoken tokens of text after
        the nonce lines, the user text ending in ``pad``. ``nonce`` replaces the session
        nonce (to measure the shared part)."""
        system_stream, user_stream = self._streams()
        session_line = f"{nonce or self.nonce}\n"
        # Cuts never end in whitespace: templates that trim messages (Llama 3's) would drop
        # it, and the count would stall for a step and then jump.
        head = session_line if self.run_nonce is None else f"{self.run_nonce}\n"
        if self._system_message is None or self._system_message[0] != (head, n_system):
            # One message while the sizing search holds n_system and cuts the user text:
            # the candidates share it (and the estimate its ids), none is ever changed.
            system = {"role": "system", "content": head + system_stream.take(n_system).rstrip()}
            self._system_message = ((head, n_system), system)
        if self.run_nonce is None:
            user = user_stream.take(n_user).rstrip() + pad
        else:
            user = session_line + user_stream.take(n_user).rstrip() + pad
        return [self._system_message[1], {"role": "user", "content": user}]

    def set_opening(self, messages: list[Message]) -> None:
        """Start the history with ``messages`` (an opening, or [] for none). The opening's
        streams are let go: sized, they only held their text and token ids until the session
        ended (at C256 in the agent shape most of the corpus' share of the client's peak)."""
        self.messages = copy.deepcopy(messages)
        self._system = self._user = None

    # --- turns -------------------------------------------------------------------------

    def content(self, turn: int, n: int, pad: str = "") -> str:
        """Turn ``turn``'s new content cut at ``n`` tiktoken tokens, then ``pad`` (a few
        characters that fine-tune the count by a token or two); when there is no opening,
        turn 1's content starts with the session nonce."""
        stream = self._turns.get(turn)
        if stream is None:
            if turn not in self._made:
                style: Style = "chat" if self.kinds.get(turn) == "human" else self.style
                # a tool result is the output of the tool the last reply called
                calls = self.messages[-1].get("tool_calls") if self.messages else None
                tool = None
                if calls and self.kinds.get(turn, "tool") == "tool":
                    tool = str((calls[0].get("function") or {}).get("name") or "") or None
                self._made[turn] = (style, tool, self.heads.get(turn))
            style, tool, head = self._made[turn]
            stream = self.corpus.turn_stream(style, self.seed, self.session, turn, tool)
            if head is not None:
                stream = stream.prefixed(head + "\n\n")
            self._turns = {turn: stream}
        text = stream.take(n).rstrip() + pad
        if turn == 1 and not self.messages:
            text = f"{self.nonce}\n{text}"
        return text

    def with_turn(self, turn: int, n: int, pad: str = "") -> list[Message]:
        """The messages turn ``turn`` would send with ``n`` tokens of new content (and
        ``pad``). Pure: the history is unchanged until :meth:`commit`."""
        return self.with_text(self.content(turn, n, pad), self.kinds.get(turn, "tool"))

    def with_text(self, new: str, kind: str = "tool") -> list[Message]:
        """The messages with ``new`` added as a step of ``kind`` adds it: after a reply with
        tool calls, one ``tool`` message per call (a tool step's content in the first, a
        short result in the others; a human request or a compaction's instruction follows
        them as a user message); else appended to a last user message, or a new one. Pure."""
        messages = list(self.messages)  # earlier messages are never changed: share them
        calls = self.pending_calls()
        if calls:
            into_tool = kind in ("tool", "subagent")
            for i, call_id in enumerate(calls):
                result = new if into_tool and i == 0 else SHORT_RESULT
                messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
            if into_tool:
                return messages
        if messages and messages[-1]["role"] == "user":
            last = dict(messages[-1])
            head = last["content"]
            last["content"] = f"{head}\n\n{new}" if head else new
            messages[-1] = last
        else:
            messages.append({"role": "user", "content": new})
        return messages

    def pending_calls(self) -> list[str]:
        """The ids of the last reply's tool calls when nothing has answered them yet."""
        if not self.messages or self.messages[-1]["role"] != "assistant":
            return []
        return [str(c.get("id", "")) for c in self.messages[-1].get("tool_calls") or []]

    def framing(self) -> str:
        """How the next turn's content joins the history (sizing learns each one's template
        tokens): "append" to a user message, "tool" messages, or a new "message"."""
        if self.pending_calls():
            return "tool"
        if self.messages and self.messages[-1]["role"] == "user":
            return "append"
        return "message"

    def commit(self, messages: list[Message]) -> None:
        """Make ``messages`` (from :meth:`with_turn`) the history: the turn is being sent."""
        self.messages = messages

    def add_reply(self, text: str, tool_calls: list[dict[str, Any]] | None = None) -> None:
        """Append the server's reply verbatim, its tool calls as returned: the next turn's
        context holds what it said."""
        if tool_calls:
            self.messages.append(
                {"role": "assistant", "content": text or None, "tool_calls": tool_calls}
            )
        else:
            self.messages.append({"role": "assistant", "content": text})

    def compact(self, summary: str) -> None:
        """After a compaction: the system message (prompt and tools) and the summary alone."""
        keep = self.messages[:1] if self.messages and self.messages[0]["role"] == "system" else []
        self.messages = [*keep, {"role": "user", "content": SUMMARY_HEAD + summary}]
