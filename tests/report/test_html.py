"""The HTML report: self-contained, every table and figure in it, and it renders in a real
headless Chromium (skipped where Debian's chromium package is not installed)."""

from __future__ import annotations

import html
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

DATA = Path(__file__).parents[1] / "data"


def chromium() -> str | None:
    return next(
        (p for n in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(n))),
        None,
    )


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
    # rates, ttft, latency (E2E only: v1 records carry no chunk gaps), prefill, timeline
    assert page.count('src="data:image/png;base64,') == 5
    assert "workloads" in page and "result format 1" in page  # provenance


def test_the_lead_holds_the_headline_slo_verdicts_and_every_warning_once():
    result = summarized(workloads.load_result(DATA / "v5-goodput"))
    assert result.warnings and result.scenario.slo is not None and result.gate is not None
    page = html_report(result, with_plots=False)
    body = page[page.index("<body>") + len("<body>") :]
    assert body.startswith('<section class="lead" id="lead">')
    lead = html.unescape(body[: body.index("</section>")])
    rest = html.unescape(body[body.index("</section>") :])
    assert "<table" not in lead
    leads = [
        report.run_line(result),
        "requests meeting the SLO: 12 of 12",
        "p90 TTFT ≤ 0.05 s: cannot tell yet",
        "correctness 6/6",
        *(f"warning: {w}" for w in result.warnings),
    ]
    for text in leads:
        assert text in lead, text
        assert text not in rest, text  # said once, first
    assert 'id="latency"' in rest and 'class="provenance"' in rest


def test_every_run_writes_its_report_next_to_the_result(tmp_path):
    out = tmp_path / "run"
    assert (
        main(
            [
                "run",
                "five-user-coding",
                "--out",
                str(out),
                "--quiet",
                "--no-plots",
                "--set",
                "users=1",
                "--set",
                "turns=1",
                "--set",
                "opening_tokens=300",
                "--set",
                "output_tokens=4",
                "--set",
                "repetitions.measured=1",
            ]
        )
        == 0
    )
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "five-user-coding" in page and "Per turn" in page
    assert "<img" not in page  # --no-plots: no figures


def test_show_prints_every_format(tmp_path, capsys):
    for fmt, marker in (
        ("md", "| turn |"),
        ("csv", "cell,concurrency,prior_tokens,turn"),
        ("json", '"format_version"'),
        ("html", "<!DOCTYPE html>"),
        ("text", "Per turn"),
    ):
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


def _rendered(page: str, tmp_path: Path) -> str:
    """The DOM headless Chromium rendered from ``page``, with a line the test's own script
    adds (the page has none): images, drawn, tables, width, then the first element's id and
    text."""
    probe = page.replace(
        "</body>",
        (
            "<script>window.addEventListener('load', () => { const imgs = [...document.images];"
            "const first = document.body.firstElementChild;"
            "const out = document.createElement('pre'); out.id = 'probe';"
            "out.textContent = imgs.length + ' images, ' + imgs.filter(i => i.complete && "
            "i.naturalWidth > 300).length + ' drawn, ' + document.querySelectorAll('table').length"
            " + ' tables, width ' + document.body.scrollWidth + '\\nfirst ' + first.id + ': ' + "
            "first.innerText; document.body.append(out); });</script></body>"
        ),
    )
    probed = tmp_path / "probe.html"
    probed.write_text(probe, encoding="utf-8")
    browser = chromium()
    assert browser is not None
    dom = subprocess.run(
        [browser, *_flags(tmp_path), "--virtual-time-budget=5000", "--dump-dom", probed.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return html.unescape(dom)


def _flags(tmp_path: Path) -> list[str]:
    return [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--allow-file-access-from-files",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]


needs_chromium = pytest.mark.skipif(
    chromium() is None, reason="no chromium (Debian: apt-get install chromium)"
)


@pytest.mark.slow
@needs_chromium
def test_the_report_renders_in_headless_chromium_with_its_figures(tmp_path):
    result = summarized(workloads.load_result(DATA / "v1-sweep"))
    page = write_html(result, tmp_path / "report.html").read_text(encoding="utf-8")
    dom = _rendered(page, tmp_path)
    found = re.search(r"(\d+) images, (\d+) drawn, (\d+) tables", dom)
    assert found, dom[-2000:]
    images, drawn, tables = map(int, found.groups())
    assert images == drawn == 6 and tables >= 3  # a sweep: cache.png and latency.png too
    first = re.search(r"^first lead: (.*?)</pre>", dom, re.M | re.S)
    assert first, dom[-2000:]
    assert report.sweep_line(result) in first.group(1)
    browser = chromium()
    assert browser is not None
    shot = tmp_path / "report.png"
    subprocess.run(
        [
            browser,
            *_flags(tmp_path),
            "--window-size=1280,3000",
            f"--screenshot={shot}",
            (tmp_path / "report.html").as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@needs_chromium
def test_the_lead_is_the_first_thing_chromium_draws(tmp_path):
    result = summarized(workloads.load_result(DATA / "v5-goodput"))
    dom = _rendered(html_report(result, with_plots=False), tmp_path)
    first = re.search(r"^first lead: (.*?)</pre>", dom, re.M | re.S)
    assert first, dom[-2000:]

    def words(text: str) -> str:  # a browser collapses runs of spaces
        return " ".join(text.split())

    text = words(first.group(1))
    assert text.startswith(words(report.header_line(result)))
    for line in (
        report.run_line(result),
        "requests meeting the SLO",
        *(f"warning: {w}" for w in result.warnings),
    ):
        assert words(line) in text, line
