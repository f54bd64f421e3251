"""Text that looks like what a coding agent sends: system prompt, tool schema, repository
files, tool results (file reads, grep hits, test logs, diffs) and user follow-ups.

Real text matters: tokenization and speculative-decoding acceptance both depend on it being
real code and prose, not random tokens. The default corpus is the running Python's
standard-library sources (real code, present offline). Everything is deterministic for a
given (seed, session) so a run can be repeated; freshness between runs comes from nonces,
not from different text.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import random
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from workloads import tokens
from workloads.errors import ScenarioError

__all__ = ["SYSTEM_PROMPT", "TOOLS", "Corpus", "load_corpus"]

SYSTEM_PROMPT = """\
You are a careful software engineering agent working inside a user's repository. You can read
files, search the code, run the test suite and apply patches through the tools listed below.
Work in small verified steps: read the code that matters before you change it, explain what
you found in a sentence or two, then act. Prefer the smallest change that fixes the root
cause; do not reformat unrelated code. After every edit, run the narrowest test that proves
the change and read its output before you claim success. When a test fails, quote the failing
assertion and reason about it instead of guessing. Keep public interfaces stable unless the
user asks otherwise, and mention any behaviour change explicitly. Never invent file contents:
if you have not read a file, read it. When you are done, summarise what changed, why, and how
you verified it, in at most five bullet points.
"""

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository, optionally a line range.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Path relative to the root."},
                    "start_line": {"type": "integer", "minimum": 1},
                    "end_line": {"type": "integer", "minimum": 1},
                },
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "grep",
            "description": "Search the repository with a regular expression.",
            "parameters": {
                "type": "object",
                "properties": {
                    "pattern": {"type": "string"},
                    "glob": {"type": "string", "description": "Only files matching this."},
                    "max_results": {"type": "integer", "default": 50},
                },
                "required": ["pattern"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_tests",
            "description": "Run the test suite or a subset and return its output.",
            "parameters": {
                "type": "object",
                "properties": {
                    "selector": {"type": "string", "description": "e.g. tests/test_x.py::name"},
                    "timeout_s": {"type": "integer", "default": 600},
                },
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "apply_patch",
            "description": "Apply a unified diff to the working tree.",
            "parameters": {
                "type": "object",
                "properties": {"diff": {"type": "string"}},
                "required": ["diff"],
            },
        },
    },
]

_FOLLOW_UPS = [
    "Here is the output of the tool call you asked for.",
    "That did not fix it. The tool output is below; look again.",
    "Good progress. Continue, and check the other call sites too.",
    "The reviewer asked for a smaller change. Here is the next file you wanted.",
    "Tests were run after your patch. Read the log carefully before the next step.",
]

_TASKS = [
    "A user reports that parsing fails on inputs with trailing whitespace. Find the cause in "
    "the code below and fix it without changing the public API.",
    "The functions below are slow on large inputs. Profile by reading, find the quadratic "
    "step, and propose a patch with a test.",
    "We are adding type hints to this module. Start with the files below and keep behaviour "
    "identical.",
    "A flaky test touches this code. Read it, explain the race, and make it deterministic.",
]


@dataclass(frozen=True)
class SourceFile:
    path: str
    text: str


class Corpus:
    """A deterministic pool of source files to draw context and tool results from."""

    def __init__(self, name: str, files: list[SourceFile]) -> None:
        if not files:
            raise ScenarioError(f"content.corpus {name!r}: no readable source files found")
        self.name = name
        self.files = files
        digest = hashlib.sha256()
        for f in files:
            digest.update(f.path.encode())
            digest.update(hashlib.sha256(f.text.encode()).digest())
        self.fingerprint = digest.hexdigest()[:16]

    def rng(self, seed: int, *stream: int) -> random.Random:
        """One RNG per (seed, stream...): sessions never share random state."""
        key = ":".join(str(x) for x in (seed, *stream))
        return random.Random(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big"))

    # --- pieces -----------------------------------------------------------------------------

    def system_text(self) -> str:
        """System prompt with the tool schema, identical for every session."""
        schema = json.dumps(TOOLS, indent=2)
        return f"{SYSTEM_PROMPT}\n# Tools\n\nYou may call these functions:\n{schema}\n"

    def task_text(self, rng: random.Random) -> str:
        return rng.choice(_TASKS)

    def repository_context(self, rng: random.Random, n_tokens: int) -> str:
        """Repository files, each with a header, cut to exactly ``n_tokens`` (tiktoken)."""
        return _fit(self._file_dumps(rng), n_tokens)

    def tool_result(self, rng: random.Random, turn: int, n_tokens: int) -> str:
        """A tool result of ``n_tokens`` (tiktoken): a file read, grep hits, a test log or a
        diff, preceded by a short user follow-up."""
        kind = ("read_file", "grep", "run_tests", "apply_patch")[(turn + rng.randrange(4)) % 4]
        pieces = {
            "read_file": self._file_dumps,
            "grep": self._grep_hits,
            "run_tests": self._test_log,
            "apply_patch": self._diffs,
        }[kind](rng)
        header = f"{rng.choice(_FOLLOW_UPS)}\n\n[tool: {kind}]\n"
        return header + _fit(pieces, max(0, n_tokens - tokens.count(header)))

    def reply_text(self, rng: random.Random, n_tokens: int) -> str:
        """An agent-like reply (prose then code), used by the simulated server."""
        return _fit(self._replies(rng), n_tokens)

    # --- generators of endless text ---------------------------------------------------------

    def _pick(self, rng: random.Random) -> SourceFile:
        return self.files[rng.randrange(len(self.files))]

    def _file_dumps(self, rng: random.Random) -> Iterator[str]:
        while True:
            f = self._pick(rng)
            yield f"\n=== {f.path} ===\n{f.text}\n"

    def _grep_hits(self, rng: random.Random) -> Iterator[str]:
        while True:
            f = self._pick(rng)
            lines = f.text.splitlines()
            if not lines:
                continue
            start = rng.randrange(len(lines))
            for offset, line in enumerate(lines[start : start + 12]):
                if line.strip():
                    yield f"{f.path}:{start + offset + 1}: {line.strip()}\n"

    def _test_log(self, rng: random.Random) -> Iterator[str]:
        while True:
            f = self._pick(rng)
            name = Path(f.path).stem
            lines = [ln for ln in f.text.splitlines() if ln.strip()] or ["pass"]
            line_no = rng.randrange(len(lines)) + 1
            yield (
                f"tests/test_{name}.py::test_{name}_{rng.randrange(100)} FAILED\n"
                f"    {f.path}:{line_no}: in {name}\n"
                f"        {lines[line_no - 1].strip()}\n"
                f"E       AssertionError: expected {rng.randrange(1000)}, got "
                f"{rng.randrange(1000)}\n"
            )
            yield f"tests/test_{name}.py::test_{name}_roundtrip PASSED\n"

    def _diffs(self, rng: random.Random) -> Iterator[str]:
        while True:
            f = self._pick(rng)
            old = f.text.splitlines(keepends=True)[:120]
            new = [ln.replace("    ", "\t", 1) if i % 7 == 3 else ln for i, ln in enumerate(old)]
            yield "".join(difflib.unified_diff(old, new, f"a/{f.path}", f"b/{f.path}"))

    def _replies(self, rng: random.Random) -> Iterator[str]:
        while True:
            f = self._pick(rng)
            lines = f.text.splitlines()
            start = rng.randrange(max(1, len(lines) - 20))
            snippet = "\n".join(lines[start : start + rng.randrange(6, 20)])
            yield (
                f"I read `{f.path}` around line {start + 1}. The logic there is what we need to "
                f"change; here is the relevant part and my proposed edit.\n\n```python\n"
                f"{snippet}\n```\n\n"
            )


def _fit(pieces: Iterator[str], n_tokens: int) -> str:
    """Concatenate pieces until there are at least ``n_tokens`` tokens, then cut exactly."""
    if n_tokens <= 0:
        return ""
    parts: list[str] = []
    have = 0
    for _ in range(100_000):  # bounded: each piece adds at least one token in practice
        piece = next(pieces)
        parts.append(piece)
        have += tokens.count(piece)
        if have >= n_tokens:
            break
    return tokens.truncate("".join(parts), n_tokens)


def _read_sources(root: Path, limit: int = 400) -> list[SourceFile]:
    skip = {"test", "tests", "idlelib", "site-packages", "lib2to3", "__pycache__", "ensurepip"}
    paths: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip and not d.startswith("."))
        paths.extend(Path(dirpath, name) for name in filenames if name.endswith(".py"))
    paths.sort()
    files: list[SourceFile] = []
    # Spread the pick over the whole tree, deterministically, rather than the first N names.
    step = max(1, len(paths) // limit)
    for path in paths[::step][:limit]:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if 200 < len(text) < 200_000:
            files.append(SourceFile(str(path.relative_to(root)), text))
    return files


def _synthetic_files(count: int = 64) -> list[SourceFile]:
    rng = random.Random(0)
    words = ["parse", "token", "buffer", "state", "config", "cache", "value", "index", "node"]
    files = []
    for i in range(count):
        body = []
        for j in range(30):
            a, b = rng.sample(words, 2)
            body.append(
                f"def {a}_{b}_{j}(items, limit={rng.randrange(2, 99)}):\n"
                f'    """Return the {a} of each {b} up to limit."""\n'
                f"    out = []\n    for item in items[:limit]:\n"
                f"        out.append(item.{a}({b}=item.{b}))\n    return out\n\n"
            )
        files.append(SourceFile(f"pkg/module_{i}.py", "".join(body)))
    return files


@cache
def load_corpus(name: str) -> Corpus:
    """``"stdlib"``, ``"synthetic"``, or a directory of the user's own code."""
    if name == "stdlib":
        return Corpus("stdlib", _read_sources(Path(sysconfig.get_paths()["stdlib"])))
    if name == "synthetic":
        return Corpus("synthetic", _synthetic_files())
    root = Path(name).expanduser()
    if not root.is_dir():
        raise ScenarioError(
            f"content.corpus: {name!r} is not 'stdlib', 'synthetic' or an existing directory"
        )
    return Corpus(str(root), _read_sources(root, limit=2000))
