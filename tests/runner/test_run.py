from __future__ import annotations

import gc

import pytest

import workloads
from fakes import FakeChatClient, LlamaCppLikeServer, LocalTokenizer


def small(*overrides: str) -> workloads.Scenario:
    return workloads.load_scenario("five-user-coding").with_overrides(
        [
            "users=2",
            "turns=2",
            "opening_tokens=600",
            "turn_tokens=120",
            "output_tokens=8",
            "repetitions.warmup=1",
            "repetitions.measured=2",
            *overrides,
        ]
    )


def test_a_sweep_is_one_result_with_one_cell_per_coordinate():
    client = FakeChatClient(lambda body: (100, "ok"))
    scenario = small("concurrency=[1, 2]", "prior_tokens=[300, 900]")
    result = workloads.run(scenario, client=client)
    coords = [(c.concurrency, c.prior_tokens, c.configured_prompt_tokens) for c in result.cells]
    assert coords == [(1, 300, 420), (1, 900, 1020), (2, 300, 420), (2, 900, 1020)]
    for cell in result.cells:
        mine = [r for r in result.records if r.cell == cell.cell]
        assert len(mine) == 3 * cell.concurrency * 2  # (1 warm-up + 2 measured) × C × turns
        assert {r.configured_prior_tokens for r in mine if r.turn == 1} == {cell.prior_tokens}
        assert cell.summary.run.users == cell.concurrency
        assert cell.summary.run.records == 2 * cell.concurrency * 2
        assert cell.generation_rate is not None and cell.window.duration_s is not None
    assert {(n.cell, n.repetition) for n in result.nonces} == {
        (c, r) for c in range(4) for r in range(3)
    }
    assert result.summary.run.records == sum(c.summary.run.records for c in result.cells)


def test_a_single_cell_run_keeps_its_summary_and_has_no_cells():
    result = workloads.run(small(), client=FakeChatClient(lambda body: (100, "ok")))
    assert result.cells is None and result.summary.run.records == 8
    assert [t.configured_prompt_tokens for t in result.summary.turns] == [720, 848]


def test_only_the_young_generation_is_collected_while_a_repetition_plays_and_it_is_put_back():
    seen: list[tuple[int, int, int]] = []  # the collector's thresholds at each request

    def answer(body: dict[str, object]) -> tuple[int, str]:
        seen.append(gc.get_threshold())
        return 100, "ok"

    before = gc.get_threshold()
    gc.set_threshold(500, 7, 9)  # an embedding application's own
    try:
        theirs = gc.get_threshold()  # (500, 7, 9); (500, 7, 0) on 3.14's incremental collector
        workloads.run(small(), client=FakeChatClient(answer))
        after = gc.get_threshold()
    finally:
        gc.set_threshold(*before)
    assert after == theirs
    assert len(seen) == 12 and all(t[0] == 500 and t[1] >= 2**20 for t in seen)


def test_estimates_are_corrected_from_the_warm_up_to_within_three_percent():
    """The client counts prompts with a tokenizer unlike tiktoken (~1.1×, Llama-3-like
    template with BOS): the warm-up misses by ~10%, the measured repetitions do not."""
    tok = LocalTokenizer("split")
    client = FakeChatClient(lambda body: (tok.count_prompt(body["messages"]), "done " * 8))
    result = workloads.run(
        small("users=3", "opening_tokens=4000", "turn_tokens=600"), client=client
    )
    assert result.sizing is not None and not result.sizing.exact
    errors = {
        warmup: [
            abs(r.prompt_tokens / r.configured_prompt_tokens - 1)
            for r in result.records
            if r.warmup is warmup and r.turn == 1
        ]
        for warmup in (True, False)
    }
    assert max(errors[True]) > 0.05
    assert max(errors[False]) < 0.03
    assert all(not r.shareable_exact for r in result.records)
    assert any("tiktoken estimates" in w for w in result.warnings)


def test_shareable_prefixes_are_exact_and_agree_with_the_simulators_cache(simulated_server):
    result = workloads.run(small("users=3", "turns=3"), simulated_server.target)
    assert result.sizing.exact and result.sizing.calls > 0
    truth = {t.request_id: t for t in simulated_server.truths()}
    for r in result.records:
        assert r.shareable_exact and r.prompt_tokens == r.tokenized_prompt_tokens
        assert r.cached_tokens == truth[r.request_id].cached_tokens
        if r.turn == 1:
            assert r.shareable_tokens == 0 and r.cached_tokens == 0
        else:  # the sim caches prompt + all but the last generated token, in 16-token blocks
            assert r.shareable_tokens == r.prompt_tokens - 120
            assert r.cached_tokens == (r.shareable_tokens - 1) // 16 * 16


def test_with_nonce_run_turn_one_shares_the_system_prefix(simulated_server):
    scenario = small(
        "users=3",
        "turns=1",
        "nonce=run",
        "opening_tokens=2000",
        "shared_prefix_tokens=1500",
        "pacing.mode=free",
    )
    result = workloads.run(scenario, simulated_server.target)
    first = [r for r in result.records if r.turn == 1]
    assert {r.prompt_tokens for r in first} == {2120}
    for rep in {r.repetition for r in first}:
        # The first session to send has nothing the server has seen; the others share the
        # system prefix.
        mine = sorted((r for r in first if r.repetition == rep), key=lambda r: r.started_ns)
        assert mine[0].shareable_tokens == 0
        assert {r.shareable_tokens for r in mine[1:]} <= {1499, 1500, 1501}
    # The server: nothing past the shared prefix is ever cached, and the opening its engine
    # queued first found nothing. That is the client's first to send but for a race the client
    # cannot see: openings written together on three connections may be read by the server in
    # another order (seen once on a loaded 2-core machine: the client's first found the prefix
    # cached).
    assert all(r.cached_tokens <= 1501 for r in first)
    queued = {t.request_id: t.queued_ns for t in simulated_server.truths()}
    for rep in {r.repetition for r in first}:
        mine = [r for r in first if r.repetition == rep]
        assert min(mine, key=lambda r: queued[r.request_id]).cached_tokens == 0


def test_a_llamacpp_shaped_target_is_sized_exactly_in_its_own_tokens():
    with LlamaCppLikeServer(tokenizer="words") as server:
        result = workloads.run(small(), workloads.Target(server.base_url, server.model))
    assert result.sizing.tokenizer.startswith("llama.cpp") and result.sizing.exact
    for r in result.records:
        assert r.prompt_tokens == r.configured_prompt_tokens == r.tokenized_prompt_tokens


@pytest.mark.parametrize("tokenize", [True, False])
def test_tiktoken_mode_against_a_different_tokenizer_lands_within_three_percent(tokenize):
    mode = "tokenizer=tiktoken" if tokenize else "tokenizer=auto"  # no /tokenize: auto falls back
    with LlamaCppLikeServer(tokenize=tokenize, tokenizer="split") as server:
        result = workloads.run(
            small("users=3", "opening_tokens=4000", mode),
            workloads.Target(server.base_url, server.model),
        )
    assert not result.sizing.exact and result.sizing.calls == 0
    for r in result.records:
        if not r.warmup and r.turn == 1:
            assert abs(r.prompt_tokens / r.configured_prompt_tokens - 1) < 0.03


def test_a_run_sends_one_byte_identical_system_message_per_repetition_with_nonce_run():
    client = FakeChatClient(lambda body: (100, "ok"))
    result = workloads.run(small("users=3", "turns=1", "nonce=run"), client=client)
    systems: dict[int, set[str]] = {}
    for body in client.bodies:
        user = body["messages"][1]["content"]
        repetition = int(user.split("\n", 1)[0].rsplit("#", 1)[1].split(".")[1])
        systems.setdefault(repetition, set()).add(body["messages"][0]["content"])
    assert [len(s) for s in systems.values()] == [1, 1, 1]  # warm-up + 2 measured
    assert len(set.union(*systems.values())) == 3
    for rep in result.nonces:  # recorded: one run nonce and 3 session nonces per repetition
        assert rep.run_nonce is not None and rep.run_nonce not in rep.sessions
        assert len(set(rep.sessions)) == 3


def test_the_likelihood_probe_is_out_while_the_gate_goes():
    # The server answers /v1/completions only once a chat request has come in (or after
    # 10 s): the probe, sent before the sizing, is still waiting when the correctness gate's
    # first pass goes, and its answer (no log-probabilities here) is the result's.
    with LlamaCppLikeServer(tokenizer="words", hold_completions=True) as server:
        result = workloads.run(
            small("gate=report", "repetitions.warmup=0", "repetitions.measured=1"),
            workloads.Target(server.base_url, server.model),
        )
    assert server.chats_while_held >= 1
    assert result.likelihood is not None and not result.likelihood.supported
    assert "no prompt log-probabilities" in (result.likelihood.reason or "")
    assert (
        result.gate is not None and result.records and all(r.status == "ok" for r in result.records)
    )


def test_a_scenarios_simulator_overrides_apply_and_the_callers_win():
    tiny = workloads.load_scenario("five-user-coding").with_overrides(
        [
            "users=1",
            "turns=1",
            "output_tokens=4",
            "repetitions.warmup=0",
            "repetitions.measured=1",
            "gate=off",
            'sim={kv_capacity_tokens=123456, model="scenario-model"}',
        ]
    )
    result = workloads.run(tiny)
    profile = result.target.simulator_profile
    assert profile is not None and profile["kv_capacity_tokens"] == 123_456
    assert result.target.model == "scenario-model"
    result = workloads.run(tiny, sim={"model": "callers-model"})  # key by key
    profile = result.target.simulator_profile
    assert profile is not None and profile["kv_capacity_tokens"] == 123_456
    assert result.target.model == "callers-model"
    # a profile the caller names starts from that profile alone
    result = workloads.run(tiny, sim={"profile": "h200-8b"})
    profile = result.target.simulator_profile
    assert profile is not None and profile["kv_capacity_tokens"] == 720_000


def test_simulator_overrides_with_a_target_are_refused_before_anything_is_sent(
    simulated_server, tmp_path
):
    # They were silently ignored: the run went to the target as it was (CLI: --sim with
    # --target is refused the same way).
    with pytest.raises(workloads.OptionsError, match=r"sim=.*cannot change the target"):
        workloads.run(
            small(),
            simulated_server.target,
            sim={"kv_capacity_tokens": 30_000},
            out_dir=tmp_path / "a",
        )
    assert simulated_server.truths() == []  # no request reached it
    assert not (tmp_path / "a").exists()
