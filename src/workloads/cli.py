"""Command line: ``python -m workloads run|scenarios|show|compare|probe|serve``.

The library never prints or exits; this module does. ``main(argv) -> int`` returns the exit
code so tests call it in process.

Exit codes (scripts can rely on them):

    0    done; every measured turn valid (or the failed ones within --max-error-rate)
    1    a crash: a bug in workloads (with a traceback; please report it)
    2    bad input: arguments, scenario, --out, a result file, a refused comparison
    3    the run finished, but more measured turns failed than --max-error-rate allows
    4    the target cannot be used: unreachable, model not served, not OpenAI-compatible
    130  stopped by SIGINT (Ctrl-C), 143 stopped by SIGTERM: the partial result is saved
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import os
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from workloads.model.errors import ScenarioError, TargetError, WorkloadsError

__all__ = [
    "EXIT_BAD_INPUT", "EXIT_FAILED_TURNS", "EXIT_INVALID_RUN", "EXIT_OK", "EXIT_TARGET", "main",
]

# Exit codes scripts can trust (README, "Exit codes"): 0 only for a run whose measured turns
# were valid (or failed under --max-error-rate); 128 + N when stopped by signal N.
EXIT_OK = 0
EXIT_BAD_INPUT = 2  # a command line, scenario or --out that cannot work; a refused compare
EXIT_FAILED_TURNS = 3  # measured turns failed beyond --max-error-rate, or none was recorded
EXIT_TARGET = 4  # the target cannot be used (unreachable, model not served)
# The run completed but is invalid: its required correctness gate failed (the result is
# saved and says why).
EXIT_INVALID_RUN = 5


class UsageError(WorkloadsError):
    """A command line that cannot work (exit 2); the message names the flags."""


def _parse_assignments(items: Sequence[str], flag: str) -> dict[str, Any]:
    from workloads.model.errors import ScenarioError
    from workloads.model.scenario import parse_value

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ScenarioError(f"{flag} {item!r}: expected FIELD=VALUE")
        out[key.strip()] = parse_value(value.strip())
    return out


def _console() -> Any:
    from rich.console import Console

    # markup=False: messages carry text like "pip install 'workloads[plots]'", not styles.
    console = Console(markup=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        # Piped or captured: rich would assume 80 columns; the report's tables reflow to any
        # width, and 120 keeps the per-turn table in one block. COLUMNS=N overrides.
        console = Console(width=120, markup=False)
    return console


def _run_scenario(args: argparse.Namespace) -> Any:
    """The scenario ``run`` runs: the named one with --set, or with --replay the recorded
    run's own (--set would change the workload the replay re-sends)."""
    import workloads

    gate = [f"gate={args.gate}"] if args.gate else []
    if args.replay:
        if args.scenario or args.set:
            raise ScenarioError("--replay runs the recorded run's scenario: give no scenario "
                                "name and no --set")
        from workloads.runner.replay import load_recording

        # Read it all now, transcripts included: a directory that cannot be replayed is one
        # error line before anything starts.
        return load_recording(args.replay).result.scenario.with_overrides(gate)
    if not args.scenario:
        raise ScenarioError("give a scenario name or path (python -m workloads scenarios "
                            "lists them), or --replay RUN_DIR")
    return workloads.load_scenario(args.scenario).with_overrides([*(args.set or []), *gate])


def _cmd_run(args: argparse.Namespace) -> int:
    import workloads
    from workloads.report import console as report

    console = _console()
    scenario = _run_scenario(args)
    sim = _parse_assignments(args.sim or [], "--sim")
    from workloads.telemetry import TelemetryOptions

    telemetry = TelemetryOptions(
        metrics=args.metrics_url != "off",
        metrics_url=None if args.metrics_url in (None, "off") else args.metrics_url,
        energy=args.energy,
    )
    target = None
    if args.target and args.launch:
        raise ScenarioError("give --target (a running server) or --launch (start one), not both")
    _check_run_flags(args)
    if args.target:
        target = workloads.Target(
            args.target, args.model, api_key_env=args.api_key_env,
            kv_capacity_tokens=args.kv_capacity, kv_block_tokens=args.kv_block,
        )
    elif args.model:
        console.print("--model is only used with --target; ignoring it")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else Path("runs") / f"{scenario.name}-{stamp}"
    from workloads.live import LiveProgress
    from workloads.runner.run import claim_out_dir

    claim_out_dir(out, overwrite=args.overwrite)  # before starting anything: one clear line

    with LiveProgress(scenario, console, quiet=args.quiet) as live:
        on_record = live.on_record
        try:
            with contextlib.ExitStack() as stack:
                if args.launch:
                    from workloads.servers.llamacpp import context_per_slot

                    target = stack.enter_context(_launch(
                        args.launch, console,
                        parallel=max(c.concurrency for c in scenario.cells()),
                        context_per_slot=context_per_slot(scenario),
                    ))
                result, signum = asyncio.run(_run_until_signal(
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
                    ),
                    grace_s=args.grace,
                    console=console,
                ))
        except KeyboardInterrupt:  # Ctrl-C before the run's own handlers were in place
            console.print(f"interrupted: every turn measured so far is in {out}/records.jsonl")
            return 128 + signal.SIGINT
    if result is None:  # a second signal cut the grace short: the saved partial result
        from workloads.core.aggregate import summarized
        from workloads.model.results import load_result

        result = summarized(load_result(out))
    console.print(report.render(result))
    console.print(f"saved {out / 'result.json'} and {out / 'records.jsonl'}")
    _write_plots(result, out / "plots", console, wanted=not args.no_plots)
    _write_html(result, out, console, with_plots=not args.no_plots)
    return _run_exit_code(result, signum, args.max_error_rate, console)


def _check_run_flags(args: argparse.Namespace) -> None:
    """Flag combinations that cannot work, refused before anything starts."""
    from workloads.model.target import base_url_problem

    if args.sim and args.target:
        raise UsageError("--sim sets the embedded simulator's profile and cannot change a "
                         "--target server; drop --sim, or drop --target to run the simulator")
    if args.kv_capacity is not None and not args.target:
        raise UsageError("--kv-capacity describes a --target server; the simulated server's "
                         "capacity is its profile's (--sim kv_capacity_tokens=N)")
    if args.target and (problem := base_url_problem(args.target)) is not None:
        raise UsageError(f"--target: {problem}")
    if not 0.0 <= args.max_error_rate <= 1.0:
        raise UsageError(f"--max-error-rate {args.max_error_rate:g}: give a fraction from 0 "
                         "to 1, e.g. 0.05 for 5%")
    if args.grace < 0:
        raise UsageError(f"--grace {args.grace:g}: give seconds, 0 or more")


async def _run_until_signal(
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
        if len(signals) == 1:
            console.print(f"{name}: stopping — no new turns; turns in flight get {grace_s:g} s "
                          "(send it again to cancel them now)")
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


def _run_exit_code(result: Any, signum: int | None, max_error_rate: float, console: Any) -> int:
    """Print the failures by turn and kind; the exit code of a finished or stopped run."""
    from workloads.report.failures import failure_rate

    _print_failures(result, console)
    if signum is not None:
        console.print(f"stopped by {signal.Signals(signum).name}: the result is partial "
                      f"(complete: false); exit {128 + signum}")
        return 128 + signum
    if result.invalid_reason:
        console.print(f"the run is invalid: {result.invalid_reason}; exit {EXIT_INVALID_RUN}")
        return EXIT_INVALID_RUN
    rate = failure_rate(result.records)
    if rate is None:
        console.print("no measured turn was recorded")
        return EXIT_FAILED_TURNS
    if rate > max_error_rate:
        console.print(f"{rate:.1%} of measured turns failed (allowed: --max-error-rate "
                      f"{max_error_rate:g}); exit {EXIT_FAILED_TURNS}")
        return EXIT_FAILED_TURNS
    return EXIT_OK


def _print_failures(result: Any, console: Any) -> None:
    """The failed measured turns by turn and kind, with each kind's first message."""
    from workloads.report.failures import failures, render_failures

    rows = failures(result.records, output_tokens=result.scenario.output_tokens)
    if rows:
        console.print(render_failures(rows, sum(not r.warmup for r in result.records)))


def _write_html(result: Any, directory: Path, console: Any, *, with_plots: bool) -> None:
    from workloads.report.html import write_html

    console.print(f"report: {write_html(result, directory, with_plots=with_plots)}")


@contextlib.contextmanager
def _launch(kind: str, console: Any, *, parallel: int, context_per_slot: int) -> Iterator[Any]:
    """Start a local server for the command and stop it after (``--launch llama.cpp``)."""
    from workloads.servers.llamacpp import LlamaCppServer

    server = LlamaCppServer(parallel=parallel, context_per_slot=context_per_slot)
    console.print(
        f"starting llama-server ({kind}, Gemma 3 270M) with {parallel} "
        f"slot{'' if parallel == 1 else 's'} of "
        f"{server.context_per_slot:,} tokens on 127.0.0.1 …"
    )
    with server:
        console.print(f"llama-server ready at {server.base_url} (log: {server.log_path})")
        yield server.target


def _write_plots(result: Any, directory: Path, console: Any, *, wanted: bool) -> None:
    from workloads.report import plots

    if not wanted:
        return
    if not plots.available():
        console.print("no plots: install the plots extra (pip install 'workloads[plots]')")
        return
    written = plots.write_plots(result, directory)
    console.print("plots: " + ", ".join(str(p) for p in written))


def _cmd_scenarios(args: argparse.Namespace) -> int:
    import workloads
    from workloads.report.console import scenarios_table

    names = sorted(workloads.list_scenarios())
    _console().print(scenarios_table([workloads.load_scenario(n) for n in names]))
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from workloads.core.aggregate import summarized
    from workloads.model.results import load_result
    from workloads.report import console as report
    from workloads.report.export import export

    result = summarized(load_result(args.result))  # the file's summaries are a cache
    where = Path(args.result)
    directory = where if where.is_dir() else where.parent
    for note in report.records_notes(result, directory / "records.jsonl"):
        print(f"warning: {note}", file=sys.stderr)
    if args.format != "text":
        sys.stdout.write(export(result, args.format))
        return 0
    console = _console()
    console.print(report.render(result))
    _print_failures(result, console)
    if args.plots:
        _write_plots(result, directory / "plots", console, wanted=True)
    return 0


def _completions(directory: str) -> Any:
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


def _cmd_compare(args: argparse.Namespace) -> int:

    from workloads.core.aggregate import summarized
    from workloads.model.results import load_result
    from workloads.report.compare import compare, comparison_table

    a, b = summarized(load_result(args.a)), summarized(load_result(args.b))
    result = compare(
        a, b, force=args.force, variable=args.variable, min_effect=args.min_effect / 100,
        completions_a=_completions(args.a), completions_b=_completions(args.b),
    )
    console = _console()
    name_a = a.label or str(args.a)
    name_b = b.label or str(args.b)
    at = f" at {result.prompt_delta_at}" if result.prompt_delta_at else ""
    if result.match == "matched":
        delta = f"byte-identical prompts ({result.hashed_prompts:,} prompt hashes equal)"
    else:
        delta = (
            f"median prompt tokens differ by at most {result.prompt_delta_tokens:+,.1f} of "
            f"{result.prompt_tokens_a:,.1f} ({result.prompt_delta_fraction:.3%}){at}"
            + (f"; not matched: {result.hash_note}" if result.hash_note else "")
        )
    console.print(f"A = {name_a}, B = {name_b} · {result.match} · {delta}")
    if result.variable is not None:
        values = (f": A {result.variable_values[0]} · B {result.variable_values[1]}"
                  if result.variable_values else "")
        console.print(f"variable under test: {result.variable}{values}")
    for problem in result.forced_over:
        console.print(f"forced: {problem}", style="yellow")
    for line in (result.correctness, result.likelihood, *(i.line() for i in result.identity)):
        if line:
            console.print(line)
    console.print(comparison_table(result, min_effect=args.min_effect / 100))
    return 0


def _cmd_probe(args: argparse.Namespace) -> int:
    import asyncio

    from rich.console import Console

    from workloads.model.target import Target, base_url_problem
    from workloads.probe.observe import probe, render

    # With --json, stdout carries only the JSON; what happens on the way goes to stderr.
    console = Console(stderr=True, markup=False) if args.json else _console()
    if args.target and args.launch:
        raise ScenarioError("give --target (a running server) or --launch (start one), not both")
    if args.sim and args.target:
        raise UsageError("--sim sets the embedded simulator's profile and cannot change a "
                         "--target server; drop --sim, or drop --target to probe the simulator")
    if args.target and (problem := base_url_problem(args.target)) is not None:
        raise UsageError(f"--target: {problem}")
    with contextlib.ExitStack() as stack:
        if args.target:
            target = Target(args.target, args.model, api_key_env=args.api_key_env)
        elif args.launch:
            # One slot: the repeated prompt of the cache check lands where the first one did.
            target = stack.enter_context(
                _launch(args.launch, console, parallel=1, context_per_slot=2048)
            )
        else:
            from workloads.servers.simulated import SimulatedServer

            sim = _parse_assignments(args.sim or [], "--sim")
            server = stack.enter_context(SimulatedServer(sim=sim or None))
            target = server.target
            console.print(f"probing the embedded simulated server ({server.profile.name} "
                          "profile); --target URL probes a real one")
        if args.model and not args.target:
            console.print("--model is only used with --target; ignoring it")
        if args.sim and (args.target or args.launch):
            console.print("--sim is only used with the embedded simulator; ignoring it")
        report = asyncio.run(
            probe(target, timeout_s=args.timeout, metrics_url=args.metrics_url)
        )
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        console.print(render(report))
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    import threading

    from workloads.servers.simulated import SimulatedServer, get_profile

    profile = get_profile(args.profile, _parse_assignments(args.sim or [], "--sim"))
    server = SimulatedServer(profile, host=args.host, port=args.port, debug=args.debug)
    try:
        server.start()
    except OSError as err:
        if err.errno != errno.EADDRINUSE:
            raise
        raise UsageError(f"port {args.port} on {args.host} is in use; choose another with "
                         "--port (--port 0 picks a free one)") from err
    print(f"simulated server ({profile.name}) serving {profile.model} at {server.base_url} "
          f"· KV {profile.num_blocks * profile.block_size:,} tokens"
          + (f" · {profile.spec_tokens} draft tokens" if profile.spec_tokens else ""))
    print("Ctrl-C to stop", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def _target_arguments(parser: argparse.ArgumentParser, launch_does: str) -> None:
    """--target/--model/--launch/--api-key-env, shared by run and probe."""
    parser.add_argument("--target", help="OpenAI base URL, e.g. http://host:8000/v1 "
                        "(default: the embedded simulated server)")
    parser.add_argument("--model", help="model name at the target (default: its first model)")
    parser.add_argument("--launch", choices=["llama.cpp"],
                        help="start a local llama-server with a small real model (the "
                        f"llamacpp extra), {launch_does}")
    parser.add_argument("--api-key-env", default="WORKLOADS_API_KEY",
                        help="environment variable holding the API key (default: %(default)s)")


def _run_safety_arguments(run: argparse.ArgumentParser) -> None:
    """--overwrite, --max-error-rate, --grace: what a run may replace, fail and wait for."""
    run.add_argument("--overwrite", action="store_true",
                     help="replace the result already in --out (never done otherwise)")
    run.add_argument("--max-error-rate", type=float, default=0.0, metavar="FRACTION",
                     help="exit 0 while at most this fraction of measured turns failed "
                     "(default: %(default)s: any failed turn exits 3)")
    run.add_argument("--grace", type=float, default=30.0, metavar="SECONDS",
                     help="on SIGINT/SIGTERM, how long turns in flight may finish before "
                     "they are cancelled (default: %(default)s)")
def _prog() -> str:
    """The command as the user typed it: ``workloads`` (the installed script) or
    ``python -m workloads``."""
    return "python -m workloads" if Path(sys.argv[0]).name == "__main__.py" else "workloads"


def build_parser() -> argparse.ArgumentParser:
    from workloads._version import __version__

    parser = argparse.ArgumentParser(
        prog=_prog(),
        description="Simulate coding-agent users against OpenAI-compatible LLM servers.",
    )
    parser.add_argument("--version", action="version", version=f"workloads {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a scenario and report per-turn figures")
    run.add_argument("scenario", nargs="?",
                     help="packaged scenario name or path to a .toml file")
    _target_arguments(run, "for this run, and stop it after")
    run.add_argument("--kv-capacity", type=int, metavar="TOKENS",
                     help="the --target server's KV cache capacity in tokens, for the what-if "
                     "cache oracle (llama.cpp: its /props n_ctx; vLLM: the KV cache size it "
                     "logs at start); the simulated server's is known")
    run.add_argument("--kv-block", type=int, default=16, metavar="TOKENS",
                     help="the block size the server's prefix cache reuses in (default 16, "
                     "vLLM's; llama.cpp reuses any prefix length: 1)")
    run.add_argument("--out", help="directory for result.json and records.jsonl "
                     "(default: runs/NAME-TIMESTAMP)")
    run.add_argument("--set", action="append", metavar="FIELD=VALUE",
                     help="override a scenario field (dotted path), e.g. --set users=2")
    run.add_argument("--sim", action="append", metavar="FIELD=VALUE",
                     help="override a simulator profile field, e.g. --sim kv_capacity_tokens=46202")
    run.add_argument("--metrics-url", metavar="URL|off",
                     help="the server's Prometheus metrics (default: the target's root + "
                     "/metrics); 'off' reads no server counters")
    run.add_argument("--energy", choices=["auto", "nvml", "hwmon", "rapl", "off"],
                     default="auto",
                     help="energy over the measured window: NVIDIA GPUs (nvml, needs "
                     "workloads[nvidia]), Intel GPUs (hwmon), CPU packages (rapl); auto picks "
                     "the first readable, and only for a target on this machine "
                     "(default: %(default)s)")
    run.add_argument("--label", help="name of this arm, stored in the result")
    run.add_argument("--note", help="free text (the stack, flags), stored in the result")
    run.add_argument("--quiet", action="store_true",
                     help="no progress (a bar in a terminal, else a line on stderr every 5 s)")
    run.add_argument("--no-plots", action="store_true", help="do not write DIR/plots/*.png")
    _run_safety_arguments(run)
    run.add_argument("--gate", choices=["off", "report", "required"],
                     help="the correctness gate, sent greedily before and after the measured "
                     "window: report it, require it (a failing case makes the run invalid, "
                     f"exit {EXIT_INVALID_RUN}), or off (default: the scenario's, report)")
    run.add_argument("--replay", metavar="RUN_DIR",
                     help="re-send RUN_DIR's exact messages turn by turn (its recorded "
                     "replies in the history), so compare can call the arms matched")
    run.add_argument("--no-transcripts", action="store_true",
                     help="do not write DIR/transcripts.jsonl (records keep prompt and "
                     "completion hashes)")
    run.set_defaults(func=_cmd_run)

    scenarios = sub.add_parser("scenarios", help="list packaged scenarios")
    scenarios.set_defaults(func=_cmd_scenarios)

    show = sub.add_parser("show", help="print the report of a saved result")
    show.add_argument("result", help="result directory")
    show.add_argument("--plots", action="store_true", help="(re)write DIR/plots/*.png")
    show.add_argument("--format", choices=["text", "md", "json", "csv", "html"],
                      default="text", help="text (the console report), md (Markdown), json "
                      "(the result, recomputed), csv (one row per cell and turn, raw figures) "
                      "or html (the self-contained report with its plots) on stdout "
                      "(default: %(default)s)")
    show.set_defaults(func=_cmd_show)

    comp = sub.add_parser("compare", help="compare two saved results (A/B arms)")
    comp.add_argument("a", help="baseline result directory (A)")
    comp.add_argument("b", help="candidate result directory (B)")
    comp.add_argument("--force", action="store_true",
                      help="compare even when scenario, model or prompt tokens differ")
    comp.add_argument("--variable", metavar="NAME",
                      help="the variable under test: a scenario field (e.g. sampling, "
                      "sampling.temperature), model, or any name such as a server flag; "
                      "comparability is judged on everything else")
    comp.add_argument("--min-effect", type=float, default=2.0, metavar="PERCENT",
                      help="smaller differences are never called significant (default: "
                      "%(default)s, same-host run-to-run drift)")
    comp.set_defaults(func=_cmd_compare)

    pr = sub.add_parser("probe", help="check what a target offers (streaming, usage, cached "
                        "tokens, exact lengths, /tokenize, /metrics) and what a run will do")
    _target_arguments(pr, "probe it, and stop it")
    pr.add_argument("--metrics-url", help="the server's Prometheus metrics (default: the "
                    "target's root + /metrics)")
    pr.add_argument("--sim", action="append", metavar="FIELD=VALUE",
                    help="override a profile field of the embedded simulator, e.g. "
                    "--sim spec_tokens=2")
    pr.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                    help="limit for each request (default: %(default)s)")
    pr.add_argument("--json", action="store_true", help="print the report as JSON")
    pr.set_defaults(func=_cmd_probe)

    serve = sub.add_parser("serve", help="run the simulated server standalone")
    serve.add_argument("--profile", default="fast",
                       choices=["fast", "arc-b70-27b", "h200-8b"],
                       help="engine profile (default: %(default)s)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000, help="0 = any free port")
    serve.add_argument("--sim", action="append", metavar="FIELD=VALUE",
                       help="override a profile field, e.g. --sim kv_capacity_tokens=46202 "
                       "--sim spec_tokens=4 --sim faults.rate_429=0.1")
    serve.add_argument("--debug", action="store_true", help="enable GET /debug/requests")
    serve.set_defaults(func=_cmd_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except TargetError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_TARGET
    except (WorkloadsError, OSError) as err:  # OSError: --out, --port (one line each)
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
