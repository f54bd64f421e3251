"""The verdict lines of a report: the correctness gate ("correctness 6/6"), a run made
invalid by a required gate, and degenerate completions. Text only; printing is the CLI's."""

from __future__ import annotations

from workloads.model.results import RunResult

__all__ = ["correctness_line", "degeneration_line", "likelihood_line", "verdict_lines"]


def correctness_line(result: RunResult) -> str | None:
    """"correctness 6/6 …", or which cases failed and why; None when the gate did not run."""
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
        head += (f" · text form: the model echoed {gate.echoed} of 6 chat requests (a base "
                 "model, not tuned for chat); kernels and KV cache judged, not the template")
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
    return (f"likelihood: mean NLL {probe.mean_nll:.4f} nats/token over {probe.tokens} tokens "
            f"of the fixed text (perplexity {probe.perplexity:.3f}; {probe.source})")


def verdict_lines(result: RunResult) -> list[tuple[str, str]]:
    """(text, style) lines for the report, in order."""
    out: list[tuple[str, str]] = []
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
