"""``run``: a scenario against a target, stopped gracefully by SIGINT/SIGTERM, with an exit
code scripts can trust."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

from workloads.cli.common import (
    EXIT_FAILED_TURNS,
    EXIT_INVALID_RUN,
    EXIT_OK,
    StoppedByTerm,
    UsageError,
    check_target_flags,
    launch,
    make_console,
    parse_assignments,
    slo_option,
    workers_count,
    write_plots,
)
from workloads.model.errors import OutputError, ScenarioError
from workloads.wire.loop import run_loop


def run_scenario(args: argparse.Namespace) -> Any:
    """The scenario ``run`` runs: the named one with --set, or with --replay the recorded
    run's own (--set would change the workload the replay re-sends)."""
    import workloads

    gate = [f"gate={args.gate}"] if args.gate else []
    if args.trace:
        if args.replay:
            raise ScenarioError("--trace replays a trace, --replay a recorded run: give one")
        return workloads.load_scenario(args.scenario or "trace-replay").with_overrides(
            [*(args.set or []), *gate]
        )
    if args.replay:
        if args.scenario or args.set:
            raise ScenarioError(
                "--replay runs the recorded run's scenario: give no scenario name and no --set"
            )
        from workloads.runner.replay import load_recording

        # Read it all now, transcripts included: a directory that cannot be replayed is one
        # error line before anything starts.
        return load_recording(args.replay).result.scenario.with_overrides(gate)
    if not args.scenario:
        raise ScenarioError(
            "give a scenario name or path (python -m workloads list "
            "lists them), --replay RUN_DIR or --trace FILE"
        )
    return workloads.load_scenario(args.scenario).with_overrides([*(args.set or []), *gate])


def cmd_run(args: argparse.Namespace) -> int:
    import workloads

    console = make_console()
    scenario = run_scenario(args)
    trace = None
    if args.trace:  # read and checked whole before --out exists: bad input is one line
        gate = [f"gate={args.gate}"] if args.gate else []
        trace, scenario = read_trace(
            args.trace, scenario, named=bool(args.scenario), sets=[*(args.set or []), *gate]
        )
        if trace is not None:
            from workloads.runner.trace import trace_scenario

            scenario = trace_scenario(scenario, trace)
    sim = parse_assignments(args.sim or [], "--sim")
    from workloads.telemetry import TelemetryOptions

    telemetry = TelemetryOptions(
        metrics=args.metrics_url != "off",
        metrics_url=None if args.metrics_url in (None, "off") else args.metrics_url,
        energy=args.energy,
    )
    target = None
    if args.target and args.launch:
        raise ScenarioError("give --target (a running server) or --launch (start one), not both")
    check_run_flags(args)
    if sim:  # every field checked now, before any folder or server exists: one line
        from workloads.servers.simulated.profiles import sim_profile

        sim_profile(sim)
    if args.target:
        target = workloads.Target(
            args.target,
            args.model,
            api_key_env=args.api_key_env,
            kv_capacity_tokens=args.kv_capacity,
            kv_block_tokens=args.kv_block,
            proxy=args.proxy,
            ca_bundle=args.ca_bundle,
            insecure=args.insecure,
        )
    elif args.model:
        console.print("--model is only used with --target; ignoring it")
    workers = workers_count(
        args.workers, max(c.concurrency for c in scenario.cells()), ray=args.ray is not None
    )
    if (args.replay or args.trace) and args.workers == "auto":
        workers = 1  # replay and trace replay send from one process
    elif (
        args.workers == "auto"
        and args.ray is None
        and (line := auto_workers_line(workers, scenario)) is not None
    ):
        console.print(line)  # said where a run wants more than one process
    from workloads.runner.outdir import check_out_dir, new_run_dir

    fresh = None
    if args.out:
        out = Path(args.out)
        check_out_dir(out, overwrite=args.overwrite)  # before starting anything: one line
    else:  # a folder of its own, even for runs started in the same second
        name = trace.path.stem if trace is not None else scenario.name
        fresh = new_run_dir(Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}")
        out = fresh.path
    try:
        return run_into(
            out,
            args,
            console=console,
            scenario=scenario,
            target=target,
            sim=sim,
            telemetry=telemetry,
            workers=workers,
            trace=trace,
        )
    finally:
        if fresh is not None:
            fresh.discard()  # only if still empty: the run never started


def auto_workers_line(workers: int, scenario: Any) -> str | None:
    """What --workers auto chose and why, where the sessions want more than one process:
    their share, capped by the cores this process may use (None for smaller runs)."""
    from workloads.runner.workers.pool import SESSIONS_PER_WORKER, usable_cpus

    concurrency = max(c.concurrency for c in scenario.cells())
    wanted = -(-concurrency // SESSIONS_PER_WORKER)
    if wanted <= 1:
        return None
    cores, why = usable_cpus()
    chose = "this process alone" if workers == 1 else f"{workers} worker processes"
    return (
        f"--workers auto: {chose} for {concurrency} concurrent sessions (one process per "
        f"{SESSIONS_PER_WORKER}: {wanted}; at most one per core this process may use: "
        f"{cores}, {why})"
    )


def run_into(
    out: Path,
    args: argparse.Namespace,
    *,
    console: Any,
    scenario: Any,
    target: Any,
    sim: dict[str, Any],
    telemetry: Any,
    workers: int,
    trace: Any,
) -> int:
    """The run itself, into ``out`` (checked or made), then its report; the exit code."""
    from workloads.live import LiveProgress
    from workloads.report import console as report

    with LiveProgress(scenario, console, quiet=args.quiet) as live:
        on_record = live.on_record
        try:
            with contextlib.ExitStack() as stack:
                if args.launch:
                    from workloads.servers.llamacpp import context_per_slot

                    target = stack.enter_context(
                        launch(
                            args.launch,
                            console,
                            parallel=max(c.concurrency for c in scenario.cells()),
                            context_per_slot=context_per_slot(scenario),
                        )
                    )
                result, signum = run_loop(
                    run_until_signal(
                        dict(
                            scenario=scenario,
                            target=target,
                            out_dir=out,
                            label=args.label,
                            note=args.note,
                            sim=sim or None,
                            on_record=on_record,
                            telemetry=telemetry,
                            overwrite=args.overwrite,
                            transcripts=not args.no_transcripts,
                            replay=args.replay,
                            workers=workers,
                            ray=args.ray,
                            trace=trace,
                            slo=slo_option(args.slo),
                        ),
                        grace_s=args.grace,
                        console=console,
                    )
                )
        except KeyboardInterrupt as err:  # Ctrl-C (or SIGTERM with --launch) before the
            # run's own handlers were in place
            signum = err.signum if isinstance(err, StoppedByTerm) else signal.SIGINT
            if (out / "records.jsonl").exists():
                notice = f"interrupted: every turn measured so far is in {out}/records.jsonl"
            else:
                notice = "interrupted before the run started: nothing was written"
            print(notice, file=sys.stderr)
            return 128 + signum
    if result is None:  # a second signal cut the grace short: the saved partial result
        from workloads.core.load import load_result

        result = load_result(out)
    if signum is not None and (early := report.stopped_early(result)) is not None:
        # Nothing measured to report: one line, not a report of empty tables.
        console.print(
            f"stopped by {signal.Signals(signum).name} {early}: nothing to report; "
            f"records in {out} (exit {128 + signum})"
        )
        return 128 + signum
    console.print(report.render(result))
    console.print(f"saved {out / 'result.json'} and {out / 'records.jsonl'}")
    try:
        write_plots(result, out / "plots", console, wanted=not args.no_plots)
        write_html(result, out, console, with_plots=not args.no_plots)
    except OutputError as err:  # a full disk after the run: the file it names, what is kept
        raise OutputError(
            f"{err}; the result and records are saved", path=err.path, errno=err.errno
        ) from err
    except OSError as err:
        raise OutputError.writing(
            err.filename or out,
            err,
            name=None if err.filename else f"the report into {out}",
            then="; the result and records are saved",
        ) from err
    return run_exit_code(result, signum, args.max_error_rate, console)


def read_trace(
    name: str, scenario: Any, *, named: bool, sets: list[str] | None = None
) -> tuple[Any, Any]:
    """The trace ``run --trace`` replays, read within the scenario's limits, and the scenario
    to run. A Mooncake trace: (the trace, the scenario). An agent trace (the project's
    per-step format, or a published one: WEKA, TraceLab, AIPerf multi-turn): (None, the
    scenario with ``agent.trace`` set, one session per trace session), the scenario being
    ``coding-agents`` with ``sets`` (the --set and --gate assignments) unless one was named.
    A --set of what the trace decides (``users``, ``turns``) is refused, never dropped."""
    import workloads
    from workloads.core.agent_traces import any_format, load_published
    from workloads.core.traces import load_agent_trace
    from workloads.runner.trace import find_trace
    from workloads.runner.trace import read_trace as read

    path = find_trace(name)
    kind = any_format(path, max_bytes=scenario.trace.max_bytes)
    decided = ["users", "turns"]
    if kind == "mooncake":
        decided += ["opening_tokens", "turn_tokens", "output_tokens"]
    for assignment in sets or []:
        key = assignment.partition("=")[0].strip()
        if key in decided:
            raise ScenarioError(
                f"--set {assignment}: the trace {path.name} sets {key} (a {kind} trace "
                f"decides {', '.join(decided)}); drop it"
            )
    if kind == "mooncake":
        return read(path, scenario.trace), scenario
    base = (
        scenario
        if named
        else workloads.load_scenario("coding-agents")
        .model_copy(update={"fleet": None})  # the trace's sessions, not a fleet's
        .with_overrides(sets or [])
    )
    if base.agent is None:
        raise ScenarioError(
            f"--trace {path}: an agent trace plays on a scenario with an "
            "[agent] section (coding-agents, the default, has one)"
        )
    from workloads.model.scenario import nominal

    where = [f"agent.trace={json.dumps(str(path.resolve()))}"]
    if kind == "agent":
        plans = load_agent_trace(
            path,
            nominal(base.opening_tokens),
            system_tokens=base.shared_prefix_tokens or 0,
            max_bytes=scenario.trace.max_bytes,
        )
        if not plans:
            raise ScenarioError(f"--trace {path}: no steps")
        users, turns = len(plans), max(len(p) for p in plans.values())
        return None, base.with_overrides([f"users={users}", f"turns={turns}", *where])
    published = load_published(path, max_bytes=scenario.trace.max_bytes)
    plans = [s.plan for s in published.sessions]
    # Each session opens at its own recorded size; the prefix every session sends is the
    # smallest opening's (less room for a nonce line), so no opening is cut below it.
    smallest = min(p[0].prior_tokens for p in plans)
    shared = f"shared_prefix_tokens={smallest - 64}" if smallest >= 1024 else None
    update = {"shared_prefix_tokens": None} if shared is None else {}
    return None, base.model_copy(update=update).with_overrides(
        [
            f"users={len(plans)}",
            f"turns={max(len(p) for p in plans)}",
            f"opening_tokens={smallest}",
            *([shared] if shared else []),
            *where,
        ]
    )


def check_run_flags(args: argparse.Namespace) -> None:
    """Flag combinations that cannot work, refused before anything starts."""
    if args.sim and args.target:
        raise UsageError(
            "--sim sets the embedded simulator's profile and cannot change a "
            "--target server; drop --sim, or drop --target to run the simulator"
        )
    if args.kv_capacity is not None and not args.target:
        raise UsageError(
            "--kv-capacity describes a --target server; the simulated server's "
            "capacity is its profile's (--sim kv_capacity_tokens=N)"
        )
    check_target_flags(args)
    if not 0.0 <= args.max_error_rate <= 1.0:
        raise UsageError(
            f"--max-error-rate {args.max_error_rate:g}: give a fraction from 0 "
            "to 1, e.g. 0.05 for 5%"
        )
    if args.grace < 0:
        raise UsageError(f"--grace {args.grace:g}: give seconds, 0 or more")
    slo_option(args.slo)  # a malformed --slo: one line, before --out exists


async def run_until_signal(
    options: dict[str, Any], *, grace_s: float, console: Any
) -> tuple[Any, int | None]:
    """The run, stopped gracefully by SIGINT or SIGTERM (the same way): no new turns, the
    ones in flight get ``grace_s`` to finish, the partial result is saved. A second signal
    cancels the turns in flight at once. Returns the result (None when a second signal cut
    it short; it is saved all the same) and the first signal, if any."""
    import workloads

    stop = asyncio.Event()
    signals: list[int] = []
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()

    def on_signal(signum: int) -> None:
        signals.append(signum)
        name = signal.Signals(signum).name
        if len(signals) == 1:  # a notice, not the report: stderr, as the error lines
            print(
                f"{name}: stopping — no new turns; turns in flight get {grace_s:g} s "
                "(send it again to cancel them now)",
                file=sys.stderr,
                flush=True,
            )
            stop.set()
        elif task is not None:
            task.cancel()

    installed = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(signum, on_signal, signum)
        except (NotImplementedError, RuntimeError, ValueError):
            continue  # not the main thread (an embedding host), or no signals here
        installed.append(signum)
    try:
        result = await workloads.run_async(**options, stop=stop, stop_grace_s=grace_s)
    except asyncio.CancelledError:
        if not signals:
            raise
        return None, signals[0]
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)
    return result, signals[0] if signals else None


def run_exit_code(result: Any, signum: int | None, max_error_rate: float, console: Any) -> int:
    """Print the failures by turn and kind; the exit code of a finished or stopped run."""
    from workloads.report.failures import failure_rate

    print_failures(result, console)
    if signum is not None and not result.complete:
        console.print(
            f"stopped by {signal.Signals(signum).name}: the result is partial "
            f"(complete: false); exit {128 + signum}"
        )
        return 128 + signum
    if signum is not None:  # it came once every turn had ended: it cut nothing short
        console.print(
            f"{signal.Signals(signum).name} came after the last turn had ended: nothing was "
            "cut short; the result is complete (complete: true) and judged as a finished run"
        )
    if result.invalid_reason:
        console.print(f"the run is invalid: {result.invalid_reason}; exit {EXIT_INVALID_RUN}")
        return EXIT_INVALID_RUN
    rate = failure_rate(result.records)
    if rate is None:
        console.print("no measured turn was recorded")
        return EXIT_FAILED_TURNS
    if rate > max_error_rate:
        console.print(
            f"{rate:.1%} of measured turns failed (allowed: --max-error-rate "
            f"{max_error_rate:g}); exit {EXIT_FAILED_TURNS}"
        )
        return EXIT_FAILED_TURNS
    return EXIT_OK


def print_failures(result: Any, console: Any) -> None:
    """The failed measured turns by turn and kind, with each kind's first message."""
    from workloads.report.failures import failures, render_failures

    rows = failures(result.records, output_tokens=result.scenario.output_tokens)
    if rows:
        console.print(render_failures(rows, sum(not r.warmup for r in result.records)))


def write_html(result: Any, directory: Path, console: Any, *, with_plots: bool) -> None:
    from workloads.report.html import write_html

    console.print(f"report: {write_html(result, directory, with_plots=with_plots)}")
