"""Text that looks like what a coding agent (or a person at a chat box) sends: system prompt,
tool schema, repository files, tool results (file reads, grep hits, test logs, diffs), user
follow-ups and questions, and agent-like replies for the simulated server.

Size: past 400 lines because about 120 of them are the text itself (system prompts, the
tool schema, task and question lists); the code is under 300.

Real text matters: tokenization and speculative-decoding acceptance both depend on it being
real code and prose, not random tokens. The default corpus is the running Python's
standard-library sources (real code, present offline). Everything here is deterministic for
a given (seed, session, turn), so a run can be repeated; freshness between runs comes from
nonces (``conversation.py``), not from different text.

Each piece of a conversation is a :class:`TextStream`: endless text that is cut at a token
count on demand, so the depth fitting in ``session.py`` can ask for "this stream, n tokens"
as often as it needs and always get a prefix of the same text.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import json
import os
import random
import sysconfig
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

from workloads.core import tokens
from workloads.model.errors import ScenarioError

__all__ = [
    "CHAT_SYSTEM_PROMPT",
    "SYSTEM_PROMPT",
    "TOOLS",
    "Corpus",
    "SourceFile",
    "TextStream",
    "cold_prompt",
    "load_corpus",
]

Style = Literal["agent", "chat"]

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

To call a tool, reply with one short sentence saying why, then a fenced block:
```tool_call
{"name": "<tool name>", "arguments": {<arguments as JSON>}}
```
Call one tool per reply. The tool's output comes back in the next user message.
"""

CHAT_SYSTEM_PROMPT = """\
You are a helpful programming assistant. Answer clearly and concisely, show code when it
helps, and say so when you are not sure.
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

_QUESTIONS = [
    "What does this function do, and is there a bug in it?",
    "How would I write a unit test for this?",
    "Can you make this faster without changing what it returns?",
    "Why does this raise an exception when the input is empty?",
    "Could you rewrite this to be easier to read?",
    "Is this thread-safe? If not, what would you change?",
]

_CHAT_FOLLOW_UPS = [
    "Thanks. What about this part?",
    "That helps. One more question about the same file:",
    "I tried that and it still fails. Here is the code again:",
    "Makes sense. And how does this piece fit in?",
]


@dataclass(frozen=True)
class SourceFile:
    """One file of a corpus: a path relative to the corpus root and its text."""

    path: str
    text: str


def stream_rng(seed: int, *stream: int | str) -> random.Random:
    """One RNG per (seed, stream...), the same whatever the corpus. Pure."""
    key = ":".join(str(x) for x in (seed, *stream))
    return random.Random(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big"))


class TextStream:
    """Endless deterministic text, cut at a token count on demand.

    The pieces are encoded with tiktoken as they are needed; :meth:`take` returns the text of
    the first ``n`` of those tokens, so ``take(n + k)`` always extends ``take(n)``. Token
    counts here are tiktoken's; the target's own count is measured by the caller.
    """

    def __init__(self, pieces: Iterator[str]) -> None:
        self._pieces = pieces
        self._ids: array[int] = array("i")  # compact (tokens.compact): a list held ~36 B a token
        # The last cut: sizing asks for one several times in a row (a content count, then the
        # render with it; each pad of a cut). Eight kept every stream's dead candidates alive
        # (10.8 MB of the client's peak at C256, benchmarks/RESULTS.md); a cut asked for
        # again later is one decode.
        self._taken: dict[int, str] = {}

    def _extend_to(self, n_tokens: int) -> None:
        for _ in range(1_000_000):  # bounded: every piece adds at least one token in practice
            if len(self._ids) >= n_tokens:
                return
            self._ids.extend(tokens.encode(next(self._pieces)))

    def prefixed(self, head: str) -> TextStream:
        """A stream that starts with ``head`` and goes on with this one's text (use before
        taking anything from this one)."""
        return TextStream(itertools.chain([head], self._pieces))

    def take(self, n_tokens: int) -> str:
        """The text of the first ``n_tokens`` tokens, never ending inside a character."""
        if n_tokens <= 0:
            return ""
        text = self._taken.get(n_tokens)
        if text is not None:
            return text
        self._extend_to(n_tokens)
        raw = tokens.encoding().decode_bytes(self._ids[:n_tokens])
        text = raw.decode("utf-8", "ignore")  # a cut inside a multi-byte character drops it
        self._taken = {n_tokens: text}
        return text


class Corpus:
    """A deterministic pool of source files to draw context, tool results and replies from.

    ``fingerprint`` identifies the exact files (paths and contents); it is recorded in every
    RunResult so two runs can be checked for identical text.
    """

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

    def rng(self, seed: int, *stream: int | str) -> random.Random:
        """One RNG per (seed, stream...): sessions never share random state."""
        return stream_rng(seed, *stream)

    # --- the streams a conversation is made of ------------------------------------------

    def system_stream(self, style: Style, seed: int) -> TextStream:
        """The system message after its nonce line: prompt (and tool schema, for agents),
        then shared repository files for as long as asked. Identical for every session."""
        rng = self.rng(seed, "system")
        head = _system_head(style)
        if style == "agent":
            return TextStream(_chain([head, "\n# Project context\n"], self._file_dumps(rng)))
        return TextStream(_chain([head, "\nReference code:\n"], self._files(rng)))

    def natural_system_tokens(self, style: Style) -> int:
        """tiktoken tokens of the system prompt (and tool schema) without shared files."""
        return tokens.count(_system_head(style))

    def user_stream(self, style: Style, seed: int, session: int) -> TextStream:
        """The session's first user message: its task and the files it starts with."""
        rng = self.rng(seed, "user", session)
        if style == "agent":
            head = [rng.choice(_TASKS), "\n\nRelevant files:\n"]
            return TextStream(_chain(head, self._file_dumps(rng)))
        return TextStream(_chain(["I'm working on this code:\n"], self._files(rng)))

    def turn_stream(
        self, style: Style, seed: int, session: int, turn: int, tool: str | None = None
    ) -> TextStream:
        """Turn ``turn``'s new content: for agents a tool result of the tool the reply
        called (``tool``, a name of the coding tool set: a file read for read, grep or glob
        hits, a command's log for bash, a diff for edit and write), a follow-up and a
        drawn one of those without a known call; a question about a piece of code for
        chat."""
        rng = self.rng(seed, "turn", session, turn)
        if style == "chat":
            lead = rng.choice(_QUESTIONS) if turn == 1 else rng.choice(_CHAT_FOLLOW_UPS)
            return TextStream(_chain([lead, "\n\n"], self._snippets(rng)))
        kinds: dict[str, Callable[[random.Random], Iterator[str]]] = {
            "read": self._file_dumps,
            "grep": self._grep_hits,
            "bash": self._test_log,
            "edit": self._diffs,
        }
        also = {"glob": "grep", "write": "edit"}
        drawn = list(kinds)[(turn + rng.randrange(4)) % 4]
        if tool is not None and (tool in kinds or tool in also):
            return TextStream(kinds[also.get(tool, tool)](rng))
        header = f"{rng.choice(_FOLLOW_UPS)}\n\n[tool result: {drawn}]\n"
        return TextStream(_chain([header], kinds[drawn](rng)))

    def block_stream(self, seed: int, block: int) -> TextStream:
        """The text of a trace's prompt block (a Mooncake hash id): excerpts of files,
        about 60 lines each, from an RNG seeded by the block's id, so a block is the same
        text wherever it appears (requests that share a block id share its text)."""
        rng = self.rng(seed, "block", block)

        def excerpts() -> Iterator[str]:
            while True:
                f = self._pick(rng)
                lines = f.text.splitlines()
                start = rng.randrange(max(1, len(lines) - 60))
                body = "\n".join(lines[start : start + 60])
                yield f"\n=== {f.path} (line {start + 1}) ===\n{body}\n"

        return TextStream(excerpts())

    def reply_text(self, rng: random.Random, n_tokens: int) -> str:
        """An agent-like reply of ``n_tokens`` (tiktoken): mostly a sentence and a tool call,
        sometimes a proposed patch. The simulated server answers with these."""
        return TextStream(self._replies(rng)).take(n_tokens)

    # --- generators of endless text -----------------------------------------------------

    def _pick(self, rng: random.Random) -> SourceFile:
        return self.files[rng.randrange(len(self.files))]

    def _file_dumps(self, rng: random.Random) -> Iterator[str]:
        while True:
            f = self._pick(rng)
            yield f"\n=== {f.path} ===\n{f.text}\n"

    def _files(self, rng: random.Random) -> Iterator[str]:
        while True:
            f = self._pick(rng)
            yield f"\n```{_fence_language(f.path)}\n# {f.path}\n{f.text}\n```\n"

    def _snippets(self, rng: random.Random) -> Iterator[str]:
        while True:
            f = self._pick(rng)
            lines = f.text.splitlines()
            start = rng.randrange(max(1, len(lines) - 30))
            body = "\n".join(lines[start : start + rng.randrange(8, 30)])
            del lines  # a suspended generator would hold the file's lines: one per stream
            yield f"```{_fence_language(f.path)}\n{body}\n```\n"

    def _grep_hits(self, rng: random.Random) -> Iterator[str]:
        while True:
            f = self._pick(rng)
            lines = f.text.splitlines()
            if not lines:
                continue
            start = rng.randrange(len(lines))
            hits = [
                f"{f.path}:{start + offset + 1}: {line.strip()}\n"
                for offset, line in enumerate(lines[start : start + 12])
                if line.strip()
            ]
            del lines  # not held by the suspended generator (as in _snippets)
            yield from hits

    def _test_log(self, rng: random.Random) -> Iterator[str]:
        while True:
            f = self._pick(rng)
            name = Path(f.path).stem
            lines = [ln for ln in f.text.splitlines() if ln.strip()] or ["pass"]
            line_no = rng.randrange(len(lines)) + 1
            failed = (
                f"tests/test_{name}.py::test_{name}_{rng.randrange(100)} FAILED\n"
                f"    {f.path}:{line_no}: in {name}\n"
                f"        {lines[line_no - 1].strip()}\n"
                f"E       AssertionError: expected {rng.randrange(1000)}, got "
                f"{rng.randrange(1000)}\n"
            )
            del lines  # not held by the suspended generator
            yield failed
            yield f"tests/test_{name}.py::test_{name}_roundtrip PASSED\n"

    def _diffs(self, rng: random.Random) -> Iterator[str]:
        while True:
            f = self._pick(rng)
            old = f.text.splitlines(keepends=True)[:120]
            new = [ln.replace("    ", "\t", 1) if i % 7 == 3 else ln for i, ln in enumerate(old)]
            diff = "".join(difflib.unified_diff(old, new, f"a/{f.path}", f"b/{f.path}"))
            del old, new  # not held by the suspended generator
            yield diff

    def _replies(self, rng: random.Random) -> Iterator[str]:
        while True:
            f = self._pick(rng)
            lines = f.text.splitlines()
            start = rng.randrange(max(1, len(lines) - 20))
            roll = rng.random()
            if roll < 0.45:
                call = {
                    "name": "read_file",
                    "arguments": {"path": f.path, "start_line": start + 1, "end_line": start + 60},
                }
                why = f"I need to see how `{f.path}` handles this before changing anything."
            elif roll < 0.65:
                word = next((w for w in lines[start].split() if w.isidentifier()), "main")
                call = {"name": "grep", "arguments": {"pattern": rf"\b{word}\b", "glob": "*.py"}}
                why = f"Let me find every use of `{word}` first."
            elif roll < 0.8:
                call = {
                    "name": "run_tests",
                    "arguments": {"selector": f"tests/test_{Path(f.path).stem}.py"},
                }
                why = "The change is in place; running the narrowest test that covers it."
            else:
                old = lines[start : start + 6]
                new = [ln.rstrip() + "  # checked" if i == 2 else ln for i, ln in enumerate(old)]
                diff = "\n".join(
                    difflib.unified_diff(old, new, f"a/{f.path}", f"b/{f.path}", lineterm="")
                )
                call = {"name": "apply_patch", "arguments": {"diff": diff}}
                why = f"The root cause is in `{f.path}` near line {start + 1}; here is the fix."
            yield f"{why}\n```tool_call\n{json.dumps(call)}\n```\n"


def _system_head(style: Style) -> str:
    if style == "agent":
        schema = json.dumps(TOOLS, indent=2)
        return f"{SYSTEM_PROMPT}\n# Tools\n\nYou may call these functions:\n{schema}\n"
    return CHAT_SYSTEM_PROMPT


def _chain(head: list[str], rest: Iterator[str]) -> Iterator[str]:
    yield from head
    yield from rest


def _fence_language(path: str) -> str:
    return {
        ".py": "python",
        ".js": "javascript",
        ".ts": "typescript",
        ".go": "go",
        ".rs": "rust",
        ".c": "c",
        ".h": "c",
        ".java": "java",
    }.get(Path(path).suffix, "")


# Source files a user's repository may hold; anything else (binaries, data) is skipped.
_SOURCE_SUFFIXES = {
    ".py",
    ".pyi",
    ".js",
    ".jsx",
    ".ts",
    ".tsx",
    ".go",
    ".rs",
    ".c",
    ".h",
    ".cc",
    ".cpp",
    ".hpp",
    ".java",
    ".kt",
    ".rb",
    ".php",
    ".cs",
    ".swift",
    ".scala",
    ".sh",
    ".sql",
    ".md",
    ".rst",
    ".toml",
    ".yaml",
    ".yml",
    ".cfg",
    ".ini",
    ".html",
    ".css",
}
_SKIP_DIRS = {
    "test",
    "tests",
    "idlelib",
    "site-packages",
    "lib2to3",
    "__pycache__",
    "ensurepip",
    "node_modules",
    "venv",
    ".venv",
    "build",
    "dist",
    "target",
    "vendor",
}


def _read_sources(root: Path, suffixes: set[str], limit: int) -> list[SourceFile]:
    paths: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
        paths.extend(Path(dirpath, name) for name in filenames if Path(name).suffix in suffixes)
    paths.sort()
    files: list[SourceFile] = []
    # Spread the pick over the whole tree, deterministically, rather than the first N names.
    step = max(1, len(paths) // limit)
    for path in paths[::step][:limit]:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if 200 < len(text) < 200_000 and "\x00" not in text:
            files.append(SourceFile(path.relative_to(root).as_posix(), text))
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
    """``"stdlib"``, ``"synthetic"``, or a directory of the user's own code.

    ``"stdlib"`` falls back to synthetic text (and says so in its name) when this Python was
    installed without its sources.
    """
    if name == "stdlib":
        files = _read_sources(Path(sysconfig.get_paths()["stdlib"]), {".py"}, limit=400)
        if not files:
            return Corpus("synthetic (no stdlib sources found)", _synthetic_files())
        return Corpus("stdlib", files)
    if name == "synthetic":
        return Corpus("synthetic", _synthetic_files())
    root = Path(name).expanduser()
    if not root.is_dir():
        raise ScenarioError(
            f"content.corpus: {name!r} is not 'stdlib', 'synthetic' or an existing directory"
        )
    return Corpus(str(root), _read_sources(root, _SOURCE_SUFFIXES, limit=2000))


# Plain words that are about one token each in tiktoken and in the models' tokenizers, so a
# cold prompt of N tiktoken tokens is ~N on the target too (digits are one token each in Gemma's).
_WORDS = (
    "cache",
    "block",
    "prefix",
    "server",
    "token",
    "stream",
    "model",
    "prompt",
    "reply",
    "session",
    "turn",
    "user",
    "agent",
    "tool",
    "file",
    "source",
    "window",
    "counter",
    "usage",
    "length",
    "probe",
    "check",
    "queue",
    "slot",
    "batch",
    "decode",
    "prefill",
    "draft",
    "accept",
    "engine",
    "request",
    "response",
    "chunk",
    "event",
    "table",
    "report",
    "value",
)


def cold_prompt(nonce: str, n_tokens: int, head: str) -> list[dict[str, str]]:
    """A one-message chat of ``n_tokens`` tiktoken tokens that no earlier request shares
    beyond the chat template's first tokens: ``head`` (which names ``nonce``), then plain
    words drawn with ``nonce`` as the seed. The probe's cache check and fit's cold prompts.
    Pure."""
    rng = random.Random(nonce)
    words = " ".join(rng.choice(_WORDS) for _ in range(n_tokens * 2))
    return [{"role": "user", "content": tokens.truncate(f"{head} {words}", n_tokens)}]
