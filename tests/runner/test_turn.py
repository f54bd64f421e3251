from __future__ import annotations

import hashlib
import json

from workloads.model.transcripts import TranscriptWriter, prompt_hash
from workloads.runner.turn import PromptHasher


def digest(message: dict[str, object]) -> str:
    """The transcripts' name for a message, computed here from its definition."""
    canonical = json.dumps(message, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def check(hasher: PromptHasher, history: list[dict[str, object]]) -> None:
    assert hasher(history) == prompt_hash(history)
    assert hasher.digests == [digest(m) for m in history]


def test_a_growing_history_hashes_as_prompt_hash_does_whatever_it_shares() -> None:
    hasher = PromptHasher()
    system = {"role": "system", "content": "Tu es bref. « ça » 🙂"}
    user = {"role": "user", "content": "read main.py"}
    history: list[dict[str, object]] = [system, user]
    check(hasher, history)
    # the usual turn: the reply and a new message appended, the earlier ones shared
    reply = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read"}}],
    }
    history = [*history, reply, {"role": "tool", "tool_call_id": "c1", "content": "x = 1\n"}]
    check(hasher, history)
    # content appended to the last user message: a new dict in its place
    appended = [*history[:-1], {**history[-1], "content": "x = 1\n\nand more"}]
    check(hasher, appended)
    # a compaction: shorter than before
    compacted: list[dict[str, object]] = [system, {"role": "user", "content": "summary"}]
    check(hasher, compacted)
    # the same message object given new content is not taken for the one hashed before
    compacted[1]["content"] = "another summary"
    check(hasher, compacted)
    check(hasher, [])
    check(hasher, [user])


def test_a_message_changed_in_place_anywhere_is_hashed_again() -> None:
    hasher = PromptHasher()
    calls: list[dict[str, object]] = [{"id": "c1", "type": "function", "function": {"name": "a"}}]
    reply: dict[str, object] = {"role": "assistant", "content": None, "tool_calls": calls}
    tool: dict[str, object] = {"role": "tool", "tool_call_id": "c1", "content": "ok"}
    history = [{"role": "user", "content": "go"}, reply, tool]
    check(hasher, history)
    calls.append({"id": "c2", "type": "function", "function": {"name": "b"}})  # nested
    check(hasher, history)
    function = calls[0]["function"]
    assert isinstance(function, dict)
    function["name"] = "renamed"  # deeper still
    check(hasher, history)
    reply["name"] = "agent"  # a key added, the content untouched
    check(hasher, history)
    # equal in Python, not in JSON: 1, 1.0 and True; 0.0 and -0.0
    for value in (1, 1.0, True, 0.0, -0.0):
        tool["weight"] = value
        check(hasher, history)


def test_the_writer_names_messages_by_the_hashers_digests_and_writes_the_same_bytes(
    tmp_path,
) -> None:
    history: list[dict[str, object]] = [
        {"role": "system", "content": "sé"},
        {"role": "user", "content": "q"},
    ]
    hasher = PromptHasher()
    paths = tmp_path / "given.jsonl", tmp_path / "computed.jsonl"
    with TranscriptWriter(paths[0]) as given, TranscriptWriter(paths[1]) as computed:
        for turn in (1, 2, 3):
            prompt = hasher(history)
            given.write(
                cell=0,
                repetition=0,
                warmup=False,
                session=0,
                turn=turn,
                messages=history,
                completion=f"a{turn}",
                prompt_sha256=prompt,
                digests=hasher.digests,
            )
            computed.write(
                cell=0,
                repetition=0,
                warmup=False,
                session=0,
                turn=turn,
                messages=history,
                completion=f"a{turn}",
            )
            history = [
                *history,
                {"role": "assistant", "content": f"a{turn}"},
                {"role": "user", "content": f"q{turn}"},
            ]
    assert paths[0].read_bytes() == paths[1].read_bytes()
