"""What an agent-trace replay (``run --trace FILE`` of the per-step format or a published
corpus: WEKA, TraceLab, AIPerf multi-turn) says about its trace: the file and its sha256,
its sessions, steps and recorded models, each step's sent prompt (usage ``prompt_tokens``)
beside the trace's input size (the record's ``configured_prompt_tokens``), and the observed
prefix-cache hit rate beside the trace's own (hash-ideal, or the recording's provider's).

The trace is the file ``scenario.agent.trace`` names, read again for its facts; when it is
gone or changed, the lines say so and keep what the records alone tell.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from workloads.core.agent_traces import any_format, load_published
from workloads.core.traces import _sha256, observed_hit_rate
from workloads.model.errors import TraceError
from workloads.model.results import RunResult

__all__ = ["coordinates", "lines"]


def _path(result: RunResult) -> Path | None:
    agent = result.scenario.agent
    return None if agent is None or agent.trace is None else Path(agent.trace)


def coordinates(result: RunResult) -> str | None:
    """The line that replaces the scenario's size distributions for an agent-trace replay:
    the prompts sent beside the trace's input sizes. None: not an agent-trace replay."""
    if _path(result) is None:
        return None
    pairs = [
        (r.prompt_tokens, r.configured_prompt_tokens)
        for r in result.records
        if not r.warmup and r.valid and r.prompt_tokens and r.configured_prompt_tokens
    ]
    if not pairs:
        return "prompts vs the trace's input sizes: no valid measured step"
    errors = [abs(sent - wanted) / wanted for sent, wanted in pairs]
    return (
        f"prompts vs the trace's input sizes: median error {statistics.median(errors):.2%}, "
        f"max {max(errors):.2%} over {len(pairs):,} measured steps (usage prompt_tokens "
        f"beside each step's recorded input; median input "
        f"{statistics.median(w for _, w in pairs):,.0f} tokens)"
    )


def lines(result: RunResult) -> list[str]:
    """The trace named (file, format, sha256, sessions, steps, models) and the hit rates.
    [] when the run did not replay an agent trace."""
    path = _path(result)
    if path is None:
        return []
    observed = observed_hit_rate(result.records)
    seen = "not reported" if observed is None else f"{observed:.1%}"
    model = result.target.model
    if not path.is_file():
        return [f"agent trace {path.name}: the file is gone; observed hit rate {seen}"]
    try:
        kind = any_format(path)
        if kind in ("agent", "mooncake"):
            return [
                f"agent trace {path.name} (per-step format, sha256 {_sha256(path)[:16]}…); "
                f"every request sent to {model}; observed hit rate {seen}"
            ]
        trace = load_published(path)
    except TraceError as err:
        return [f"agent trace {path.name}: cannot be read again ({err})"]
    steps = sum(1 for r in result.records if not r.warmup)
    subs = sum(1 for r in result.records if not r.warmup and r.parent_session is not None)
    models = ", ".join(f"{m} ({n})" for m, n in trace.models) or "not recorded"
    out = [
        f"agent trace {path.name} ({trace.format}, sha256 {trace.sha256[:16]}…): "
        f"{len(trace.sessions)} sessions, {steps:,} measured steps ({subs:,} of "
        f"sub-agents); recorded models {models}, every request sent to {model}"
    ]
    if trace.ideal_hit_rate is not None:
        own = (
            f"ideal {trace.ideal_hit_rate:.1%} (the trace's hash ids: an unlimited prefix "
            f"cache at {trace.block_tokens}-token blocks)"
        )
    elif trace.recorded_hit_rate is not None:
        own = f"recorded {trace.recorded_hit_rate:.1%} (the recording provider's cache)"
    else:
        own = "the trace has no hash ids"
    out.append(f"prefix-cache hit rate: observed {seen} · {own}")
    if trace.skipped:
        out.append(f"{trace.skipped:,} repeated rounds of the trace were skipped")
    return out
