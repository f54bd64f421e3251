"""run(): warm-up and measured repetitions, the measured window, and the RunResult.

    result = workloads.run("five-user-coding")                       # simulated server
    result = workloads.run("five-user-coding", target=Target("http://gpu:8000/v1", "m"))
    result = await workloads.run_async(scenario, target=target)     # inside an event loop
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import secrets
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from workloads import aggregate
from workloads.client import AiohttpChatClient, ChatClient
from workloads.content import load_corpus
from workloads.conversation import open_conversation
from workloads.errors import TargetError
from workloads.pacing import pause_before_turn, sleep_until
from workloads.records import RecordWriter, TurnRecord
from workloads.results import (
    RECORDS_FILE,
    RepetitionNonces,
    RunResult,
    ServerIdentity,
    TargetInfo,
    Window,
    environment,
)
from workloads.scenario import Scenario, load_scenario
from workloads.session import Session
from workloads.telemetry import TelemetryOptions, WindowTelemetry, energy_for_target
from workloads.telemetry.figures import EnergyFigures, ServerTelemetry

__all__ = ["Target", "run", "run_async"]

DEFAULT_API_KEY_ENV = "WORKLOADS_API_KEY"


@dataclass(frozen=True)
class Target:
    """The OpenAI-compatible server under test.

    ``base_url`` ends in ``/v1``. ``model`` None means: the first model ``/v1/models`` lists.
    The API key is read from the environment variable ``api_key_env`` when the run starts; it
    is never stored in results or printed.
    """

    base_url: str
    model: str | None = None
    api_key_env: str = DEFAULT_API_KEY_ENV

    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) or None

    @property
    def root_url(self) -> str:
        """The server root (``/tokenize``, ``/metrics`` live there, not under ``/v1``)."""
        url = self.base_url.rstrip("/")
        return url[: -len("/v1")] if url.endswith("/v1") else url


async def _identify(target: Target, timeout_s: float) -> tuple[str, ServerIdentity]:
    """Check the target answers, pick the model, read what identity it offers."""
    headers = {"Authorization": f"Bearer {key}"} if (key := target.api_key()) else {}
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout, headers=headers) as http:
        try:
            async with http.get(target.base_url.rstrip("/") + "/models") as resp:
                if resp.status != 200:
                    raise TargetError(
                        f"{target.base_url}/models answered HTTP {resp.status}; is this an "
                        "OpenAI-compatible base URL (ending in /v1), and is the API key set in "
                        f"${target.api_key_env}?"
                    )
                listing = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError) as err:
            raise TargetError(f"cannot reach {target.base_url}/models: {err}") from err
        models = [m.get("id", "") for m in listing.get("data", []) if isinstance(m, dict)]
        model = target.model or (models[0] if models else None)
        if model is None:
            raise TargetError(f"{target.base_url}/models lists no model; pass --model")
        version = None
        try:
            async with http.get(target.root_url + "/version") as resp:
                if resp.status == 200:
                    version = str((await resp.json(content_type=None)).get("version"))
        except (aiohttp.ClientError, TimeoutError, ValueError, AttributeError):
            pass  # not every server has /version; identity then comes from the fingerprint
    return model, ServerIdentity(version=version, models=models)


@asynccontextmanager
async def _simulated_target(sim: dict[str, Any] | None) -> AsyncIterator[tuple[Target, Any]]:
    from workloads.simulated_server import SimulatedServer

    async with SimulatedServer(sim=sim) as server:
        yield server.target, server


async def run_async(
    scenario: Scenario | str | Path,
    target: Target | None = None,
    *,
    out_dir: str | Path | None = None,
    label: str | None = None,
    note: str | None = None,
    sim: dict[str, Any] | None = None,
    on_record: Callable[[TurnRecord], None] | None = None,
    client: ChatClient | None = None,
    telemetry: TelemetryOptions | None = None,
) -> RunResult:
    """Run ``scenario`` against ``target`` (the embedded simulated server when None).

    ``out_dir`` receives ``records.jsonl`` (appended as turns finish) and ``result.json``.
    ``on_record`` is called with every TurnRecord as it is made (for progress displays).
    ``client`` replaces the HTTP client (tests use a function-backed fake; telemetry is then
    off unless ``telemetry`` asks for it). ``telemetry`` says what to read over the measured
    window: the server's /metrics and this machine's energy (:class:`TelemetryOptions`).
    """
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)
    out = Path(out_dir) if out_dir is not None else None
    if out is not None and (out / "result.json").exists():
        raise FileExistsError(f"{out / 'result.json'} exists; choose another --out directory")
    async with AsyncExitStack() as stack:
        simulated = target is None
        sim_profile = None
        if target is None:
            sim_target, server = await stack.enter_async_context(_simulated_target(sim))
            target = sim_target
            sim_profile = server.profile.model_dump()
        assert target is not None
        chosen = target
        model: str
        if client is None:
            model, identity = await _identify(chosen, scenario.timeouts.connect_s + 20)
            client = await stack.enter_async_context(
                AiohttpChatClient(
                    chosen.base_url,
                    connections=max(scenario.users, 1),
                    api_key=chosen.api_key(),
                    connect_timeout_s=scenario.timeouts.connect_s,
                    read_gap_timeout_s=scenario.timeouts.read_gap_s,
                    request_timeout_s=scenario.timeouts.turn_s,
                )
            )
        else:
            model, identity = chosen.model or "fake", ServerIdentity()
            if telemetry is None:
                telemetry = TelemetryOptions(metrics=False, energy="off")
        window_telemetry = await stack.enter_async_context(_window_telemetry(chosen, telemetry,
                                                                            simulated))
        writer = None
        if out is not None:
            writer = stack.enter_context(RecordWriter(out / RECORDS_FILE))
        return await _Run(
            scenario=scenario,
            client=client,
            model=model,
            target_info=TargetInfo(
                base_url=chosen.base_url,
                model=model,
                simulated=simulated,
                simulator_profile=sim_profile,
                server=identity,
            ),
            writer=writer,
            on_record=on_record,
            label=label,
            note=note,
            out=out,
            telemetry=window_telemetry,
        ).execute()
    raise AssertionError("unreachable")  # pragma: no cover


def run(
    scenario: Scenario | str | Path,
    target: Target | None = None,
    **options: Any,
) -> RunResult:
    """Synchronous :func:`run_async` (starts its own event loop). Same arguments."""
    return asyncio.run(run_async(scenario, target, **options))


def _window_telemetry(
    target: Target, options: TelemetryOptions | None, simulated: bool
) -> WindowTelemetry:
    options = options or TelemetryOptions()
    energy, note = energy_for_target(options.energy, base_url=target.base_url,
                                     simulated=simulated)
    key = target.api_key()
    return WindowTelemetry(
        dataclasses.replace(options, energy=energy),
        metrics_url=options.metrics_url or target.root_url + "/metrics",
        headers={"Authorization": f"Bearer {key}"} if key else None,
        energy_note=note,
    )


class _Run:
    def __init__(
        self,
        *,
        scenario: Scenario,
        client: ChatClient,
        model: str,
        target_info: TargetInfo,
        writer: RecordWriter | None,
        on_record: Callable[[TurnRecord], None] | None,
        label: str | None,
        note: str | None,
        out: Path | None,
        telemetry: WindowTelemetry,
    ) -> None:
        self.scenario = scenario
        self.client = client
        self.model = model
        self.target_info = target_info
        self.writer = writer
        self.callback = on_record
        self.label = label
        self.note = note
        self.out = out
        self.records: list[TurnRecord] = []
        self.nonces: list[RepetitionNonces] = []
        self.corpus = load_corpus(scenario.content.corpus)
        self.window_start: float | None = None
        self.window_end: float | None = None
        self.fingerprint: str | None = None
        self.telemetry = telemetry
        self.server_telemetry: ServerTelemetry | None = None
        self.energy: EnergyFigures | None = None

    def _record(self, record: TurnRecord) -> None:
        self.records.append(record)
        if self.writer is not None:
            self.writer.write(record)
        if record.system_fingerprint:
            self.fingerprint = record.system_fingerprint
        if self.callback is not None:
            self.callback(record)

    async def execute(self) -> RunResult:
        s = self.scenario
        complete = False
        try:
            for repetition in range(s.repetitions.warmup + s.repetitions.measured):
                warmup = repetition < s.repetitions.warmup
                if not warmup and self.window_start is None:
                    await self.telemetry.start()  # right before the first measured request
                    self.window_start = time.time()
                await self._repetition(repetition, warmup)
            self.window_end = time.time()  # every measured response has ended
            measured = [r for r in self.records if not r.warmup]
            self.server_telemetry, self.energy = await self.telemetry.finish(measured)
            complete = True
        finally:
            # Also on Ctrl-C or a crash: the result says what was measured, and that it stopped.
            result = self._result(complete)
            if self.out is not None:
                result.save(self.out, overwrite=not complete)
        return result

    async def _repetition(self, repetition: int, warmup: bool) -> None:
        s = self.scenario
        run_nonce = secrets.token_hex(8) if s.nonce == "run" else None
        session_nonces = [secrets.token_hex(8) for _ in range(s.users)]
        self.nonces.append(
            RepetitionNonces(
                repetition=repetition, warmup=warmup, run_nonce=run_nonce, sessions=session_nonces
            )
        )
        sessions = [
            Session(
                client=self.client,
                scenario=s,
                model=self.model,
                conversation=open_conversation(
                    corpus=self.corpus,
                    session=i,
                    nonce=session_nonces[i],
                    run_nonce=run_nonce,
                    seed=s.content.seed,
                    opening_tokens=s.opening_tokens,
                    turn_tokens=s.turn_tokens,
                ),
                repetition=repetition,
                warmup=warmup,
                on_record=self._record,
            )
            for i in range(s.users)
        ]
        if s.pacing.mode == "lockstep":
            for turn in range(1, s.turns + 1):
                async with asyncio.TaskGroup() as tg:  # the barrier: all of turn k, then k+1
                    for session in sessions:
                        tg.create_task(session.turn(turn))
        else:
            async with asyncio.TaskGroup() as tg:
                for session in sessions:
                    tg.create_task(self._free_running(session, repetition))

    async def _free_running(self, session: Session, repetition: int) -> None:
        rng = self.corpus.rng(self.scenario.content.seed, repetition, session.conversation.session)
        for turn in range(1, self.scenario.turns + 1):
            pause = pause_before_turn(self.scenario.pacing, turn, rng)
            await sleep_until(time.perf_counter() + pause)
            await session.turn(turn)

    def _result(self, complete: bool) -> RunResult:
        s = self.scenario
        summary = aggregate.summarize(self.records, users=s.users)
        warnings = [*_warnings(summary, complete), *self.telemetry.warnings]
        identity = self.target_info.server.model_copy(
            update={"system_fingerprint": self.fingerprint}
        )
        window = Window(
            start_unix=self.window_start,
            end_unix=self.window_end,
            duration_s=(
                self.window_end - self.window_start
                if self.window_end is not None and self.window_start is not None
                else None
            ),
            server=self.server_telemetry,
            energy=self.energy,
        )
        return RunResult(
            created_unix=time.time(),
            complete=complete,
            label=self.label,
            note=self.note,
            scenario=s,
            target=self.target_info.model_copy(update={"server": identity}),
            corpus={"name": self.corpus.name, "fingerprint": self.corpus.fingerprint},
            nonces=self.nonces,
            window=window,
            summary=summary,
            warnings=warnings,
            environment=environment(),
            records=self.records,
        )


def _warnings(summary: aggregate.Summary, complete: bool) -> list[str]:
    out: list[str] = []
    run = summary.run
    if not complete:
        out.append("the run was interrupted: figures cover only the turns measured before it")
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
