"""run() and run_async(): the public entry. Sets up what a run needs (the simulated server
when no target is given, the model check, the HTTP client, the target's tokenizer, window
telemetry, the records file), then hands over to :class:`~workloads.runner.cells.Run`.

A run has one cell per sweep coordinate (concurrency × prior depth; one cell without sweep
axes). Each cell runs its own warm-up and measured repetitions and has its own window.

    result = workloads.run("five-user-coding")                       # simulated server
    result = workloads.run("five-user-coding", target=Target("http://gpu:8000/v1", "m"))
    result = await workloads.run_async(scenario, target=target)     # inside an event loop
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from workloads.core import tokens
from workloads.core.tokens import EstimateTokenizer, TargetTokenizer
from workloads.model.records import RecordWriter, TurnRecord
from workloads.model.results import RECORDS_FILE, RESULT_FILE, RunResult, ServerIdentity, TargetInfo
from workloads.model.scenario import Scenario, load_scenario
from workloads.model.target import Target
from workloads.runner.cells import Run
from workloads.telemetry import TelemetryOptions, WindowTelemetry, energy_for_target
from workloads.wire.client import AiohttpChatClient, ChatClient
from workloads.wire.identify import identify
from workloads.wire.tokenize import probe_tokenizer

__all__ = ["run", "run_async"]


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
    # tiktoken's tables take 0.3 s to load (seconds on a busy machine): load them off the event
    # loop now, not on it in the middle of the first sessions' sizing.
    await asyncio.to_thread(tokens.encoding)
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        for name in (RESULT_FILE, RECORDS_FILE):
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
                    timeouts=scenario.timeouts,
                )
            )
            if scenario.tokenizer == "auto":
                found = await probe_tokenizer(
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
        return await Run(
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
