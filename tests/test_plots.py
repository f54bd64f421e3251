from __future__ import annotations

from pathlib import Path

import workloads
from workloads.report.plots import write_plots

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
