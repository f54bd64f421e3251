"""``capacity``: the highest concurrency (or arrival rate) at which session goodput stays at
or above a goal, searched by runs of a scenario (:mod:`workloads.runner.capacity`)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import time
from pathlib import Path
from typing import Any

from workloads.cli.common import (
    EXIT_OK,
    UsageError,
    check_target_flags,
    launch,
    make_console,
    override_arguments,
    parse_assignments,
    slo_argument,
    slo_option,
    target_arguments,
)
from workloads.cli.help import CAPACITY_EPILOG, command_parser
from workloads.model.errors import OutputError
from workloads.wire.loop import run_loop

__all__ = ["add_capacity_parser", "cmd_capacity"]


def add_capacity_parser(sub: Any) -> None:
    """The ``capacity`` subcommand and its flags."""
    cap = command_parser(sub, "capacity", epilog=CAPACITY_EPILOG)
    cap.add_argument("scenario", help="packaged scenario name or path to a .toml file")
    slo_argument(
        cap, "the SLO each request is judged by (required unless the scenario has an [slo] table)"
    )
    target_arguments(cap, "for the search, and stop it after")
    cap.add_argument(
        "--goal",
        type=float,
        default=95.0,
        metavar="PERCENT",
        help="session goodput to keep (default: %(default)s)",
    )
    cap.add_argument(
        "--start",
        type=float,
        metavar="LOAD",
        help="the first load measured: a concurrency, or an arrival rate for an "
        "open-loop scenario (default: the scenario's)",
    )
    cap.add_argument(
        "--max-load",
        type=float,
        metavar="LOAD",
        help="the highest load tried (default: 4096 sessions; with --launch, "
        "the server's slots: 16)",
    )
    cap.add_argument(
        "--max-points",
        type=int,
        default=12,
        metavar="N",
        help="loads measured at most (default: %(default)s)",
    )
    cap.add_argument(
        "--repetitions",
        type=int,
        default=3,
        metavar="N",
        help="measured repetitions per run of a load; an undecided load runs "
        "N more (default: %(default)s, at least 3)",
    )
    cap.add_argument(
        "--max-repetitions",
        type=int,
        default=30,
        metavar="N",
        help="repetitions per load at most; a load still undecided is 'cannot "
        "tell', treated as not meeting (default: %(default)s)",
    )
    cap.add_argument(
        "--max-minutes",
        type=float,
        default=60.0,
        metavar="MINUTES",
        help="wall time of the whole search, checked between runs (default: %(default)s)",
    )
    override_arguments(cap)
    cap.add_argument(
        "--out",
        metavar="DIR",
        help="directory for capacity.json, capacity.png and each run "
        "under points/ (below; default: runs/capacity-NAME-YYYYmmdd-HHMMSS)",
    )
    cap.add_argument(
        "--overwrite", action="store_true", help="replace a capacity.json already in --out"
    )
    cap.add_argument("--no-plots", action="store_true", help="do not write capacity.png")
    cap.set_defaults(func=cmd_capacity)


def _limits(args: argparse.Namespace) -> Any:
    from workloads.model.errors import OptionsError
    from workloads.runner.capacity import CapacityLimits

    if args.start is not None and args.max_load is not None and args.start > args.max_load:
        raise UsageError(
            f"--start {args.start:g} is above --max-load {args.max_load:g}: the search "
            "measures no load above --max-load"
        )
    if not 0.0 < args.goal < 100.0:
        raise UsageError(f"--goal {args.goal:g}: give a percentage between 0 and 100")
    limits = CapacityLimits(
        max_points=args.max_points,
        batch=args.repetitions,
        max_repetitions=args.max_repetitions,
        max_seconds=args.max_minutes * 60,
        max_load=args.max_load if args.max_load is not None else (16 if args.launch else None),
    )
    try:
        limits.check()
    except OptionsError as err:
        raise UsageError(
            f"--max-points {args.max_points}, --repetitions {args.repetitions}, "
            f"--max-repetitions {args.max_repetitions}, --max-load: {err}"
        ) from err
    return limits


def cmd_capacity(args: argparse.Namespace) -> int:
    import workloads
    from workloads.report import goodput as report

    console = make_console()
    scenario = workloads.load_scenario(args.scenario).with_overrides(args.set or [])
    slo = slo_option(args.slo) or scenario.slo
    if slo is None:
        raise UsageError(
            f"capacity needs an SLO: give --slo (e.g. --slo ttft_s=2,itl_ms=50) "
            f"or an [slo] table in {args.scenario}"
        )
    if args.sim and (args.target or args.launch):
        raise UsageError(
            "--sim sets the embedded simulator's profile; drop it with --target or --launch"
        )
    if args.target and args.launch:
        raise UsageError("give --target (a running server) or --launch (start one), not both")
    check_target_flags(args)
    limits = _limits(args)
    out = (
        Path(args.out)
        if args.out
        else Path("runs") / (f"capacity-{scenario.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    )
    if (out / "capacity.json").exists() and not args.overwrite:
        raise UsageError(
            f"{out / 'capacity.json'} exists; choose another --out, or pass --overwrite"
        )
    word = "arrival rate" if scenario.pacing.mode == "arrivals" else "concurrency"
    console.print(
        f"capacity of {scenario.name}: the highest {word} keeping session goodput "
        f"≥ {args.goal:g}% at {slo.describe()}"
    )

    def on_point(p: Any) -> None:
        load = f"{p.load:g}/s" if word == "arrival rate" else f"C{p.load:g}"
        interval = "" if p.low is None else f" [{p.low:.0%}–{p.high:.0%}]"
        share = "—" if p.session_share is None else f"{p.session_share:.0%}"
        still = " (measuring more)" if p.verdict == "cannot tell" else ""
        console.print(
            f"  {load}: session goodput {share}{interval} over "
            f"{p.repetitions} repetitions: {p.verdict}{still}"
        )

    target = None
    if args.target:
        target = workloads.Target(
            args.target,
            args.model,
            api_key_env=args.api_key_env,
            proxy=args.proxy,
            ca_bundle=args.ca_bundle,
            insecure=args.insecure,
        )
    with contextlib.ExitStack() as stack:
        if args.launch:
            from workloads.servers.llamacpp import context_per_slot

            assert limits.max_load is not None
            target = stack.enter_context(
                launch(
                    args.launch,
                    console,
                    parallel=int(limits.max_load),
                    context_per_slot=context_per_slot(scenario),
                )
            )
        result, signum = run_loop(
            _until_signal(
                dict(
                    scenario=scenario,
                    target=target,
                    slo=slo,
                    goal=args.goal / 100,
                    start=args.start,
                    sim=parse_assignments(args.sim or [], "--sim") or None,
                    out_dir=out,
                    overwrite=args.overwrite,
                    limits=limits,
                    on_point=on_point,
                ),
                console,
            )
        )
    console.print()
    for block in report.capacity_blocks(result):
        console.print(block)
    console.print(f"saved {out / 'capacity.json'} (each run under {out / 'points'})")
    if not args.no_plots:
        try:
            written = report.capacity_plot(result, out / "capacity.png")
        except OutputError as err:  # a full disk after the search: the file (exit 6)
            raise OutputError(
                f"{err}; capacity.json and the runs are saved", path=err.path, errno=err.errno
            ) from err
        except OSError as err:
            raise OutputError.writing(
                out / "capacity.png", err, then="; capacity.json and the runs are saved"
            ) from err
        console.print(
            f"plot: {written}"
            if written is not None
            else "no plot: install the plots extra (pip install 'workloads[plots]')"
        )
    if signum is not None:  # what was measured is reported and saved, but the search was cut
        console.print(f"stopped by {signal.Signals(signum).name}; exit {128 + signum}")
        return 128 + signum
    return EXIT_OK  # "not found" is an answer too: the report says it


async def _until_signal(options: dict[str, Any], console: Any) -> tuple[Any, int | None]:
    """The search, ended gracefully by SIGINT or SIGTERM: the run in flight stops as a run
    does, no new one starts, and what was measured is saved. Returns the result and the
    first signal, if any."""
    from workloads.runner.capacity import capacity_async

    stop = asyncio.Event()
    signals: list[int] = []
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        signals.append(signum)
        console.print(
            f"{signal.Signals(signum).name}: stopping the search after this run's turns in flight"
        )
        stop.set()

    installed = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, on_signal, signum)
            installed.append(signum)
    try:
        result = await capacity_async(**options, stop=stop)
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)
    return result, signals[0] if signals else None
