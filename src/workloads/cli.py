"""Command line: ``python -m workloads run|scenarios|show|serve``.

The library never prints or exits; this module does. ``main(argv) -> int`` returns the exit
code so tests call it in process.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from workloads.errors import WorkloadsError

__all__ = ["main"]


def _parse_assignments(items: Sequence[str], flag: str) -> dict[str, Any]:
    from workloads.errors import ScenarioError
    from workloads.scenario import _parse_value

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ScenarioError(f"{flag} {item!r}: expected FIELD=VALUE")
        out[key.strip()] = _parse_value(value.strip())
    return out


def _cmd_run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    import workloads
    from workloads import report

    console = Console()
    scenario = workloads.load_scenario(args.scenario).with_overrides(args.set or [])
    sim = _parse_assignments(args.sim or [], "--sim")
    target = None
    if args.target:
        target = workloads.Target(args.target, args.model, api_key_env=args.api_key_env)
    elif args.model:
        console.print("--model is only used with --target; ignoring it for the simulated server")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else Path("runs") / f"{scenario.name}-{stamp}"
    reps = scenario.repetitions.warmup + scenario.repetitions.measured
    total = scenario.total_turns()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        console=console,
        transient=True,
        disable=args.quiet,
    ) as progress:
        task = progress.add_task(f"{scenario.name}: turns", total=total, status="")
        failed = 0

        def on_record(record: workloads.TurnRecord) -> None:
            nonlocal failed
            failed += record.status != "ok"
            phase = "warm-up" if record.warmup else "measured"
            where = f"cell {record.cell + 1}/{len(scenario.cells())} " if scenario.swept else ""
            progress.update(
                task,
                advance=1,
                status=f"{where}rep {record.repetition + 1}/{reps} ({phase}) turn {record.turn}"
                + (f" · {failed} failed" if failed else ""),
            )

        try:
            result = workloads.run(
                scenario,
                target,
                out_dir=out,
                label=args.label,
                note=args.note,
                sim=sim or None,
                on_record=on_record,
            )
        except KeyboardInterrupt:
            console.print(f"interrupted: every turn measured so far is in {out}/records.jsonl")
            return 130
    console.print(report.render(result))
    console.print(f"saved {out / 'result.json'} and {out / 'records.jsonl'}")
    return 0


def _cmd_scenarios(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    import workloads

    def axis(values: set[int]) -> str:  # a sweep axis as "low–high" (the table is narrow)
        low, high = min(values), max(values)
        return f"{low:,}" if low == high else f"{low:,}–{high:,}"

    table = Table("name", "users", "turns", "opening", "new/turn", "output", "description")
    table.columns[0].no_wrap = True
    for name in sorted(workloads.list_scenarios()):
        s = workloads.load_scenario(name)
        cells = s.cells()
        table.add_row(
            name,
            axis({c.concurrency for c in cells}),
            str(s.turns),
            axis({c.prior_tokens for c in cells}),
            f"{s.turn_tokens:,}",
            str(s.output_tokens),
            s.description,
        )
    Console().print(table)
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from rich.console import Console

    from workloads import report
    from workloads.aggregate import summarize
    from workloads.results import load_result

    result = load_result(args.result)
    if result.records:  # recompute from the raw records: the file's summary is a cache
        result = result.model_copy(
            update={"summary": summarize(result.records, users=result.scenario.users)}
        )
    Console().print(report.render(result))
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    import threading

    from workloads.simulated_server import SimulatedServer, get_profile

    profile = get_profile(args.profile, _parse_assignments(args.sim or [], "--sim"))
    server = SimulatedServer(profile, host=args.host, port=args.port, debug=args.debug)
    server.start()
    print(f"simulated server ({profile.name}) serving {profile.model} at {server.base_url}")
    print("Ctrl-C to stop", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m workloads",
        description="Simulate coding-agent users against OpenAI-compatible LLM servers.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a scenario and report per-turn figures")
    run.add_argument("scenario", help="packaged scenario name or path to a .toml file")
    run.add_argument("--target", help="OpenAI base URL, e.g. http://host:8000/v1 (default: "
                     "the embedded simulated server)")
    run.add_argument("--model", help="model name at the target (default: its first model)")
    run.add_argument("--api-key-env", default="WORKLOADS_API_KEY",
                     help="environment variable holding the API key (default: %(default)s)")
    run.add_argument("--out", help="directory for result.json and records.jsonl "
                     "(default: runs/NAME-TIMESTAMP)")
    run.add_argument("--set", action="append", metavar="FIELD=VALUE",
                     help="override a scenario field (dotted path), e.g. --set users=2")
    run.add_argument("--sim", action="append", metavar="FIELD=VALUE",
                     help="override a simulator profile field, e.g. --sim kv_capacity_tokens=46202")
    run.add_argument("--label", help="name of this arm, stored in the result")
    run.add_argument("--note", help="free text (the stack, flags), stored in the result")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.set_defaults(func=_cmd_run)

    scenarios = sub.add_parser("scenarios", help="list packaged scenarios")
    scenarios.set_defaults(func=_cmd_scenarios)

    show = sub.add_parser("show", help="print the report of a saved result")
    show.add_argument("result", help="result directory or result.json")
    show.set_defaults(func=_cmd_show)

    serve = sub.add_parser("serve", help="run the simulated server standalone")
    serve.add_argument("--profile", default="fast")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--sim", action="append", metavar="FIELD=VALUE")
    serve.add_argument("--debug", action="store_true", help="enable GET /debug/requests")
    serve.set_defaults(func=_cmd_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except (WorkloadsError, FileExistsError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
