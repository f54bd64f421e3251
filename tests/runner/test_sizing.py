"""Sizing against a tokenizer and template that are not the estimate's (no sockets)."""

from __future__ import annotations

import asyncio

import pytest

import workloads
from fakes import LocalTokenizer
from workloads.core.conversation import Conversation, make_nonces, probe_nonce
from workloads.core.corpus import load_corpus
from workloads.core.tokens import EstimateTokenizer
from workloads.runner.sizing import CellSizing

CORPUS = load_corpus("stdlib")


def scenario(**fields):
    base = {
        "name": "t",
        "users": 2,
        "turns": 3,
        "opening_tokens": 3000,
        "turn_tokens": 400,
        "output_tokens": 16,
    }
    return workloads.Scenario.model_validate({**base, **fields})


async def open_and_turns(sizing: CellSizing, tok, *, session=0, turns=2, reply="ok " * 16):
    s = sizing.scenario
    nonces = make_nonces(b"s" * 16, cell=0, repetition=0, users=s.users, mode=s.nonce)
    conv = Conversation(
        corpus=CORPUS,
        style=s.content.style,
        seed=0,
        session=session,
        nonce=nonces.sessions[session],
        run_nonce=nonces.run,
    )
    n_system = await sizing.fit_shared(conv, probe_nonce(nonces)) if s.opening_tokens else 0
    messages, ids, exact = await sizing.fit_opening(conv, n_system)
    conv.set_opening(messages)
    prompts, base = [], len(ids)
    for turn in range(1, turns + 1):
        prepared = await sizing.fit_turn(conv, turn, base, exact=exact)
        conv.commit(prepared.messages)
        prompts.append(
            tok.count_prompt(prepared.messages)
            if hasattr(tok, "count_prompt")
            else len(prepared.ids)
        )
        conv.add_reply(reply)
        base = len(prepared.ids) + len(await tok.encode(reply))
    return len(ids), prompts


@pytest.mark.parametrize(
    ("fields", "kind"),
    [
        ({}, "words"),
        ({}, "split"),
        ({"opening_tokens": 300}, "words"),  # smaller than the system prompt: it is cut
        ({"opening_tokens": 0, "turn_tokens": 70, "content": {"style": "chat"}}, "words"),
        ({"nonce": "run", "shared_prefix_tokens": 2000}, "split"),
    ],
)
def test_openings_and_prompts_hit_the_targets_tokens_exactly(fields, kind):
    s = scenario(**fields)
    tok = LocalTokenizer(kind)
    sizing = CellSizing(s, tok)
    opening, prompts = asyncio.run(open_and_turns(sizing, tok))
    assert opening == s.opening_tokens
    # turn 1: opening + turn_tokens; turn 2: turn 1's prompt + its reply + turn_tokens
    reply = len(tok.tokenizer.encode("ok " * 16))
    assert prompts == [s.configured_prompt_tokens(1), prompts[0] + reply + s.turn_tokens]


def test_a_second_repetition_reuses_what_the_first_learned():
    s = scenario()
    tok = LocalTokenizer("split")
    sizing = CellSizing(s, tok)
    asyncio.run(open_and_turns(sizing, tok))
    first = tok.calls
    asyncio.run(open_and_turns(sizing, tok))
    assert tok.calls - first <= first / 2


def test_the_shared_prefix_is_the_common_part_of_two_sessions():
    s = scenario(nonce="run", shared_prefix_tokens=2000)
    tok = LocalTokenizer("words")
    sizing = CellSizing(s, tok)
    nonces = make_nonces(b"q" * 16, cell=0, repetition=0, users=2, mode="run")
    convs = [
        Conversation(corpus=CORPUS, style="agent", seed=0, session=i, nonce=n, run_nonce=nonces.run)
        for i, n in enumerate(nonces.sessions)
    ]
    n_system = asyncio.run(sizing.fit_shared(convs[0], probe_nonce(nonces)))
    a, b = (asyncio.run(tok.render(c.opening(n_system, 100), "continue")) for c in convs)
    common = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
    assert abs(common - 2000) <= 1


def test_estimates_are_scaled_by_what_the_warm_up_taught_per_session():
    sizing = CellSizing(scenario(), EstimateTokenizer())
    sizing.learn([(0, 1, 1100, 1000), (1, 1, 1300, 1000), (0, 2, 500, 400)])
    assert sizing.session_scale[(1, 1)] == 1.3 and sizing.scale[1] == pytest.approx(1.2)
    est = sizing.estimate
    assert sizing.turn_target(1, 0, est, session=1) == round(3400 / 1.3)
    assert sizing.turn_target(1, 0, est, session=5) == round(3400 / 1.2)  # unseen: median
    assert sizing.turn_target(2, 7000, est, session=0) == 7000 + 320


def _turn2(shareable: int, cached: int):
    from workloads.model.records import TurnRecord

    return TurnRecord(
        repetition=0,
        warmup=False,
        session=0,
        turn=2,
        status="ok",
        valid=True,
        prompt_tokens=shareable + 100,
        completion_tokens=500,
        cached_tokens=cached,
        shareable_tokens=shareable,
        shareable_exact=True,
        configured_prior_tokens=0,
        started_ns=0,
    )


def test_sampled_replies_that_go_uncached_are_explained_not_blamed_on_the_cache():
    from workloads.model.results import Sizing
    from workloads.runner.sizing import sizing_warnings

    sizing = Sizing(tokenizer="t", exact=True, calls=1, seconds=0.1)
    sampled = scenario(output_tokens=500, sampling={"temperature": 0.7})
    records = [_turn2(9_000, 8_512), _turn2(9_500, 9_008)]  # ~490 of 500 reply tokens missed
    (warning,) = [w for w in sizing_warnings(records, sizing, sampled) if "reads low" in w]
    # Measured from what 16-token blocks can hold of the shareable prefix: 8,992 and 9,488.
    assert "median cacheable − cached = 480 tokens" in warning
    greedy = scenario(output_tokens=500, sampling={"temperature": 0})
    assert not [w for w in sizing_warnings(records, sizing, greedy) if "reads low" in w]
    reused = [_turn2(9_000, 8_992)]  # the cache served what was shareable
    assert not [w for w in sizing_warnings(reused, sizing, sampled) if "reads low" in w]
