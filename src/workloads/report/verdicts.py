"""The verdict lines of a report: the correctness gate ("correctness 6/6"), a run made
invalid by a required gate, degenerate completions, and a replay's cache. Text only;
printing is the CLI's."""

from __future__ import annotations

from workloads.core.replay import judged
from workloads.model.replay import Replay, Turn1Cache
from workloads.model.results import RunResult

__all__ = [
    "correctness_line",
    "degeneration_line",
    "likelihood_line",
    "replay_line",
    "turn1_text",
    "verdict_lines",
]


def correctness_line(result: RunResult) -> str | None:
    """ "correctness 6/6 …", or which cases failed and why; None when the gate did not run."""
    gate = result.gate
    if gate is None:
        return None
    cases = gate.cases
    if not cases:
        return "correctness not measured: no gate case was sent (the run stopped first)"
    phases = sorted({o.phase for o in gate.outputs}, reverse=True)  # before, after
    where = " and ".join(phases)
    head = (
        f"correctness {len(gate.passed_cases)}/{len(cases)} (greedy, {where} the measured "
        f"window{'s' if result.cells else ''}; gate {gate.mode})"
    )
    if gate.form == "text":
        head += (
            f" · text form: the model echoed {gate.echoed} of 6 chat requests (a base "
            "model, not tuned for chat); kernels and KV cache judged, not the template"
        )
    if gate.passed:
        return head
    failures = []
    for case in gate.failed_cases:
        bad = [o for o in gate.judged if o.case == case and not o.passed]
        when = "/".join(o.phase for o in bad)
        failures.append(f"{case} ({when}: {bad[0].why})")
    return f"{head} · failed: " + "; ".join(failures)


def degeneration_line(result: RunResult) -> str | None:
    """How many measured completions loop or collapsed; None when none did or none were
    judged (older results)."""
    measured = [r for r in result.records if not r.warmup and r.degenerate is not None]
    flagged = [r for r in measured if r.degenerate]
    if not flagged:
        return None
    turns = sorted({r.turn for r in flagged})
    return (
        f"degenerate completions: {len(flagged)} of {len(measured)} measured (turn "
        f"{', '.join(map(str, turns))}; e.g. {flagged[0].degenerate_reason})"
    )


def likelihood_line(result: RunResult) -> str | None:
    """The likelihood probe: mean NLL of the fixed text, or why not; None when not run."""
    probe = result.likelihood
    if probe is None:
        return None
    if not probe.supported or probe.mean_nll is None:
        return f"likelihood: {probe.reason or 'not measured'}"
    return (
        f"likelihood: mean NLL {probe.mean_nll:.4f} nats/token over {probe.tokens} tokens "
        f"of the fixed text (perplexity {probe.perplexity:.3f}; {probe.source})"
    )


def turn1_text(t: Turn1Cache | None) -> str:
    """ "9,184 of 9,192 prompt tokens (99.9%)", or why not."""
    if t is None:
        return "no valid measured turn 1"
    if t.cached_tokens is None:
        return f"not reported of {t.prompt_tokens:,} prompt tokens"
    rate = f" ({t.hit_rate:.1%})" if t.hit_rate is not None else ""
    return f"{t.cached_tokens:,} of {t.prompt_tokens:,} prompt tokens{rate}"


def replay_line(r: Replay) -> str:
    """A replay's cache (``r`` judged: :func:`workloads.core.replay.judged`): warm (the
    target still held the recorded prompts) or cold, with turn 1's cached tokens in both
    runs."""
    label = f" [{r.recorded_label}]" if r.recorded_label else ""
    figures = (
        f"turn 1 cached {turn1_text(r.turn1)}; the recorded run's {turn1_text(r.recorded_turn1)}"
    )
    if r.cache == "warm":
        return (
            f"replay of {r.recorded}{label} on a WARM CACHE: {figures}. The target still "
            "held the recorded prompts, so TTFT, prefill and cache figures are not the "
            "recorded run's conditions (restart the server, or flush its prefix cache, "
            "for a cold replay)"
        )
    state = "a cold cache" if r.cache == "cold" else "a cache state not known"
    return f"replay of {r.recorded}{label} on {state}: {figures}"


def verdict_lines(result: RunResult) -> list[tuple[str, str]]:
    """(text, style) lines for the report, in order."""
    out: list[tuple[str, str]] = []
    if result.replay is not None:  # judged from the records: a rebuilt run has them too
        replay = judged(result.replay, result.records)
        out.append((replay_line(replay), "warning" if replay.cache == "warm" else ""))
    line = correctness_line(result)
    if line is not None:
        style = "" if result.gate is not None and result.gate.passed else "warning"
        out.append((line, style))
    if (line := likelihood_line(result)) is not None:
        out.append((line, ""))
    if (line := degeneration_line(result)) is not None:
        out.append((line, "warning"))
    if result.invalid_reason:
        out.append((f"INVALID RUN: {result.invalid_reason}", "error"))
    return out
