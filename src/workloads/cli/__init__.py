"""Command line: ``python -m workloads run|capacity|fit|predict|list|show|compare|probe|serve``.

The library never prints or exits; this module does. ``main(argv) -> int`` returns the exit
code so tests call it in process.

Exit codes (scripts can rely on them) are listed, with their meanings, at the end of ``run
--help`` and ``capacity --help`` (cli/help.py, from the constants in cli/common.py); 0 is a
valid run, 2 bad input, 128 + N a stop by signal N.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence

from workloads.cli.capacity import add_capacity_parser
from workloads.cli.commands import cmd_compare, cmd_list, cmd_probe, cmd_serve, cmd_show
from workloads.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED_TURNS,
    EXIT_INVALID_RUN,
    EXIT_OK,
    EXIT_OUTPUT,
    EXIT_TARGET,
    UsageError,
    flag_words,
    override_arguments,
    prog,
    run_safety_arguments,
    scale_arguments,
    slo_argument,
    target_arguments,
)
from workloads.cli.fit import add_fit_parser
from workloads.cli.help import RUN_EPILOG, command_parser
from workloads.cli.predict import add_predict_parser
from workloads.cli.run import cmd_run
from workloads.model.errors import (
    OutputError,
    OutputExistsError,
    ResultFormatWarning,
    TargetError,
    WorkloadsError,
)

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_FAILED_TURNS",
    "EXIT_INVALID_RUN",
    "EXIT_OK",
    "EXIT_OUTPUT",
    "EXIT_TARGET",
    "UsageError",
    "build_parser",
    "main",
]


def build_parser() -> argparse.ArgumentParser:
    from workloads._version import __version__

    parser = argparse.ArgumentParser(
        prog=prog(),
        description="Simulate coding-agent users against OpenAI-compatible LLM servers and "
        "report per-turn figures you can trust.",
        epilog=f"Start with `{prog()} run five-user-coding` (the embedded simulated server, "
        f"about a minute); `{prog()} COMMAND --help` describes each command, and `run "
        "--help` its exit codes and the files it writes.",
    )
    parser.add_argument("--version", action="version", version=f"workloads {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")

    run = command_parser(sub, "run", epilog=RUN_EPILOG)
    run.add_argument("scenario", nargs="?", help="packaged scenario name or path to a .toml file")
    target_arguments(run, "for this run, and stop it after")
    run.add_argument(
        "--kv-capacity",
        type=int,
        metavar="TOKENS",
        help="the --target server's KV cache capacity in tokens, for the what-if "
        "cache oracle (llama.cpp: its /props n_ctx; vLLM: the KV cache size it "
        "logs at start); the simulated server's is known",
    )
    run.add_argument(
        "--kv-block",
        type=int,
        default=16,
        metavar="TOKENS",
        help="the block size the server's prefix cache reuses in (default 16, "
        "vLLM's; llama.cpp reuses any prefix length: 1)",
    )
    run.add_argument(
        "--out",
        metavar="DIR",
        help="directory for records.jsonl, result.json and the rest (below; default: "
        "runs/NAME-YYYYmmdd-HHMMSS)",
    )
    override_arguments(run)
    run.add_argument(
        "--metrics-url",
        metavar="URL|off",
        help="the server's Prometheus metrics (default: the target's root + "
        "/metrics); 'off' reads no server counters",
    )
    run.add_argument(
        "--energy",
        choices=["auto", "nvml", "hwmon", "rapl", "off"],
        default="auto",
        help="energy over the measured window: NVIDIA GPUs (nvml, needs "
        "workloads[nvidia]), Intel GPUs (hwmon), CPU packages (rapl); auto picks "
        "the first readable, and only for a target on this machine "
        "(default: %(default)s)",
    )
    run.add_argument("--label", help="name of this arm, stored in the result")
    run.add_argument("--note", help="free text (the stack, flags), stored in the result")
    run.add_argument(
        "--quiet",
        action="store_true",
        help="no progress (a bar in a terminal, else a line on stderr every 5 s)",
    )
    run.add_argument("--no-plots", action="store_true", help="do not write DIR/plots/*.png")
    run_safety_arguments(run)
    scale_arguments(run)
    run.add_argument(
        "--gate",
        choices=["off", "report", "required"],
        help="the correctness gate, sent greedily before and after the measured "
        "window: report it, require it (a failing case makes the run invalid, "
        f"exit {EXIT_INVALID_RUN}), or off (default: the scenario's, report)",
    )
    run.add_argument(
        "--replay",
        metavar="RUN_DIR",
        help="re-send RUN_DIR's exact messages turn by turn (its recorded "
        "replies in the history), so compare can call the arms matched",
    )
    run.add_argument(
        "--trace",
        metavar="FILE",
        help="replay a recorded Mooncake trace (JSONL: timestamp, input_length, "
        "output_length, hash_ids) open loop at its timestamps × "
        "pacing.time_scale; NAME is then optional (default: trace-replay); "
        "packaged: mooncake-sample",
    )
    slo_argument(run, "judge goodput and session goodput by this SLO")
    run.add_argument(
        "--no-transcripts",
        action="store_true",
        help="do not write DIR/transcripts.jsonl (records keep prompt and completion hashes)",
    )
    run.set_defaults(func=cmd_run)
    add_capacity_parser(sub)
    add_fit_parser(sub)
    add_predict_parser(sub)

    listing = command_parser(sub, "list", aliases=["scenarios"])
    listing.set_defaults(func=cmd_list)

    show = command_parser(sub, "show")
    show.add_argument("result", help="run directory (or its result.json)")
    show.add_argument("--plots", action="store_true", help="(re)write DIR/plots/*.png")
    show.add_argument(
        "--format",
        choices=["text", "md", "json", "csv", "html"],
        default="text",
        help="text (the console report), md (Markdown), json "
        "(the result, recomputed), csv (one row per cell and turn, raw figures) "
        "or html (the self-contained report with its plots) on stdout "
        "(default: %(default)s)",
    )
    slo_argument(show, "judge the saved run by this SLO")
    show.set_defaults(func=cmd_show)

    comp = command_parser(sub, "compare")
    comp.add_argument("a", help="baseline result directory (A)")
    comp.add_argument("b", help="candidate result directory (B)")
    comp.add_argument(
        "--force",
        action="store_true",
        help="compare even when scenario, model or prompt tokens differ, and "
        "give verdicts for an invalid or incomplete arm (the output says so)",
    )
    comp.add_argument(
        "--variable",
        metavar="NAME",
        help="the variable under test: any scenario field (e.g. users, "
        "opening_tokens, sampling.temperature; sweep cells are then paired "
        "by position), model, cache (a replay's warm prefix cache), or any "
        "name such as a server flag; comparability is judged on everything "
        "else",
    )
    comp.add_argument(
        "--min-effect",
        type=float,
        default=2.0,
        metavar="PERCENT",
        help="smaller differences are never called significant (default: "
        "%(default)s, same-host run-to-run drift)",
    )
    comp.add_argument(
        "--plot", metavar="FILE", help="also write a PNG: every figure as B/A with its interval"
    )
    comp.set_defaults(func=cmd_compare)

    pr = command_parser(sub, "probe")
    target_arguments(pr, "probe it, and stop it")
    pr.add_argument(
        "--metrics-url",
        help="the server's Prometheus metrics (default: the target's root + /metrics)",
    )
    pr.add_argument(
        "--sim",
        action="append",
        metavar="FIELD=VALUE",
        help="override a profile field of the embedded simulator, e.g. --sim spec_tokens=2",
    )
    pr.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="limit for each request (default: %(default)s)",
    )
    pr.add_argument("--json", action="store_true", help="print the report as JSON")
    pr.set_defaults(func=cmd_probe)

    serve = command_parser(sub, "serve")
    serve.add_argument(
        "--profile",
        default="fast",
        choices=["fast", "arc-b70-27b", "h200-8b"],
        help="engine profile (default: %(default)s)",
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000, help="0 = any free port")
    serve.add_argument(
        "--sim",
        action="append",
        metavar="FIELD=VALUE",
        help="override a profile field, e.g. --sim kv_capacity_tokens=46202 "
        "--sim spec_tokens=4 --sim faults.rate_429=0.1",
    )
    serve.add_argument("--debug", action="store_true", help="enable GET /debug/requests")
    serve.set_defaults(func=cmd_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    with warnings.catch_warnings():
        # A result file read with fields this version does not know: one line on stderr,
        # whatever the interpreter's warning filters say (the report follows).
        warnings.simplefilter("always", ResultFormatWarning)
        warnings.showwarning = _warning_line
        return _main(argv)


def _warning_line(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: object = None,
    line: str | None = None,
) -> None:
    print(f"warning: {message}", file=sys.stderr)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except TargetError as err:
        print(f"error: {flag_words(str(err))}", file=sys.stderr)
        return EXIT_TARGET
    except OutputExistsError as err:  # a choice of --out: bad input
        print(f"error: {flag_words(str(err))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OutputError as err:
        print(f"error: {flag_words(str(err))}", file=sys.stderr)
        return EXIT_OUTPUT
    except WorkloadsError as err:  # worded for a library caller: the CLI names its flags
        print(f"error: {flag_words(str(err))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as err:  # --out, --port (one line each)
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
