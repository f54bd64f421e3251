"""``list`` (also ``scenarios``), ``show``, ``compare``, ``probe`` and ``serve``."""

from __future__ import annotations

import argparse
import contextlib
import errno
import sys
import threading
from pathlib import Path
from typing import Any

from workloads.cli.common import (
    UsageError,
    check_target_flags,
    make_console,
    open_target,
    parse_assignments,
    print_table,
    slo_option,
    write_plots,
)
from workloads.cli.run import print_failures
from workloads.model.errors import ScenarioError
from workloads.wire.loop import run_loop


def cmd_list(args: argparse.Namespace) -> int:
    import workloads
    from workloads.report.console import scenarios_table

    names = sorted(workloads.list_scenarios())
    make_console().print(scenarios_table([workloads.load_scenario(n) for n in names]))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from workloads.core.load import load_result
    from workloads.report import console as report
    from workloads.report.export import export

    where = Path(args.result)
    if (where / "capacity.json").exists() and not (where / "result.json").exists():
        from workloads.model.capacity import load_capacity
        from workloads.report.export import export_capacity
        from workloads.report.goodput import capacity_blocks, capacity_plot

        if args.slo:
            raise UsageError(
                f"{where} is a capacity search, judged at its own SLO: --slo applies to a run"
            )
        searched = load_capacity(where)
        if args.format != "text":
            sys.stdout.write(export_capacity(searched, args.format))
            return 0
        console = make_console()
        for block in capacity_blocks(searched):
            console.print(block)
        if args.plots:
            written = capacity_plot(searched, where / "capacity.png")
            console.print(
                f"plot: {written}"
                if written is not None
                else "no plot: install the plots extra (pip install 'workloads[plots]')"
            )
        return 0
    result = load_result(args.result)  # the file's summaries are a cache: from the records
    if (slo := slo_option(args.slo)) is not None:  # judge the saved run by another SLO
        from workloads.core.aggregate import summarized

        result = summarized(
            result.model_copy(update={"scenario": result.scenario.model_copy(update={"slo": slo})})
        )
    directory = where if where.is_dir() else where.parent
    for note in report.records_notes(result, directory / "records.jsonl"):
        print(f"warning: {note}", file=sys.stderr)
    if args.format != "text":
        sys.stdout.write(export(result, args.format))
        return 0
    console = make_console()
    console.print(report.render(result))
    print_failures(result, console)
    if args.plots:
        write_plots(result, directory / "plots", console, wanted=True)
    return 0


def completions(directory: str) -> Any:
    """A run directory's completion texts by (cell, repetition, session, turn), or None when
    it has no transcripts (then identity gives counts but not positions)."""
    from workloads.model.errors import ResultFormatError
    from workloads.model.transcripts import TRANSCRIPTS_FILE, read_transcripts

    where = Path(directory)
    path = (where if where.is_dir() else where.parent) / TRANSCRIPTS_FILE
    try:
        return {k: t.completion for k, t in read_transcripts(path).items()}
    except ResultFormatError:
        return None


def cmd_compare(args: argparse.Namespace) -> int:
    from workloads.cli.common import EXIT_INVALID_RUN
    from workloads.core.load import load_result
    from workloads.report.compare import compare, comparison_lines, comparison_table

    a, b = load_result(args.a), load_result(args.b)
    result = compare(
        a,
        b,
        force=args.force,
        variable=args.variable,
        min_effect=args.min_effect / 100,
        completions_a=completions(args.a),
        completions_b=completions(args.b),
    )
    console = make_console()
    name_a, name_b = a.label or str(args.a), b.label or str(args.b)
    for line in comparison_lines(result, name_a, name_b):
        console.print(line)
    console.print(comparison_table(result, min_effect=args.min_effect / 100))
    if args.plot:
        from workloads.report.compare_plot import compare_plot

        written = compare_plot(result, args.plot, name_a=name_a, name_b=name_b)
        console.print(
            f"plot: {written}"
            if written is not None
            else "no plot: install the plots extra (pip install 'workloads[plots]')"
        )
    # An invalid or incomplete arm: the figures are printed, no verdict is given (exit 5).
    return EXIT_INVALID_RUN if result.withheld else 0


def cmd_probe(args: argparse.Namespace) -> int:

    from rich.console import Console

    from workloads.probe.observe import probe, render

    # With --json, stdout carries only the JSON; what happens on the way goes to stderr.
    console = Console(stderr=True, markup=False) if args.json else make_console()
    if args.target and args.launch:
        raise ScenarioError("give --target (a running server) or --launch (start one), not both")
    if args.sim and args.target:
        raise UsageError(
            "--sim sets the embedded simulator's profile and cannot change a "
            "--target server; drop --sim, or drop --target to probe the simulator"
        )
    check_target_flags(args)
    with contextlib.ExitStack() as stack:
        # One slot: the repeated prompt of the cache check lands where the first one did.
        target = open_target(
            args,
            stack,
            console,
            doing=("probing", "probes"),
            parallel=1,
            context_per_slot=2048,
        )
        if args.model and not args.target:
            console.print("--model is only used with --target; ignoring it")
        if args.sim and (args.target or args.launch):
            console.print("--sim is only used with the embedded simulator; ignoring it")
        report = run_loop(probe(target, timeout_s=args.timeout, metrics_url=args.metrics_url))
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        print_table(console, render(report))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:

    from workloads.servers.simulated import SimulatedServer, get_profile

    profile = get_profile(args.profile, parse_assignments(args.sim or [], "--sim"))
    server = SimulatedServer(profile, host=args.host, port=args.port, debug=args.debug)
    try:
        server.start()
    except OSError as err:
        if err.errno != errno.EADDRINUSE:
            raise
        raise UsageError(
            f"port {args.port} on {args.host} is in use; choose another with "
            "--port (--port 0 picks a free one)"
        ) from err
    print(
        f"simulated server ({profile.name}) serving {profile.model} at {server.base_url} "
        f"· KV {profile.num_blocks * profile.block_size:,} tokens"
        + (f" · {profile.spec_tokens} draft tokens" if profile.spec_tokens else "")
    )
    print("Ctrl-C to stop", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0
