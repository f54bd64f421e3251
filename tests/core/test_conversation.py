from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from workloads.core.conversation import (
    NONCE_WORDS,
    SHORT_RESULT,
    SUMMARY_HEAD,
    Conversation,
    complete_calls,
    make_nonces,
    probe_nonce,
)
from workloads.core.corpus import load_corpus

CORPUS = load_corpus("stdlib")


def conversations(nonces, *, style="agent"):
    return [
        Conversation(corpus=CORPUS, style=style, seed=0, session=i, nonce=n, run_nonce=nonces.run)
        for i, n in enumerate(nonces.sessions)
    ]


@settings(max_examples=40, deadline=None)
@given(
    entropy=st.binary(min_size=16, max_size=16),
    users=st.integers(1, 40),
    repetitions=st.integers(1, 4),
    cells=st.integers(1, 3),
    mode=st.sampled_from(["session", "run"]),
)
def test_nonces_differ_across_cells_repetitions_and_sessions(
    entropy, users, repetitions, cells, mode
):
    every = [
        make_nonces(entropy, cell=c, repetition=r, users=users, mode=mode)
        for c in range(cells)
        for r in range(repetitions)
    ]
    sessions = [n for rep in every for n in rep.sessions]
    assert len(set(sessions)) == len(sessions) == users * repetitions * cells
    for rep in every:  # within a repetition, prompts diverge on the nonce's first word
        assert len({n.split()[0] for n in rep.sessions}) == users
        assert probe_nonce(rep).split()[0] not in {n.split()[0] for n in rep.sessions}
    runs = [rep.run for rep in every]
    assert (runs == [None] * len(every)) if mode == "session" else len(set(runs)) == len(every)


@given(entropy=st.binary(min_size=16, max_size=16))
def test_nonces_are_fresh_per_run_but_made_of_stable_words(entropy):
    a = make_nonces(entropy, cell=0, repetition=0, users=3, mode="run")
    b = make_nonces(
        bytes(16) if entropy != bytes(16) else b"x" * 16, cell=0, repetition=0, users=3, mode="run"
    )
    assert a.sessions != b.sessions and a.run != b.run
    assert all(w in NONCE_WORDS for n in a.sessions for w in n.split()[:-1])


@settings(max_examples=15, deadline=None)
@given(
    entropy=st.binary(min_size=16, max_size=16),
    users=st.integers(2, 6),
    n_system=st.integers(0, 3000),
    n_user=st.integers(0, 3000),
)
def test_with_nonce_run_the_system_message_is_byte_identical_across_a_repetition(
    entropy, users, n_system, n_user
):
    first, second = (
        make_nonces(entropy, cell=0, repetition=r, users=users, mode="run") for r in (0, 1)
    )
    openings = [c.opening(n_system, n_user) for c in conversations(first)]
    assert len({o[0]["content"] for o in openings}) == 1  # the shared prefix
    assert len({o[1]["content"] for o in openings}) == users  # then each session's nonce
    assert all(o[1]["content"].startswith(n) for o, n in zip(openings, first.sessions, strict=True))
    later = conversations(second)[0].opening(n_system, n_user)
    assert later[0]["content"] != openings[0][0]["content"]  # no sharing across repetitions


@settings(max_examples=10, deadline=None)
@given(entropy=st.binary(min_size=16, max_size=16), users=st.integers(2, 6))
def test_with_nonce_session_nothing_is_shared_from_the_first_character_on(entropy, users):
    nonces = make_nonces(entropy, cell=0, repetition=0, users=users, mode="session")
    systems = [c.opening(700, 50)[0]["content"] for c in conversations(nonces)]
    assert len({s.split()[0] for s in systems}) == users


def test_turns_append_to_the_opening_then_alternate_with_real_replies():
    nonces = make_nonces(b"k" * 16, cell=0, repetition=0, users=1, mode="session")
    (conv,) = conversations(nonces)
    conv.set_opening(conv.opening(700, 300))
    before = [dict(m) for m in conv.messages]
    first = conv.with_turn(1, 200)
    assert conv.messages == before  # pure until committed
    assert [m["role"] for m in first] == ["system", "user"]
    assert first[1]["content"].startswith(before[1]["content"] + "\n\n")
    conv.commit(first)
    conv.add_reply("I'll read it.\n```tool_call\n{}\n```")
    second = conv.with_turn(2, 100, ".")
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert second[-1]["content"].endswith(".") and not second[-1]["content"][:-1].endswith(" ")


def test_without_an_opening_turn_one_starts_with_the_session_nonce():
    nonces = make_nonces(b"c" * 16, cell=0, repetition=0, users=2, mode="session")
    conv = conversations(nonces, style="chat")[1]
    conv.set_opening([])
    messages = conv.with_turn(1, 40)
    assert len(messages) == 1 and messages[0]["role"] == "user"
    assert messages[0]["content"].startswith(nonces.sessions[1] + "\n")


# --- tool calls, human requests and compaction ------------------------------------------

CALLS = [
    {"id": "call_a", "type": "function", "function": {"name": "read", "arguments": "{}"}},
    {"id": "call_b", "type": "function", "function": {"name": "grep", "arguments": "{}"}},
    {"id": "call_c", "type": "function", "function": {"name": "glob", "arguments": "{}"}},
]


def opened(nonce_mode="run"):
    nonces = make_nonces(b"t" * 16, cell=0, repetition=0, users=1, mode=nonce_mode)
    (conv,) = conversations(nonces)
    conv.set_opening(conv.opening(300, 100))
    conv.commit(conv.with_turn(1, 50))
    return conv


def test_a_tool_step_answers_every_call_with_a_tool_message_of_its_id():
    conv = opened()
    conv.add_reply("Reading.", CALLS)
    assert conv.pending_calls() == ["call_a", "call_b", "call_c"]
    assert conv.framing() == "tool"
    messages = conv.with_text("the file's text", "tool")
    tools = messages[len(conv.messages) :]
    assert [m["role"] for m in tools] == ["tool"] * 3
    assert [m["tool_call_id"] for m in tools] == ["call_a", "call_b", "call_c"]
    assert [m["content"] for m in tools] == ["the file's text", SHORT_RESULT, SHORT_RESULT]
    assert messages[: len(conv.messages)] == conv.messages  # the history is unchanged


def test_a_subagent_result_also_goes_into_the_first_tool_message():
    conv = opened()
    conv.add_reply("", CALLS[:1])
    messages = conv.with_text("the sub-agent's answer", "subagent")
    assert messages[-1] == {
        "role": "tool",
        "tool_call_id": "call_a",
        "content": "the sub-agent's answer",
    }


def test_a_human_request_after_tool_calls_answers_them_then_is_a_user_message():
    conv = opened()
    conv.add_reply("Two calls.", CALLS[:2])
    messages = conv.with_text("Now fix the failing test, please.", "human")
    tail = messages[len(conv.messages) :]
    assert [m["role"] for m in tail] == ["tool", "tool", "user"]
    assert [m["tool_call_id"] for m in tail[:2]] == ["call_a", "call_b"]
    assert all(m["content"] == SHORT_RESULT for m in tail[:2])
    assert tail[2]["content"] == "Now fix the failing test, please."


def test_after_a_reply_without_calls_the_next_step_is_a_new_user_message():
    conv = opened()
    conv.add_reply("All done.")
    assert conv.pending_calls() == [] and conv.framing() == "message"
    messages = conv.with_text("more output", "tool")
    assert messages[-1] == {"role": "user", "content": "more output"}


def test_calls_answered_are_no_longer_pending():
    conv = opened()
    conv.add_reply("x", CALLS[:1])
    conv.commit(conv.with_text("result", "tool"))
    assert conv.pending_calls() == []
    assert conv.framing() == "message"  # the last message is a tool message, not a user one


def test_a_reply_with_tool_calls_and_no_text_stores_content_none():
    conv = opened()
    conv.add_reply("", CALLS[:1])
    assert conv.messages[-1] == {"role": "assistant", "content": None, "tool_calls": CALLS[:1]}
    conv.add_reply("Some text", CALLS[1:2])
    assert conv.messages[-1]["content"] == "Some text"


def test_compact_keeps_the_system_message_and_a_summary():
    conv = opened()
    system = dict(conv.messages[0])
    conv.add_reply("Reading.", CALLS[:1])
    conv.commit(conv.with_text("result", "tool"))
    conv.add_reply("Read it.")
    conv.commit(conv.with_text(COMPACT, "compaction"))
    conv.compact("The task: fix parse().")
    assert conv.messages == [
        system,
        {"role": "user", "content": SUMMARY_HEAD + "The task: fix parse()."},
    ]
    assert conv.framing() == "append"


def test_a_compaction_after_tool_calls_answers_them_first():
    conv = opened()
    conv.add_reply("", CALLS[:2])
    tail = conv.with_text(COMPACT, "compaction")[len(conv.messages) :]
    assert [m["role"] for m in tail] == ["tool", "tool", "user"]
    assert tail[-1]["content"] == COMPACT


COMPACT = "Summarise the conversation so far."


def test_a_tool_call_cut_before_its_arguments_closed_stays_out_of_the_history():
    # a call cut by max_tokens: its arguments do not parse, an agent cannot run it and a
    # server refuses to render it again (llama.cpp: HTTP 500)
    whole = {"id": "a", "type": "function", "function": {"name": "read", "arguments": '{"p": 1}'}}
    cut = {"id": "b", "type": "function", "function": {"name": "grep", "arguments": '{"pat'}}
    listed = {"id": "c", "type": "function", "function": {"name": "bash", "arguments": "[1]"}}
    assert complete_calls([whole, cut, listed]) == [whole]
    assert complete_calls(None) == []


def test_the_opening_cut_again_after_it_was_set_is_the_same_text():
    # set_opening lets the opening's streams go; asked again, they are made again
    nonces = make_nonces(b"\x01" * 16, cell=0, repetition=0, users=2, mode="session")
    conversation = conversations(nonces)[0]
    first = conversation.opening(300, 900, ".")
    conversation.set_opening(first)
    assert conversation.opening(300, 900, ".") == first
    assert conversation.opening(310, 1200) != first  # a longer cut: more of the same text
    assert conversation.opening(310, 1200)[1]["content"].startswith(first[1]["content"][:-1])


def test_a_turn_asked_for_again_after_a_later_one_is_the_same_text():
    # only the turn being sized keeps its stream; an earlier one is made again from what
    # made it, though the history (the tool its reply called) has changed since
    nonces = make_nonces(b"\x02" * 16, cell=0, repetition=0, users=1, mode="session")
    conversation = conversations(nonces)[0]
    conversation.set_opening(conversation.opening(300, 600))
    first = conversation.content(1, 200)
    conversation.commit(conversation.with_turn(1, 200))
    call = {"id": "c1", "type": "function", "function": {"name": "grep", "arguments": "{}"}}
    conversation.add_reply("", [call])
    second = conversation.content(2, 150)
    assert conversation.content(1, 200) == first
    assert conversation.content(2, 150) == second != first
