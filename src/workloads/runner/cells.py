"""A run's lifetime: for each cell (sweep coordinate), its warm-up and measured repetitions
and its measured window; every TurnRecord appended to records.jsonl as it is made; the
RunResult saved at the end, and also when the run is stopped (Ctrl-C, a crash): a stopped run
says so and keeps what it measured.

records.jsonl starts with the run's header (scenario, target, identity, options) the moment
the run starts, and gets each repetition's nonces and each cell's window as they are known,
so it alone rebuilds the report of a run killed before result.json was written.

Stopping: when the caller's ``stop`` event is set (the CLI sets it on SIGINT or SIGTERM), no
new turn starts; turns in flight get ``grace_s`` to finish, then are cancelled and recorded
``cancelled`` with what they measured; the open window is closed and the partial result saved.

The window of a cell opens after its first measured repetition is sized (no ``/tokenize``
call in it), right before its first request is sent, and closes after its last response.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from pathlib import Path

from workloads.core.corpus import load_corpus
from workloads.core.tokens import TargetTokenizer
from workloads.model.likelihood import Likelihood
from workloads.model.records import RecordWriter, TurnRecord
from workloads.model.results import (
    RunHeader,
    RunResult,
    TargetInfo,
    environment,
    header_line,
    meta_line,
)
from workloads.model.scenario import Cell, Scenario
from workloads.model.transcripts import TranscriptWriter
from workloads.runner.gate import send_gate
from workloads.runner.monitor import ClientMonitor
from workloads.runner.outcome import Measured, build_result, corpus_info, window
from workloads.runner.repetition import Repetition, open_sessions, play
from workloads.runner.replay import Recording, replay_sessions
from workloads.runner.session import Session
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
        stop: asyncio.Event | None = None,
        grace_s: float = 30.0,
        transcripts: TranscriptWriter | None = None,
        replay: Recording | None = None,
        likelihood: Likelihood | None = None,
    ) -> None:
        self.client = client
        self.transcripts = transcripts
        self.replay = replay  # a recorded run whose exact messages are re-sent
        self.model = model
        self.writer = writer
        self.callback = on_record
        self.out = out
        self.telemetry = telemetry  # started and finished once per cell: one window each
        self.stop = stop if stop is not None else asyncio.Event()  # never set: runs to the end
        self.grace_s = grace_s  # in-flight turns' time to finish once stop is set
        self.stopped = False  # a turn or repetition was left out because of stop
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
            likelihood=likelihood,
        )

    def _record(self, record: TurnRecord) -> None:
        self.measured.records.append(record)
        if self.writer is not None:
            self.writer.write(record)
        if record.system_fingerprint:
            self.measured.fingerprint = record.system_fingerprint
        if self.callback is not None:
            self.callback(record)

    def _exchange(self, record: TurnRecord, messages: list[dict[str, str]],
                  reply: str | None) -> None:
        if self.transcripts is not None:
            self.transcripts.write(
                cell=record.cell, repetition=record.repetition, warmup=record.warmup,
                session=record.session, turn=record.turn, messages=messages, completion=reply,
            )

    async def execute(self) -> RunResult:
        """Run every cell; save and return the result (partial when stopped). The
        correctness gate, unless off, goes before the first cell and after the last: outside
        every measured window."""
        complete = False
        gate = self.measured.scenario.gate
        monitor = ClientMonitor()  # the client watches itself: loop lag, CPU share
        try:
            if self.writer is not None:
                self.writer.write_line(header_line(self._header()))
            if gate != "off":  # outside the monitor and every window: not measured traffic
                self.measured.gate_outputs += await send_gate(
                    self.client, self.model, self.measured.scenario, "before")
            async with monitor:
                for cell in self.measured.cells:
                    await self._cell(cell)
                    if self.stopped:
                        break
            if gate != "off" and not self.stopped:
                self.measured.gate_outputs += await send_gate(
                    self.client, self.model, self.measured.scenario, "after")
            complete = not self.stopped
        finally:
            # Also on Ctrl-C or a crash: the result says what was measured, and that it stopped.
            m = self.measured
            m.client = monitor.health(m.records)
            m.telemetry_warnings = list(self.telemetry.warnings)
            result = build_result(m, complete=complete)
            if self.out is not None:
                # run_async refused an existing result.json, so this one is ours.
                result.save(self.out, overwrite=True)
        return result

    def _header(self) -> RunHeader:
        m = self.measured
        return RunHeader(
            label=m.label, note=m.note, scenario=m.scenario, target=m.target,
            corpus=corpus_info(m.corpus), environment=environment(),
        )

    async def _play(self, sessions: list[Session], repetition: Repetition,
                    scenario: Scenario) -> bool:
        """Play a repetition; False when stop left turns out or cut them short.

        Once stop is set, the sessions start no new turn and the turns in flight get
        ``grace_s``; those still running then are cancelled (each records itself).
        """
        playing = asyncio.ensure_future(
            play(sessions, repetition, scenario, self.measured.corpus, stop=self.stop)
        )
        try:
            stopping = asyncio.ensure_future(self.stop.wait())
            try:
                await asyncio.wait({playing, stopping}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopping.cancel()
            if not playing.done():  # stop was set: the turns in flight get their grace
                await asyncio.wait({playing}, timeout=self.grace_s)
            if not playing.done():
                playing.cancel()
            try:
                return await playing
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # we are cancelled ourselves, not only the turns
                return False
        finally:
            if not playing.done():  # we were cancelled: the turns go too, and record so
                playing.cancel()
                await asyncio.wait({playing})

    async def _cell(self, cell: Cell) -> None:
        m = self.measured
        s = m.scenario.repetitions
        opened: float | None = None
        traced: list[Session] = []  # measured sessions whose last reply the oracle lacks
        for index in range(s.warmup + s.measured):
            if self.stop.is_set():
                self.stopped = True
                break
            repetition = Repetition(cell=cell, index=index, warmup=index < s.warmup)
            sizing = m.sizings[cell.index]
            if self.replay is not None:
                sessions, nonces = replay_sessions(
                    repetition, self.replay, sizing=sizing, corpus=m.corpus,
                    client=self.client, model=self.model, on_record=self._record,
                    on_exchange=self._exchange,
                )
                async with asyncio.TaskGroup() as tg:  # turn 1 sized before anything is sent
                    for session in sessions:
                        tg.create_task(session.prepare(1))
            else:
                sessions, nonces = await open_sessions(
                    repetition, sizing=sizing, corpus=m.corpus, entropy=self.entropy,
                    client=self.client, model=self.model, on_record=self._record,
                    on_exchange=self._exchange,
                )
            m.nonces.append(nonces)
            if self.writer is not None:
                self.writer.write_line(meta_line("nonces", nonces.model_dump(mode="json")))
            if self.stop.is_set():  # stopped while sizing: nothing of it was sent
                self.stopped = True
                break
            if not repetition.warmup and opened is None:
                await self.telemetry.start()  # the window opens: sized, nothing sent yet
                opened = time.time()
                if m.window_start is None:
                    m.window_start = opened
            finished = await self._play(sessions, repetition, sizing.scenario)
            if repetition.warmup and not sizing.exact:
                sizing.learn([o for session in sessions for o in session.observations])
            if not repetition.warmup:
                m.traces.setdefault(cell.index, []).extend(
                    t for session in sessions for t in session.token_log
                )
                traced += sessions
            if not finished:
                self.stopped = True
                break
        if opened is None:
            return  # stopped before the cell's first measured request: no window
        m.window_end = time.time()  # every measured response of the cell has ended
        here = [r for r in m.records if not r.warmup and r.cell == cell.index]
        server, energy = await self.telemetry.finish(here)
        m.windows[cell.index] = window(opened, m.window_end, server, energy)
        if self.writer is not None:
            line = m.windows[cell.index].model_dump(mode="json")
            self.writer.write_line(meta_line("window", {"cell": cell.index, **line}))
        for session in traced:  # after the window: these tokenizer calls are not measured
            await session.finish_trace()
