"""What the simulated model says: replies that read like a coding agent's, built from the
content corpus (real source files), exactly as long as planned and deterministic per seed.

Real-looking text matters downstream: the reply goes back into the session's history, so its
tokenization shapes the next turn's prompt, and a reply of random tokens would make the
history unlike any agent's. Each reply mixes a few moves an agent makes: say what it read and
quote the code, propose a patch as a diff, call a tool, read a failing test.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import random
from array import array
from collections.abc import Callable, Sequence

from workloads.core.corpus import Corpus, SourceFile
from workloads.servers.simulated import tokenizer

__all__ = ["plan_reply", "reply_seed"]


def reply_seed(prompt: Sequence[int], *, request_seed: int | None, server_seed: int) -> int:
    """The RNG seed of one reply: the request's own ``seed`` when given, else the server seed
    and the prompt, so the same prompt gets the same reply from the same server."""
    digest = hashlib.sha256()
    if request_seed is not None:
        digest.update(f"request:{request_seed}".encode())
    else:
        digest.update(f"server:{server_seed}:".encode())
        digest.update(array("I", prompt).tobytes())
    return int.from_bytes(digest.digest()[:8], "big")


def _snippet(rng: random.Random, f: SourceFile, lines: int) -> tuple[int, str]:
    all_lines = f.text.splitlines()
    start = rng.randrange(max(1, len(all_lines) - lines))
    return start + 1, "\n".join(all_lines[start : start + lines])


def _explain(rng: random.Random, f: SourceFile) -> str:
    line, code = _snippet(rng, f, rng.randrange(6, 18))
    return (
        f"I read `{f.path}` around line {line}. The behaviour comes from this block; the "
        f"branch below is taken for the input in the report, so that is where to fix it.\n\n"
        f"```python\n{code}\n```\n\n"
    )


def _patch(rng: random.Random, f: SourceFile) -> str:
    line, code = _snippet(rng, f, rng.randrange(5, 12))
    old = code.splitlines(keepends=True)
    new = [
        ln.replace("if ", "if not ", 1) if i == len(old) // 2 else ln for i, ln in enumerate(old)
    ]
    diff = "".join(difflib.unified_diff(old, new, f"a/{f.path}", f"b/{f.path}", n=2))
    body = diff or "".join(old)
    return (
        f"Here is the smallest change that fixes it (line {line}), leaving the public "
        f"interface as it is:\n\n```diff\n{body.rstrip()}\n```\n\n"
    )


def _tool_call(rng: random.Random, f: SourceFile) -> str:
    name, args = rng.choice(
        [
            ("read_file", {"path": f.path, "start_line": rng.randrange(1, 200)}),
            ("grep", {"pattern": f"def {f.path.rsplit('/', 1)[-1][:-3]}", "glob": "*.py"}),
            ("run_tests", {"selector": f"tests/test_{f.path.rsplit('/', 1)[-1]}"}),
        ]
    )
    call = json.dumps({"name": name, "arguments": args})
    return f"Before changing anything I need to check one more thing.\n\n{call}\n\n"


def _test_reading(rng: random.Random, f: SourceFile) -> str:
    line, code = _snippet(rng, f, 3)
    first = next((ln.strip() for ln in code.splitlines() if ln.strip()), "pass")
    expected, got = rng.randrange(1000), rng.randrange(1000)
    return (
        f"The failing assertion expects {expected} but the code returns {got}: the value is "
        f"computed in `{f.path}` at line {line} (`{first}`), before the cache is refreshed. "
        "Running the narrowest test after the patch will show whether that ordering was the "
        "whole story.\n\n"
    )


_MOVES: list[Callable[[random.Random, SourceFile], str]] = [
    _explain,
    _patch,
    _tool_call,
    _test_reading,
]


def reply_text(corpus: Corpus, rng: random.Random, n_tokens: int) -> str:
    """Agent-like text of at least ``n_tokens`` tokens (the caller cuts it exactly)."""
    parts: list[str] = []
    have = 0
    move = None
    while have < n_tokens + 8:  # a little slack: joined pieces can merge across the seams
        # Never the same move twice running: a run of tool calls repeats their lead sentence,
        # and the degeneration detector rightly calls such a reply a loop (seven in a row
        # made 60% of a 215-token chat-short reply's 4-grams repeats: a warning about the
        # simulator, not the server under test).
        move = rng.choice([m for m in _MOVES if m is not move])
        piece = move(rng, corpus.files[rng.randrange(len(corpus.files))])
        parts.append(piece)
        have += len(tokenizer.encode(piece))
    return "".join(parts)


def plan_reply(corpus: Corpus, seed: int, length: int) -> list[int]:
    """Exactly ``length`` token ids of an agent-like reply that re-encode to themselves."""
    rng = random.Random(seed)
    return tokenizer.stable_completion(reply_text(corpus, rng, length), length)
