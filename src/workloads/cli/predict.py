"""``predict``: a scenario played against the simulated engine with a profile (named, or as
``workloads fit`` wrote it) on a virtual clock (:mod:`workloads.runner.predict`), saved and
reported as a run is, marked predicted."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from workloads.cli.common import EXIT_OK, make_console, override_arguments, write_plots
from workloads.cli.help import command_parser

__all__ = ["add_predict_parser", "cmd_predict"]


def add_predict_parser(sub: Any) -> None:
    """The ``predict`` subcommand and its flags."""
    predict = command_parser(sub, "predict")
    predict.add_argument("scenario", help="packaged scenario name or path to a .toml file")
    predict.add_argument(
        "--profile",
        metavar="PROFILE.toml|NAME",
        help="the engine profile: a file `fit` wrote, or fast, arc-b70-27b, h200-8b "
        "(default: the one `run SCENARIO` would start the embedded simulator with)",
    )
    override_arguments(predict)
    predict.add_argument(
        "--out",
        metavar="DIR",
        help="directory for result.json, records.jsonl and the report (default: "
        "runs/NAME-predicted-YYYYmmdd-HHMMSS)",
    )
    predict.add_argument("--overwrite", action="store_true", help="replace a result in --out")
    predict.add_argument("--label", help="name of this arm, stored in the result")
    predict.add_argument("--note", help="free text, stored in the result")
    predict.add_argument("--no-plots", action="store_true", help="do not write DIR/plots/*.png")
    predict.set_defaults(func=cmd_predict)


def cmd_predict(args: argparse.Namespace) -> int:
    import workloads
    from workloads.cli.common import parse_assignments
    from workloads.cli.run import write_html
    from workloads.model.results import RECORDS_FILE, RESULT_FILE
    from workloads.model.transcripts import TRANSCRIPTS_FILE
    from workloads.report import console as report
    from workloads.runner.outdir import check_out_dir
    from workloads.runner.predict import predict, predictable
    from workloads.servers.simulated.profiles import sim_profile

    console = make_console()
    scenario = workloads.load_scenario(args.scenario).with_overrides(args.set or [])
    predictable(scenario)  # one line before anything is made
    sim = parse_assignments(args.sim or [], "--sim")
    if args.profile is not None:
        sim = {**sim, "profile": args.profile}
    elif "profile" not in sim:  # as run: the scenario's overrides, the caller's winning
        sim = {**scenario.sim, **sim}
    sim_profile(sim)  # a bad profile or field: one line naming it
    out = Path(args.out or f"runs/{scenario.name}-predicted-{time.strftime('%Y%m%d-%H%M%S')}")
    check_out_dir(out, overwrite=args.overwrite)
    result = predict(scenario, sim=sim, label=args.label, note=args.note)
    if args.overwrite:  # an older run's files would sit beside this result
        for name in (RESULT_FILE, RECORDS_FILE, TRANSCRIPTS_FILE):
            (out / name).unlink(missing_ok=True)
    result.save(out, overwrite=args.overwrite)
    console.print(report.render(result))
    console.print(f"saved {out / RESULT_FILE} and {out / RECORDS_FILE}")
    write_plots(result, out / "plots", console, wanted=not args.no_plots)
    write_html(result, out, console, with_plots=not args.no_plots)
    return EXIT_OK
