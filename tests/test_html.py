"""The HTML report: self-contained, every table and figure in it, and it renders in a real
headless Chromium (skipped where Debian's chromium package is not installed)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

import workloads
from workloads.cli import main
from workloads.core.aggregate import summarized
from workloads.report import console as report
from workloads.report.html import html_report, write_html
from workloads.report.table import ReportTable

DATA = Path(__file__).parent / "data"


def chromium() -> str | None:
    return next((p for n in ("chromium", "chromium-browser", "google-chrome")
                 if (p := shutil.which(n))), None)


def test_the_page_is_self_contained_with_every_table_and_figure():
    result = summarized(workloads.load_result(DATA / "v1-small-a"))
    page = html_report(result)
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)=["'](?!data:)""", page)  # nothing fetched from outside
    assert "<script" not in page
    for table in (b for b in report.blocks(result) if isinstance(b, ReportTable)):
        assert f'id="{table.name}"' in page
        for column in table.columns:
            assert f">{column}<" in page.replace("&#x27;", "'")
    assert page.count('src="data:image/png;base64,') == 4  # rates, ttft, prefill, timeline
    assert "workloads" in page and "result format 1" in page  # provenance


def test_every_run_writes_its_report_next_to_the_result(tmp_path):
    out = tmp_path / "run"
    assert main(["run", "five-user-coding", "--out", str(out), "--quiet", "--no-plots",
                 "--set", "users=1", "--set", "turns=1", "--set", "opening_tokens=300",
                 "--set", "output_tokens=4", "--set", "repetitions.measured=1"]) == 0
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "five-user-coding" in page and "Per turn" in page
    assert "<img" not in page  # --no-plots: no figures


def test_show_prints_every_format(tmp_path, capsys):
    for fmt, marker in (("md", "| turn |"), ("csv", "cell,concurrency,prior_tokens,turn"),
                        ("json", '"format_version"'), ("html", "<!DOCTYPE html>"),
                        ("text", "Per turn")):
        assert main(["show", str(DATA / "v1-small-a"), "--format", fmt]) == 0
        assert marker in capsys.readouterr().out, fmt


def test_show_says_when_records_are_torn_or_short(tmp_path, capsys):
    copy = tmp_path / "r"
    shutil.copytree(DATA / "v1-small-a", copy)
    records = copy / "records.jsonl"
    lines = records.read_text().splitlines(keepends=True)
    records.write_text("".join(lines[:-1]) + lines[-1][:40])
    assert main(["show", str(copy)]) == 0
    err = capsys.readouterr().err
    assert "ends in a torn line" in err
    assert f"holds {len(lines) - 1} of the {len(lines)} turns" in err


@pytest.mark.skipif(chromium() is None, reason="no chromium (Debian: apt-get install chromium)")
def test_the_report_renders_in_headless_chromium_with_its_figures(tmp_path):
    result = summarized(workloads.load_result(DATA / "v1-sweep"))
    page = write_html(result, tmp_path / "report.html").read_text(encoding="utf-8")
    # The page has no script of its own: the test adds one that records what rendered.
    probe = page.replace("</body>", (
        "<script>window.addEventListener('load', () => { const imgs = [...document.images];"
        "document.body.insertAdjacentHTML('beforeend', '<pre id=\"probe\">' + imgs.length + "
        "' images, ' + imgs.filter(i => i.complete && i.naturalWidth > 300).length + "
        "' drawn, ' + document.querySelectorAll('table').length + ' tables, width ' + "
        "document.body.scrollWidth + '</pre>'); });</script></body>"))
    probed = tmp_path / "probe.html"
    probed.write_text(probe, encoding="utf-8")
    browser = chromium()
    assert browser is not None
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
             f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(
        [browser, *flags, "--virtual-time-budget=5000", "--dump-dom", probed.as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    found = re.search(r"(\d+) images, (\d+) drawn, (\d+) tables", dom)
    assert found, dom[-2000:]
    images, drawn, tables = map(int, found.groups())
    assert images == drawn == 5 and tables >= 3  # a sweep: cache.png too
    shot = tmp_path / "report.png"
    subprocess.run(
        [browser, *flags, "--window-size=1280,3000", f"--screenshot={shot}",
         (tmp_path / "report.html").as_uri()],
        capture_output=True, timeout=120, check=True,
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
