"""run() and run_async(): the public entry. Sets up what a run needs (the simulated server
when no target is given, the model check, the HTTP client, the target's tokenizer, window
telemetry, the records file), then hands over to :class:`~workloads.runner.cells.Run`.

A run has one cell per sweep coordinate (concurrency × prior depth; one cell without sweep
axes). Each cell runs its own warm-up and measured repetitions and has its own window.

    result = workloads.run("five-user-coding")                       # simulated server
    result = workloads.run("five-user-coding", target=Target("http://gpu:8000/v1", "m"))
    result = await workloads.run_async(scenario, target=target)     # inside an event loop

Arguments that cannot work together raise :class:`~workloads.OptionsError` before anything
starts. The run logs its start, each cell and its end to the ``workloads`` logger (silent
unless the application configures logging).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from workloads.core import tokens
from workloads.core.tokens import EstimateTokenizer, TargetTokenizer
from workloads.core.traces import MooncakeTrace
from workloads.model.errors import OptionsError
from workloads.model.likelihood import Likelihood
from workloads.model.records import RecordWriter, TurnRecord
from workloads.model.results import RECORDS_FILE, RunResult, ServerIdentity, TargetInfo
from workloads.model.scenario import Scenario, load_scenario
from workloads.model.slo import Slo, parse_slo
from workloads.model.target import Target
from workloads.model.transcripts import TRANSCRIPTS_FILE, TranscriptWriter
from workloads.runner.cells import Run, RunOutput, RunSetup
from workloads.runner.gate import gate_client
from workloads.runner.options import Stopping
from workloads.runner.outdir import claim_out_dir
from workloads.runner.players import Players
from workloads.runner.replay import load_recording
from workloads.runner.trace import TracePlayers, read_trace, trace_info, trace_scenario
from workloads.runner.workers.pool import WorkerPlayers, WorkerPool
from workloads.telemetry import TelemetryOptions, WindowTelemetry, energy_for_target
from workloads.wire.arrival import arrival_stamps
from workloads.wire.client import AiohttpChatClient, ChatClient
from workloads.wire.identify import identify
from workloads.wire.likelihood import measure_likelihood
from workloads.wire.loop import run_loop
from workloads.wire.tokenize import LlamaCppTokenizer, VllmTokenizer, probe_tokenizer
from workloads.wire.transport import Transport, transport_for

__all__ = ["run", "run_async"]

log = logging.getLogger(__name__)


@asynccontextmanager
async def _simulated_target(sim: dict[str, Any] | None) -> AsyncIterator[tuple[Target, Any]]:
    from workloads.servers.simulated import SimulatedServer

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
    stop: asyncio.Event | None = None,
    stop_grace_s: float = 30.0,
    overwrite: bool = False,
    transcripts: bool = True,  # write DIR/transcripts.jsonl (with out_dir); records keep hashes
    replay: str | Path | None = None,  # a run directory whose exact messages to re-send
    workers: int = 1,  # processes that send the requests: 1 = this one (see auto_workers)
    ray: str | None = None,  # a Ray cluster's address: the workers are Ray actors there
    trace: str | Path | MooncakeTrace | None = None,  # a Mooncake trace to replay
    slo: Slo | str | None = None,  # judge goodput by this SLO (replaces the scenario's)
) -> RunResult:
    """Run ``scenario`` against ``target`` (the embedded simulated server when None).

    ``out_dir`` receives ``records.jsonl`` (appended as turns finish) and ``result.json``.
    ``on_record`` is called with every TurnRecord as it is made (for progress displays).
    ``client`` replaces the HTTP client (tests use a function-backed fake), and with it what
    only a real server answers: the target is not asked for its models (the model is
    ``target.model`` or "fake") or tokenizer (prompts are sized by tiktoken's estimate),
    telemetry is off unless ``telemetry`` asks for it, the likelihood probe is not sent
    (unless the client is an AiohttpChatClient), and the correctness gate is not sent unless
    the scenario requires it (a scripted client answers no questions: the result's scenario
    then says gate "off"). A warning of the result lists what was turned off, and the
    ``workloads`` logger says it at WARNING.
    ``telemetry`` says what to read over each measured window: the server's /metrics and
    this machine's energy (:class:`TelemetryOptions`).
    ``transcripts`` (with ``out_dir``) writes every turn's messages and completion to
    ``transcripts.jsonl``; off, the records still carry their prompt and completion hashes.
    ``replay`` (a run directory with transcripts) re-sends that run's exact messages turn by
    turn, recorded replies included; ``scenario`` must be the recorded one.
    ``workers`` (> 1) shards every cell's sessions over that many worker processes on this
    host, each with its own event loop and client; this process keeps the records, windows
    and result (:mod:`workloads.runner.workers.pool`). ``ray`` runs the workers as Ray actors on
    the cluster at that address (``workers`` of them; the ``ray`` extra).
    ``trace`` (a Mooncake trace file, or one read by :func:`workloads.core.traces.load_mooncake`)
    replays its requests open loop at their timestamps × ``pacing.time_scale``
    (:mod:`workloads.runner.trace`); ``scenario`` gives the rest (repetitions, content,
    sampling, timeouts, ``trace`` limits), and its users, turns and sizes are the trace's.
    ``slo`` (an :class:`~workloads.model.slo.Slo` or ``--slo`` text, "ttft_s=2,itl_ms=50")
    replaces the scenario's ``[slo]``: the result then has goodput (``result.goodput``).

    ``stop``: once set (the CLI sets it on SIGINT/SIGTERM; the library installs no signal
    handler), no new turn starts, turns in flight get ``stop_grace_s`` seconds to finish and
    are then recorded ``cancelled``, and the partial result is saved and returned
    (``complete`` False). ``overwrite``: replace the results already in ``out_dir`` (else
    they are never overwritten: :class:`~workloads.OutputExistsError`).

    Raises :class:`~workloads.OptionsError` for arguments that cannot work together,
    :class:`~workloads.ScenarioError` for a bad scenario or trace,
    :class:`~workloads.TargetError` when the target cannot be used and
    :class:`~workloads.OutputError` when ``out_dir`` cannot be claimed or written (the
    first three before any request is sent). A failed request is never raised: it is a
    record with its error kind.
    """
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)
    if slo is not None:  # bad text: one line (OptionsError), before anything starts
        scenario = scenario.model_copy(
            update={"slo": parse_slo(slo) if isinstance(slo, str) else slo}
        )
    _check_options(
        fleet=scenario.fleet is not None,
        target=target,
        sim=sim,
        workers=workers,
        ray=ray,
        client=client,
        replay=replay,
        trace=trace,
        stop_grace_s=stop_grace_s,
    )
    sharded = workers > 1 or ray is not None
    if trace is not None and not isinstance(trace, MooncakeTrace):
        trace = read_trace(trace, scenario.trace)  # bad input: one line, before --out exists
    if trace is not None:
        scenario = trace_scenario(scenario, trace)
    recording = None
    if replay is not None:
        recording = load_recording(replay)
        recording.check(scenario)
    # tiktoken's tables take 0.3 s to load (seconds on a busy machine): load them off the event
    # loop now, not on it in the middle of the first sessions' sizing; not at all where worker
    # processes size the prompts (each loads its own).
    if not sharded:
        await asyncio.to_thread(tokens.encoding)
    out = Path(out_dir) if out_dir is not None else None
    async with AsyncExitStack() as stack:
        if out is not None:  # removed again if the run fails to start (runner/outdir.py)
            stack.enter_context(claim_out_dir(out, overwrite=overwrite))
        simulated = target is None or target.simulator_profile is not None
        sim_profile = None if target is None else target.simulator_profile
        embedded = target is None  # the server this run starts, on this host's loopback
        if target is None:
            # the scenario's simulator overrides, the caller's winning (a profile named
            # by the caller starts from that profile alone)
            merged = (
                dict(sim or {}) if "profile" in (sim or {}) else {**scenario.sim, **(sim or {})}
            )
            sim_target, server = await stack.enter_async_context(_simulated_target(merged))
            target = sim_target
            sim_profile = server.profile.model_dump()
        assert target is not None
        chosen = target
        transport = transport_for(chosen)  # bad options: one line, before any request
        if embedded:  # never through HTTP(S)_PROXY: a proxy elsewhere cannot reach it
            transport = dataclasses.replace(transport, direct=True)
        model: str
        tokenizer: TargetTokenizer = EstimateTokenizer()
        energy_note: str | None = None  # why energy is off, when this run decides so
        setup_warnings: list[str] = []  # for the result: what the setup changed, and why
        gate: ChatClient | None = None  # the gate's client; None: the run's own
        likelihood: asyncio.Task[Likelihood] | None = None
        # who stamps the reads: known for the library's own client, not for a caller's
        connection = transport.environment(chosen.base_url)
        if client is None:
            connection["arrival_stamps"] = arrival_stamps(chosen.base_url)
            model, identity = await identify(
                chosen,
                scenario.timeouts.connect_s + 20,
                transport,
                connect_s=scenario.timeouts.connect_s,
            )
            client = await stack.enter_async_context(
                AiohttpChatClient(
                    chosen.base_url,
                    connections=max(c.concurrency for c in scenario.cells()),
                    transport=transport,
                    timeouts=scenario.timeouts,
                )
            )
            if scenario.gate != "off":  # its own connections, each request capped
                gate = await stack.enter_async_context(
                    gate_client(chosen, scenario.timeouts, transport)
                )
            # The likelihood probe (one request, which never raises) goes out now and is
            # awaited after the correctness gate's first pass, before any window opens (the
            # server's counters never see it): the tokenizer probe, the sizing and the gate
            # go meanwhile. An error of the tokenizer probe reaches the caller as itself (a
            # TargetError is one line and exit 4 at the CLI).
            likelihood = await _probe_in_background(
                stack, chosen.base_url, model, transport, scenario.timeouts.turn_s
            )
            found = await _probe_tokenizer(scenario, target.root_url, model, transport)
            if found is not None:
                tokenizer = await stack.enter_async_context(found)
        else:
            model, identity = chosen.model or "fake", ServerIdentity()
            # Nothing is asked of the target: the result says what that turned off.
            off = [
                f"the target was not asked for its models (model {model!r}) or its "
                "tokenizer (prompts sized by tiktoken's estimate)"
            ]
            if scenario.gate == "report":
                scenario = scenario.model_copy(update={"gate": "off"})
                off.append("the correctness gate was not sent (gate 'report' became 'off')")
            if telemetry is None:
                telemetry = TelemetryOptions(metrics=False, energy="off")
                energy_note = "client= replaced the HTTP client"
                off.append("server metrics and energy were not read")
            if not isinstance(client, AiohttpChatClient):
                off.append("the likelihood probe was not sent")
            replaced = "client= replaced the HTTP client: " + "; ".join(off)
            log.warning("%s", replaced)
            setup_warnings.append(replaced)
            if isinstance(client, AiohttpChatClient):  # a real target (not a test's fake client)
                likelihood = await _probe_in_background(
                    stack, chosen.base_url, model, transport, scenario.timeouts.turn_s
                )
        window_telemetry = await stack.enter_async_context(
            _window_telemetry(chosen, telemetry, simulated, energy_note)
        )
        players: Callable[[Run], Players] | None = None
        replayed = None
        if trace is not None:
            replayed = trace_info(trace, scenario, exact=tokenizer.exact)
            players = functools.partial(_trace_players, trace, tokenizer)
        if sharded:
            pool = await stack.enter_async_context(await _worker_pool(workers, ray))
            players = functools.partial(
                _worker_players, pool, target=chosen, transcripts=out is not None and transcripts
            )
        writer = None
        if out is not None:
            writer = stack.enter_context(RecordWriter(out / RECORDS_FILE))
        transcript_writer = None
        if out is not None and transcripts:
            transcript_writer = stack.enter_context(TranscriptWriter(out / TRANSCRIPTS_FILE))
        log.info(
            "run of %s: %d cells × %d repetitions against %s (model %s)%s",
            scenario.name,
            len(scenario.cells()),
            scenario.repetitions.warmup + scenario.repetitions.measured,
            "the embedded simulated server" if embedded else transport.redact(chosen.base_url),
            model,
            f", {workers} worker processes" if sharded else "",
        )
        result = await Run(
            scenario=scenario,
            setup=RunSetup(
                client=client,
                model=model,
                tokenizer=tokenizer,
                target_info=TargetInfo(
                    base_url=chosen.base_url,
                    model=model,
                    simulated=simulated,
                    simulator_profile=sim_profile,
                    server=identity,
                    kv_capacity_tokens=chosen.kv_capacity_tokens,
                    kv_block_tokens=chosen.kv_block_tokens if chosen.kv_capacity_tokens else None,
                    insecure=chosen.insecure and chosen.base_url.startswith("https"),
                ),
                telemetry=window_telemetry,
                gate_client=gate,
                likelihood=likelihood,
                connection=connection,
                warnings=tuple(setup_warnings),
            ),
            output=RunOutput(
                out=out,
                writer=writer,
                transcripts=transcript_writer,
                on_record=on_record,
                label=label,
                note=note,
            ),
            stopping=Stopping(stop if stop is not None else asyncio.Event(), stop_grace_s),
            replay=recording,
            players=players,
            trace=replayed,
        ).execute()
        log.info(
            "run of %s finished: %s, %d records%s",
            scenario.name,
            "complete" if result.complete else "stopped early",
            len(result.records),
            f", saved in {out}" if out is not None else "",
        )
        return result
    raise AssertionError("unreachable")  # pragma: no cover


def run(
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
    stop: asyncio.Event | None = None,
    stop_grace_s: float = 30.0,
    overwrite: bool = False,
    transcripts: bool = True,
    replay: str | Path | None = None,
    workers: int = 1,
    ray: str | None = None,
    trace: str | Path | MooncakeTrace | None = None,
    slo: Slo | str | None = None,
) -> RunResult:
    """:func:`run_async` for code without an event loop: the same arguments, the same result.

        result = workloads.run("five-user-coding", out_dir="runs/a")
        print(result.summary.run.aggregate_rate)

    It starts an event loop of its own. Where one is already running in this thread
    (Jupyter, an async harness), the run gets a loop in a thread of its own and this call
    waits for it (your loop is blocked meanwhile); ``on_record`` is then called in that
    thread, and may set ``stop``. Ctrl-C, or a cancellation of the task that called, cancels
    the run: its turns in flight are recorded ``cancelled`` and the partial result is saved
    before the interruption propagates. Inside an event loop ``await run_async(...)`` keeps
    the loop running and takes objects bound to it (a ``client``, a ``stop`` event).
    """
    return run_loop(
        run_async(
            scenario,
            target,
            out_dir=out_dir,
            label=label,
            note=note,
            sim=sim,
            on_record=on_record,
            client=client,
            telemetry=telemetry,
            stop=stop,
            stop_grace_s=stop_grace_s,
            overwrite=overwrite,
            transcripts=transcripts,
            replay=replay,
            workers=workers,
            ray=ray,
            trace=trace,
            slo=slo,
        )
    )


def _check_options(
    *,
    fleet: bool,
    target: Target | None,
    sim: dict[str, Any] | None,
    workers: int,
    ray: str | None,
    client: ChatClient | None,
    replay: str | Path | None,
    trace: str | Path | MooncakeTrace | None,
    stop_grace_s: float,
) -> None:
    """Arguments of :func:`run_async` out of range or that cannot work together, refused
    before anything starts; worded as a caller writes them (the CLI rewords them with its
    flags)."""
    # A number in a string ("3", as read from a config or environment) is still no count:
    # named, not a TypeError from a comparison.
    if isinstance(workers, bool) or not isinstance(workers, int):
        raise OptionsError(
            f"workers={workers!r}: give a whole number of processes, 1 or more, e.g. workers=3",
            option="workers",
        )
    if workers < 1:
        raise OptionsError(f"workers={workers}: give 1 or more processes", option="workers")
    if sim and target is not None:  # ignored silently before: the run went to the target
        raise OptionsError(
            f"sim={sim!r} sets the embedded simulator's profile and cannot change the "
            f"target {target.base_url}; drop sim=, or drop the target to run the simulator",
            option="sim",
        )
    if isinstance(stop_grace_s, bool) or not isinstance(stop_grace_s, int | float):
        raise OptionsError(
            f"stop_grace_s={stop_grace_s!r}: give seconds as a number, 0 or more",
            option="stop_grace_s",
        )
    if not stop_grace_s >= 0:  # NaN too
        raise OptionsError(
            f"stop_grace_s={stop_grace_s}: give seconds, 0 or more", option="stop_grace_s"
        )
    sharding = ", ".join(
        [
            *([f"workers={workers}"] if workers > 1 else []),
            *([f"ray={ray!r}"] if ray is not None else []),
        ]
    )
    if sharding and client is not None:
        raise OptionsError(
            f"client= cannot be combined with {sharding}: worker processes send with HTTP "
            "clients of their own; a client= replacement sends from this process "
            "(workers=1)",
            option="client",
        )
    if sharding and replay is not None:
        raise OptionsError(
            f"replay={str(replay)!r} cannot be combined with {sharding}: a replay sends from "
            "this process (workers=1)",
            option="replay",
        )
    if fleet and (sharding or replay is not None or trace is not None):
        shown = trace.path if isinstance(trace, MooncakeTrace) else trace
        option, what = (
            ("workers", sharding)
            if sharding
            else ("replay", f"replay={str(replay)!r}")
            if replay is not None
            else ("trace", f"trace={str(shown)!r}")
        )
        raise OptionsError(
            f"{what} cannot be combined with the scenario's fleet: a fleet plays from this "
            "process (workers=1) and draws its own sessions",
            option=option,
        )
    if trace is not None and (sharding or replay is not None):
        shown = trace.path if isinstance(trace, MooncakeTrace) else trace
        raise OptionsError(
            f"trace={str(shown)!r} cannot be combined with "
            f"{sharding or f'replay={str(replay)!r}'}: a trace replay sends from this "
            "process (workers=1) and plays the trace, not a recorded run",
            option="trace",
        )


async def _worker_pool(workers: int, ray: str | None) -> WorkerPool:
    if ray is None:
        return WorkerPool(workers)
    from workloads.runner.workers.ray_actors import ray_pool  # the ray extra, only when asked

    return await ray_pool(ray, workers)


def _worker_players(
    pool: WorkerPool, run: Run, *, target: Target, transcripts: bool
) -> WorkerPlayers:
    return WorkerPlayers(pool, run, target=target, transcripts=transcripts)


async def _probe_in_background(
    stack: AsyncExitStack, base_url: str, model: str, transport: Transport, timeout_s: float
) -> asyncio.Task[Likelihood]:
    """The likelihood probe, sent now and awaited later (runner/cells.py: after the gate's
    first pass); a run that ends before it was awaited cancels it on the way out."""
    probe = asyncio.ensure_future(
        measure_likelihood(base_url, model, transport=transport, timeout_s=timeout_s)
    )

    async def cancel() -> None:
        if not probe.done():
            probe.cancel()
            await asyncio.wait({probe})

    stack.push_async_callback(cancel)
    return probe


async def _probe_tokenizer(
    scenario: Scenario, root_url: str, model: str, transport: Transport
) -> VllmTokenizer | LlamaCppTokenizer | None:
    """The target's own tokenizer where the scenario asks for it (``tokenizer = "auto"``)."""
    if scenario.tokenizer != "auto":
        return None
    return await probe_tokenizer(
        root_url,
        model,
        transport=transport,
        template_kwargs=scenario.extra_body.get("chat_template_kwargs"),
    )


def _trace_players(trace: MooncakeTrace, tokenizer: TargetTokenizer, run: Run) -> TracePlayers:
    return TracePlayers(
        trace=trace,
        tokenizer=tokenizer,
        sizings=run.measured.sizings,
        corpus=run.measured.corpus,
        entropy=run.entropy,
        io=run.io,
        stopping=run.stopping,
        monitor=run.monitor,
    )


def _window_telemetry(
    target: Target,
    options: TelemetryOptions | None,
    simulated: bool,
    energy_note: str | None = None,
) -> WindowTelemetry:
    options = options or TelemetryOptions()
    energy, note = energy_for_target(options.energy, base_url=target.base_url, simulated=simulated)
    return WindowTelemetry(
        dataclasses.replace(options, energy=energy),
        metrics_url=options.metrics_url or target.root_url + "/metrics",
        transport=transport_for(target),
        energy_note=energy_note or note,
    )
