"""``fit``: measure a server from outside and write the simulated engine's profile fitted to
it (:mod:`workloads.runner.fit`), for ``run --sim profile=FILE.toml``."""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path
from typing import Any

from workloads.cli.common import (
    EXIT_OK,
    UsageError,
    check_target_flags,
    make_console,
    open_target,
    target_arguments,
)
from workloads.cli.help import command_parser
from workloads.model.errors import OutputError, OutputExistsError, ScenarioError
from workloads.wire.loop import run_loop

__all__ = ["add_fit_parser", "cmd_fit"]

# --launch: one slot per stream of the probe's largest batch, each holding its longest prompt
# (4,096 tiktoken tokens; Gemma's tokenizer counts more) and reply.
LAUNCH_SLOTS = 8
LAUNCH_CONTEXT = 6144


def add_fit_parser(sub: Any) -> None:
    """The ``fit`` subcommand and its flags."""
    fit = command_parser(sub, "fit")
    target_arguments(fit, "fit it, and stop it")
    fit.add_argument(
        "--out",
        metavar="PROFILE.toml",
        help="the profile to write (default: fit-YYYYmmdd-HHMMSS.toml); the probe's "
        "records go beside it as PROFILE.records.jsonl",
    )
    fit.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    fit.add_argument(
        "--metrics-url",
        metavar="URL",
        help="the server's Prometheus metrics (default: the target's root + /metrics)",
    )
    fit.add_argument(
        "--sim",
        action="append",
        metavar="FIELD=VALUE",
        help="without --target: a field of the embedded simulator fitted against, e.g. "
        "--sim profile=arc-b70-27b",
    )
    fit.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="limit for each probe request (default: %(default)s)",
    )
    fit.add_argument("--quiet", action="store_true", help="no progress lines")
    fit.set_defaults(func=cmd_fit)


def cmd_fit(args: argparse.Namespace) -> int:
    import orjson

    from workloads.model.target import base_url_problem
    from workloads.runner.fit import fit_async, profile_toml

    console = make_console()
    if args.target and args.launch:
        raise ScenarioError("give --target (a running server) or --launch (start one), not both")
    if args.sim and (args.target or args.launch):
        raise UsageError("--sim sets the embedded simulator fitted against; drop it with --target")
    check_target_flags(args)
    if args.target and (problem := base_url_problem(args.target)) is not None:
        raise UsageError(f"--target: {problem}")
    out = Path(args.out or time.strftime("fit-%Y%m%d-%H%M%S.toml"))
    if out.suffix != ".toml":
        raise UsageError(f"--out {out}: a profile is a .toml file")
    records = out.with_suffix(".records.jsonl")
    for path in (out, records):
        if path.exists() and not args.overwrite:
            raise OutputExistsError(f"{path} exists; give another --out, or --overwrite")
    with contextlib.ExitStack() as stack:
        target = open_target(
            args,
            stack,
            console,
            doing=("fitting", "fits"),
            parallel=LAUNCH_SLOTS,
            context_per_slot=LAUNCH_CONTEXT,
        )
        say = (lambda line: None) if args.quiet else (lambda line: console.print(f"  {line}"))
        if not args.quiet:
            console.print(f"fit of {target.base_url}: probing (about a minute on a CPU server)")
        fitted = run_loop(
            fit_async(target, progress=say, timeout_s=args.timeout, metrics_url=args.metrics_url)
        )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        records.write_bytes(
            b"".join(
                orjson.dumps({"probe": probe, "request": i, "record": r.model_dump(mode="json")})
                + b"\n"
                for i, (probe, r) in enumerate(fitted.records)
            )
        )
        out.write_text(profile_toml(fitted, records_file=records.name), encoding="utf-8")
    except OSError as err:
        raise OutputError.writing(out, err) from err
    for name in ("prefill_s_per_token", "step_fixed_s", "decode_s_per_seq", "attend_s_per_token"):
        e = fitted.estimates[name]
        console.print(
            f"{name:<20} {e.value:.4g}  [{0 if e.low is None else e.low:.4g}, "
            f"{'∞' if e.high is None else f'{e.high:.4g}'}]"
        )
    for name in ("max_running", "kv_capacity_tokens", "prefix_caching"):
        if name in fitted.estimates:
            console.print(
                f"{name:<20} {getattr(fitted.profile, name)}  ({fitted.estimates[name].how})"
            )
        else:
            console.print(f"{name:<20} not measured: {fitted.not_measured.get(name, '')}")
    console.print(
        f"wrote {out} ({len(fitted.records)} probe requests in {fitted.seconds:.1f} s, "
        f"records in {records}); use it: run SCENARIO --sim profile={out}"
    )
    return EXIT_OK
