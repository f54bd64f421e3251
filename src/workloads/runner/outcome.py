"""What a run measured, and the RunResult made of it (also for an interrupted run).

:class:`Measured` is filled while the run goes (records, nonces, windows, token traces);
:func:`build_result` turns it into the saved :class:`~workloads.model.results.RunResult`,
with every summary from :func:`workloads.core.aggregate.summarized`, the what-if cache
oracle per cell, and the warnings a reader needs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from workloads.core import aggregate
from workloads.core.concurrency import concurrency
from workloads.core.corpus import Corpus
from workloads.core.goodput import missing_figure
from workloads.core.pressure import kv_figures
from workloads.core.replay import judged
from workloads.core.tokens import TargetTokenizer
from workloads.core.traces import observed_hit_rate
from workloads.core.whatif import OracleRequest, what_if
from workloads.model.figures import EnergyFigures, ServerTelemetry
from workloads.model.gate import GateOutput, GateResult
from workloads.model.likelihood import Likelihood
from workloads.model.records import TurnRecord
from workloads.model.replay import Replay
from workloads.model.results import (
    CellSummary,
    ClientHealth,
    RepetitionNonces,
    RunResult,
    Sizing,
    TargetInfo,
    TraceReplay,
    Window,
    cell_coordinates,
    environment,
)
from workloads.model.scenario import Cell, Scenario
from workloads.model.summary import Summary
from workloads.model.whatif import WhatIfTurn
from workloads.runner.monitor import health_warnings, merged_warning
from workloads.runner.sizing import CellSizing, sizing_warnings
from workloads.runner.turn import TokenTrace
from workloads.wire.arrival import KERNEL_STAMPS

__all__ = ["Measured", "build_result", "corpus_info", "window"]


@dataclass
class Measured:
    """Everything a run has measured so far; the runner appends, :func:`build_result` reads."""

    scenario: Scenario
    target: TargetInfo
    corpus: Corpus
    cells: list[Cell]
    sizings: dict[int, CellSizing]
    tokenizer: TargetTokenizer
    label: str | None = None
    note: str | None = None
    records: list[TurnRecord] = field(default_factory=list)
    nonces: list[RepetitionNonces] = field(default_factory=list)
    windows: dict[int, Window] = field(default_factory=dict)  # per cell
    window_start: float | None = None  # wall clock: the first cell's window opened
    window_end: float | None = None
    fingerprint: str | None = None  # the last system_fingerprint the server sent
    traces: dict[int, list[TokenTrace]] = field(default_factory=dict)  # per cell, measured
    telemetry_warnings: list[str] = field(default_factory=list)
    setup_warnings: list[str] = field(default_factory=list)  # run_async's (client=)
    client: ClientHealth | None = None  # the client's own health over the run
    gate_outputs: list[GateOutput] = field(default_factory=list)  # the correctness gate
    likelihood: Likelihood | None = None  # the likelihood probe, before the first window
    environment: dict[str, str] = field(default_factory=dict)  # Run fills it (event loop)
    # Tokenizer use in worker processes (--workers): calls and seconds, beyond ``tokenizer``'s
    tokenizer_calls: int = 0
    tokenizer_seconds: float = 0.0
    trace: TraceReplay | None = None  # run --trace: the trace replayed
    replay: Replay | None = None  # run --replay: the recorded run (its turn 1's cache)

    def kv_capacity(self) -> tuple[int | None, int]:
        """The server's KV capacity in tokens (None: unknown) and its block size: as the user
        gave them for a real server (Target.kv_capacity_tokens), or the simulated server's
        profile."""
        if self.target.kv_capacity_tokens is not None:
            return self.target.kv_capacity_tokens, self.target.kv_block_tokens or 16
        profile = self.target.simulator_profile or {}
        capacity = profile.get("kv_capacity_tokens")
        block = profile.get("block_size")
        return (
            capacity if isinstance(capacity, int) else None,
            block if isinstance(block, int) else 16,
        )


def window(
    start: float | None,
    end: float | None,
    server: ServerTelemetry | None = None,
    energy: EnergyFigures | None = None,
) -> Window:
    """A measured window from its wall-clock edges and what telemetry read over it."""
    return Window(
        start_unix=start,
        end_unix=end,
        duration_s=end - start if end is not None and start is not None else None,
        server=server,
        energy=energy,
    )


def corpus_info(corpus: Corpus) -> dict[str, str]:
    """What the result says about the corpus the prompts were cut from."""
    return {
        "name": corpus.name,
        "fingerprint": corpus.fingerprint,
        "files": str(len(corpus.files)),
    }


def _what_if(m: Measured, cell: int) -> list[WhatIfTurn] | None:
    """The what-if cache oracle over a cell's measured turns, in arrival order: what an LRU
    prefix cache of the server's KV capacity would serve with no contention, and what an
    unlimited one would. Needs exact token ids (a target /tokenize) and a known capacity."""
    traces = sorted(m.traces.get(cell, []), key=lambda t: t.sent_ns)
    capacity, block_size = m.kv_capacity()
    if not traces or capacity is None or not all(t.prompt for t in traces):
        return None  # (an empty prompt: a turn's ids could not be rendered after the window)
    requests = [
        OracleRequest(t.prompt, t.completion, turn=t.turn, counted=t.counted) for t in traces
    ]
    return what_if(requests, capacity_tokens=capacity, block_size=block_size)


def _sizing(m: Measured) -> Sizing:
    tok = m.tokenizer
    return Sizing(
        tokenizer=tok.description,
        exact=tok.exact,
        calls=tok.calls + m.tokenizer_calls,
        seconds=round(tok.seconds + m.tokenizer_seconds, 3),
        fallbacks=sum(z.fallbacks for z in m.sizings.values()),
        scale={
            str(i): {str(t): round(v, 4) for t, v in z.scale.items()}
            for i, z in m.sizings.items()
            if z.scale
        },
    )


def build_result(m: Measured, *, complete: bool) -> RunResult:
    """The RunResult of what ``m`` holds; ``complete`` False marks an interrupted run."""
    s = m.scenario
    lockstep = s.pacing.mode == "lockstep"  # else no aggregate: streams need not overlap
    cells = None
    if s.swept:
        cells = [
            CellSummary(
                **cell_coordinates(s, cell),
                window=m.windows.get(cell.index, Window()),
                cache_what_if=_what_if(m, cell.index),
                **aggregate.cell_figures(
                    mine,
                    users=cell.concurrency,
                    lockstep=lockstep,
                    **kv_figures(m.windows.get(cell.index, Window()).server, m.target),
                ),
                goodput=aggregate.judged_goodput(mine, s.slo),
            )
            for cell in m.cells
            if (mine := [r for r in m.records if r.cell == cell.index])
        ]
    identity = m.target.server.model_copy(update={"system_fingerprint": m.fingerprint})
    run_window = m.windows.get(0, Window()) if not s.swept else window(m.window_start, m.window_end)
    result = RunResult(
        created_unix=time.time(),
        complete=complete,
        label=m.label,
        note=m.note,
        scenario=s,
        target=m.target.model_copy(update={"server": identity}),
        corpus=corpus_info(m.corpus),
        nonces=m.nonces,
        window=run_window,
        summary=aggregate.summarize(
            m.records,
            users=s.users,
            lockstep=lockstep,
            **kv_figures(run_window.server, m.target),
        ),
        cells=cells,
        cache_what_if=None if s.swept else _what_if(m, 0),
        sizing=_sizing(m),
        environment=m.environment or environment(),
        records=m.records,
        client=m.client,
        concurrency=concurrency(m.records),
    )
    warnings = [*m.setup_warnings, *_warnings(result.summary, complete), *m.telemetry_warnings]
    if m.target.insecure:
        warnings.insert(
            0,
            "TLS certificates were not verified (--insecure): the server "
            "answering may not be the one named; use --ca-bundle FILE for a "
            "private CA",
        )
    warnings += health_warnings(
        m.client,
        embedded=m.target.simulated,
        kernel_stamps=result.environment.get("arrival_stamps") == KERNEL_STAMPS,
    )
    if (merged := merged_warning(m.records)) is not None:
        warnings.append(merged)
    if m.trace is None:  # a trace's prompts are its blocks, not sized depths
        warnings += sizing_warnings(
            m.records,
            result.sizing or _sizing(m),
            s,
            replayed=m.replay is not None,
            block_tokens=m.kv_capacity()[1],
            loop_lag_max_ms=m.client.loop_lag_max_ms if m.client is not None else None,
        )
    gate, invalid = _gate(m)
    warnings += _degenerate_warning(m.records)
    hosts = {r.host for r in m.records if r.host is not None}
    if len(hosts) > 1:
        warnings.append(
            f"the turns were sent from {len(hosts)} hosts ({', '.join(sorted(hosts))}), each "
            "stamping with its own clock: wall throughput, requests/s and concurrency over "
            "time need one clock and are not reported; per-turn rates, TTFT and every "
            "duration are"
        )
    trace = m.trace
    if trace is not None:
        trace = trace.model_copy(update={"observed_hit_rate": observed_hit_rate(m.records)})
        if trace.truncated:
            warnings.append(
                f"the trace was cut at {trace.requests:,} requests by scenario.trace limits "
                "(max_requests, max_duration_s): only they were replayed, and the ideal hit "
                "rate is theirs"
            )
    if s.slo is not None and (why := missing_figure(m.records, s.slo)) is not None:
        warnings.append(f"no goodput: {why}")
    return result.model_copy(
        update={
            "warnings": warnings,
            "gate": gate,
            "invalid_reason": invalid,
            "likelihood": m.likelihood,
            "trace": trace,
            "replay": None if m.replay is None else judged(m.replay, m.records),
            "goodput": aggregate.judged_goodput(m.records, s.slo),
        }
    )


def _gate(m: Measured) -> tuple[GateResult | None, str | None]:
    """The gate's result, and why the run is invalid when a required gate failed."""
    if m.scenario.gate == "off":
        return None, None
    gate = GateResult(mode=m.scenario.gate, outputs=m.gate_outputs)
    if m.scenario.gate == "required" and not gate.passed:
        failed = ", ".join(gate.failed_cases) or "it was not sent"
        return gate, f"the required correctness gate failed: {failed}"
    return gate, None


def _degenerate_warning(records: list[TurnRecord]) -> list[str]:
    flagged = [r for r in records if not r.warmup and r.degenerate]
    if not flagged:
        return []
    measured = sum(1 for r in records if not r.warmup)
    return [
        f"{len(flagged)} of {measured} measured completions are degenerate (they loop or "
        f"collapse: {flagged[0].degenerate_reason}); they went back into the history and "
        "inflate cache and n-gram acceptance figures — see records.jsonl (degenerate_reason)"
    ]


def _warnings(summary: Summary, complete: bool) -> list[str]:
    out: list[str] = []
    run = summary.run
    if not complete:
        cut = ""
        if run.cancelled:
            cut = (
                f"; {run.cancelled} turns in flight then were cancelled (counted apart, "
                "not as failed; no rate includes them)"
            )
        out.append(f"the run was interrupted: figures cover only the turns measured before it{cut}")
    if run.errors:
        out.append(
            f"{run.errors} of {run.records} measured turns failed; see records.jsonl "
            "(error_kind, error_message) — failed turns are excluded from every rate"
        )
    if run.invalid:
        out.append(
            f"{run.invalid} measured turns finished but are invalid (finish_reason is not "
            "'length' or the length differs from output_tokens): does the server honour "
            "ignore_eos/min_tokens? Set exact_output = false if it cannot"
        )
    if any(t.cached_tokens is None for t in summary.turns if t.valid):
        out.append(
            "the server does not report cached tokens (usage.prompt_tokens_details); cache "
            "effectiveness is not reported — on vLLM start it with --enable-prompt-tokens-details"
        )
    resends = sum(t.resends for t in summary.turns)
    if resends:
        out.append(
            f"{resends} requests were re-sent on a fresh connection because the server had "
            "closed the pooled one before reading them (not server errors)"
        )
    return out
