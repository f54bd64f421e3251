from __future__ import annotations

from workloads.model.transcripts import prompt_hash
from workloads.runner.turn import PromptHasher


def test_a_growing_history_hashes_as_prompt_hash_does_whatever_it_shares() -> None:
    hasher = PromptHasher()
    system = {"role": "system", "content": "Tu es bref. « ça » 🙂"}
    user = {"role": "user", "content": "read main.py"}
    history = [system, user]
    assert hasher(history) == prompt_hash(history)
    # the usual turn: the reply and a new message appended, the earlier ones shared
    reply = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read"}}],
    }
    history = [*history, reply, {"role": "tool", "tool_call_id": "c1", "content": "x = 1\n"}]
    assert hasher(history) == prompt_hash(history)
    # content appended to the last user message: a new dict in its place
    appended = [*history[:-1], {**history[-1], "content": "x = 1\n\nand more"}]
    assert hasher(appended) == prompt_hash(appended)
    # a compaction: shorter than before
    compacted = [system, {"role": "user", "content": "summary"}]
    assert hasher(compacted) == prompt_hash(compacted)
    # the same message object given new content is not taken for the one hashed before
    compacted[1]["content"] = "another summary"
    assert hasher(compacted) == prompt_hash(compacted)
    assert hasher([]) == prompt_hash([])
    assert hasher([user]) == prompt_hash([user])
