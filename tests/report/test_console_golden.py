"""Golden text of the console report at 80, 120 and 200 columns: every column of every table
present, no value cut, no line past the width. Regenerate after a deliberate change with
``WORKLOADS_UPDATE_GOLDEN=1 python -m pytest -n0 tests/report/test_console_golden.py`` and
read the diff."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from rich.console import Console

import workloads
from workloads.core.aggregate import summarized
from workloads.report import console as report
from workloads.report.table import ReportTable

DATA = Path(__file__).parents[1] / "data"
GOLDEN = DATA / "golden"
WIDTHS = [80, 120, 200]
RESULTS = ["v1-small-a", "v1-sweep", "v1-small-a+gaps", "v4-agents", "v6-stopped"]


def with_gaps(result: workloads.RunResult) -> workloads.RunResult:
    """The stored result as a client that keeps chunk gaps would have recorded it: each
    record's span from first to last content chunk split into its chunks' gaps, every
    fourth one three times as long (a deterministic, uneven ITL)."""
    records = []
    for r in result.records:
        if r.first_content_ns is None or r.last_content_ns is None or r.content_events < 2:
            records.append(r)
            continue
        n = r.content_events - 1
        weights = [3 if i % 4 == 3 else 1 for i in range(n)]
        span_us = (r.last_content_ns - r.first_content_ns) / 1000
        gaps = [round(span_us * w / sum(weights)) for w in weights]
        records.append(r.model_copy(update={"chunk_gaps_us": gaps}))
    return summarized(result.model_copy(update={"records": records}))


def load(name: str) -> workloads.RunResult:
    if name.endswith("+gaps"):
        return with_gaps(workloads.load_result(DATA / name.removesuffix("+gaps")))
    return summarized(workloads.load_result(DATA / name))


def rendered(result: workloads.RunResult, width: int) -> str:
    console = Console(width=width, record=True, color_system=None, file=io.StringIO())
    console.print(report.render(result))
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()) + "\n"


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", RESULTS)
def test_the_report_matches_its_golden_text(name, width):
    result = load(name)
    text = rendered(result, width)
    path = GOLDEN / f"{name}-{width}.txt"
    if os.environ.get("WORKLOADS_UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"{path} differs: see the diff above"


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", RESULTS)
def test_no_column_is_lost_and_no_value_cut(name, width):
    result = load(name)
    text = rendered(result, width)
    assert "…" not in text
    tables = [b for b in report.blocks(result) if isinstance(b, ReportTable)]
    assert tables
    for table in tables:
        for column in table.columns:
            assert column in text, f"{table.name}: column {column!r} missing at {width}"
        for row in table.rows:
            for cell in row:
                assert cell in text, f"{table.name}: value {cell!r} cut at {width}"
    for line in text.splitlines():
        assert len(line) <= width, f"line over {width} columns: {line!r}"


def test_a_narrow_console_stacks_blocks_that_repeat_the_turn_column():
    result = summarized(workloads.load_result(DATA / "v1-small-a"))
    table = report.turn_table(result)
    from workloads.report.table import blocks

    stacked = blocks(table, 80)
    assert len(stacked) > 1 and all(b[0] == 0 for b in stacked)
    assert sorted({i for b in stacked for i in b}) == list(range(len(table.columns)))
    assert blocks(table, 200) == [list(range(len(table.columns)))]


def test_recorded_chunk_gaps_give_itl_rows_in_milliseconds():
    text = rendered(load("v1-small-a+gaps"), 120)
    rows = [line.split() for line in text.splitlines() if " ITL ms " in line]
    assert [row[0] for row in rows] == ["1", "2", "all"]
    # "2.25 [2.23–2.40]  6.70  7.58  7.58  180": the 180 gaps are 12 requests' (ITL's bounds
    # count requests, core/stats.py), enough to bound p50, not p90 (29) nor p99 (299)
    p50, p90, top = float(rows[-1][3]), float(rows[-1][5]), float(rows[-1][-2])
    assert 0 < p50 < p90 <= top  # every fourth gap three times as long
    assert rows[-1][4].startswith("[") and rows[-1][5:8] == ["6.70", "7.58", "7.58"]
    assert "ITL not recorded" not in text
