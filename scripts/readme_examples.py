"""The README's and docs' example outputs, from real runs kept in the repository.

Each example block in README.md and docs/*.md sits under a marker naming a stored run and a
part of its report::

    <!-- example: first-run window -->
    ```text
    ...
    ```

The stored runs are in ``docs/examples/NAME/`` (result.json + records.jsonl), made by the
commands in :data:`EXAMPLES` against the embedded simulated server. A block's text is the
report of its run as ``python -m workloads show docs/examples/NAME`` prints it at
:data:`WIDTH` columns, cut to the part named. tests/test_readme.py fails when a block differs
from what this script prints, so an example in README.md or docs/ can never go stale.

    python scripts/readme_examples.py            # rewrite the blocks from the stored runs
    python scripts/readme_examples.py --check    # exit 1 and name the stale blocks
    python scripts/readme_examples.py --rerun    # run the examples again, then rewrite
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
STORE = ROOT / "docs" / "examples"
WIDTH = 100  # GitHub shows about this many columns of a code block without scrolling

# name -> the `python -m workloads` arguments that made it (the embedded simulator, the
# default `fast` profile). Smaller than the full scenarios where a full run takes minutes.
EXAMPLES: dict[str, list[str]] = {
    "first-run": ["run", "five-user-coding"],
    "what-if": ["run", "five-user-coding", "--sim", "kv_capacity_tokens=46202",
                "--set", "repetitions.measured=1"],
    "depth-sweep": ["run", "depth-sweep", "--set", "output_tokens=64",
                    "--set", "repetitions.measured=2"],
}

MARKER = re.compile(
    r"<!-- example: (?P<name>[\w-]+) (?P<part>[\w-]+) -->\n```text\n(?P<body>.*?)```", re.S
)


def _between(lines: list[str], start: Callable[[str], bool],
             stop: Callable[[str], bool] | None = None) -> list[str]:
    out: list[str] = []
    for line in lines:
        if not out and not start(line):
            continue
        if out and stop is not None and stop(line):
            break
        out.append(line)
    while out and not out[-1].strip():
        out.pop()
    return out


PARTS: dict[str, Callable[[list[str]], list[str]]] = {
    "full": lambda lines: lines,
    # everything before the window section
    "report": lambda lines: _between(lines, lambda _: True,
                                     lambda line: line.startswith("Window")),
    # the header and coordinates lines: up to the first blank line
    "head": lambda lines: _between(lines, lambda _: True, lambda line: not line.strip()),
    "turns": lambda lines: _between(lines, lambda line: line.startswith("Per turn — rates"),
                                    lambda line: line.startswith("Per turn — tokens")),
    "tokens": lambda lines: _between(lines, lambda line: line.startswith("Per turn — tokens"),
                                     lambda line: line.startswith("Latency")),
    "latency": lambda lines: _between(lines, lambda line: line.startswith("Latency"),
                                      lambda line: not line.strip()),
    "what-if": lambda lines: _between(lines, lambda line: line.startswith("What-if"),
                                      lambda line: not line.strip()),
    "run-line": lambda lines: _between(lines, lambda line: "per-user median" in line,
                                       lambda line: line.startswith("depths")),
    "window": lambda lines: _between(lines, lambda line: line.startswith("Window")),
    "cells": lambda lines: _between(lines, lambda line: line.startswith("sweep of"),
                                    lambda line: line.startswith("Per cell — latency")),
}
# the README's excerpt: the header, the per-turn rates and the run line
PARTS["summary"] = lambda lines: [*PARTS["head"](lines), "", *PARTS["turns"](lines), "",
                                  *PARTS["run-line"](lines)]


def files() -> list[Path]:
    """The files whose example blocks this script keeps: README.md and every page in docs/."""
    return [README, *sorted(DOCS.glob("*.md"))]


def report_text(name: str) -> list[str]:
    """The stored run's report as ``show`` prints it at :data:`WIDTH` columns."""
    import workloads
    from workloads.core.aggregate import summarized
    from workloads.report.export import plain_text

    result = summarized(workloads.load_result(STORE / name))
    return plain_text(result, WIDTH).splitlines()


def block_text(name: str, part: str) -> str:
    if name not in EXAMPLES:
        raise SystemExit(f"an example block names {name!r}; known: {', '.join(EXAMPLES)}")
    if part not in PARTS:
        raise SystemExit(f"an example block names part {part!r}; known: {', '.join(PARTS)}")
    lines = PARTS[part](report_text(name))
    return "\n".join(lines) + "\n"


def regenerated(text: str) -> str:
    """A file's text with every example block replaced by what the stored run prints."""
    def replace(m: re.Match[str]) -> str:
        body = block_text(m["name"], m["part"])
        return f"<!-- example: {m['name']} {m['part']} -->\n```text\n{body}```"

    return MARKER.sub(replace, text)


def stale_blocks(text: str) -> list[str]:
    """``NAME PART`` of every block whose text is not what the stored run prints."""
    return [f"{m['name']} {m['part']}" for m in MARKER.finditer(text)
            if m["body"] != block_text(m["name"], m["part"])]


def rerun(names: list[str]) -> None:
    from workloads.cli import main

    for name in names:
        out = STORE / name
        if out.exists():
            shutil.rmtree(out)
        code = main([*EXAMPLES[name], "--out", str(out), "--quiet", "--no-plots"])
        if code != 0:
            raise SystemExit(f"example {name}: exit {code}")
        # The README quotes the report, which show recomputes from result.json and
        # records.jsonl: the page and the transcripts would only weigh on the repository.
        (out / "report.html").unlink(missing_ok=True)
        (out / "transcripts.jsonl").unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a block is stale")
    parser.add_argument("--rerun", nargs="*", metavar="NAME",
                        help="run these examples again (all when none named)")
    args = parser.parse_args(argv)
    if args.check:
        stale = [(path, block) for path in files()
                 for block in stale_blocks(path.read_text(encoding="utf-8"))]
        for path, block in stale:
            print(f"{path.relative_to(ROOT)}: example '{block}' is stale: run "
                  "python scripts/readme_examples.py", file=sys.stderr)
        return 1 if stale else 0
    if args.rerun is not None:
        rerun(args.rerun or list(EXAMPLES))
    for path in files():
        text = path.read_text(encoding="utf-8")
        new = regenerated(text)
        if new != text:
            path.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
