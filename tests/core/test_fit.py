"""The fit's pure math: least squares and its intervals, decode points from stamps, the
first wave of a batch."""

from __future__ import annotations

import random

import pytest

from workloads.core.fit import (
    DecodePoint,
    PrefillPoint,
    StreamStamps,
    decode_points,
    first_wave,
    fit_engine,
    least_squares,
)


def test_least_squares_recovers_an_exact_line() -> None:
    rows = [[1.0, x] for x in (1, 2, 3, 4)]
    beta, halves = least_squares(rows, [0.5 + 2 * x for x in (1, 2, 3, 4)])
    assert beta == pytest.approx([0.5, 2.0])
    assert halves == pytest.approx([0.0, 0.0], abs=1e-9)  # no residual: no width


def test_least_squares_intervals_cover_the_truth_about_95_percent_of_draws() -> None:
    rng = random.Random(7)
    covered = 0
    for _ in range(400):
        xs = [float(x) for x in range(1, 11)]
        ys = [3.0 + 0.5 * x + rng.gauss(0, 1) for x in xs]
        (_, b), (ha, hb) = least_squares([[1.0, x] for x in xs], ys)
        assert ha is not None and hb is not None
        covered += abs(b - 0.5) <= hb
    assert 0.91 <= covered / 400 <= 0.99


def test_least_squares_refuses_collinear_columns() -> None:
    with pytest.raises(ValueError, match="cannot tell"):
        least_squares([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]], [1.0, 2.0, 3.0])


def test_decode_points_count_the_streams_decoding_at_each_gap() -> None:
    # Two streams: A decodes 0..100 ms alone with 10 ms steps, then B joins at 100 and both
    # step every 12 ms until 196.
    ms = 1_000_000
    a = [i * 10 * ms for i in range(11)] + [100 * ms + i * 12 * ms for i in range(1, 9)]
    b = [100 * ms + i * 12 * ms for i in range(0, 9)]
    points = decode_points(
        [StreamStamps(0, prompt_tokens=100, content_ns=a), StreamStamps(1, 50, b)]
    )
    alone = next(p for p in points if p.request == 0 and p.streams == 1)
    together = next(p for p in points if p.request == 0 and p.streams == 2)
    assert alone.step_s == pytest.approx(0.010)
    assert together.step_s == pytest.approx(0.012)
    # context: A's prompt plus its chunks so far, and B's with its own
    assert together.context > alone.context + 50


def test_first_wave_counts_streams_that_started_before_any_ended() -> None:
    assert first_wave([(10, 100), (12, 110), (150, 250), (160, 260)]) == 2
    assert first_wave([(10, 100), (12, 110)]) == 2
    assert first_wave([]) == 0


def test_fit_engine_recovers_step_and_prefill_coefficients() -> None:
    fixed, per_seq, attend, prefill, overhead = 0.004, 0.0005, 1e-7, 1e-4, 0.002
    decode = [
        DecodePoint(i, n, c, fixed + per_seq * n + attend * c)
        for i, (n, c) in enumerate([(1, 200), (1, 4000), (2, 400), (4, 800), (8, 1600), (1, 2000)])
    ]
    pre = [
        PrefillPoint(10 + i, t, overhead + fixed + prefill * t)
        for i, t in enumerate([256, 1024, 4096])
    ]
    fitted = fit_engine(pre, decode)
    assert fitted["step_fixed_s"].value == pytest.approx(fixed)
    assert fitted["decode_s_per_seq"].value == pytest.approx(per_seq)
    assert fitted["attend_s_per_token"].value == pytest.approx(attend)
    assert fitted["prefill_s_per_token"].value == pytest.approx(prefill)
    assert fitted["overhead_s"].value == pytest.approx(overhead)
    assert fitted["prefill_s_per_token"].requests == (10, 11, 12)


def test_fit_engine_leaves_out_what_too_few_points_cannot_fit() -> None:
    assert fit_engine([PrefillPoint(0, 100, 0.1)], [DecodePoint(0, 1, 100, 0.01)]) == {}
