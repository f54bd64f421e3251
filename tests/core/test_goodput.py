"""Goodput from hand-built records with small integer nanoseconds: which requests and
sessions met the SLO, per repetition, turn and kind, and how a load's session goodput is
judged against a goal."""

from __future__ import annotations

import pytest

from workloads.core.goodput import judge, judge_share, meets, missing_figure, request_figures
from workloads.model.records import TurnRecord
from workloads.model.slo import parse_slo

S = 1_000_000_000
MS = 1_000_000


def rec(
    *,
    rep=0,
    session=0,
    turn=1,
    ttft=S // 2,
    decode=S,
    tokens=11,
    valid=True,
    warmup=False,
    kind=None,
    parent=None,
    gaps=None,
    sent=0,
    cell=0,
):
    first = sent + ttft
    return TurnRecord(
        cell=cell,
        repetition=rep,
        warmup=warmup,
        session=session,
        turn=turn,
        status="ok" if valid else "error",
        valid=valid,
        configured_prior_tokens=0,
        completion_tokens=tokens,
        ttft_ns=ttft,
        started_ns=sent,
        sent_ns=sent,
        first_content_ns=first,
        last_content_ns=first + decode,
        done_ns=first + decode,
        step_kind=kind,
        parent_session=parent,
        chunk_gaps_us=gaps,
    )


def test_request_figures_are_in_the_slo_units():
    r = rec(ttft=S // 2, decode=S, tokens=11, gaps=[1000] * 9 + [50_000])
    figures = request_figures(r)
    assert figures["ttft_s"] == pytest.approx(0.5)
    assert figures["tpot_ms"] == pytest.approx(100.0)  # 1 s over 10 tokens after the first
    assert figures["e2e_s"] == pytest.approx(1.5)
    # p90 of nine 1 ms gaps and one 50 ms gap: interpolated between them
    assert figures["itl_ms"] == pytest.approx(1.0 + 0.1 * 49.0)
    assert request_figures(rec(tokens=1))["tpot_ms"] == 0.0


def test_a_request_meets_when_valid_and_every_limit_of_its_kind_holds():
    slo = parse_slo("ttft_s=1,tool.ttft_s=0.2")
    assert meets(rec(ttft=S // 2), slo)
    assert not meets(rec(ttft=S // 2, valid=False), slo)
    assert not meets(rec(ttft=S // 2, kind="tool"), slo)
    assert meets(rec(ttft=S // 10, kind="tool"), slo)
    # a figure not measured does not hold
    assert not meets(rec(), parse_slo("itl_ms=50"))
    assert missing_figure([rec()], parse_slo("itl_ms=50")) is not None
    assert missing_figure([rec()], parse_slo("ttft_s=1")) is None


def test_one_slow_step_makes_a_bad_session():
    slo = parse_slo("ttft_s=1")
    records = [
        rec(session=0, turn=1),
        rec(session=0, turn=2),
        rec(session=0, turn=3),
        rec(session=1, turn=1),
        rec(session=1, turn=2, ttft=2 * S),
        rec(session=1, turn=3),
    ]
    g = judge(records, slo)
    assert (g.requests, g.met, g.sessions, g.good_sessions) == (6, 5, 2, 1)
    assert g.share == pytest.approx(5 / 6) and g.session_share == pytest.approx(0.5)
    # per turn: the share of sessions still good through it
    assert [(t.turn, t.met, t.sessions, t.good_through) for t in g.turns] == [
        (1, 2, 2, 2),
        (2, 1, 2, 1),
        (3, 2, 2, 1),
    ]


def test_a_sub_agents_slow_step_counts_against_its_user():
    slo = parse_slo("ttft_s=1")
    records = [
        rec(session=0, kind="tool"),
        rec(session=1, kind="tool"),
        rec(session=66, parent=1, kind="subagent", ttft=3 * S),
        rec(session=67, parent=66, kind="subagent"),
    ]
    g = judge(records, slo)
    assert (g.sessions, g.good_sessions) == (2, 1)
    assert g.kinds is not None
    assert [(k.kind, k.requests, k.met) for k in g.kinds] == [("tool", 2, 2), ("subagent", 2, 1)]
    # the turn figures are the users' own sessions' turns; the sub-agents' slow step, sent
    # before its user's turn 1, makes session 1 bad through that turn
    assert [(t.requests, t.met, t.good_through) for t in g.turns] == [(2, 2, 1)]


def test_sessions_good_through_count_a_sub_agents_step_at_the_turn_it_feeds():
    # Session 1's turn 2 spawns a sub-agent (at 3 s, between turns 1 and 2: sub-agents play
    # before the step whose tool result they make); its slow step makes session 1 bad from
    # turn 2, not turn 1. A sub-agent's slow step no turn follows counts for no turn.
    slo = parse_slo("ttft_s=1")
    records = [
        rec(session=0, turn=1, sent=0),
        rec(session=0, turn=2, sent=5 * S),
        rec(session=0, turn=3, sent=10 * S),
        rec(session=1, turn=1, sent=0),
        rec(session=66, parent=1, kind="subagent", sent=3 * S, ttft=2 * S),
        rec(session=1, turn=2, sent=6 * S),
        rec(session=1, turn=3, sent=10 * S),
        rec(session=2, turn=1, sent=0),
        rec(session=67, parent=2, kind="subagent", sent=12 * S, ttft=2 * S),
    ]
    g = judge(records, slo)
    assert (g.sessions, g.good_sessions) == (3, 1)
    assert [(t.turn, t.met, t.sessions, t.good_through) for t in g.turns] == [
        (1, 3, 3, 3),
        (2, 2, 2, 1),
        (3, 2, 2, 1),
    ]


def test_a_turn_cancelled_by_a_stop_is_no_miss():
    slo = parse_slo("ttft_s=1")
    cut = rec(session=1, turn=2, sent=5 * S).model_copy(
        update={
            "status": "incomplete",
            "error_kind": "cancelled",
            "valid": False,
            "ttft_ns": None,
            "first_content_ns": None,
            "last_content_ns": None,
            "done_ns": None,
        }
    )
    failed = cut.model_copy(update={"session": 2, "status": "error", "error_kind": "timeout"})
    records = [rec(session=s, turn=1) for s in (0, 1, 2)] + [cut, failed]
    g = judge(records, slo)
    assert (g.requests, g.met, g.sessions, g.good_sessions) == (4, 3, 3, 2)
    assert [(t.turn, t.requests, t.good_through) for t in g.turns] == [(1, 3, 3), (2, 1, 0)]
    assert [(c.n, c.over) for c in g.checks] == [(4, 1)]


def test_warm_up_never_counts_and_rates_are_per_repetition():
    slo = parse_slo("ttft_s=1")
    records = [
        rec(rep=0, warmup=True, ttft=5 * S),
        rec(rep=1, session=0),
        rec(rep=1, session=1, ttft=3 * S),  # span 0 → 4 s
        rec(rep=2, session=0),
        rec(rep=2, session=1),  # span 0 → 1.5 s
    ]
    g = judge(records, slo)
    assert (g.requests, g.met) == (4, 3)
    assert [(r.repetition, r.met, r.good_sessions) for r in g.repetitions] == [(1, 1, 1), (2, 2, 2)]
    assert g.request_rate is not None
    assert (g.request_rate.low, g.request_rate.high) == pytest.approx((1 / 4.0, 2 / 1.5))
    assert g.token_rate is not None and g.token_rate.high == pytest.approx(22 / 1.5)


def test_checks_judge_each_limit_at_the_percentile_with_kinds_apart():
    slo = parse_slo("ttft_s=1,tool.ttft_s=0.1")
    records = [rec(session=i, ttft=S // 2, kind="human") for i in range(40)] + [
        rec(session=i, ttft=S // 2, kind="tool") for i in range(40)
    ]
    checks = {(c.figure, c.kind): c for c in judge(records, slo).checks}
    assert checks[("ttft_s", None)].verdict == "holds" and checks[("ttft_s", None)].n == 40
    tool = checks[("ttft_s", "tool")]
    assert (tool.verdict, tool.over, tool.limit) == ("fails", 40, 0.1)
    few = judge(records[:10], parse_slo("ttft_s=1,percentile=99")).checks[0]
    assert few.verdict == "cannot tell" and few.high is None and few.low is not None
    failed = judge([rec(valid=False)] * 45, slo).checks[0]
    assert failed.verdict == "fails" and failed.over == 45 and failed.low is None


def test_a_share_is_judged_only_when_its_interval_says_so():
    assert judge_share([(5, 5)] * 2, 0.5).verdict == "measure more"  # too few repetitions
    clear = judge_share([(10, 10)] * 3, 0.5)
    assert clear.verdict == "meets" and clear.low >= 0.5
    assert judge_share([(0, 10)] * 3, 0.5).verdict == "fails"
    # three repetitions all good have no spread, yet 15 sessions cannot show 95%
    steady = judge_share([(5, 5)] * 3, 0.95)
    assert steady.verdict == "measure more" and steady.low < 0.95
    # a repetition far from the others widens the interval past the binomial one
    varied = judge_share([(10, 10), (10, 10), (2, 10), (10, 10)], 0.5)
    assert varied.low < judge_share([(32, 40)], 0.5).low
    assert judge_share([], 0.5) is None
    with pytest.raises(ValueError):
        judge_share([(1, 1)], 1.0)


# --- A run judged by an SLO, on the embedded simulated server -------------------------


def test_a_run_with_an_slo_saves_goodput_that_show_and_csv_recompute(tiny_scenario, tmp_path):
    import csv
    import io

    import workloads
    from workloads.cli import main
    from workloads.core.aggregate import summarized
    from workloads.report.export import csv_text, plain_text
    from workloads.report.text import format_band

    scenario = tiny_scenario.with_overrides(["repetitions.measured=2", "gate=off"])
    # a TTFT limit every request meets and an E2E limit none can (1 µs): goodput is known
    result = workloads.run(scenario, out_dir=tmp_path / "run", slo="ttft_s=60,itl_ms=60000")
    g = result.goodput
    assert g is not None and g.slo == workloads.model.slo.parse_slo("ttft_s=60,itl_ms=60000")
    assert g.requests == result.summary.run.records == 8
    assert g.met == result.summary.run.valid
    assert g.sessions == 4  # 2 users × 2 measured repetitions
    loaded = summarized(workloads.load_result(tmp_path / "run"))
    assert loaded.goodput == g
    strict = loaded.model_copy(
        update={
            "scenario": loaded.scenario.model_copy(
                update={"slo": workloads.model.slo.parse_slo("e2e_s=0.000001")}
            )
        }
    )
    judged = summarized(strict).goodput
    assert judged is not None and (judged.met, judged.good_sessions) == (0, 0)
    # 8 requests cannot bound p90 from above, but all over the limit bound it from below
    assert [(c.verdict, c.over, c.high) for c in judged.checks] == [("fails", 8, None)]
    rows = list(csv.DictReader(io.StringIO(csv_text(loaded))))
    assert [row["goodput_met"] for row in rows] == [str(t.met) for t in g.turns]
    # the run-level goodput, the headline's figures with the rates' bands, on every row
    assert g.request_rate is not None and g.token_rate is not None
    assert {
        (
            row["goodput_run_met"],
            row["goodput_run_requests"],
            row["goodput_run_session_share"],
            row["goodput_run_requests_per_s_low"],
            row["goodput_run_tok_s_high"],
        )
        for row in rows
    } == {
        (
            str(g.met),
            str(g.requests),
            str(g.session_share),
            str(g.request_rate.low),
            str(g.token_rate.high),
        )
    }
    # the headline prints the rates' bands (median (min–max) over the repetitions)
    text = plain_text(loaded)
    rate = g.request_rate
    assert f"goodput {format_band(rate)} requests/s, {format_band(g.token_rate)} tok/s" in text
    assert rate.low != rate.high and "(" in format_band(rate)
    assert all(row["ttft_s_p99_high"] == "" for row in rows)  # 4 requests bound no p99
    code = main(["show", str(tmp_path / "run"), "--slo", "e2e_s=0.000001"])
    assert code == 0


def test_a_malformed_slo_flag_is_one_line_before_anything_starts(tmp_path, capsys):
    from workloads.cli import main

    out = tmp_path / "never"
    code = main(["run", "five-user-coding", "--slo", "ttft_s=2,itl=50", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert err.count("\n") == 1 and "--slo 'itl=50': unknown key 'itl'" in err


def test_p99_of_45_requests_says_what_it_needs_and_p90_is_bounded():
    from workloads.core import stats
    from workloads.report.text import percentile_text

    p = stats.percentiles([0.1 * (i + 1) for i in range(45)])
    assert p is not None
    assert percentile_text(p, 99.0) == "needs ≥ 299"
    assert percentile_text(p, 90.0) == "4.06 [3.70–4.50]"  # x_(37) and x_(45)


def test_the_report_leads_its_goodput_block_with_the_slo_and_both_shares():
    from pathlib import Path

    import workloads
    from workloads.report.export import plain_text

    result = workloads.load_result(Path(__file__).parents[1] / "data" / "v5-goodput")
    g = result.goodput
    assert g is not None and result.scenario.slo is not None
    text = plain_text(result, width=200)
    assert f"SLO: {result.scenario.slo.describe()}" in text
    assert f"requests meeting the SLO: {g.met} of {g.requests}" in text
    assert f"session goodput {g.session_share:.0%} ({g.good_sessions} of" in text
    # 6 human and 6 tool steps, each kind with its own TTFT limit: too few for a p90 bound
    assert (
        "p90 TTFT ≤ 0.05 s: cannot tell yet (needs ≥ 29 requests for a 95% upper bound; have 6)"
    ) in text
    assert "p90 TTFT ≤ 0.1 s (tool result steps): cannot tell yet" in text
    assert len([c for c in g.checks if c.verdict == "cannot tell"]) == len(g.checks) == 3
