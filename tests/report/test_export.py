"""One figure per name in every export: the CSV, the JSON, Markdown, the HTML page and
rates.png name each per-turn throughput figure as the console does, with the same value. A
fleet (arrivals pacing) leads with wall throughput and keeps the Σ of its streams under its
† name, never "aggregate"; lock-step keeps the aggregate as it was."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest

import workloads
from workloads.report import console as report
from workloads.report.export import export
from workloads.report.html import html_report
from workloads.report.text import num

FLEET_COLUMNS = ["wall tok/s", "Σ streams tok/s †", "per-user tok/s"]
LOCKSTEP_COLUMNS = ["aggregate tok/s", "wall tok/s", "per-user tok/s"]
CSV_KEYS = {
    "wall tok/s": "wall_tok_s",
    "Σ streams tok/s †": "streams_sum_tok_s",
    "per-user tok/s": "per_user_tok_s",
    "aggregate tok/s": "aggregate_tok_s",
}
SHRINK = [
    "turns=2",
    "opening_tokens=400",
    "turn_tokens=60",
    "output_tokens=16",
    "repetitions.warmup=0",
    "repetitions.measured=2",
]


@pytest.fixture(scope="module")
def fleet() -> workloads.RunResult:
    # Four agents arriving at 40/s: all four start a turn 1 and a turn 2, so every turn has
    # its Σ over all the users' streams, and the streams do not run in lock-step. 64-token
    # replies (~0.25 s of streaming): a 16-token one could arrive in one read while a loaded
    # machine held the loop (6 xdist workers on 2 cores), leaving that stream no rate
    # (first and last content stamped together) and its turn no Σ.
    scenario = workloads.load_scenario("agent-fleet").with_overrides(
        [
            "users=4",
            *SHRINK,
            "output_tokens=64",
            "pacing.arrivals.rate_per_s=40",
            "pacing.tool_time.median=0.05",
        ]
    )
    return workloads.run(scenario)


@pytest.fixture(scope="module")
def lockstep() -> workloads.RunResult:
    return workloads.run(
        workloads.load_scenario("five-user-coding").with_overrides(["users=2", *SHRINK])
    )


def csv_rows(result: workloads.RunResult) -> tuple[list[str], list[dict[str, str]]]:
    reader = csv.DictReader(io.StringIO(export(result, "csv")))
    rows = list(reader)
    return list(reader.fieldnames or []), rows


def console_cells(result: workloads.RunResult) -> dict[tuple[int, str], str]:
    table = report.turn_table(result)
    return {
        (int(row[0]), column): cell
        for row in table.rows
        for column, cell in zip(table.columns, row, strict=True)
    }


@pytest.mark.parametrize(
    ("name", "columns"), [("fleet", FLEET_COLUMNS), ("lockstep", LOCKSTEP_COLUMNS)]
)
def test_the_csv_has_the_consoles_rate_columns_in_its_order_with_its_values(request, name, columns):
    result = request.getfixturevalue(name)
    assert report.turn_table(result).columns[1:4] == columns
    fields, rows = csv_rows(result)
    rates = [f for f in fields if f.endswith("tok_s_median") and "prefill" not in f]
    assert rates == [f"{CSV_KEYS[c]}_median" for c in columns]
    cells = console_cells(result)
    assert {int(r["turn"]) for r in rows} == {1, 2}
    for row in rows:
        for column in columns:
            median = row[f"{CSV_KEYS[column]}_median"]
            assert median, f"turn {row['turn']}: {column} empty"
            # The console prints "median (low–high)": its median is the CSV's, rounded.
            assert cells[(int(row["turn"]), column)].split(" ")[0] == num(float(median))


def test_a_fleet_export_never_calls_its_sum_of_streams_aggregate(fleet):
    fields, rows = csv_rows(fleet)
    assert not [f for f in fields if "aggregate" in f]
    data = json.loads(export(fleet, "json"))
    for turn, row in zip(data["summary"]["turns"], rows, strict=True):
        assert turn["aggregate_rate"] is None
        assert turn["streams_sum_rate"]["median"] == float(row["streams_sum_tok_s_median"])
        assert turn["wall_aggregate_rate"]["median"] == float(row["wall_tok_s_median"])
    run = data["summary"]["run"]
    assert run["aggregate_rate"] is None and run["turn_aggregate_rate"] is None
    assert run["wall_aggregate_rate"]["median"] > 0

    text = export(fleet, "text")
    markdown = export(fleet, "md")
    page = html_report(fleet, with_plots=False)
    headline = report.run_line(fleet)
    assert headline.startswith("wall throughput ")
    note = report.turn_table(fleet).notes[0]
    assert note.startswith("† arrivals pacing")
    for form in (text, markdown, page):
        assert "aggregate" not in form.lower()
    assert "| turn | " + " | ".join(FLEET_COLUMNS) + " |" in markdown
    assert f"- {note}" in markdown and headline in markdown
    heads = re.findall(r"<th[^>]*>([^<]*)</th>", page)
    assert heads[1:4] == FLEET_COLUMNS
    assert note.replace("'", "&#x27;") in page


def test_a_lockstep_export_keeps_its_aggregate(lockstep):
    fields, rows = csv_rows(lockstep)
    assert "aggregate_tok_s_median" in fields and "streams_sum_tok_s_median" not in fields
    data = json.loads(export(lockstep, "json"))
    for turn, row in zip(data["summary"]["turns"], rows, strict=True):
        assert turn["streams_sum_rate"] is None
        assert turn["aggregate_rate"]["median"] == float(row["aggregate_tok_s_median"])
    assert data["summary"]["run"]["aggregate_rate"] is not None
    assert report.run_line(lockstep).startswith("aggregate ")
    assert "†" not in export(lockstep, "md")


@pytest.mark.parametrize(
    ("name", "columns"), [("fleet", FLEET_COLUMNS), ("lockstep", LOCKSTEP_COLUMNS)]
)
def test_rates_png_plots_the_consoles_columns_under_its_names(request, name, columns):
    pytest.importorskip("matplotlib")
    from matplotlib.container import ErrorbarContainer

    from workloads.report import plots

    result = request.getfixturevalue(name)
    fig = plots._rates_figure(result)
    try:
        assert [ax.get_ylabel() for ax in fig.axes] == columns
        texts = [t.get_text() for t in fig.texts]  # the suptitle, and a footnote if any
        daggers = [n for n in report.turn_table(result).notes if n.startswith("†")]
        assert len(daggers) == (name == "fleet")
        assert [t for t in texts if t.startswith("†")] == daggers  # the table's footnote
        if name == "fleet":
            assert not [t for t in texts if "aggregate" in t]
            assert not [ax for ax in fig.axes if "aggregate" in ax.get_title()]
        _, rows = csv_rows(result)
        for ax, column in zip(fig.axes, columns, strict=True):
            line = next(c for c in ax.containers if isinstance(c, ErrorbarContainer)).lines[0]
            assert list(line.get_ydata()) == [float(r[f"{CSV_KEYS[column]}_median"]) for r in rows]
    finally:
        plots._pyplot().close(fig)
