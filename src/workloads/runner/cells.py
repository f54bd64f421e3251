"""A run's lifetime: for each cell (sweep coordinate), its warm-up and measured repetitions
and its measured window; every TurnRecord appended to records.jsonl as it is made; the
RunResult saved at the end, and also when the run is stopped (Ctrl-C, a crash): a stopped run
says so and keeps what it measured.

The window of a cell opens after its first measured repetition is sized (no ``/tokenize``
call in it), right before its first request is sent, and closes after its last response.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from pathlib import Path

from workloads.core.corpus import load_corpus
from workloads.core.tokens import TargetTokenizer
from workloads.model.records import RecordWriter, TurnRecord
from workloads.model.results import RunResult, TargetInfo
from workloads.model.scenario import Cell, Scenario
from workloads.runner.monitor import ClientMonitor
from workloads.runner.outcome import Measured, build_result, window
from workloads.runner.repetition import Repetition, open_sessions, play
from workloads.runner.sizing import CellSizing
from workloads.telemetry import WindowTelemetry
from workloads.wire.client import ChatClient

__all__ = ["Run"]


class Run:
    """One run of a scenario with a client, a tokenizer and window telemetry already set up
    (:func:`workloads.runner.run.run_async` sets them up)."""

    def __init__(
        self,
        *,
        scenario: Scenario,
        client: ChatClient,
        model: str,
        tokenizer: TargetTokenizer,
        target_info: TargetInfo,
        telemetry: WindowTelemetry,
        writer: RecordWriter | None = None,
        on_record: Callable[[TurnRecord], None] | None = None,
        label: str | None = None,
        note: str | None = None,
        out: Path | None = None,
    ) -> None:
        self.client = client
        self.model = model
        self.writer = writer
        self.callback = on_record
        self.out = out
        self.telemetry = telemetry  # started and finished once per cell: one window each
        self.entropy = secrets.token_bytes(16)  # this run's freshness: every nonce derives from it
        cells = scenario.cells()
        self.measured = Measured(
            scenario=scenario,
            target=target_info,
            corpus=load_corpus(scenario.content.corpus),
            cells=cells,
            sizings={c.index: CellSizing(scenario.for_cell(c), tokenizer) for c in cells},
            tokenizer=tokenizer,
            label=label,
            note=note,
        )

    def _record(self, record: TurnRecord) -> None:
        self.measured.records.append(record)
        if self.writer is not None:
            self.writer.write(record)
        if record.system_fingerprint:
            self.measured.fingerprint = record.system_fingerprint
        if self.callback is not None:
            self.callback(record)

    async def execute(self) -> RunResult:
        """Run every cell; save and return the result (partial when stopped)."""
        complete = False
        monitor = ClientMonitor()  # the client watches itself: loop lag, CPU share
        try:
            async with monitor:
                for cell in self.measured.cells:
                    await self._cell(cell)
            complete = True
        finally:
            # Also on Ctrl-C or a crash: the result says what was measured, and that it stopped.
            m = self.measured
            m.client = monitor.health(m.records)
            m.telemetry_warnings = list(self.telemetry.warnings)
            result = build_result(m, complete=complete)
            if self.out is not None:
                result.save(self.out, overwrite=not complete)
        return result

    async def _cell(self, cell: Cell) -> None:
        m = self.measured
        s = m.scenario.repetitions
        opened: float | None = None
        for index in range(s.warmup + s.measured):
            repetition = Repetition(cell=cell, index=index, warmup=index < s.warmup)
            sizing = m.sizings[cell.index]
            sessions, nonces = await open_sessions(
                repetition, sizing=sizing, corpus=m.corpus, entropy=self.entropy,
                client=self.client, model=self.model, on_record=self._record,
            )
            m.nonces.append(nonces)
            if not repetition.warmup and opened is None:
                await self.telemetry.start()  # the window opens: sized, nothing sent yet
                opened = time.time()
                if m.window_start is None:
                    m.window_start = opened
            await play(sessions, repetition, sizing.scenario, m.corpus)
            if repetition.warmup and not sizing.exact:
                sizing.learn([o for session in sessions for o in session.observations])
            if not repetition.warmup:
                m.traces.setdefault(cell.index, []).extend(
                    t for session in sessions for t in session.token_log
                )
        m.window_end = time.time()  # every measured response of the cell has ended
        here = [r for r in m.records if not r.warmup and r.cell == cell.index]
        server, energy = await self.telemetry.finish(here)
        m.windows[cell.index] = window(opened, m.window_end, server, energy)
