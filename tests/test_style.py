"""The code's format and lint rules (pyproject's [tool.ruff]) are checked with the tests, so
CI fails on a file the formatter would change, not a reviewer later."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ["src", "tests", "benchmarks"]


def _ruff() -> str:
    # the test extra's pinned ruff first (beside this interpreter), not another on PATH
    pinned = Path(sys.executable).parent / "ruff"
    exe = str(pinned) if pinned.exists() else shutil.which("ruff")
    if exe is None:
        pytest.fail("ruff is missing: install the test extra")
    return exe


def test_every_file_is_as_ruff_format_writes_it():
    done = subprocess.run(
        [_ruff(), "format", "--check", *CHECKED], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def test_ruff_lint_rules_hold():
    done = subprocess.run(
        [_ruff(), "check", "--no-cache", *CHECKED], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
