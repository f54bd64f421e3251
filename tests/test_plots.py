from __future__ import annotations

from pathlib import Path

import workloads
from workloads.report.plots import timeline_bars, write_plots

DATA = Path(__file__).parent / "data"


def test_write_plots_makes_three_pngs(tmp_path):
    written = write_plots(workloads.load_result(DATA / "v1-small-a"), tmp_path)
    assert sorted(p.name for p in written) == ["rates.png", "timeline.png", "ttft.png"]
    for path in written:
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_a_sweep_is_plotted_per_cell(tmp_path):
    written = write_plots(workloads.load_result(DATA / "v1-sweep"), tmp_path)
    assert sorted(p.name for p in written) == ["rates.png", "timeline.png", "ttft.png"]


def test_the_timeline_shows_every_failed_request_from_send_to_error_by_kind(tmp_path):
    scenario = workloads.load_scenario("five-user-coding").with_overrides([
        "users=4", "turns=3", "opening_tokens=300", "turn_tokens=50", "output_tokens=24",
        "repetitions.warmup=0", "repetitions.measured=2",
    ])
    sim = {"faults.rate_429": 0.15, "faults.rate_500": 0.15, "faults.rate_disconnect": 0.15,
           "faults.rate_early_stop": 0.15, "faults.after_tokens": 4, "faults.retry_after_s": 0}
    result = workloads.run(scenario, sim=sim)
    # A request that never connected: no send time, only when the client began it.
    never = result.records[0].model_copy(update={
        "status": "error", "error_kind": "connect_refused", "valid": False, "http_status": None,
        "sent_ns": None, "headers_ns": None, "first_content_ns": None,
        "last_content_ns": None, "done_ns": None, "error_ns": None, "repetition": 9,
    })
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
    written = write_plots(result, tmp_path)
    assert (tmp_path / "timeline.png") in written
