"""The engine's scheduling, driven step by step without a clock: chunked prefill, prefix-cache
hits, admission, preemption, speculative decoding and the step-time model."""

from __future__ import annotations

import math

import pytest

from workloads.servers.simulated import get_profile
from workloads.servers.simulated.engine import Engine, Sequence, Step
from workloads.servers.simulated.profiles import expected_acceptance_rate


def engine(**overrides: object) -> Engine:
    return Engine(get_profile("fast", overrides))


def ids(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))


def run(e: Engine, max_steps: int = 100_000) -> list[Step]:
    steps = []
    clock = 0
    while e.waiting or e.running:
        step = e.plan_step()
        clock += 1_000_000
        e.complete_step(step, now_ns=clock)
        steps.append(step)
        assert len(steps) < max_steps, "the engine stopped making progress"
    return steps


def flat(chunks: list[list[int]]) -> list[int]:
    return [i for chunk in chunks for i in chunk]


def output(seq: Sequence) -> list[list[int]]:
    chunks = []
    while not seq.out.empty():
        item = seq.out.get_nowait()
        if item is not None:
            chunks.append(item)
    return chunks


def test_prefill_is_chunked_under_the_token_budget():
    e = engine(token_budget=100)
    seq = e.submit(ids(250), ids(3, 1000), max_tokens=3)
    steps = run(e)
    assert [s.prefill_tokens for s in steps] == [100, 100, 50, 0, 0]
    assert [len(c) for c in output(seq)] == [1, 1, 1]
    assert seq.truth.finish_reason == "length"


def test_decodes_go_first_and_new_prefills_share_what_is_left_of_the_budget():
    e = engine(token_budget=100)
    a = e.submit(ids(10), ids(50, 1000), max_tokens=50)
    e.complete_step(e.plan_step())  # a prefills and samples its first token
    e.submit(ids(300, 5000), ids(2, 9000), max_tokens=2)
    step = e.plan_step()
    assert [(w.seq is a, w.tokens, w.decode) for w in step.work] == [
        (True, 1, True),
        (False, 99, False),
    ]


@pytest.mark.parametrize(("prompt", "generated"), [(100, 20), (160, 32), (37, 11), (1000, 512)])
def test_with_ample_kv_cached_tokens_are_the_shared_prefix_rounded_down_to_blocks(
    prompt, generated
):
    e = engine()
    first = e.submit(ids(prompt), ids(generated, 50_000), max_tokens=generated)
    run(e)
    # The next turn's prompt starts with everything the first request saw and said.
    shared = first.prompt + first.plan
    second = e.submit(shared + ids(40, 90_000), ids(4, 95_000), max_tokens=4)
    run(e)
    # The last generated token was never fed back, so it has no KV (vLLM alike): the hit is
    # the shareable prefix minus that token, rounded down to whole blocks.
    assert second.truth.cached_tokens == 16 * ((len(shared) - 1) // 16)


def test_a_fully_cached_prompt_recomputes_its_last_block():
    e = engine()
    e.submit(ids(160), ids(2, 5000), max_tokens=2)
    run(e)
    again = e.submit(ids(160), ids(2, 6000), max_tokens=2)
    run(e)
    assert again.truth.cached_tokens == 144  # (160 - 1) // 16 blocks


def test_the_running_batch_is_capped():
    e = engine(max_running=2)
    for i in range(3):
        e.submit(ids(20, 100 * i), ids(5, 10_000), max_tokens=5)
    step = e.plan_step()
    assert len(step.work) == 2 and len(e.waiting) == 1


def test_admission_waits_until_blocks_for_the_whole_prompt_are_free():
    e = engine(kv_capacity_tokens=16 * 10)
    a = e.submit(ids(100), ids(20, 5000), max_tokens=20)  # 7 blocks, 8 with its output
    b = e.submit(ids(100, 1000), ids(5, 6000), max_tokens=5)
    step = e.plan_step()
    assert [w.seq for w in step.work] == [a]
    run(e)
    assert b.truth.finish_reason == "length" and not b.truth.preempted
    assert b.truth.scheduled_ns is not None


def test_decode_growth_preempts_the_most_recent_and_it_recomputes_later():
    # Two 64-token prompts fit (8 blocks); their outputs do not.
    e = engine(kv_capacity_tokens=16 * 9)
    a = e.submit(ids(64), ids(40, 5000), max_tokens=40)
    b = e.submit(ids(64, 1000), ids(40, 6000), max_tokens=40)
    run(e)
    assert b.truth.preempted and not a.truth.preempted
    assert e.counters["num_preemptions"] == b.truth.num_preemptions >= 1
    for seq in (a, b):  # the reply is exactly the plan, preempted or not
        assert flat(output(seq)) == seq.plan
        assert seq.truth.completion_tokens == 40 and seq.truth.finish_reason == "length"
    # usage reports the hit of the first admission; the counters count it once
    assert e.counters["prefix_cache_queries"] == 128
    assert e.pool.num_free == e.pool.num_blocks


def test_a_preempted_request_finds_its_own_blocks_again_if_they_survived():
    e = engine(kv_capacity_tokens=16 * 12, admission="chunk", token_budget=16)
    a = e.submit(ids(64), ids(60, 5000), max_tokens=60)
    b = e.submit(ids(64, 1000), ids(60, 6000), max_tokens=60)
    steps = run(e)
    assert b.truth.preempted
    # Recompute after preemption costs fewer prompt tokens than the tokens b held, because
    # its own full blocks were still cached.
    recomputed = sum(w.tokens for s in steps for w in s.work if w.seq is b and not w.decode)
    assert recomputed < 64 + b.truth.completion_tokens + 64
    assert flat(output(a)) == a.plan and flat(output(b)) == b.plan


def test_finished_and_aborted_requests_give_back_every_block():
    e = engine(kv_capacity_tokens=16 * 50)
    done = e.submit(ids(100), ids(10, 5000), max_tokens=10)
    gone = e.submit(ids(100, 1000), ids(10, 6000), max_tokens=10)
    e.complete_step(e.plan_step())
    e.abort(gone)
    run(e)
    assert done.truth.finish_reason == "length" and gone.truth.finish_reason == "abort"
    assert e.pool.usage == 0.0
    assert e.finished_reasons == {"length": 1, "abort": 1}


def test_a_short_plan_finishes_with_stop():
    e = engine()
    seq = e.submit(ids(30), ids(3, 5000), max_tokens=10)
    run(e)
    assert seq.truth.finish_reason == "stop" and seq.truth.completion_tokens == 3


def test_without_prefix_caching_nothing_is_ever_a_hit():
    e = engine(prefix_caching=False)
    e.submit(ids(200), ids(4, 5000), max_tokens=4)
    run(e)
    again = e.submit(ids(200), ids(4, 6000), max_tokens=4)
    run(e)
    assert again.truth.cached_tokens == 0 and e.pool.num_cached == 0


def test_step_time_is_the_profile_formula():
    e = Engine(
        get_profile(
            "fast",
            {
                "step_fixed_s": 0.01,
                "prefill_s_per_token": 0.001,
                "decode_s_per_seq": 0.1,
                "attend_s_per_token": 1e-6,
                "draft_s_per_token": 0.05,
                "spec_tokens": 2,
                "token_budget": 1000,
            },
        )
    )
    e.submit(ids(100), ids(10, 5000), max_tokens=10)
    first = e.plan_step()
    assert first.duration_s == pytest.approx(0.01 + 100 * 0.001)
    e.complete_step(first)
    e.submit(ids(50, 1000), ids(10, 6000), max_tokens=10)
    second = e.plan_step()  # one decode with 2 drafts (context 100) + a 50-token prefill
    assert second.duration_s == pytest.approx(0.01 + 50 * 0.001 + 0.1 + 2 * 0.05 + 100e-6)


def test_speculative_decoding_counts_drafts_and_never_overshoots_max_tokens():
    e = engine(spec_tokens=4, spec_acceptance=0.8)
    seqs = [
        e.submit(ids(40, 100 * i), ids(n, 10_000), max_tokens=n)
        for i, n in enumerate([1, 2, 5, 17, 64])
    ]
    steps = run(e)
    for seq in seqs:
        chunks = output(seq)
        assert flat(chunks) == seq.plan
        assert all(len(c) <= 5 for c in chunks)
        # after the prefill's token, every decode step emits its accepted drafts plus one
        decodes = sum(1 for s in steps for w in s.work if w.seq is seq and w.decode)
        assert seq.truth.completion_tokens == 1 + decodes + seq.truth.accepted_tokens
        assert seq.truth.draft_tokens <= 4 * seq.truth.spec_steps
    c = e.counters
    assert c["generation_tokens"] == sum(len(s.plan) for s in seqs)
    assert c["spec_decode_num_draft_tokens"] == sum(s.truth.draft_tokens for s in seqs)
    assert c["spec_decode_num_accepted_tokens"] == sum(s.truth.accepted_tokens for s in seqs)
    assert e.accepted_per_pos == sorted(e.accepted_per_pos, reverse=True)
    assert sum(e.accepted_per_pos) == c["spec_decode_num_accepted_tokens"]


def _decode_many(k: int, p: float, requests: int = 60, length: int = 200) -> Engine:
    e = engine(spec_tokens=k, spec_acceptance=p, seed=7)
    for i in range(requests):
        e.submit(ids(32, 1000 * i), ids(length, 500_000), max_tokens=length, rng_seed=i)
    run(e)
    return e


def test_acceptance_over_a_run_matches_the_configured_probability_within_sampling_error():
    p = 0.6
    c = _decode_many(1, p).counters
    drafts = c["spec_decode_num_draft_tokens"]
    measured = c["spec_decode_num_accepted_tokens"] / drafts
    sigma = math.sqrt(p * (1 - p) / drafts)
    assert abs(measured - p) < 4 * sigma, (measured, drafts)


def test_with_several_drafts_each_position_is_accepted_with_the_configured_probability():
    k, p = 4, 0.7
    e = _decode_many(k, p)
    c = e.counters
    rate = c["spec_decode_num_accepted_tokens"] / c["spec_decode_num_draft_tokens"]
    assert rate == pytest.approx(expected_acceptance_rate(k, p), abs=0.02)
    # position 0 is tried on every draft step; position i only after i accepted drafts
    attempts = c["spec_decode_num_drafts"]
    for count in e.accepted_per_pos:
        conditional = count / attempts
        assert conditional == pytest.approx(p, abs=4 * math.sqrt(p * (1 - p) / attempts))
        attempts = count


def test_a_request_too_big_for_the_kv_cache_is_refused_up_front():
    e = engine(kv_capacity_tokens=1600)
    assert e.fits(1500, 100)
    assert not e.fits(1500, 101)


def _lockstep(e: Engine, users: int, order_of_turn2: list[int]) -> float:
    """Turn-2 cached / shareable for lock-step sessions of ~10.5K tokens in ``e``."""
    prompts = [ids(10_500, 10**6 * s) for s in range(users)]
    firsts = [
        e.submit(p, ids(64, 10**6 * s + 500_000), max_tokens=64) for s, p in enumerate(prompts)
    ]
    run(e)
    seconds = []
    for s in order_of_turn2:
        history = firsts[s].prompt + firsts[s].plan
        seconds.append(
            e.submit(history + ids(1000, 10**6 * s + 700_000), ids(64, 1), max_tokens=64)
        )
    run(e)
    shareable = sum(len(f.prompt) + len(f.plan) for f in firsts)
    return sum(s.truth.cached_tokens for s in seconds) / shareable


def test_lockstep_sessions_that_overflow_the_kv_cache_evict_each_others_prefixes():
    short = {"kv_capacity_tokens": 46_202}
    assert _lockstep(engine(**short), 1, [0]) > 0.99
    # Arriving in the same order every turn, each admission evicts the tail of the session
    # that comes next, and the loss compounds: the seed record's collapse.
    assert _lockstep(engine(**short), 5, [0, 1, 2, 3, 4]) < 0.25
    # The order decides who loses: reversed, the first arrivals find their prefixes whole
    # and the last one pays for all (so a real run's figure varies with arrival order).
    assert _lockstep(engine(**short), 5, [4, 3, 2, 1, 0]) > 0.7
    assert _lockstep(engine(), 5, [0, 1, 2, 3, 4]) > 0.99
