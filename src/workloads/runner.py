"""run(): cells, warm-up and measured repetitions, the measured window, and the RunResult.

A run has one cell per sweep coordinate (concurrency × prior depth; one cell without sweep
axes). Each cell runs its own warm-up and measured repetitions and has its own window.

    result = workloads.run("five-user-coding")                       # simulated server
    result = workloads.run("five-user-coding", target=Target("http://gpu:8000/v1", "m"))
    result = await workloads.run_async(scenario, target=target)     # inside an event loop
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from workloads import aggregate, tokens
from workloads.client import AiohttpChatClient, ChatClient
from workloads.content import load_corpus
from workloads.conversation import Conversation, make_nonces, probe_nonce
from workloads.errors import TargetError
from workloads.pacing import sleep_until, turn_deadline
from workloads.records import RecordWriter, TurnRecord
from workloads.results import (
    RECORDS_FILE,
    CellSummary,
    RepetitionNonces,
    RunResult,
    ServerIdentity,
    Sizing,
    TargetInfo,
    Window,
    environment,
)
from workloads.scenario import Cell, Scenario, load_scenario
from workloads.session import Session, TokenTrace
from workloads.simulated_server.oracle import OracleRequest, WhatIfTurn, what_if
from workloads.sizing import CellSizing, sizing_warnings
from workloads.telemetry import TelemetryOptions, WindowTelemetry, energy_for_target
from workloads.telemetry.figures import EnergyFigures, ServerTelemetry
from workloads.tokens import EstimateTokenizer, TargetTokenizer

__all__ = ["Target", "identify", "run", "run_async"]

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
    # Set by SimulatedServer.target: the profile of the simulated engine behind this URL, so
    # a run against it is labelled simulated (no energy reading, the what-if oracle knows the
    # KV capacity) however it was started.
    simulator_profile: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) or None

    def headers(self) -> dict[str, str]:
        """HTTP headers for every request to the target (the API key, when one is set)."""
        key = self.api_key()
        return {"Authorization": f"Bearer {key}"} if key else {}

    @property
    def root_url(self) -> str:
        """The server root (``/tokenize``, ``/metrics`` live there, not under ``/v1``)."""
        url = self.base_url.rstrip("/")
        return url[: -len("/v1")] if url.endswith("/v1") else url


async def identify(target: Target, timeout_s: float) -> tuple[str, ServerIdentity]:
    """Check the target answers, pick the model, read what identity it offers.

    Raises :class:`TargetError` when ``/models`` cannot be read or lists no model. Used by
    runs and by ``probe``.
    """
    headers = target.headers()
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
        except ValueError as err:
            raise TargetError(f"{target.base_url}/models did not answer JSON: {err}") from err
        data = listing.get("data") if isinstance(listing, dict) else None
        if not isinstance(data, list):
            raise TargetError(
                f"{target.base_url}/models is not an OpenAI model list (no 'data' array)"
            )
        models = [str(m.get("id", "")) for m in data if isinstance(m, dict)]
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
    ``client`` replaces the HTTP client (tests use a function-backed fake): prompts are then
    sized by tiktoken estimate, as no target tokenizer is asked, and telemetry is off unless
    ``telemetry`` asks for it. ``telemetry`` says what to read over each measured window: the
    server's /metrics and this machine's energy (:class:`TelemetryOptions`).
    """
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        for name in ("result.json", RECORDS_FILE):
            # records.jsonl alone is what a killed run leaves: appending to it would mix runs.
            if (out / name).exists():
                raise FileExistsError(f"{out / name} exists; choose another --out directory")
    async with AsyncExitStack() as stack:
        simulated = target is None or target.simulator_profile is not None
        sim_profile = None if target is None else target.simulator_profile
        if target is None:
            sim_target, server = await stack.enter_async_context(_simulated_target(sim))
            target = sim_target
            sim_profile = server.profile.model_dump()
        assert target is not None
        chosen = target
        model: str
        tokenizer: TargetTokenizer = EstimateTokenizer()
        if client is None:
            model, identity = await identify(chosen, scenario.timeouts.connect_s + 20)
            client = await stack.enter_async_context(
                AiohttpChatClient(
                    chosen.base_url,
                    connections=max(c.concurrency for c in scenario.cells()),
                    api_key=chosen.api_key(),
                    connect_timeout_s=scenario.timeouts.connect_s,
                    read_gap_timeout_s=scenario.timeouts.read_gap_s,
                    request_timeout_s=scenario.timeouts.turn_s,
                )
            )
            if scenario.tokenizer == "auto":
                found = await tokens.probe_tokenizer(
                    target.root_url,
                    model,
                    headers=target.headers() or None,
                    template_kwargs=scenario.extra_body.get("chat_template_kwargs"),
                )
                if found is not None:
                    tokenizer = await stack.enter_async_context(found)
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
            tokenizer=tokenizer,
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
    return WindowTelemetry(
        dataclasses.replace(options, energy=energy),
        metrics_url=options.metrics_url or target.root_url + "/metrics",
        headers=target.headers() or None,
        energy_note=note,
    )


class _Run:
    def __init__(
        self,
        *,
        scenario: Scenario,
        client: ChatClient,
        model: str,
        tokenizer: TargetTokenizer,
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
        self.tokenizer = tokenizer
        self.target_info = target_info
        self.writer = writer
        self.callback = on_record
        self.label = label
        self.note = note
        self.out = out
        self.records: list[TurnRecord] = []
        self.nonces: list[RepetitionNonces] = []
        self.corpus = load_corpus(scenario.content.corpus)
        self.entropy = secrets.token_bytes(16)  # this run's freshness: every nonce derives from it
        self.cells = scenario.cells()
        self.sizings = {
            cell.index: CellSizing(scenario.for_cell(cell), tokenizer) for cell in self.cells
        }
        self.windows: dict[int, Window] = {}
        self.window_start: float | None = None
        self.cell_start: float | None = None
        self.window_end: float | None = None
        self.fingerprint: str | None = None
        self.telemetry = telemetry  # started and finished once per cell: one window each
        self.traces: dict[int, list[TokenTrace]] = {}  # per cell, measured turns only
        profile = target_info.simulator_profile or {}
        capacity = profile.get("kv_capacity_tokens")
        self.kv_capacity_tokens = capacity if isinstance(capacity, int) else None
        block = profile.get("block_size")
        self.block_size = block if isinstance(block, int) else 16

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
            for cell in self.cells:
                self.cell_start = None
                for repetition in range(s.repetitions.warmup + s.repetitions.measured):
                    warmup = repetition < s.repetitions.warmup
                    opening = not warmup and self.cell_start is None
                    await self._repetition(
                        cell, repetition, warmup, self._open_window if opening else None
                    )
                self.window_end = time.time()  # every measured response of the cell has ended
                measured = [r for r in self.records if not r.warmup and r.cell == cell.index]
                server, energy = await self.telemetry.finish(measured)
                self.windows[cell.index] = _window(self.cell_start, self.window_end, server, energy)
            complete = True
        finally:
            # Also on Ctrl-C or a crash: the result says what was measured, and that it stopped.
            result = self._result(complete)
            if self.out is not None:
                result.save(self.out, overwrite=not complete)
        return result

    async def _open_window(self) -> None:
        """The cell's window starts: after the first measured repetition is sized (its
        /tokenize calls are not in the window), right before its first request is sent."""
        await self.telemetry.start()
        self.cell_start = time.time()
        if self.window_start is None:
            self.window_start = self.cell_start

    async def _repetition(
        self,
        cell: Cell,
        repetition: int,
        warmup: bool,
        before_first_send: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        sizing = self.sizings[cell.index]
        s = sizing.scenario
        nonces = make_nonces(
            self.entropy, cell=cell.index, repetition=repetition, users=s.users, mode=s.nonce
        )
        self.nonces.append(
            RepetitionNonces(
                cell=cell.index,
                repetition=repetition,
                warmup=warmup,
                run_nonce=nonces.run,
                sessions=nonces.sessions,
            )
        )
        conversations = [
            Conversation(
                corpus=self.corpus,
                style=s.content.style,
                seed=s.content.seed,
                session=i,
                nonce=nonces.sessions[i],
                run_nonce=nonces.run,
            )
            for i in range(s.users)
        ]
        n_system = 0
        if s.opening_tokens > 0:
            n_system = await sizing.fit_shared(conversations[0], probe_nonce(nonces))
        sessions = [
            Session(
                client=self.client,
                scenario=s,
                model=self.model,
                conversation=conversation,
                sizing=sizing,
                repetition=repetition,
                warmup=warmup,
                on_record=self._record,
                cell=cell.index,
            )
            for conversation in conversations
        ]
        async with asyncio.TaskGroup() as tg:
            for session in sessions:
                tg.create_task(session.open(n_system))
        _share_openings(sessions, sizing)
        async with asyncio.TaskGroup() as tg:  # turn 1 sized before anything is sent
            for session in sessions:
                tg.create_task(session.prepare(1))
        if before_first_send is not None:
            await before_first_send()
        rngs = [
            self.corpus.rng(s.content.seed, "pacing", cell.index, repetition, i)
            for i in range(s.users)
        ]
        if s.pacing.mode == "lockstep":
            for turn in range(1, s.turns + 1):
                if turn > 1:
                    async with asyncio.TaskGroup() as tg:  # every session sized before any sends
                        for session in sessions:
                            tg.create_task(session.prepare(turn))
                barrier = time.perf_counter()
                async with asyncio.TaskGroup() as tg:  # the barrier: all of turn k, then k+1
                    for session, rng in zip(sessions, rngs, strict=True):
                        due = turn_deadline(barrier, s.pacing, turn, rng)
                        tg.create_task(_send_at(session, turn, due))
        else:
            start = time.perf_counter()
            async with asyncio.TaskGroup() as tg:
                for session, rng in zip(sessions, rngs, strict=True):
                    tg.create_task(_free_running(session, s, start, rng))
        if warmup and not sizing.exact:
            sizing.learn([o for session in sessions for o in session.observations])
        if not warmup:
            traces = self.traces.setdefault(cell.index, [])
            traces.extend(t for session in sessions for t in session.token_log)

    def _what_if(self, cell: int) -> list[WhatIfTurn] | None:
        """The what-if cache oracle over a cell's measured turns, in arrival order: what an
        LRU prefix cache of the server's KV capacity would serve with no contention, and
        what an unlimited one would. Needs exact token ids (a target /tokenize) and a known
        capacity (today: the simulated server's profile)."""
        traces = sorted(self.traces.get(cell, []), key=lambda t: t.sent_ns)
        capacity = self.kv_capacity_tokens
        if not traces or capacity is None:
            return None
        requests = [OracleRequest(t.prompt, t.completion, turn=t.turn) for t in traces]
        return what_if(requests, capacity_tokens=capacity, block_size=self.block_size)

    def _result(self, complete: bool) -> RunResult:
        s = self.scenario
        summary = aggregate.summarize(self.records, users=s.users)
        cells = None
        if s.swept:
            cells = []
            for cell in self.cells:
                cs = self.sizings[cell.index].scenario
                mine = [r for r in self.records if r.cell == cell.index]
                if not mine:
                    continue
                cells.append(
                    CellSummary(
                        cell=cell.index,
                        concurrency=cell.concurrency,
                        prior_tokens=cell.prior_tokens,
                        configured_prompt_tokens=cs.configured_prompt_tokens(1),
                        window=self.windows.get(cell.index, Window()),
                        generation_rate=aggregate.generation_rate(mine),
                        summary=aggregate.summarize(mine, users=cell.concurrency),
                        cache_what_if=self._what_if(cell.index),
                    )
                )
        sizing = Sizing(
            tokenizer=self.tokenizer.description,
            exact=self.tokenizer.exact,
            calls=self.tokenizer.calls,
            seconds=round(self.tokenizer.seconds, 3),
            fallbacks=sum(z.fallbacks for z in self.sizings.values()),
            scale={
                str(i): {str(t): round(v, 4) for t, v in z.scale.items()}
                for i, z in self.sizings.items()
                if z.scale
            },
        )
        warnings = [*_warnings(summary, complete), *self.telemetry.warnings]
        warnings += sizing_warnings(self.records, sizing, s)
        identity = self.target_info.server.model_copy(
            update={"system_fingerprint": self.fingerprint}
        )
        window = self.windows.get(0, Window()) if not s.swept else _window(
            self.window_start, self.window_end
        )
        return RunResult(
            created_unix=time.time(),
            complete=complete,
            label=self.label,
            note=self.note,
            scenario=s,
            target=self.target_info.model_copy(update={"server": identity}),
            corpus={
                "name": self.corpus.name,
                "fingerprint": self.corpus.fingerprint,
                "files": str(len(self.corpus.files)),
            },
            nonces=self.nonces,
            window=window,
            summary=summary,
            cells=cells,
            cache_what_if=None if s.swept else self._what_if(0),
            sizing=sizing,
            warnings=warnings,
            environment=environment(),
            records=self.records,
        )


def _window(
    start: float | None,
    end: float | None,
    server: ServerTelemetry | None = None,
    energy: EnergyFigures | None = None,
) -> Window:
    return Window(
        start_unix=start,
        end_unix=end,
        duration_s=end - start if end is not None and start is not None else None,
        server=server,
        energy=energy,
    )


def _share_openings(sessions: list[Session], sizing: CellSizing) -> None:
    """Turn 1's shareable prefix: with nonce = "run", the part of its opening this session
    has in common with another session of the repetition (0 alone, or with nonce = "session").
    """
    if sizing.scenario.nonce != "run" or len(sessions) < 2:
        return
    scale = 1.0 if sizing.exact else sizing.scale.get(1, 1.0)
    for i, session in enumerate(sessions):
        other = sessions[(i + 1) % len(sessions)]
        common = tokens.common_prefix_length(session.opening_ids, other.opening_ids)
        session.peer_shared = round(common * scale)
        session.peer_shared_exact = session.opening_exact and other.opening_exact


async def _send_at(session: Session, turn: int, due: float) -> None:
    late = await sleep_until(due)
    await session.send(turn, lag_ns=round(late * 1e9))


async def _free_running(
    session: Session, scenario: Scenario, start: float, rng: random.Random
) -> None:
    since = start
    for turn in range(1, scenario.turns + 1):
        due = turn_deadline(since, scenario.pacing, turn, rng)
        if turn > 1:  # turn 1 was sized before the repetition started
            await session.prepare(turn)  # sizing happens inside the think/tool time
        late = await sleep_until(due)
        await session.send(turn, lag_ns=round(late * 1e9))
        since = time.perf_counter()


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
