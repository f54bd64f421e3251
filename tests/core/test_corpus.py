from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from workloads.core import tokens
from workloads.core.corpus import TextStream, load_corpus

STDLIB = load_corpus("stdlib")


def test_the_default_corpus_is_this_pythons_standard_library():
    assert STDLIB.name == "stdlib" and len(STDLIB.files) > 100
    assert any(f.path == "json/decoder.py" for f in STDLIB.files) or len(STDLIB.files) > 300
    assert len(STDLIB.fingerprint) == 16


def test_text_is_deterministic_per_seed_and_differs_across_sessions_and_seeds():
    def opening(seed: int, session: int) -> str:
        return STDLIB.user_stream("agent", seed, session).take(2000)

    assert opening(0, 1) == opening(0, 1)
    assert opening(0, 1) != opening(0, 2)
    assert opening(0, 1) != opening(7, 1)
    assert STDLIB.system_stream("agent", 3).take(900) == STDLIB.system_stream("agent", 3).take(900)


@given(n=st.integers(0, 3000), k=st.integers(0, 500))
def test_a_longer_cut_of_a_stream_extends_the_shorter_one(n, k):
    stream = STDLIB.turn_stream("agent", 0, 0, 2)
    short, long = stream.take(n), stream.take(n + k)
    assert long.startswith(short)
    assert tokens.count(short) <= n + 1  # a cut is at most its token count (+1 for a merge)


def test_the_system_stream_starts_with_prompt_and_tool_schema():
    text = STDLIB.system_stream("agent", 0).take(STDLIB.natural_system_tokens("agent"))
    assert text.startswith("You are a careful software engineering agent")
    assert '"name": "apply_patch"' in text and text.rstrip().endswith("]")
    assert STDLIB.system_stream("chat", 0).take(10).startswith("You are a helpful")


def test_tool_results_cover_file_reads_grep_test_logs_and_diffs():
    kinds = set()
    for session in range(6):
        for turn in range(1, 9):
            head = STDLIB.turn_stream("agent", 0, session, turn).take(60)
            kinds.add(head.split("[tool result: ")[1].split("]")[0])
    assert kinds == {"read", "grep", "bash", "edit"}  # the coding tool set's names


def test_a_tool_result_is_the_output_of_the_tool_called():
    # read: a file dump; grep and glob: hits; bash: a command's log; edit and write: a diff
    # (no drawn header: the text is that tool's output)
    for tool, drawn in [("read", "read"), ("glob", "grep"), ("bash", "bash"), ("write", "edit")]:
        got = STDLIB.turn_stream("agent", 0, 1, 2, tool).take(200)
        assert "[tool result:" not in got
        for turn in range(1, 40):  # the same kind drawn without a call has the same shape
            head = STDLIB.turn_stream("agent", 0, 1, turn).take(60)
            if f"[tool result: {drawn}]" in head:
                break
        else:
            raise AssertionError(f"no drawn {drawn} result")
    assert STDLIB.turn_stream("agent", 0, 1, 2, "task").take(60).count("[tool result:") == 1


def test_chat_turns_are_questions_about_code():
    text = STDLIB.turn_stream("chat", 0, 3, 1).take(120)
    assert "?" in text.splitlines()[0] and "```" in text


def test_agent_replies_are_mostly_tool_calls():
    replies = [STDLIB.reply_text(STDLIB.rng(0, "reply", i), 80) for i in range(60)]
    calls = sum("```tool_call" in r.split("\n```\n")[0] for r in replies)
    assert calls == 60  # every reply opens with a sentence and a tool call
    assert all(tokens.count(r) <= 81 for r in replies)


def test_a_user_directory_is_a_corpus_with_a_content_fingerprint(tmp_path):
    (tmp_path / "src").mkdir()
    go = "package main\n\n" + "func f() int { return 1 }\n" * 20
    (tmp_path / "src" / "main.go").write_text(go)
    (tmp_path / "lib.rs").write_text("pub fn g() -> u32 {\n    2\n}\n" * 20)
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "secret.py").write_text("x = 1\n" * 100)
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01" * 500)
    first = load_corpus.__wrapped__(str(tmp_path))
    assert sorted(f.path for f in first.files) == ["lib.rs", "src/main.go"]
    (tmp_path / "lib.rs").write_text("pub fn g() -> u32 {\n    3\n}\n" * 20)
    second = load_corpus.__wrapped__(str(tmp_path))
    assert first.fingerprint != second.fingerprint


def test_the_synthetic_corpus_needs_no_files():
    corpus = load_corpus("synthetic")
    assert corpus.files and corpus.user_stream("agent", 0, 0).take(500)


def test_an_empty_text_stream_cut_is_empty():
    assert TextStream(iter(["abc"] * 3)).take(0) == ""
