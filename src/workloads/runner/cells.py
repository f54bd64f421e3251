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
A file of the run directory that cannot be written (a full disk) stops the run the same way:
the records file keeps every whole line written before, result.json is saved only beside a
whole records.jsonl, and the run raises :class:`OutputError` naming the file and what was kept.

The window of a cell opens after its first measured repetition is sized (no ``/tokenize``
call in it), right before its first request is sent, and closes after its last response.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from workloads.core.corpus import load_corpus
from workloads.core.tokens import TargetTokenizer
from workloads.model.errors import OutputError
from workloads.model.likelihood import Likelihood
from workloads.model.records import RecordWriter, TurnRecord
from workloads.model.results import (
    RECORDS_FILE,
    RESULT_FILE,
    ClientHealth,
    RunHeader,
    RunResult,
    TargetInfo,
    TraceReplay,
    environment,
    header_line,
    meta_line,
)
from workloads.model.scenario import Cell, Scenario
from workloads.model.transcripts import TranscriptWriter
from workloads.runner.gate import not_served, send_gate
from workloads.runner.monitor import ClientMonitor, merged_health
from workloads.runner.options import SessionIO, Stopping
from workloads.runner.outcome import Measured, build_result, corpus_info, window
from workloads.runner.players import LocalPlayers, Players
from workloads.runner.repetition import Repetition
from workloads.runner.replay import Recording
from workloads.runner.sizing import CellSizing
from workloads.telemetry import WindowTelemetry
from workloads.wire.client import ChatClient

__all__ = ["Run", "RunOutput", "RunSetup"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunSetup:
    """What :func:`workloads.runner.run.run_async` set up against the target before the run:
    the clients, the model and tokenizer it found, what the result says of the target, the
    window telemetry, and what the setup itself has to report."""

    client: ChatClient
    model: str
    tokenizer: TargetTokenizer
    target_info: TargetInfo
    telemetry: WindowTelemetry  # started and finished once per cell: one window each
    gate_client: ChatClient | None = None  # runner.gate.gate_client; None: through ``client``
    # the likelihood probe's answer, or the probe still on its way (awaited after the gate's
    # first pass, before the first window)
    likelihood: Likelihood | asyncio.Future[Likelihood] | None = None
    # proxy and TLS settings, for the result's environment
    connection: Mapping[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()  # the setup's, for the result (run_async's client=)


@dataclass(frozen=True)
class RunOutput:
    """Where a run keeps what it measures: the run directory and its open files, the
    caller's record callback, and the labels the result carries. All None: memory only."""

    out: Path | None = None
    writer: RecordWriter | None = None
    transcripts: TranscriptWriter | None = None
    on_record: Callable[[TurnRecord], None] | None = None
    label: str | None = None
    note: str | None = None


class Run:
    """One run of a scenario with a client, a tokenizer and window telemetry already set up
    (:func:`workloads.runner.run.run_async` sets them up)."""

    def __init__(
        self,
        *,
        scenario: Scenario,
        setup: RunSetup,
        output: RunOutput | None = None,  # default: kept in memory only
        stopping: Stopping | None = None,  # default: never stopped from outside
        replay: Recording | None = None,
        players: Callable[[Run], Players] | None = None,  # default: this process plays all
        trace: TraceReplay | None = None,  # run --trace: what the players replay
    ) -> None:
        output = output if output is not None else RunOutput()
        self.stopping = stopping if stopping is not None else Stopping()
        self.connection = dict(setup.connection)
        client = setup.client
        self.client = client
        self.gate_client = setup.gate_client if setup.gate_client is not None else client
        self.transcripts = output.transcripts
        self.replay = replay  # a recorded run whose exact messages are re-sent
        self.model = setup.model
        self.writer = output.writer
        self.callback = output.on_record
        self.out = output.out
        self.telemetry = setup.telemetry
        self.stop = self.stopping.event  # never set: runs to the end
        self.grace_s = self.stopping.grace_s  # in-flight turns' time to finish once stopped
        self.stopped = False  # a turn or repetition was left out because of stop
        # The first write to the run directory that failed (a full disk): the run stops
        # as ``stop`` stops it, keeps what was written, and raises it at the end.
        self.output_error: OutputError | None = None
        self.stop_write = False  # a failed write set ``stop``
        for file in (self.writer, self.transcripts):
            if file is not None:
                file.on_error = self._cannot_write
        probe = setup.likelihood
        self.probe = probe if isinstance(probe, asyncio.Future) else None
        self.entropy = secrets.token_bytes(16)  # this run's freshness: every nonce derives from it
        cells = scenario.cells()
        tokenizer = setup.tokenizer
        self.measured = Measured(
            scenario=scenario,
            target=setup.target_info,
            corpus=load_corpus(scenario.content.corpus),
            cells=cells,
            sizings={c.index: CellSizing(scenario.for_cell(c), tokenizer) for c in cells},
            tokenizer=tokenizer,
            label=output.label,
            note=output.note,
            likelihood=setup.likelihood if isinstance(setup.likelihood, Likelihood) else None,
            trace=trace,
            setup_warnings=list(setup.warnings),
            replay=replay.replay() if replay is not None else None,
        )
        # what the sessions send through and where their records and transcripts go
        self.io = SessionIO(client, self.model, self.record, self.exchange)
        self.monitor = ClientMonitor()  # the client watches itself: loop lag, CPU share
        self.players: Players = (
            LocalPlayers(
                sizings=self.measured.sizings,
                corpus=self.measured.corpus,
                entropy=self.entropy,
                io=self.io,
                stopping=self.stopping,
                replay=replay,
                monitor=self.monitor,
            )
            if players is None
            else players(self)
        )

    def record(self, record: TurnRecord) -> None:
        """Keep ``record``: in the result, appended to records.jsonl, to ``on_record``."""
        self.measured.records.append(record)
        if self.writer is not None:
            self.writer.write(record)
        if record.system_fingerprint:
            self.measured.fingerprint = record.system_fingerprint
        if self.callback is not None:
            self.callback(record)

    def _cannot_write(self, err: OutputError) -> None:
        """A file of the run directory cannot be written: stop the run (no new turn; turns
        in flight get the grace, their records kept in memory only)."""
        if self.output_error is None:
            self.output_error = err
        self.stop_write = True
        self.stop.set()

    def exchange(
        self,
        record: TurnRecord,
        messages: list[dict[str, str]],
        reply: str | None,
        digests: list[str] | None,
    ) -> None:
        """Keep a turn's messages and completion in the transcripts (when kept): the
        record's prompt hash and the messages' digests named, not computed again."""
        if self.transcripts is not None:
            self.transcripts.write(
                cell=record.cell,
                repetition=record.repetition,
                warmup=record.warmup,
                session=record.session,
                turn=record.turn,
                messages=messages,
                completion=reply,
                prompt_sha256=record.prompt_sha256,
                digests=digests,
            )

    async def execute(self) -> RunResult:
        """Run every cell; save and return the result (partial when stopped). The
        correctness gate, unless off, goes before the first cell and after the last: outside
        every measured window."""
        complete = False
        workers: list[ClientHealth] = []  # the worker processes' own health, when any
        gate = self.measured.scenario.gate
        monitor = self.monitor
        # where the run ran, and which event loop stamped its chunks (uvloop or asyncio)
        self.measured.environment = (
            environment() | {"event_loop": self.players.event_loop()} | self.connection
        )
        if self.writer is not None:  # a failure here is a failed start: nothing is saved
            self.writer.write_line(header_line(self._header()))
            if (err := self.output_error) is not None:
                raise OutputError(f"{err}; the run did not start", path=err.path, errno=err.errno)
        try:
            if gate != "off":  # outside the monitor and every window: not measured traffic
                self.measured.gate_outputs += await send_gate(
                    self.gate_client,
                    self.model,
                    self.measured.scenario,
                    "before",
                    url=self._chat_url,
                )
            if self.probe is not None:  # sent with the gate's first pass, before any window
                self.measured.likelihood = await self.probe
            async with monitor:
                for cell in self.measured.cells:
                    await self._cell(cell)
                    if self.stopped:
                        break
            workers = await self.players.finish()
            if gate != "off" and not self.stopped:
                self.measured.gate_outputs += await send_gate(
                    self.gate_client,
                    self.model,
                    self.measured.scenario,
                    "after",
                    self.measured.gate_outputs,
                )
            complete = not self.stopped
        finally:
            # Also on Ctrl-C or a crash: the result says what was measured, and that it stopped.
            m = self.measured
            m.client = merged_health(monitor.health(m.records), workers)
            m.telemetry_warnings = list(self.telemetry.warnings)
            result = build_result(m, complete=complete)
            saved = self.out is not None and self._save(result)
        if self.output_error is not None:
            raise self._stopped_by(self.output_error, saved=saved)
        return result

    def _save(self, result: RunResult) -> bool:
        """Save ``result`` unless records.jsonl failed (a result.json beside records.jsonl
        summarises the records in it; ``show`` rebuilds the report from records.jsonl)."""
        assert self.out is not None
        if self.writer is not None and self.writer.failure is not None:
            return False
        try:
            # run_async refused an existing result.json, so this one is ours.
            result.save(self.out, overwrite=True)
        except OutputError as err:  # raised after the finally, not over another exception
            if self.output_error is None:
                self.output_error = err
            return False
        return True

    def _stopped_by(self, err: OutputError, *, saved: bool) -> OutputError:
        """``err`` with what the run kept: the records written before it, and the result."""
        out = self.out if self.out is not None else Path(".")
        records = out / RECORDS_FILE
        written = self.writer.records if self.writer is not None else 0
        whole = self.writer is None or self.writer.failure is None
        stopped = "the run stopped there; " if self.stop_write else ""
        if saved:
            kept = f"its {written} turn records are in {records}, its result in {out / RESULT_FILE}"
        else:
            which = (
                f"its {written} turn records"
                if whole
                else f"the {written} turn records written before"
            )
            kept = f"{which} are kept in {records} (show {out} rebuilds the report from them)"
        return OutputError(f"{err}; {stopped}{kept}", path=err.path, errno=err.errno)

    @property
    def _chat_url(self) -> str:
        return self.measured.target.base_url.rstrip("/") + "/chat/completions"

    def _header(self) -> RunHeader:
        m = self.measured
        return RunHeader(
            label=m.label,
            note=m.note,
            scenario=m.scenario,
            target=m.target,
            corpus=corpus_info(m.corpus),
            environment=m.environment,
            trace=m.trace,
            replay=m.replay,
        )

    async def _cell(self, cell: Cell) -> None:
        m = self.measured
        s = m.scenario.repetitions
        log.info(
            "cell %d of %d: %d concurrent sessions, %d warm-up and %d measured repetitions",
            cell.index + 1,
            len(m.cells),
            cell.concurrency,
            s.warmup,
            s.measured,
        )
        opened: float | None = None

        async def open_window() -> None:
            nonlocal opened
            log.debug("cell %d: the measured window opens", cell.index + 1)
            await self.telemetry.start()  # the window opens: sized, nothing sent yet
            opened = time.time()
            if m.window_start is None:
                m.window_start = opened

        if m.scenario.for_cell(cell).fleet is not None:
            # One continuous fleet: its windows are the repetitions; the measured window
            # opens when the warm-up's windows end, while the fleet plays on.
            fleet = Repetition(cell=cell, index=0, warmup=s.warmup > 0)
            if isinstance(self.players, LocalPlayers):
                self.players.on_measured = open_window
            nonces = await self.players.open(fleet)
            m.nonces.append(nonces)
            if self.writer is not None:
                self.writer.write_line(meta_line("nonces", nonces.model_dump(mode="json")))
            if self.stop.is_set():
                self.stopped = True
                return
            if s.warmup == 0:
                await open_window()
            if not await self.players.play(fleet):
                self.stopped = True
            await self._close(cell, opened)
            return
        for index in range(s.warmup + s.measured):
            if self.stop.is_set():
                self.stopped = True
                break
            repetition = Repetition(cell=cell, index=index, warmup=index < s.warmup)
            nonces = await self.players.open(repetition)
            m.nonces.append(nonces)
            if self.writer is not None:
                self.writer.write_line(meta_line("nonces", nonces.model_dump(mode="json")))
            if self.stop.is_set():  # stopped while sizing: nothing of it was sent
                self.stopped = True
                break
            if not repetition.warmup and opened is None:
                await open_window()
            finished = await self.players.play(repetition)
            if cell.index == 0 and index == 0:  # the gate, when on, asked this already
                here = [r for r in m.records if r.cell == 0 and r.repetition == 0]
                what = f"each of the first repetition's {len(here)} requests"
                if err := not_served([r.http_status for r in here], self._chat_url, what):
                    raise err
            await self.players.learn(repetition)
            if not finished:
                self.stopped = True
                break
        await self._close(cell, opened)

    async def _close(self, cell: Cell, opened: float | None) -> None:
        """Close the cell's measured window (opened at ``opened``; None: it never opened)
        and keep its telemetry and the what-if oracle's traces."""
        m = self.measured
        if opened is None:
            return  # stopped before the cell's first measured request: no window
        m.window_end = time.time()  # every measured response of the cell has ended
        log.debug(
            "cell %d: the measured window closed after %.1f s",
            cell.index + 1,
            m.window_end - opened,
        )
        here = [r for r in m.records if not r.warmup and r.cell == cell.index]
        server, energy = await self.telemetry.finish(here)
        m.windows[cell.index] = window(opened, m.window_end, server, energy)
        if self.writer is not None:
            line = m.windows[cell.index].model_dump(mode="json")
            self.writer.write_line(meta_line("window", {"cell": cell.index, **line}))
        # after the window: these tokenizer calls are not measured
        m.traces.setdefault(cell.index, []).extend(await self.players.traces(cell))
