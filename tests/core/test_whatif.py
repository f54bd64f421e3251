"""The what-if cache oracle: ideal LRU hit rates of a run's token sequences, no timing."""

from __future__ import annotations

import pytest

from workloads.core.whatif import OracleRequest, lru_hits, replay, what_if
from workloads.servers.simulated.engine import Engine
from workloads.servers.simulated.profiles import get_profile


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


def test_a_real_run_replays_through_the_oracle(tmp_path):
    """The report's sentence: observed hits at C5 vs an LRU of the same capacity vs unlimited,
    from the simulated server's own token ids."""
    import workloads
    from workloads.servers.simulated import SimulatedServer

    scenario = workloads.load_scenario("five-user-coding").with_overrides(
        [
            "users=5",
            "turns=2",
            "opening_tokens=9500",
            "turn_tokens=1000",
            "output_tokens=64",
            "repetitions.warmup=0",
            "repetitions.measured=1",
        ]
    )
    with SimulatedServer("fast", sim={"kv_capacity_tokens": 46202}) as server:
        result = workloads.run(scenario, server.target, out_dir=tmp_path / "run")
        ordered = sorted(result.records, key=lambda r: r.sent_ns or 0)
        requests = [
            OracleRequest(*server.token_ids(r.request_id or ""), turn=r.turn) for r in ordered
        ]
    turn2 = what_if(requests, capacity_tokens=46202)[1]
    observed = sum(r.cached_tokens or 0 for r in result.records if r.turn == 2)
    assert observed < 0.5 * turn2.unlimited_hit_tokens
    # Five ~11K sessions overflow 46K tokens even one request at a time: the collapse is the
    # capacity's, not only the concurrency's (which of the two costs more varies by run).
    assert turn2.lru_effectiveness is not None and turn2.lru_effectiveness < 0.5
    # with no limit every turn-2 prompt would hit its whole block-rounded history
    shareable = sum(r.shareable_tokens or 0 for r in result.records if r.turn == 2)
    assert turn2.unlimited_hit_tokens == sum(
        16 * ((r.shareable_tokens - 1) // 16) for r in result.records if r.turn == 2
    )
    assert turn2.unlimited_hit_tokens / shareable > 0.99
