from __future__ import annotations

import io
import struct
from pathlib import Path

import workloads
from workloads.core.aggregate import summarized
from workloads.report.plots import (
    _FIGURES,
    _Axis,
    _cdf,
    _compact,
    _jitter,
    _latency_series,
    _pyplot,
    timeline_bars,
    write_plots,
)

DATA = Path(__file__).parents[1] / "data"


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def drawn(result: workloads.RunResult, name: str) -> bytes | None:
    """The PNG bytes of the one figure ``name`` of ``result``, drawn as ``figures`` draws
    each (None where it has nothing to draw, so ``figures`` leaves it out), without drawing
    the others (drawing is most of these tests' time)."""
    draw = dict(_FIGURES)[name]
    buffer = io.BytesIO()
    draw(result, buffer)
    return buffer.getvalue() or None


def test_write_plots_makes_five_pngs(tmp_path):
    written = write_plots(workloads.load_result(DATA / "v1-small-a"), tmp_path)
    assert sorted(p.name for p in written) == [
        "latency.png",
        "prefill.png",
        "rates.png",
        "timeline.png",
        "ttft.png",
    ]
    for path in written:
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_a_sweep_is_plotted_per_cell(tmp_path):
    written = write_plots(workloads.load_result(DATA / "v1-sweep"), tmp_path)
    assert sorted(p.name for p in written) == [
        "cache.png",
        "latency.png",
        "prefill.png",
        "rates.png",
        "timeline.png",
        "ttft.png",
    ]


def test_latency_is_drawn_from_valid_measured_requests_only():
    result = workloads.load_result(DATA / "v5-goodput")
    assert any(r.chunk_gaps_us for r in result.records)  # ITL and E2E both drawn
    assert (drawn(result, "latency.png") or b"")[:8] == b"\x89PNG\r\n\x1a\n"
    invalid = result.model_copy(
        update={"records": [r.model_copy(update={"valid": r.warmup}) for r in result.records]}
    )
    assert drawn(invalid, "latency.png") is None  # only warm-ups were valid


def test_the_timeline_shows_every_failed_request_from_send_to_error_by_kind():
    scenario = workloads.load_scenario("five-user-coding").with_overrides(
        [
            "users=4",
            "turns=3",
            "opening_tokens=300",
            "turn_tokens=50",
            "output_tokens=24",
            "repetitions.warmup=0",
            "repetitions.measured=2",
            "gate=off",  # the timeline is of the measured requests
        ]
    )
    sim = {
        "faults.rate_429": 0.15,
        "faults.rate_500": 0.15,
        "faults.rate_disconnect": 0.15,
        "faults.rate_early_stop": 0.15,
        "faults.after_tokens": 4,
        "faults.retry_after_s": 0,
    }
    result = workloads.run(scenario, sim=sim)
    # A request that never connected: no send time, only when the client began it.
    never = result.records[0].model_copy(
        update={
            "status": "error",
            "error_kind": "connect_refused",
            "valid": False,
            "http_status": None,
            "sent_ns": None,
            "headers_ns": None,
            "first_content_ns": None,
            "last_content_ns": None,
            "done_ns": None,
            "error_ns": None,
            "repetition": 9,
        }
    )
    result = result.model_copy(update={"records": [*result.records, never]})

    bars = timeline_bars(result)
    assert len(bars) == len(result.records)  # every measured request, failed ones included
    by_kind = {b.kind for b in bars}
    assert {"http_429", "http_5xx", "disconnected", "invalid", "connect_refused"} <= by_kind
    assert None in by_kind  # and the good ones
    origin = min(r.sent_ns or r.started_ns for r in result.records)
    for bar, record in zip(bars, result.records, strict=True):
        assert bar.end_s > bar.start_s  # never a zero-width bar
        if record.error_ns is not None:  # it ends when the error came
            assert bar.end_s >= (record.error_ns - origin) / 1e9
        elif record.error_kind is not None:  # no error time: the last time it knows
            assert bar.end_s >= (record.started_ns - origin) / 1e9
    assert drawn(result, "timeline.png") is not None


def test_a_cold_sweep_has_no_cache_plot_of_zeros():
    sweep = summarized(workloads.load_result(DATA / "v1-sweep"))
    cold = sweep.model_copy(
        update={
            "records": [r.model_copy(update={"cached_tokens": 0}) for r in sweep.records],
            "cells": [
                c.model_copy(update={"window": c.window.model_copy(update={"server": None})})
                for c in sweep.cells or []
            ],
        }
    )
    assert drawn(cold, "cache.png") is None


def depth_sweep(concurrency: int = 1) -> workloads.RunResult:
    """The stored sweep re-labelled as depths 4,096 and 115,404 (its two cells)."""
    result = summarized(workloads.load_result(DATA / "v1-sweep"))
    cells = [
        c.model_copy(update={"prior_tokens": p, "concurrency": concurrency})
        for c, p in zip(result.cells or [], [4096, 115_404], strict=True)
    ]
    return result.model_copy(update={"cells": cells})


def test_depths_go_on_a_log2_axis_of_prompt_tokens_and_concurrency_on_a_linear_one():
    depth = _Axis(depth_sweep())
    assert depth.by_depth and "log2" in depth.label and depth.series == [1]
    sweep = summarized(workloads.load_result(DATA / "v1-sweep"))  # C1, C2 at one depth
    concurrency = _Axis(sweep)
    assert not concurrency.by_depth and concurrency.label == "concurrency (users)"
    assert [concurrency.x(c) for c in sweep.cells or []] == [1.0, 2.0]
    first = (sweep.cells or [])[0].summary.turns[0].prompt_tokens
    assert first is not None and depth.x((depth_sweep().cells or [])[0]) == first.median


def test_a_c1_sweep_draws_one_rates_panel_not_the_same_one_twice():
    one = drawn(depth_sweep(concurrency=1), "rates.png")
    two = drawn(summarized(workloads.load_result(DATA / "v1-sweep")), "rates.png")
    assert one is not None and two is not None
    assert png_size(one)[0] < 0.7 * png_size(two)[0]


def test_tick_labels_and_jitter():
    assert [_compact(v) for v in (512, 6146, 67_584, 117_452)] == ["512", "6.1K", "68K", "117K"]
    offsets = _jitter(20, 0.2)
    assert len(set(offsets)) == 20 and all(-0.2 <= o <= 0.2 for o in offsets)
    assert _jitter(20, 0.2) == offsets  # the same plot from the same result


def test_concurrency_over_time_is_plotted_when_the_result_has_it():
    from workloads.model.summary import ConcurrencySummary

    result = summarized(workloads.load_result(DATA / "v1-small-a"))
    assert drawn(result, "concurrency.png") is None  # older results: nothing to draw
    timed = result.model_copy(
        update={
            "concurrency": ConcurrencySummary(
                mean=1.5, max=2, span_s=1.0, samples=[(0.0, 1), (0.5, 2), (1.0, 0)]
            )
        }
    )
    assert drawn(timed, "concurrency.png") is not None


def test_the_latency_legend_counts_what_the_latency_table_counts():
    # The legend's n counted the CDF's points, one more than the values (the step drawn up
    # at the least value): 46 beside the table's 45.
    result = workloads.load_result(DATA / "v5-goodput")
    itl, e2e = _latency_series(result)
    run = result.summary.run
    assert run.itl_percentiles is not None and run.e2e_percentiles is not None
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2)
    try:
        _cdf(axes[0], itl, "ITL ms", "none")
        _cdf(axes[1], e2e, "E2E s", "none")
        legends = [ax.get_legend().get_texts()[0].get_text() for ax in axes]
    finally:
        plt.close(fig)
    assert legends == [f"n {run.itl_percentiles.n:,}", f"n {run.e2e_percentiles.n:,}"]


def test_a_full_disk_while_drawing_leaves_no_truncated_png_and_names_the_file(tmp_path):
    """A file-size limit (RLIMIT_FSIZE, in a process of its own) below the first PNG's size
    fails its write as a full disk would, part-way through: ``show --plots`` exits 6 naming
    that PNG, and leaves no PNG (nor tmp file) behind."""
    import os
    import shutil
    import subprocess
    import sys

    run = tmp_path / "run"
    shutil.copytree(DATA / "v1-small-a", run)
    script = (
        "import resource, sys\n"
        "from workloads.cli import main\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, "show", str(run), "--plots"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(Path(workloads.__file__).parents[1])},
    )
    assert done.returncode == 6, done.stderr
    assert "Traceback" not in done.stderr
    error = done.stderr.splitlines()[-1]
    assert error.startswith(f"error: cannot write {run / 'plots'}/") and ".png: " in error
    assert "(EFBIG)" in error
    assert [p.name for p in (run / "plots").iterdir()] == []  # no truncated PNG, no .tmp
