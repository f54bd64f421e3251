"""The what-if cache oracle: ideal LRU hit rates of a run's token sequences, no timing."""

from __future__ import annotations

import pytest

from workloads.simulated_server.engine import Engine
from workloads.simulated_server.oracle import OracleRequest, lru_hits, replay, what_if
from workloads.simulated_server.profiles import get_profile


def sessions(users: int, turns: int, opening: int, new: int, reply: int) -> list[OracleRequest]:
    """Lock-step agent sessions: each turn's prompt = the last prompt + reply + new tokens."""
    prompts = [list(range(s * 10**6, s * 10**6 + opening)) for s in range(users)]
    out = []
    for turn in range(1, turns + 1):
        for s in range(users):
            base = s * 10**6 + turn * 10**5
            if turn > 1:
                prompts[s] = prompts[s] + list(range(base, base + new))
            completion = list(range(base + 50_000, base + 50_000 + reply))
            out.append(OracleRequest(list(prompts[s]), completion, turn=turn))
            prompts[s] = prompts[s] + completion
    return out


def test_unlimited_capacity_hits_everything_but_the_uncomputed_tail():
    rows = replay(sessions(5, 3, 8000, 1000, 500), capacity_tokens=None)
    assert [r.turn for r in rows] == [1, 2, 3]
    assert rows[0].hit_tokens == 0
    # turn 2: each session's prompt + reply minus the reply's last token, whole blocks
    assert rows[1].hit_tokens == 5 * 16 * ((8000 + 500 - 1) // 16)
    assert rows[1].hit_rate == pytest.approx(8496 / 9500)


def test_a_working_set_bigger_than_the_cache_thrashes_an_lru():
    # Five ~10K sessions in 46,202 tokens: even one request at a time, each admission evicts
    # the tail of the session that comes next, and the loss compounds turn by turn.
    rows = what_if(sessions(5, 3, 9500, 1000, 64), capacity_tokens=46_202)
    assert rows[1].unlimited_hit_tokens == 5 * 16 * ((9500 + 64 - 1) // 16)
    effectiveness = [r.lru_effectiveness for r in rows[1:]]
    assert 0.3 < effectiveness[0] < 0.8 and effectiveness[1] < 0.3
    # the same sessions one after another fit easily
    one = what_if(sessions(1, 3, 9500, 1000, 64), capacity_tokens=46_202)
    assert one[1].lru_effectiveness == 1.0


def test_the_oracle_agrees_with_the_engine_when_requests_run_one_at_a_time():
    requests = sessions(3, 3, 700, 150, 40)
    engine = Engine(get_profile("fast", {"kv_capacity_tokens": 3000}))
    observed = []
    for r in requests:
        seq = engine.submit(list(r.prompt), list(r.completion), max_tokens=len(r.completion))
        while not seq.finished:
            engine.complete_step(engine.plan_step())
        observed.append(seq.truth.cached_tokens)
    assert observed == lru_hits(requests, capacity_tokens=3000)
    assert sum(observed) > 0


def test_prompts_alone_miss_the_replies():
    with_replies = sessions(2, 2, 1000, 100, 200)
    without = [OracleRequest(r.prompt, turn=r.turn) for r in with_replies]
    assert replay(without, capacity_tokens=None)[1].hit_tokens == 2 * 16 * (1000 // 16)
    assert replay(with_replies, capacity_tokens=None)[1].hit_tokens == 2 * 16 * (1199 // 16)


def test_a_capacity_below_one_block_is_refused():
    with pytest.raises(ValueError):
        replay([OracleRequest([1, 2, 3])], capacity_tokens=8)
