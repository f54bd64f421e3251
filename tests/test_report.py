from __future__ import annotations

import re

from rich.console import Console

import workloads
from fakes import FakeChatClient
from workloads import report
from workloads.cli import main


def rendered(result: workloads.RunResult) -> str:
    console = Console(width=120, record=True, color_system=None)
    console.print(report.render(result))
    return console.export_text()


def test_a_depth_sweep_prints_seed_000_shaped_rows(tmp_path, capsys):
    out = tmp_path / "sweep"
    code = main(["run", "depth-sweep", "--out", str(out), "--quiet",
                 "--set", "prior_tokens=[512, 1024]", "--set", "turn_tokens=256",
                 "--set", "output_tokens=16", "--set", "repetitions.measured=2"])
    assert code == 0
    text = rendered(workloads.load_result(out))
    assert "prior" in text and "configured" in text and "range" in text
    rows = [line for line in text.splitlines() if re.match(r"│\s+1 │", line)]
    assert len(rows) == 2
    for row, (prior, prompt) in zip(rows, [("512", "768"), ("1,024", "1,280")], strict=True):
        cells = [c.strip() for c in row.strip("│").split("│")]
        assert cells[1:4] == [prior, prompt, prompt]  # configured target, configured, actual
        low, high = (float(x.replace(",", "")) for x in cells[5].split("–"))
        assert low <= float(cells[4].replace(",", "")) <= high  # median within its range
        assert cells[-1] == "2/2"
    assert "exact, from the target's" in text


def test_a_concurrency_sweep_adds_the_aggregate_column():
    scenario = workloads.load_scenario("concurrency-sweep").with_overrides(
        ["concurrency=[1, 2]", "turns=1", "opening_tokens=300", "output_tokens=4",
         "repetitions.warmup=0", "repetitions.measured=1"])
    result = workloads.run(scenario, client=FakeChatClient(lambda body: (320, "ok")))
    text = rendered(result)
    assert "aggregate" in text and "sweep of 2 cells: C 1, 2" in text


def test_the_turn_table_shows_configured_next_to_actual_prompt_tokens():
    scenario = workloads.load_scenario("five-user-coding").with_overrides(
        ["users=1", "turns=2", "opening_tokens=300", "turn_tokens=50", "output_tokens=4",
         "repetitions.warmup=0", "repetitions.measured=1"])
    result = workloads.run(scenario, client=FakeChatClient(lambda body: (351, "ok")))
    text = rendered(result)
    assert "configured" in text
    table = text[text.index("configured prompt"):]
    row = next(line for line in table.splitlines() if re.match(r"\s*2\s", line))
    assert "404" in row.split()[1]  # 300 + 2 × 50 + 4, next to the server's count
