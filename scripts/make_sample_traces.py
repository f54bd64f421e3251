"""Write the sample traces under traces/ (deterministic: seeded; no recorded data copied).

    python scripts/make_sample_traces.py          # rewrite traces/*.jsonl
    python scripts/make_sample_traces.py --check  # exit 1 when a shipped file is stale

* ``mooncake-sample.jsonl`` — a Mooncake-format trace of 84 requests over 45 s: every prompt
  opens with the same 4-block system prefix (2,048 tokens); 12 conversations of 4-6 requests
  each extend their previous request (its full blocks, then new ones); the rest are one-off
  requests that share only the system prefix. Input lengths from about 2.5K to 14K tokens
  (median near 7K, like the Mooncake conversation trace's), outputs 16-160 tokens, so the
  replay runs on the simulated server in seconds.
* ``agent-sample.jsonl`` — a per-step agent trace: three sessions of human and tool steps,
  one compaction (session 1, step 6), and one sub-agent (session 3, spawned for session 0's
  step 4).

tests/core/test_traces.py checks the shipped files equal what this script writes.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

BLOCK = 512
TRACES = Path(__file__).resolve().parents[1] / "traces"


def mooncake_sample(seed: int = 18) -> list[dict[str, Any]]:
    """The Mooncake sample's requests, in timestamp order."""
    rng = random.Random(seed)
    system = [0, 1, 2, 3]  # every request's shared prefix
    next_id = 100
    rows: list[tuple[int, int, int, list[int]]] = []

    def fresh(n: int) -> list[int]:
        nonlocal next_id
        ids = list(range(next_id, next_id + n))
        next_id += n
        return ids

    for _ in range(12):  # conversations: each request extends the previous one
        at = rng.randrange(0, 20_000)
        length = len(system) * BLOCK + rng.randrange(600, 3000)
        ids = system + fresh(-(-length // BLOCK) - len(system))
        for _ in range(rng.randrange(4, 7)):
            output = rng.randrange(16, 161)
            rows.append((at, length, output, ids))
            full = length // BLOCK  # the full blocks carry over; a partial last one changes
            length = min(length + output + rng.randrange(500, 2200), 14_000)
            ids = ids[:full] + fresh(-(-length // BLOCK) - full)
            at += rng.randrange(2_000, 6_000)
    while len(rows) < 84:  # one-off requests: only the system prefix is shared
        length = len(system) * BLOCK + rng.randrange(500, 9000)
        ids = system + fresh(-(-length // BLOCK) - len(system))
        rows.append((rng.randrange(0, 45_000), length, rng.randrange(16, 161), ids))
    rows.sort(key=lambda r: r[0])
    return [{"timestamp": t, "input_length": n, "output_length": o, "hash_ids": ids}
            for t, n, o, ids in rows]


def agent_sample(seed: int = 18) -> list[dict[str, Any]]:
    """The agent sample's steps: session by session, steps in order."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []

    def step(session: int, n: int, kind: str, **extra: Any) -> None:
        human = kind == "human"
        rows.append({
            "session": session, "step": n, "kind": kind,
            "appended_tokens": rng.randrange(200, 600) if human else rng.randrange(300, 3000),
            "output_tokens": rng.randrange(40, 400),
            "pause_s": round(rng.uniform(2.0, 20.0) if human else rng.uniform(0.1, 3.0), 2),
            **extra,
        })

    for session, kinds in enumerate([
        ["human", "tool", "tool", "tool", "human", "tool"],
        ["human", "tool", "tool", "tool", "tool", "compaction", "tool", "human"],
        ["human", "tool", "tool", "human"],
    ]):
        for n, kind in enumerate(kinds, 1):
            step(session, n, kind)
    for n in range(1, 4):  # session 0's step 4 is the tool result of a sub-agent's work
        step(3, n, "subagent", parent=0, parent_step=4)
    for row in rows:
        if row["kind"] == "compaction":
            row["pause_s"] = 0.0
    return rows


def render(rows: list[dict[str, Any]]) -> str:
    """JSON Lines, one compact object per line."""
    return "".join(json.dumps(row, separators=(",", ":")) + "\n" for row in rows)


def samples() -> dict[str, str]:
    """File name -> the text this script writes."""
    return {
        "mooncake-sample.jsonl": render(mooncake_sample()),
        "agent-sample.jsonl": render(agent_sample()),
    }


def main(argv: list[str]) -> int:
    stale = []
    for name, text in samples().items():
        path = TRACES / name
        if "--check" in argv:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
            continue
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    if stale:
        print(f"stale: {', '.join(stale)}; run python scripts/make_sample_traces.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
