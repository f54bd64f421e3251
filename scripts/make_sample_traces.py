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


def _grow(rng: random.Random, ids: list[int], size: int, keep: int, next_id: list[int],
          block: int) -> list[int]:
    """The hash ids of a prompt of ``size`` tokens whose first ``keep`` tokens are those
    of ``ids``' prompt: the kept whole blocks, then fresh ids (whole blocks only)."""
    kept = ids[: keep // block]
    fresh = size // block - len(kept)
    out = kept + list(range(next_id[0], next_id[0] + fresh))
    next_id[0] += fresh
    return out


def weka_sample(seed: int = 18) -> dict[str, Any]:
    """A WEKA-schema conversation (callanjfox/kv-cache-tester traces/trace_*.json): 8
    requests of a parent agent on two models, one context shrink (request 6: thinking
    dropped from the history), and a sub-agent of 3 requests spawned before request 5."""
    rng = random.Random(seed)
    block, next_id = 64, [1]
    system, tools = 4000, 13000

    def request(t: float, size: int, ids: list[int], kind: str, model: str) -> dict[str, Any]:
        out = rng.randrange(40, 120)
        return {
            "t": round(t, 3), "type": "s", "model": model, "in": size, "out": out,
            "hash_ids": ids, "input_types": [kind], "output_types": ["text", "tool_use"],
            "stop": "tool_use", "think_time": round(rng.uniform(0.5, 4.0), 3),
            "api_time": round(rng.uniform(1.0, 6.0), 3),
        }

    requests: list[dict[str, Any]] = []
    size, ids, t = 19000, [], 0.0
    for n in range(8):
        if n == 0:
            ids = _grow(rng, [], size, 0, next_id, block)
            row = request(t, size, ids, "text", "claude-opus-4-5-20251101")
            row["think_time"] = 0.0
        else:
            last = requests[-1]
            running = last["in"] + last["out"]
            keep = running
            size = running + rng.randrange(300, 1500)
            if n == 5:  # the context shrank without a compaction
                keep = running - 3000
                size = keep + rng.randrange(300, 800)
            ids = _grow(rng, last["hash_ids"], size, min(keep, last["in"]), next_id, block)
            model = "claude-haiku-4-5-20251001" if n == 3 else "claude-opus-4-5-20251101"
            row = request(t, size, ids, "tool_result", model)
        if n == 4:  # a sub-agent runs before request 4 (its result is that tool result)
            sub: list[dict[str, Any]] = []
            sub_size, sub_ids, sub_t = 18500, [], 0.0
            for k in range(3):
                keep = 0 if k == 0 else sub[-1]["in"] + sub[-1]["out"]
                sub_size = 18500 if k == 0 else keep + rng.randrange(300, 1200)
                sub_ids = _grow(rng, sub_ids, sub_size, min(keep, sub_size), next_id, block)
                sub.append(request(sub_t, sub_size, sub_ids, "tool_result" if k else "text",
                                   "claude-haiku-4-5-20251001"))
                sub_t += rng.uniform(2.0, 5.0)
            requests.append({
                "t": round(t, 3), "type": "subagent", "agent_id": "agent_001",
                "subagent_type": "Explore", "duration_ms": round(sub_t * 1000),
                "total_tokens": sum(r["in"] + r["out"] for r in sub),
                "tool_use_count": 3, "status": "completed", "requests": sub,
                "models": ["claude-haiku-4-5-20251001"], "tool_tokens": 8000,
                "system_tokens": 800,
            })
            t += sub_t
        requests.append(row)
        t += row["api_time"] + rng.uniform(0.5, 4.0)
    return {
        "id": "weka-sample", "models": ["claude-opus-4-5-20251101", "claude-haiku-4-5-20251001"],
        "block_size": block, "hash_id_scope": "local", "tool_tokens": tools,
        "system_tokens": system, "requests": requests,
    }


def _stamp(seconds: float) -> str:
    whole = int(seconds)
    ms = round((seconds - whole) * 1000)
    h, rest = divmod(whole, 3600)
    return f"2026-06-01T{10 + h:02d}:{rest // 60:02d}:{rest % 60:02d}.{ms:03d}Z"


def tracelab_sample(seed: int = 18) -> list[dict[str, Any]]:
    """TraceLab round traces (uw-syfi/TraceLab example_sessions/sanitized/round_trace.jsonl):
    three sessions of 5 rounds (Claude and Codex models), arriving 0, 3 and 7 s in; session
    2's round 3 shrinks its context (no compaction marker)."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for session, (start, model, opening) in enumerate(
        [(0.0, "claude-opus-4-8", 18000), (3.0, "gpt-5.4", 17500), (7.0, "claude-opus-4-8", 19000)]
    ):
        sid = f"claude:{session:08x}-0000-4000-8000-{seed:012x}"
        t, prefix, size = start, opening, opening + rng.randrange(300, 900)
        for index in range(5):
            if index:
                last = rows[-1]
                prefix = last["input_tokens_total"] + last["output_tokens"]
                size = prefix + rng.randrange(200, 1500)
                if session == 2 and index == 3:
                    prefix -= 4000
                    size = prefix + rng.randrange(200, 600)
            out = rng.randrange(30, 120)
            first = "user_message" if index in (0, 4) else "tool_result"
            end = t + rng.uniform(1.0, 3.0)
            rows.append({
                "provider": "claude" if model.startswith("claude") else "codex",
                "project": "project_00000001", "session_id": sid, "round_index": index,
                "round_id": f"msg_{session:02d}{index:02d}", "model": model,
                "input_tokens_total": size, "prefix_tokens": prefix,
                "newly_append_tokens": size - prefix, "output_tokens": out,
                "reasoning_output_tokens": None,
                "timing_events": [
                    {"event_type": first, "timestamp": _stamp(t), "source": "user.message"},
                    {"event_type": "tool_call", "timestamp": _stamp(end),
                     "source": "assistant.content.tool_use", "tool_name": "Bash",
                     "tool_index": 0},
                ],
                "tools": [{"tool_index": 0, "tool_name": "Bash", "emitted_at": _stamp(end),
                           "tool_wall_latency_ms": 800, "tool_internal_latency_ms": None,
                           "is_error": False, "result_at": _stamp(end + 0.8)}],
                "first_input_event_type": first, "store": ".claude",
            })
            t = end + (rng.uniform(5.0, 20.0) if index == 3 else 0.8)
    return rows


def aiperf_sample(seed: int = 18) -> list[dict[str, Any]]:
    """AIPerf multi-turn Mooncake rows (ai-dynamo/aiperf MooncakeTrace: session_id, delay):
    three sessions of 3 turns, each turn's prompt the previous one's blocks and new ones, and
    every session opening with the same 2-block prefix."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    next_id = [100]
    for session in range(3):
        ids: list[int] = [0, 1]
        size = 1024 + rng.randrange(500, 1500)
        for turn in range(3):
            if turn:
                size += rng.randrange(600, 1600)
            blocks = -(-size // BLOCK)
            ids = ids[: blocks - 1 if turn else 2] if turn else ids
            while len(ids) < blocks:
                ids.append(next_id[0])
                next_id[0] += 1
            row: dict[str, Any] = {"session_id": f"session-{session}", "input_length": size,
                                   "output_length": rng.randrange(20, 80), "hash_ids": list(ids)}
            if turn == 0:
                row["timestamp"] = session * 2000
            else:
                row["delay"] = rng.randrange(500, 3000)
            rows.append(row)
    return rows


def render(rows: list[dict[str, Any]]) -> str:
    """JSON Lines, one compact object per line."""
    return "".join(json.dumps(row, separators=(",", ":")) + "\n" for row in rows)


def samples() -> dict[str, str]:
    """File name -> the text this script writes."""
    return {
        "mooncake-sample.jsonl": render(mooncake_sample()),
        "agent-sample.jsonl": render(agent_sample()),
        "weka-sample.json": json.dumps(weka_sample(), separators=(",", ":")) + "\n",
        "tracelab-sample.jsonl": render(tracelab_sample()),
        "aiperf-sample.jsonl": render(aiperf_sample()),
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
