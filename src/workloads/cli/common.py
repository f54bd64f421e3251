"""What the commands share: exit codes, the console, flags used by several commands,
launching a local server, writing plots."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from workloads.model.errors import ScenarioError, WorkloadsError

# Exit codes scripts can trust (docs/targets.md, "Stopping, failures and exit codes"): 0 only
# for a run whose measured turns were valid (or failed under --max-error-rate); 128 + N when
# stopped by signal N.
EXIT_OK = 0
EXIT_BAD_INPUT = 2  # a command line, scenario or --out that cannot work; a refused compare
EXIT_FAILED_TURNS = 3  # measured turns failed beyond --max-error-rate, or none was recorded
EXIT_TARGET = 4  # the target cannot be used (unreachable, model not served)
# The run completed but is invalid: its required correctness gate failed (the result is
# saved and says why).
EXIT_INVALID_RUN = 5
# The results could not be written (a full disk, a folder that turned read-only); the
# message names the file, and the records written before the failure are kept.
EXIT_OUTPUT = 6


class UsageError(WorkloadsError):
    """A command line that cannot work (exit 2); the message names the flags."""


# The library words its errors for a caller of the library: arguments as Python spells them
# (workers=3, overwrite=True), Target fields, scenario and simulator overrides. The CLI's
# messages name the flags that set the same things.
_PHRASES = {
    "scenario overrides": "--set",
    "scenario override": "--set",
    "simulator override": "--sim",
    "overwrite=True": "--overwrite",
    "transcripts=False": "--no-transcripts",
    "Target.model": "--model",
    "Target.proxy": "--proxy",
    "Target.ca_bundle": "--ca-bundle",
    "Target.insecure": "--insecure",
}
_VALUED = {  # NAME=VALUE → --flag VALUE
    "workers": "--workers",
    "ray": "--ray",
    "replay": "--replay",
    "trace": "--trace",
    "out_dir": "--out",
    "stop_grace_s": "--grace",
}
_LIBRARY_WORDS = re.compile(
    r"(?<![\w.])(?:(?P<phrase>"
    + "|".join(re.escape(p) for p in sorted(_PHRASES, key=len, reverse=True))
    + r")(?!\w)|(?P<name>"
    + "|".join(_VALUED)
    + r")=(?P<value>'[^']*'|\"[^\"]*\"|[^\s,;:()'\"]*))"
)


def flag_words(message: str) -> str:
    """A library error's ``message`` as the CLI says it: ``workers=3`` → ``--workers 3``,
    ``replay='runs/a'`` → ``--replay runs/a``, ``overwrite=True`` → ``--overwrite``,
    ``scenario override 'users=x'`` → ``--set 'users=x'``."""

    def flag(match: re.Match[str]) -> str:
        if match["phrase"]:
            return _PHRASES[match["phrase"]]
        value = match["value"]
        if value[:1] in ("'", '"'):
            value = value[1:-1]
        return f"{_VALUED[match['name']]} {value}" if value else _VALUED[match["name"]]

    return _LIBRARY_WORDS.sub(flag, message)


def parse_assignments(items: Sequence[str], flag: str) -> dict[str, Any]:
    from workloads.model.scenario import parse_value

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ScenarioError(f"{flag} {item!r}: expected FIELD=VALUE")
        out[key.strip()] = parse_value(value.strip())
    return out


def make_console() -> Any:
    from rich.console import Console

    # markup=False: messages carry text like "pip install 'workloads[plots]'", not styles.
    console = Console(markup=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        # Piped or captured: rich would assume 80 columns; the report's tables reflow to any
        # width, and 120 keeps the per-turn table in one block. COLUMNS=N overrides.
        console = Console(width=120, markup=False)
    return console


def print_table(console: Any, table: Any) -> None:
    """Print a rich table; piped or captured (no terminal), each line without the trailing
    spaces that pad its columns to the console's width (a line-oriented reader, ``diff``
    or ``grep 'yes$'``, sees the text alone). On a terminal, as rich draws it."""
    if console.is_terminal:
        console.print(table)
        return
    with console.capture() as captured:
        console.print(table)
    lines = captured.get().splitlines()
    console.file.write("".join(line.rstrip() + "\n" for line in lines))
    console.file.flush()


class StoppedByTerm(KeyboardInterrupt):
    """SIGTERM while a launched server is up and no run handles signals (it is starting, or
    stopping): unwinds like Ctrl-C, so the server is stopped on the way out."""

    signum = signal.SIGTERM


@contextlib.contextmanager
def _term_unwinds() -> Iterator[None]:
    """SIGTERM raises StoppedByTerm inside the block (in the main thread; elsewhere signals
    cannot be handled and nothing changes). Python's default would end the process at once,
    leaving a launched llama-server running."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum: int, frame: object) -> None:
        raise StoppedByTerm

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def launch(kind: str, console: Any, *, parallel: int, context_per_slot: int) -> Iterator[Any]:
    """Start a local server for the command and stop it after (``--launch llama.cpp``).
    Ctrl-C or SIGTERM while it starts stops it (KeyboardInterrupt, StoppedByTerm)."""
    from workloads.servers.llamacpp import LlamaCppServer

    server = LlamaCppServer(parallel=parallel, context_per_slot=context_per_slot)
    console.print(
        f"starting llama-server ({kind}, Gemma 3 270M) with {parallel} "
        f"slot{'' if parallel == 1 else 's'} of "
        f"{server.context_per_slot:,} tokens on 127.0.0.1 …"
    )
    with _term_unwinds(), server:
        console.print(f"llama-server ready at {server.base_url} (log: {server.log_path})")
        yield server.target


def open_target(
    args: argparse.Namespace,
    stack: contextlib.ExitStack,
    console: Any,
    *,
    doing: tuple[str, str],
    parallel: int,
    context_per_slot: int,
) -> Any:
    """The target a command talks to: ``--target`` (a running server), ``--launch`` (a
    server started here with ``parallel`` slots of ``context_per_slot`` tokens, stopped
    with ``stack``), else the embedded simulated server with ``--sim``. ``doing``: what the
    command does, as "-ing" and "-s" ("probing", "probes"), for the simulator's line."""
    from workloads.model.target import Target

    if args.target:
        return Target(
            args.target,
            args.model,
            api_key_env=args.api_key_env,
            proxy=args.proxy,
            ca_bundle=args.ca_bundle,
            insecure=args.insecure,
        )
    if args.launch:
        return stack.enter_context(
            launch(args.launch, console, parallel=parallel, context_per_slot=context_per_slot)
        )
    from workloads.servers.simulated import SimulatedServer

    sim = parse_assignments(args.sim or [], "--sim")
    server = stack.enter_context(SimulatedServer(sim=sim or None))
    console.print(
        f"{doing[0]} the embedded simulated server ({server.profile.name} profile); "
        f"--target URL {doing[1]} a real one"
    )
    return server.target


def write_plots(result: Any, directory: Path, console: Any, *, wanted: bool) -> None:
    from workloads.report import plots

    if not wanted:
        return
    if not plots.available():
        console.print("no plots: install the plots extra (pip install 'workloads[plots]')")
        return
    written = plots.write_plots(result, directory)
    console.print("plots: " + ", ".join(str(p) for p in written))


def check_target_flags(args: argparse.Namespace) -> None:
    """--target, --proxy (or the environment's proxy for the target) and --ca-bundle that
    cannot work: one line, exit 2 (bad arguments), before anything starts."""
    from workloads.model.errors import TargetError
    from workloads.model.target import base_url_problem
    from workloads.wire.transport import Transport

    if not args.target:
        return
    if (problem := base_url_problem(args.target)) is not None:
        raise UsageError(f"--target: {problem}")
    try:
        transport = Transport(proxy=args.proxy, ca_bundle=args.ca_bundle)
        transport.proxy_for(args.target)  # HTTP(S)_PROXY, when no --proxy is given
        if args.ca_bundle is not None:
            transport.ssl_context()  # a file that is no PEM of certificates
    except TargetError as err:
        raise UsageError(str(err)) from None


def target_arguments(parser: argparse.ArgumentParser, launch_does: str) -> None:
    """--target/--model/--launch/--api-key-env, shared by run and probe."""
    parser.add_argument(
        "--target",
        metavar="URL",
        help="OpenAI base URL, e.g. http://host:8000/v1 (default: the embedded simulated server)",
    )
    parser.add_argument("--model", help="model name at the target (default: its first model)")
    parser.add_argument(
        "--launch",
        choices=["llama.cpp"],
        help="start a local llama-server with a small real model (the "
        f"llamacpp extra), {launch_does}",
    )
    parser.add_argument(
        "--api-key-env",
        default="WORKLOADS_API_KEY",
        help="environment variable holding the API key (default: %(default)s)",
    )
    parser.add_argument(
        "--proxy",
        metavar="URL",
        help="send every request through this HTTP proxy (http://[user:pass@]"
        "HOST:PORT; default: HTTPS_PROXY/HTTP_PROXY, skipping NO_PROXY hosts)",
    )
    parser.add_argument(
        "--ca-bundle",
        metavar="FILE",
        help="PEM file of the CA certificates that signed an https target's "
        "certificate (a private CA)",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="do not verify the https target's certificate (the result and report say so)",
    )


def override_arguments(parser: argparse.ArgumentParser) -> None:
    """--set, --sim: the scenario's and the embedded simulator's fields, overridden."""
    parser.add_argument(
        "--set",
        action="append",
        metavar="FIELD=VALUE",
        help="override a scenario field (dotted path), e.g. --set users=2",
    )
    parser.add_argument(
        "--sim",
        action="append",
        metavar="FIELD=VALUE",
        help="override a field of the embedded simulator's profile, e.g. "
        "--sim kv_capacity_tokens=46202",
    )


def run_safety_arguments(run: argparse.ArgumentParser) -> None:
    """--overwrite, --max-error-rate, --grace: what a run may replace, fail and wait for."""
    run.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the result already in --out (never done otherwise)",
    )
    run.add_argument(
        "--max-error-rate",
        type=float,
        default=0.0,
        metavar="FRACTION",
        help="exit 0 while at most this fraction of measured turns failed "
        "(default: %(default)s: any failed turn exits 3)",
    )
    run.add_argument(
        "--grace",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="on SIGINT/SIGTERM, how long turns in flight may finish before "
        "they are cancelled (default: %(default)s)",
    )


def scale_arguments(run: argparse.ArgumentParser) -> None:
    """--workers, --ray: how many processes, on which hosts, send the requests."""
    run.add_argument(
        "--workers",
        default="auto",
        metavar="N|auto",
        help="worker processes that send the requests, each with its own event "
        "loop: 1 sends from this process; auto (default) uses one per 64 "
        "concurrent sessions, at most one per core",
    )
    run.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run the worker processes as Ray actors on the cluster at ADDRESS "
        "(e.g. 127.0.0.1:6379 or auto; the ray extra: pip install "
        "'workloads[ray]'); --workers says how many (auto: one per 64 concurrent "
        "sessions)",
    )


def workers_count(value: str, concurrency: int, *, ray: bool = False) -> int:
    """--workers N|auto as a number of processes (auto on Ray: not capped by this host's
    cores)."""
    from workloads.runner.workers.pool import auto_workers

    if value == "auto":
        return auto_workers(concurrency, cpus=1 << 20 if ray else None)
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise UsageError(f"--workers {value}: give a number of processes (1 or more) or auto")
    return count


def prog() -> str:
    """The command as the user typed it: ``workloads`` (the installed script) or
    ``python -m workloads``."""
    return "python -m workloads" if Path(sys.argv[0]).name == "__main__.py" else "workloads"


def slo_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """--slo: the latency limits goodput is judged by."""
    parser.add_argument(
        "--slo",
        metavar="KEY=N,...",
        help=f"{what}: limits per request, the unit in the key: ttft_s, "
        "tpot_ms, itl_ms (a request's p90 chunk gap), e2e_s; per step kind "
        "KIND.KEY (human, tool, subagent, compaction); percentile=P for the "
        "run's checks (default 90); e.g. ttft_s=2,itl_ms=50,tool.ttft_s=5 "
        "(replaces the scenario's [slo])",
    )


def slo_option(text: str | None) -> Any:
    """--slo text as an Slo (None: not given); a mistake is one line naming --slo."""
    from workloads.model.errors import OptionsError
    from workloads.model.slo import parse_slo

    if text is None:
        return None
    try:
        return parse_slo(text)
    except OptionsError as err:
        raise UsageError(f"--{err}") from err
