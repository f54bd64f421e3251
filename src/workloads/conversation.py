"""One session's chat history: the opening context, the new content of each turn, and the
server's REAL replies. Pure: values in, values out.

Message layout (roles alternate, which strict chat templates such as Gemma's require)::

    system     [run nonce, when nonce = "run"] system prompt + tool schema
    user       [session nonce] task + repository files    <- opening context
               + turn 1's new content (a tool result)
    assistant  the server's reply to turn 1, verbatim
    user       turn 2's new content
    ...

``nonce = "session"`` puts the session nonce first in the system message, so no two sessions
(and no two repetitions) share a single token of prefix. ``nonce = "run"`` keeps a
byte-identical system message across one repetition's sessions, starting with the run nonce,
and puts the session nonce right after it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Literal

from workloads import tokens
from workloads.content import Corpus

__all__ = ["Conversation", "open_conversation"]

# Per-message overhead of common chat templates (role markers, separators), in tokens. Only
# used to size the opening context before the server has told us its real count.
TEMPLATE_TOKENS_PER_MESSAGE = 4


@dataclass
class Conversation:
    """The growing history of one session in one repetition."""

    session: int
    nonce: str
    run_nonce: str | None
    corpus: Corpus
    seed: int
    turn_tokens: int
    messages: list[dict[str, str]] = field(default_factory=list)
    opening_text_tokens: int = 0  # tiktoken count of the opening context we built
    _pending_user: str = ""

    def begin_turn(self, turn: int) -> list[dict[str, str]]:
        """Add turn ``turn``'s new content and return the messages to send (a copy)."""
        rng = self.corpus.rng(self.seed, self.session, turn)
        new = self.corpus.tool_result(rng, turn, self.turn_tokens)
        if turn == 1:
            self.messages[-1]["content"] += "\n\n" + new
        else:
            self.messages.append({"role": "user", "content": new})
        return copy.deepcopy(self.messages)

    def add_reply(self, text: str) -> None:
        """Append the server's reply verbatim: the next turn's context holds what it said."""
        self.messages.append({"role": "assistant", "content": text})

    @property
    def shared_system(self) -> str:
        return self.messages[0]["content"]


def open_conversation(
    *,
    corpus: Corpus,
    session: int,
    nonce: str,
    run_nonce: str | None,
    seed: int,
    opening_tokens: int,
    turn_tokens: int,
    adjust_tokens: int = 0,
) -> Conversation:
    """Build a session's opening context of about ``opening_tokens`` tokens.

    ``adjust_tokens`` corrects the size once the target has told us how its tokenizer and
    chat template count this text (positive = add context).
    """
    system = corpus.system_text()
    if run_nonce is None:
        system = f"[session {nonce}]\n{system}"
        user_head = ""
    else:
        system = f"[run {run_nonce}]\n{system}"
        user_head = f"[session {nonce}]\n"
    rng = corpus.rng(seed, session, 0)
    user_head += corpus.task_text(rng) + "\n\nRelevant files:\n"
    fixed = tokens.count(system) + tokens.count(user_head) + 2 * TEMPLATE_TOKENS_PER_MESSAGE
    body_tokens = max(0, opening_tokens - fixed + adjust_tokens)
    body = corpus.repository_context(rng, body_tokens)
    conversation = Conversation(
        session=session,
        nonce=nonce,
        run_nonce=run_nonce,
        corpus=corpus,
        seed=seed,
        turn_tokens=turn_tokens,
        messages=[
            {"role": "system", "content": system},
            {"role": "user", "content": user_head + body},
        ],
        opening_text_tokens=fixed + tokens.count(body),
    )
    return conversation


Role = Literal["system", "user", "assistant"]
