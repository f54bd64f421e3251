"""The package's layers (pyproject's [tool.importlinter]): a lower layer never imports a
higher one. Run here so the suite fails on the import that breaks the picture in
docs/architecture.md, not a reviewer later."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_linter_contracts_are_kept():
    exe = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    if not Path(exe).exists():
        pytest.fail("lint-imports is missing: install the test extra (import-linter)")
    done = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
