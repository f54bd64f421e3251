"""What ``--help`` says beyond the flags: a paragraph per command, and for ``run`` and
``capacity`` the exit codes they return and the files ``--out`` receives.

tests/cli/test_help.py runs the commands and holds this text to what they do: every file a
run writes is named here, every file named here is written by some run, and every exit code
listed is one the command returns.
"""

from __future__ import annotations

import argparse
import signal
import textwrap
from typing import Any

from workloads.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED_TURNS,
    EXIT_INVALID_RUN,
    EXIT_OK,
    EXIT_OUTPUT,
    EXIT_TARGET,
)

__all__ = [
    "CAPACITY_EPILOG",
    "COMMANDS",
    "EXIT_CRASH",
    "RUN_EPILOG",
    "command_parser",
    "exit_codes",
]

EXIT_CRASH = 1  # Python's own status for an uncaught exception: never returned on purpose
EXIT_SIGINT = 128 + signal.SIGINT  # 130
EXIT_SIGTERM = 128 + signal.SIGTERM  # 143

# name -> (the one line in the top-level help, the paragraph heading the command's own help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": (
        "run a scenario against a server and report per-turn figures",
        "Run a scenario (a packaged name or a .toml file; `list` shows them) against "
        "--target URL, a --launch'ed llama-server, or by default the embedded simulated "
        "server, and print the report: per-turn rates, TTFT, prefill and cache "
        "effectiveness, latency percentiles, the measured window's server counters "
        "reconciled, the correctness gate and the likelihood probe. Everything is saved in "
        "--out DIR (below); `show DIR` prints it again. A terminal shows progress while it "
        "runs. SIGINT or SIGTERM stops it gracefully: no new turns, --grace seconds for the "
        "turns in flight, the partial result saved.",
    ),
    "capacity": (
        "find the highest load at which session goodput stays at or above a goal",
        "Search the highest concurrency (or arrival rate, for an open-loop scenario) at "
        "which session goodput, judged by --slo, stays at or above --goal: double while no "
        "load failed, halve while none met, then bisect between the highest that met and "
        "the lowest that failed, leaving no load between them untried. Each load is a run "
        "of measured repetitions judged with an interval; a load that stays undecided up "
        "to --max-repetitions is 'cannot tell'. Bounded by --max-points, --max-load and "
        "--max-minutes. `show DIR` prints the answer again (--format too).",
    ),
    "fit": (
        "measure a server from outside and fit the simulator's profile to it",
        "Measure a server from outside (HTTP and /metrics only): TTFT of cold prompts of "
        "several sizes (prefill cost per token), chunk gaps of 1 to 8 streams decoding "
        "together and of long contexts (decode step time), how many streams decode at once, "
        "whether a repeated prompt is served from a prefix cache, and the KV capacity where "
        "the server exports it. Least squares fits the embedded simulator's profile; --out "
        "gets it as TOML, every number with its 95% interval and the probe requests that "
        "measured it, and the requests' records beside it. `run SCENARIO --sim "
        "profile=FILE.toml` runs the simulator with it. Exit 0 when the profile was "
        "written; 4 when the target cannot be used or too few probe requests succeeded; 2 "
        "for bad arguments or an --out that exists.",
    ),
    "predict": (
        "predict a scenario's report from a profile, in virtual time (no server)",
        "Play a scenario against the simulated engine with a profile (a file `fit` wrote, "
        "or a named one) on a virtual clock: no server, no HTTP, no sleeping; "
        "five-user-coding takes about a second. The result is a run's (records with "
        "virtual stamps, the same report, `show` and `compare`), marked predicted in "
        "its header. Every pacing, agents' sub-agents and compactions, and fleets; an "
        "agent trace is refused. Exit 0 when the prediction was saved; 2 for a scenario "
        "it does not play, a bad profile, or an --out that holds a result.",
    ),
    "list": (
        "list the packaged scenarios",
        "List the packaged scenarios: name, shape and description. `run NAME` runs one; "
        "`run path/to/file.toml` runs your own. `scenarios` is the same command.",
    ),
    "show": (
        "print the report of a saved run (text, md, json, csv or html)",
        "Print the report of a saved run directory (or its result.json), recomputed from "
        "its records.jsonl, in any form: the console text, Markdown, the result as JSON, "
        "one CSV row per cell and turn of raw figures, or the self-contained HTML page. A "
        "run killed before it wrote result.json is rebuilt from records.jsonl; a torn or "
        "short records.jsonl is a warning on stderr. A capacity directory prints its "
        "search. --slo judges the saved run by another SLO.",
    ),
    "compare": (
        "compare two saved runs (A/B) with significance tests",
        "Compare two saved runs, A the baseline and B the candidate: every figure as B/A "
        "with its interval (Welch's t on the logarithms of the per-repetition values, "
        "Bonferroni over the rows, at least 3 repetitions a side), called significant only "
        "past --min-effect. Runs are compared only when they ran the same workload (same "
        "scenario and model, matched prompts), except the --variable under test; otherwise "
        "it refuses (exit 2) unless --force. An invalid or incomplete arm gets no verdict "
        "(exit 5) unless --force.",
    ),
    "probe": (
        "check what a server offers before a run (streaming, usage, cache, /tokenize)",
        "Send four small streamed requests to a server and read its /tokenize, /metrics, "
        "/version and llama.cpp's /props; print one row per feature: what was seen and what "
        "a run will do about it. Exit 0 whenever the probe ran, features missing or not; 4 "
        "when the target does not answer /v1/models; 2 for bad arguments. Without --target "
        "it probes the embedded simulated server.",
    ),
    "serve": (
        "run the simulated server standalone (OpenAI-compatible, on 127.0.0.1)",
        "Run the embedded simulated server on its own: an OpenAI-compatible engine model "
        "(continuous batching, chunked prefill, a paged prefix cache, vLLM-shaped /metrics "
        "and /tokenize) that `run --target URL` and any other client can measure. Ctrl-C "
        "stops it. A port in use exits 2.",
    ),
}

# What `run` returns, from the constants its code returns (cli/common.py, cli/run.py).
_RUN_EXIT_CODES: list[tuple[int, str]] = [
    (EXIT_OK, "every measured turn valid (or the failed ones within --max-error-rate)"),
    (EXIT_CRASH, "a crash: a bug in workloads (a traceback; please report it)"),
    (
        EXIT_BAD_INPUT,
        "bad input: arguments, scenario, --set/--sim field, --replay or --trace file, an "
        "--out that is a file, holds a result or is in use by another run (one line)",
    ),
    (
        EXIT_FAILED_TURNS,
        "the run finished, but more measured turns failed than --max-error-rate allows (or "
        "none was recorded); the failures are listed by turn and kind",
    ),
    (
        EXIT_TARGET,
        "the target cannot be used: unreachable, --model not served (the line lists what "
        "is), not OpenAI-compatible",
    ),
    (
        EXIT_INVALID_RUN,
        "the run finished but is invalid: its required correctness gate failed (--gate "
        "required); the result is saved and says why",
    ),
    (
        EXIT_OUTPUT,
        "the results could not be written (disk full, permission): the line names the "
        "file; the records written before it are kept",
    ),
    (EXIT_SIGINT, "stopped by SIGINT (Ctrl-C): the partial result is saved"),
    (EXIT_SIGTERM, "stopped by SIGTERM: the partial result is saved"),
]

_CAPACITY_EXIT_CODES: list[tuple[int, str]] = [
    (EXIT_OK, "the search ended: a capacity found, or why not (the report says)"),
    (EXIT_CRASH, "a crash: a bug in workloads (a traceback; please report it)"),
    (
        EXIT_BAD_INPUT,
        "bad input: arguments, scenario, --slo (or no SLO at all), limits that cannot "
        "work, a capacity.json already in --out (one line)",
    ),
    (EXIT_TARGET, "the target cannot be used: unreachable, --model not served"),
    (EXIT_OUTPUT, "the results could not be written (disk full, permission)"),
    (EXIT_SIGINT, "stopped by SIGINT (Ctrl-C): what was measured is saved"),
    (EXIT_SIGTERM, "stopped by SIGTERM: what was measured is saved"),
]


def exit_codes(command: str) -> list[int]:
    """The exit codes ``command``'s help lists (``run`` or ``capacity``)."""
    table = _RUN_EXIT_CODES if command == "run" else _CAPACITY_EXIT_CODES
    return [code for code, _ in table]


def command_parser(
    sub: Any, name: str, *, aliases: list[str] | None = None, epilog: str | None = None
) -> argparse.ArgumentParser:
    """The subparser of command ``name``: its line in the top-level help, its paragraph at
    the head of its own help, and ``epilog`` (laid out as written) at the end."""
    line, paragraph = COMMANDS[name]
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        aliases=aliases or [],
        help=line,
        description=textwrap.fill(paragraph, 88),
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


def _codes(table: list[tuple[int, str]]) -> str:
    lines = ["exit codes:"]
    for code, meaning in table:
        lines += textwrap.wrap(
            meaning, 88, initial_indent=f"  {code:<5}", subsequent_indent=" " * 7
        )
    return "\n".join(lines)


RUN_EPILOG = (
    _codes(_RUN_EXIT_CODES)
    + """

files in --out DIR (default: a new runs/NAME-YYYYmmdd-HHMMSS; a DIR holding a result is
refused unless --overwrite):
  records.jsonl      written as the run goes, flushed per turn: a header line (scenario,
                     target, identity, options), then one TurnRecord per line, with
                     "kind": "nonces" and "kind": "window" lines between them (TurnRecord
                     lines have no kind); `show DIR` rebuilds the report from it alone
  transcripts.jsonl  each turn's exact request messages and full completion, each distinct
                     message stored once (not with --no-transcripts)
  result.json        the result, at the end (also a stopped run's partial one): scenario,
                     target, summaries, window, gate, likelihood, warnings, environment
  report.html        the report as one self-contained page, the plots inline
  plots/             PNGs, with the plots extra, not with --no-plots; each one only when it
                     has something to draw: rates.png, ttft.png, latency.png, prefill.png,
                     concurrency.png, timeline.png; cache.png for a sweep; context.png and
                     sizes.png for a scenario of drawn sizes (coding-agents)
`show DIR --format text|md|json|csv|html` prints the report in other forms (on stdout)."""
)

CAPACITY_EPILOG = (
    _codes(_CAPACITY_EXIT_CODES)
    + """

files in --out DIR (default: a new runs/capacity-NAME-YYYYmmdd-HHMMSS):
  capacity.json      every load measured: session goodput and its interval, verdict,
                     per-user rate; the knee, or why none was found
  capacity.png       goodput and per-user rate against load, the goal and the knee marked
                     (with the plots extra, not with --no-plots)
  points/cLOAD-N/    each run of the search, N counting a load's runs (points/rateLOAD-N/
                     for an arrival rate): its records.jsonl (a header line, nonces and
                     window lines beside the TurnRecords, as a run's) and result.json"""
)
