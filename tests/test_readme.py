"""The README's example blocks are what scripts/readme_examples.py prints from the stored
runs in docs/examples/ (a stale example fails here), and the README and docs link only to
files in the repository."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).parent.parent


def script():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "readme_examples", ROOT / "scripts" / "readme_examples.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_readme_example_is_what_the_script_prints():
    examples = script()
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = list(examples.MARKER.finditer(text))
    assert len(blocks) >= 4
    assert examples.stale_blocks(text) == [], "run python scripts/readme_examples.py"


def test_a_changed_example_is_caught():
    examples = script()
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    stale = text.replace("reconciles", "reconciled", 1)
    assert examples.stale_blocks(stale) != []


def test_docs_link_only_to_files_in_the_repository():
    for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        text = doc.read_text(encoding="utf-8")
        assert "../shared" not in text and "/work/" not in text, doc
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
            if re.match(r"[a-z]+://", target):
                continue
            assert (doc.parent / target).exists(), f"{doc.name} links to {target}"
