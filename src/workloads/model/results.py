"""RunResult: the saved, versioned result of a run, and its loader.

``DIR/result.json`` holds the validated scenario, the target's identity, the nonces, the
measured window, the summary and warnings; ``DIR/records.jsonl`` beside it holds the raw
TurnRecords. ``show`` and ``compare`` recompute from those files.

Both carry the format as ``format_version`` (major) and ``format_minor``: a reader loads
every major up to its own, dropping with one :class:`ResultFormatWarning` the fields a newer
minor added; the rules and the history are above ``_LOADERS``.

Size: about 570 lines: the saved models and their loaders per format version belong
together (a schema change and its loader change in one place).

records.jsonl is written as the run goes, so it alone is enough to rebuild a report when the
run was killed before result.json was written. Its lines (format 2 on; one JSON object each):

    {"kind": "header", ...RunHeader}      first line: scenario, target, identity, options
    {"kind": "nonces", ...}               one per repetition, when its nonces are drawn
    {"kind": "window", "cell": 0, ...}    one per cell, when its measured window closes
    {...TurnRecord}                       one per turn (no "kind"), as the turn ends

Format 1 files hold TurnRecord lines only.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import platform
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from workloads._version import __version__
from workloads.model.base import Frozen, validate_known
from workloads.model.errors import (
    OutputError,
    ResultFormatError,
    ResultFormatWarning,
)
from workloads.model.figures import EnergyFigures, ServerTelemetry
from workloads.model.files import read_json, replace_file, target_file
from workloads.model.gate import GateResult
from workloads.model.goodput import Goodput
from workloads.model.likelihood import Likelihood
from workloads.model.records import TurnRecord
from workloads.model.replay import Replay
from workloads.model.scenario import Cell, Scenario
from workloads.model.summary import BandSummary, ConcurrencySummary, RunSummary, Summary
from workloads.model.whatif import WhatIfTurn

__all__ = [
    "FORMAT_MINOR",
    "FORMAT_VERSION",
    "CellSummary",
    "ClientHealth",
    "PredictionInfo",
    "RecordsFile",
    "RunHeader",
    "RunResult",
    "Sizing",
    "TraceReplay",
    "read_records_file",
    "read_result",
]

# The format of result.json and records.jsonl together, as major.minor (the rules and the
# history are above _LOADERS); tests/model/test_results.py fails when a saved model's
# fields change and these do not.
FORMAT_VERSION = 6
FORMAT_MINOR = 7
RESULT_FILE = "result.json"
RECORDS_FILE = "records.jsonl"


class ServerIdentity(Frozen):
    system_fingerprint: str | None = None
    version: str | None = None  # from GET /version where the server has it
    models: list[str] = Field(default_factory=list)  # from GET /v1/models


class TargetInfo(Frozen):
    base_url: str
    model: str
    simulated: bool  # the embedded simulated server (no --target)
    simulator_profile: dict[str, Any] | None = None
    server: ServerIdentity = ServerIdentity()
    # The KV capacity and block size the user gave for a real server (the what-if oracle's);
    # None for the simulator, whose profile says.
    kv_capacity_tokens: int | None = None
    kv_block_tokens: int | None = None
    # TLS certificates were not verified (--insecure); format 4, optional (default False)
    insecure: bool = False


class RepetitionNonces(Frozen):
    cell: int = 0
    repetition: int
    warmup: bool
    run_nonce: str | None  # shared by this repetition's sessions (nonce = "run")
    sessions: list[str]


class Window(Frozen):
    """The measured interval: from the first measured request to the last measured reply.

    ``server`` holds the server's counter deltas over it, reconciled with the measured
    TurnRecords' usage (None: metrics were not scraped); ``energy`` this machine's energy over
    it (None: not read). Figures a server does not report are None inside them, never 0.
    """

    start_unix: float | None = None
    end_unix: float | None = None
    duration_s: float | None = None
    server: ServerTelemetry | None = None
    energy: EnergyFigures | None = None


class CellSummary(Frozen):
    """One coordinate of a sweep: its concurrency and prior depth, its measured window, and
    the summary of its measured turns."""

    cell: int
    concurrency: int
    prior_tokens: int  # configured context before turn 1's new content
    configured_prompt_tokens: int  # turn 1: prior_tokens + turn_tokens
    window: Window
    # Post-first streaming rate of every valid measured turn: median with min-max (at C1 and
    # one turn, the seed records' "median generation tokens per second" and its range).
    generation_rate: BandSummary | None = None
    summary: Summary
    cache_what_if: list[WhatIfTurn] | None = None
    goodput: Goodput | None = None  # the cell against the scenario's SLO (format 5.1)


def cell_coordinates(scenario: Scenario, cell: Cell) -> dict[str, int]:
    """The fields of a :class:`CellSummary` that say where the cell is: its index, its
    concurrency and prior depth, and turn 1's configured prompt there."""
    return {
        "cell": cell.index,
        "concurrency": cell.concurrency,
        "prior_tokens": cell.prior_tokens,
        "configured_prompt_tokens": scenario.for_cell(cell).configured_prompt_tokens(1),
    }


class Sizing(Frozen):
    """How prompts were sized to their configured depths, and what that cost the target."""

    tokenizer: str  # e.g. "vLLM-shaped /tokenize (messages)" or "tiktoken ... (estimate)"
    exact: bool  # the target's own tokenizer (depths and shareable prefixes are exact)
    calls: int  # tokenizer HTTP calls made to the target (0 for estimates)
    seconds: float  # their total duration; none was on a turn's timed path
    fallbacks: int = 0  # turns or openings sized by estimate because a call failed
    # Estimate mode (and quiet sizing): target tokens per estimated token, learned from each
    # cell's warm-up, per cell and turn ({"0": {"1": 1.02}}).
    scale: dict[str, dict[str, float]] = Field(default_factory=dict)


class ClientHealth(Frozen):
    """How the client itself fared over the run (:mod:`workloads.runner.monitor`): figures
    that say whether the numbers could be the client's, not the server's. None: not known."""

    loop_lag_samples: int
    # how late the event loop woke, sampled every 10 ms; a wake counts when a stream was open
    # as its stall began (a request written, its response not yet ended)
    loop_lag_p50_ms: float | None
    loop_lag_p99_ms: float | None
    loop_lag_max_ms: float | None
    cpu_share: float | None  # the event loop thread's CPU seconds / wall seconds (1.0 = a core)
    send_delay_p50_ms: float | None  # measured requests: started -> written (pool, connect)
    send_delay_p99_ms: float | None
    # Client processes whose figures these are (the worst of them: lag, CPU share): 1 unless
    # the run had worker processes (--workers).
    processes: int = 1


class TraceReplay(Frozen):
    """What a trace replay (``run --trace``) replayed, and how its prefix cache fared.

    ``ideal_hit_rate``: what an unlimited prefix cache at the trace's 512-token block
    granularity would serve (Σ over requests of the leading blocks seen in an earlier
    request, × 512, capped at the request's length, / Σ input tokens;
    :func:`workloads.core.traces.ideal_hit_rate`). ``observed_hit_rate``: Σ cached_tokens /
    Σ prompt_tokens over the valid measured requests (None: not reported by the server, or
    not known yet: a run rebuilt from records.jsonl)."""

    file: str  # the trace's file name
    sha256: str  # of the whole file
    format: Literal["mooncake"] = "mooncake"
    requests: int  # replayed per repetition
    truncated: bool = False  # a limit (scenario.trace) stopped reading before the file's end
    input_tokens: int  # Σ input_length of the replayed requests
    output_tokens: int  # Σ output_length
    duration_s: float  # the last request's timestamp, before time_scale
    time_scale: float = 1.0  # arrivals were at timestamp × time_scale
    block_tokens: int = 512
    exact_blocks: bool = False  # blocks were cut with the target's tokenizer (else tiktoken)
    ideal_hit_rate: float | None = None
    observed_hit_rate: float | None = None


class PredictionInfo(Frozen):
    """A result no server produced: ``workloads predict`` played the scenario against the
    simulated engine on a virtual clock (:mod:`workloads.runner.predict`). Its records'
    stamps are virtual nanoseconds; its figures are the engine's with this profile."""

    profile: str  # the profile's name (a file's: its stem, as load_profile names it)
    file: str | None = None  # the profile file it was read from; None: a named profile
    # sha256 of the file's bytes, or of a named profile's canonical JSON (with its overrides)
    profile_sha256: str
    # The round trip a fit measured beyond the engine (the profile file's
    # provenance.overhead_s): each request's intake took that long. None: not measured.
    round_trip_s: float | None = None
    cpu_s: float | None = None  # the prediction's CPU seconds (process time)


class RunResult(Frozen):
    """Everything a run produced. Save with :meth:`save`, read back with
    :func:`workloads.load_result`.

        result = workloads.run("five-user-coding")
        print(result.summary.run.aggregate_rate)
        result.save("runs/today")
    """

    format_version: int = FORMAT_VERSION
    format_minor: int = FORMAT_MINOR  # format 5 on; a loaded older file says 0
    workloads_version: str = __version__
    created_unix: float
    complete: bool = True  # False: the run was interrupted; records hold what was measured
    label: str | None = None
    note: str | None = None
    scenario: Scenario
    target: TargetInfo
    corpus: dict[str, str]
    nonces: list[RepetitionNonces]
    window: Window
    summary: Summary  # a sweep pools every cell here; read ``cells`` instead
    cells: list[CellSummary] | None = None  # one per coordinate, for a sweep
    # The what-if cache oracle per turn (no contention; LRU of the server's KV capacity, and
    # unlimited), when token ids and the capacity are known. None: not computed.
    cache_what_if: list[WhatIfTurn] | None = None
    sizing: Sizing | None = None
    warnings: list[str] = Field(default_factory=list)
    environment: dict[str, str] = Field(default_factory=dict)
    records: list[TurnRecord] = Field(default_factory=list, exclude=True, repr=False)
    client: ClientHealth | None = None  # the client's own health; None in older results
    # Requests in flight over the measured span (None: no measured span); with free pacing
    # and arrivals it is an outcome, not a setting.
    concurrency: ConcurrencySummary | None = None
    # The correctness gate (None: not run), and why the run is invalid (a required gate
    # failed); added 2026-12-01, optional.
    gate: GateResult | None = None
    invalid_reason: str | None = None
    likelihood: Likelihood | None = None  # the likelihood probe (None: not run)
    trace: TraceReplay | None = None  # run --trace: the trace replayed (format 4, optional)
    replay: Replay | None = None  # run --replay: the run re-sent, its cache (format 5)
    # The measured requests and sessions against the scenario's SLO (format 5.1; None: no
    # SLO, or records that cannot be judged by it); a sweep's pools every cell (each cell
    # has its own).
    goodput: Goodput | None = None
    # Not measured but predicted (workloads predict, format 6.7; None: a measured run).
    predicted: PredictionInfo | None = None

    def save(self, directory: str | Path, *, overwrite: bool = False) -> Path:
        """Write ``result.json`` into ``directory`` (and records.jsonl, with its header, if
        not there yet), in the current format (a loaded older file was brought to it).

        Raises :class:`OutputExistsError` when result.json exists and not ``overwrite``, and
        :class:`OutputError` naming the file that could not be written (a full disk): no
        partial file is left, and a result.json already there stays as it was."""
        if (self.format_version, self.format_minor) != (FORMAT_VERSION, FORMAT_MINOR):
            current = self.model_copy(
                update={"format_version": FORMAT_VERSION, "format_minor": FORMAT_MINOR}
            )
            return current.save(directory, overwrite=overwrite)
        path = target_file(directory, RESULT_FILE, overwrite=overwrite)
        records_path = path.parent / RECORDS_FILE
        if not records_path.exists():
            _write_new(
                records_path,
                "".join(
                    [header_line(self.header()) + "\n"]
                    + [meta_line("nonces", n.model_dump(mode="json")) + "\n" for n in self.nonces]
                    + [r.model_dump_json() + "\n" for r in self.records]
                ),
            )
        return replace_file(path, self.model_dump_json(indent=2) + "\n")

    def header(self) -> RunHeader:
        """What this result held when its run started (records.jsonl's first line)."""
        return RunHeader(
            **{name: getattr(self, name) for name in RunHeader.model_fields if name != "kind"}
        )


class RunHeader(Frozen):
    """The first line of records.jsonl, written when the run starts: a RunResult without
    what only the end knows (summaries, windows, warnings). With it, records.jsonl alone
    rebuilds the report of a run that was killed (``show DIR``)."""

    kind: Literal["header"] = "header"
    format_version: int = FORMAT_VERSION
    format_minor: int = FORMAT_MINOR
    workloads_version: str = __version__
    created_unix: float = Field(default_factory=time.time)
    label: str | None = None
    note: str | None = None
    scenario: Scenario
    target: TargetInfo
    corpus: dict[str, str]
    environment: dict[str, str] = Field(default_factory=dict)
    trace: TraceReplay | None = None  # run --trace (its observed hit rate is not known yet)
    replay: Replay | None = None  # run --replay (this run's turn 1 is not known yet)
    predicted: PredictionInfo | None = None  # workloads predict (format 6.7)


def header_line(header: RunHeader) -> str:
    """records.jsonl's first line."""
    return header.model_dump_json()


def meta_line(kind: Literal["nonces", "window"], data: dict[str, Any]) -> str:
    """A records.jsonl line that is not a TurnRecord: ``{"kind": kind, **data}``."""
    return json.dumps({"kind": kind, **data}, separators=(",", ":"))


def _write_new(path: Path, text: str) -> None:
    """Create ``path`` holding ``text``; on failure remove what was made of it (no partial
    file) and raise :class:`OutputError` naming it."""
    try:
        file = path.open("x", encoding="utf-8")
    except FileExistsError:
        return  # written meanwhile by the run that made it: its own lines stay
    except OSError as err:
        raise OutputError.writing(path, err) from err
    try:
        with file:
            file.write(text)
    except OSError as err:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)
        raise OutputError.writing(path, err) from err


def environment() -> dict[str, str]:
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "hostname": platform.node(),
    }


class RecordsFile(Frozen):
    """What a records.jsonl holds: its header (None: format 1, which has none), the nonces
    and windows written as the run went, and the TurnRecords."""

    header: RunHeader | None = None
    nonces: list[RepetitionNonces] = Field(default_factory=list)
    windows: dict[int, Window] = Field(default_factory=dict)  # per cell
    records: list[TurnRecord] = Field(default_factory=list)


def read_records_file(path: Path, *, unknown: list[str] | None = None) -> RecordsFile:
    """Read records.jsonl (any format). A torn last line (a crash mid-write) is skipped.

    What this version does not know (a newer writer's) is dropped: fields, named by their
    line's kind and path (``record.new_field``, ``header.scenario.new_knob``), and lines of
    a kind it does not know (``lines of kind "new"``). Their names go to ``unknown``; when
    it is not given, one :class:`ResultFormatWarning` names them.

    Raises :class:`ResultFormatError` for a line that is none of the kinds above, and for
    a header of a newer format than this version of workloads reads.
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    dropped: list[str] = [] if unknown is None else unknown
    header: RunHeader | None = None
    nonces: list[RepetitionNonces] = []
    windows: dict[int, Window] = {}
    records: list[TurnRecord] = []
    header_at = 0  # the header's line
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            kind = data.pop("kind", None) if isinstance(data, dict) else None
            if kind == "header":
                if header is not None:
                    raise _two_runs(
                        path, (header_at, header.created_unix), (number, data.get("created_unix"))
                    )
                header_at = number
                data = _LOADERS[_check_version(data.get("format_version"), path)](data)
                header = validate_known(RunHeader, data, dropped, at="header")
            elif kind == "nonces":
                nonces.append(validate_known(RepetitionNonces, data, dropped, at="nonces"))
            elif kind == "window":
                cell = int(data.pop("cell"))
                windows[cell] = validate_known(Window, data, dropped, at="window")
            elif kind is None:
                records.append(validate_known(TurnRecord, data, dropped, at="record"))
            elif (named := f"lines of kind {json.dumps(kind)}") not in dropped:
                dropped.append(named)  # kind: a line kind of a newer writer
        except (json.JSONDecodeError, ValueError, KeyError) as err:
            if number == len(lines):
                break
            raise ResultFormatError(
                f"{path}:{number}: not a records.jsonl line: {_one_line(err)}"
            ) from err
    if unknown is None and dropped:
        _warn_unknown(path, {path.name: dropped}, header, stacklevel=2)
    return RecordsFile(header=header, nonces=nonces, windows=windows, records=records)


def _two_runs(path: Path, *headers: tuple[int, object]) -> ResultFormatError:
    """Two run headers in one records.jsonl: two runs appended to one file (runs started
    at once into one directory, before each claimed its own). Their records cannot be told
    apart, so no report is made of them."""

    def run(line: int, started: object) -> str:
        if not isinstance(started, (int, float)):
            return f"line {line}"
        stamp = datetime.datetime.fromtimestamp(started, datetime.UTC)
        return f"line {line} (started {stamp.isoformat(sep=' ', timespec='milliseconds')})"

    return ResultFormatError(
        f"{path}: holds two runs, whose headers are at {run(*headers[0])} and "
        f"{run(*headers[1])}: their records cannot be told apart, so no report is made of "
        "them; run each into a directory of its own"
    )


def _check_version(version: object, path: Path) -> int:
    if isinstance(version, int) and version > FORMAT_VERSION:
        raise ResultFormatError(
            f"{path}: written by a newer workloads (format {version}; this one reads up to "
            f"{FORMAT_VERSION}); upgrade workloads (pip install -U workloads)"
        )
    if version not in _LOADERS:
        raise ResultFormatError(
            f"{path}: format_version {version!r} is not a result format workloads knows "
            f"(1 to {FORMAT_VERSION}); is this a workloads result?"
        )
    assert isinstance(version, int)
    return version


def _upgrade_1(data: dict[str, Any]) -> dict[str, Any]:
    """Format 1 → 2: early files carry "window.telemetry": null, which the typed
    window.server / window.energy replaced; everything else 2 added is optional."""
    window = data.get("window")
    if isinstance(window, dict) and window.get("telemetry", 0) is None:
        window.pop("telemetry")
    return _upgrade_2(data)


def _upgrade_2(data: dict[str, Any]) -> dict[str, Any]:
    """Format 2 → 3: what 3 added is optional, but a run before quiet sizing sized every
    turn with the target's tokenizer, also inside its windows."""
    _sized_exactly(data)
    return _upgrade_3(data)


def _sized_exactly(data: dict[str, Any]) -> None:
    scenario = data.get("scenario")
    if isinstance(scenario, dict):
        scenario.setdefault("sizing_during_window", "exact")


def _upgrade_3(data: dict[str, Any]) -> dict[str, Any]:
    """Format 3 → 4: what 4 added (the agent's steps, tool calls, sizes drawn from
    distributions) is optional; a format-3 scenario's sizes are integers, which 4 reads."""
    return _upgrade_4(data)


def _upgrade_4(data: dict[str, Any]) -> dict[str, Any]:
    """Format 4 → 5: a format-4 file has no format_minor (it is 4.0); with free or arrivals
    pacing the per-turn Σ of the streams' rates is ``streams_sum_rate``, not the aggregate
    (streams need not overlap): moved, and the run's aggregate figures dropped (None), as 5
    computes them."""
    data.setdefault("format_minor", 0)
    scenario = data.get("scenario")
    pacing = scenario.get("pacing") if isinstance(scenario, dict) else None
    if isinstance(pacing, dict) and pacing.get("mode", "lockstep") != "lockstep":
        cells = data.get("cells") or []
        for summary in [
            data.get("summary"),
            *(c.get("summary") for c in cells if isinstance(c, dict)),
        ]:
            if not isinstance(summary, dict):
                continue
            for turn in summary.get("turns") or []:
                if isinstance(turn, dict) and "aggregate_rate" in turn:
                    turn["streams_sum_rate"] = turn.pop("aggregate_rate")
                    turn["aggregate_rate"] = None
            run = summary.get("run")
            if isinstance(run, dict):
                run.update(aggregate_rate=None, turn_aggregate_rate=None)
    return _upgrade_5(data)


def _upgrade_5(data: dict[str, Any]) -> dict[str, Any]:
    """Format 5 → 6: its summaries' ``errors`` count cancelled turns and ``cancelled`` is
    absent (None: not counted apart); load_result recomputes both from the records."""
    return _upgrade_6(data)


def _upgrade_6(data: dict[str, Any]) -> dict[str, Any]:
    """Before 6.3 no request asked tool_choice by the plan: such a scenario reads "auto";
    before 6.4 a fleet started every slot at a session's first step: "fresh"."""
    scenario = data.get("scenario")
    minor = data.get("format_minor", 0)
    if minor < 3 and isinstance(scenario, dict):
        scenario.setdefault("tool_choice", "auto")
    fleet = scenario.get("fleet") if isinstance(scenario, dict) else None
    if minor < 4 and isinstance(fleet, dict):
        fleet.setdefault("start", "fresh")
    return data


# The format of result.json and records.jsonl is FORMAT_VERSION.FORMAT_MINOR, saved as
# format_version and format_minor (in result.json and in records.jsonl's header). Every change
# to a saved model's fields bumps one of them (tests/model/test_results.py fails otherwise):
#   - the minor for a field added with a default that reads as "not known" or as what older
#     runs did: a reader of the same format_version drops the fields it does not know (a
#     newer minor's) with one ResultFormatWarning naming them, and loads the rest;
#   - format_version for anything else (a field removed, renamed, retyped, made required, or
#     given a new meaning), with a loader below that brings the older files to the current
#     models. A reader refuses a format_version above its own: "upgrade workloads".
#
# format_version history (keep loading every version listed here; one loader each, which
# brings a file of that version to the current model):
#   1 — 2026-11-30: first version (later additive, optional: cells, sizing, nonces' cell).
#       Early files carry "window.telemetry": null, which the typed window.server /
#       window.energy replaced the same day; it is dropped on load. records.jsonl: TurnRecord
#       lines only.
#   2 — 2026-11-30: records.jsonl starts with a header line (the run as it started) and
#       carries nonces and window lines, so a killed run's report can be rebuilt from it;
#       the optional result fields added the same day land here.
#   3 — 2026-12-01: worker processes (--workers, --ray): TurnRecord.host (the host that
#       sent the turn; None from a single process) and ClientHealth.processes; the scenario's
#       sizing_during_window (quiet sizing; older files read as its default, "estimate").
#   4 — 2026-12-01: realistic agents: scenario sizes may be distributions, the scenario's
#       agent, tools and pacing.time_scale; TurnRecord step_kind, new_tokens,
#       output_tokens, pause_s, parent_session, tool_calls, ttft_content_ns (all optional);
#       RunResult.trace and RunHeader.trace (run --trace: the trace replayed, its ideal and
#       observed prefix-cache hit rates; optional); Summary.kinds (per step kind) and
#       Summary.cache_cliff (optional); per-turn summaries count the users' own sessions
#       only (recomputed by show). TargetInfo.insecure (TLS not verified, --insecure;
#       optional, False) and the environment's "proxy" and "tls" entries (no credentials).
#   5.0 — 2026-12-01: format_minor (RunResult and RunHeader), and from here on readers drop
#       the fields of a newer minor instead of refusing the file. A major version: readers
#       of 1 to 4 refuse every field they do not know, format_minor included; format-4
#       files read as 4.0.
#       With free or arrivals pacing the per-turn Σ of the streams' rates is
#       TurnSummary.streams_sum_rate ("Σ streams tok/s †"), never the aggregate: the turns'
#       and the run's aggregate figures are None there (older files' moved on load).
#       RunResult.replay and RunHeader.replay (run --replay: the recorded run, turn 1's
#       cached tokens in both runs, the cache state "warm" or "cold"; optional); a replay's
#       records count the whole prompt as shareable (shareable_tokens = prompt_tokens: the
#       recorded run sent it), so its cache effectiveness is ≤ 100 %.
#   5.1 — 2026-12-02: SLOs and goodput: the scenario's slo (its latency limits, per step
#       kind); RunResult.goodput and CellSummary.goodput (the requests and sessions that
#       met the SLO, per repetition, turn and step kind, and the run-level checks);
#       Percentiles.bounds (order-statistics bounds of p50, p90, p99). All optional: older
#       files read as runs without an SLO, and load_result recomputes the bounds from the
#       records.
#   5.2 — 2026-12-02: per-turn spec acceptance: TurnSummary.spec_draft_tokens and
#       spec_accepted_tokens (Σ of the responses' timings.draft_n and draft_n_accepted over
#       the turn; optional: None, "not reported", in older files and where no response
#       carries them; load_result recomputes them from the records).
#   6.0 — 2026-12-02: turns cancelled in flight by a stop are counted apart, not as failed:
#       TurnSummary.cancelled and RunSummary.cancelled (None in older files), and
#       ``errors`` no longer counts them (a new meaning, so a major version; load_result
#       recomputes both from the records). A cancelled TurnRecord keeps its shareable
#       prefix as corrected for a finished turn (turn 1's first sender: 0), where format-5
#       records kept the plan's.
#   6.1 — 2026-12-02: the environment's "arrival_stamps" entry: "kernel" (each streamed
#       read stamped by the kernel when its last byte arrived: plain http on Linux,
#       wire/arrival.py) or "event loop" (when the loop handed the read over: TLS, other
#       platforms). No model changed; older files lack the entry (their reads were
#       stamped by the event loop), as do runs through a caller's own client (not known).
#   6.2 — 2026-12-02: steps after a pause apart from sessions' first steps:
#       KindSummary.first_step (a kind's first steps, True, or its later ones, False; None
#       in older files: both pooled) and Summary.pause_pressure (PausePressure: what other
#       sessions wrote into the KV over each human request's pause, against the KV
#       capacity); ServerTelemetry.kv_capacity_tokens (vLLM's cache_config_info). All
#       optional; load_result recomputes the summaries from the records (and the saved
#       window telemetry's capacity).
#   6.3 — 2026-12-03: the scenario's "fleet" (a steady-state fleet bounded by time: its
#       repetitions are fleet windows; None before) and "tool_choice" ("plan": each request
#       asks "required" or "none" as the plan's next step needs; older runs sent none but
#       "none" on a compaction, which "auto" names), and "sim" (the simulator overrides a
#       scenario runs with on the embedded server; the target's simulator_profile says
#       what ran). Older files load with fleet None, sim {} and tool_choice "auto"
#       (_upgrade_6 sets it for a file before 6.3).
#   6.4 — 2026-12-03: the fleet's "start": "steady" (each slot's first session caught in
#       mid-life, its played steps numbered from 1) or "fresh" (what 6.3 fleets did;
#       _upgrade_6 sets it for a file before 6.4).
#   6.5 — 2026-12-03: did the streams decode together? TurnSummary.decode_overlap and
#       streams_decoding (bands over the repetitions the aggregate sums) and
#       RunSummary.decode_overlap and streams_decoding (medians over the (repetition, turn)s
#       the aggregate takes): the share of each stream's decode time during which every
#       other stream decoded too, and the streams decoding at a time. Optional: None in
#       older files; load_result recomputes them from the records.
#   6.6 — 2026-12-03: TurnRecord.merged_chunks: content chunks read together with later ones
#       while the client's event loop stalled (wire/arrival.py), whose gaps records leave
#       out of chunk_gaps_us and whose decode rate is None when the first chunk is one (0 in
#       older files: not watched). ITL's Percentiles.bounds are cluster bounds
#       (requests resampled whole, core/stats.py), recomputed by load_result from records.
#   6.7 — 2026-12-03: RunResult.predicted and RunHeader.predicted (PredictionInfo: the
#       profile a `workloads predict` played in virtual time, its file, sha256 and measured
#       round trip); records of a prediction carry virtual nanoseconds. Optional: None, a
#       measured run, in older files.
_LOADERS = {
    1: _upgrade_1,
    2: _upgrade_2,
    3: _upgrade_3,
    4: _upgrade_4,
    5: _upgrade_5,
    6: _upgrade_6,
}


def read_result(path: str | Path, *, stacklevel: int = 1) -> RunResult:
    """A RunResult from ``DIR`` or ``DIR/result.json``, with its records, as the files hold
    it: the summaries are the saved ones. :func:`workloads.load_result` (what users call)
    also recomputes them from the records.

    A directory whose run was killed before writing result.json (format 2 on) is rebuilt
    from records.jsonl alone: marked incomplete, with a warning saying so; its summaries are
    empty until :func:`workloads.core.aggregate.summarized` computes them.

    Fields this version does not know (a newer minor's) are dropped, and one
    :class:`ResultFormatWarning` names them by file and path. Raises
    :class:`ResultFormatError` for a file that cannot be read, a format_version above this
    version's, and a value its field does not accept. ``stacklevel``: the warning names the
    line that many calls up from here (1: the caller), as :func:`warnings.warn` counts.
    """
    p = Path(path)
    if p.is_dir():
        p = p / RESULT_FILE
    records_path = p.parent / RECORDS_FILE
    in_records: list[str] = []
    if not p.exists() and records_path.exists():
        rebuilt = _rebuilt(records_path, in_records)
        _warn_unknown(p.parent, {RECORDS_FILE: in_records}, rebuilt, stacklevel=stacklevel + 1)
        return rebuilt
    data = read_json(p, missing="no such result file (and no records.jsonl)")
    data = _LOADERS[_check_version(data.get("format_version"), p)](data)
    records = (
        read_records_file(records_path, unknown=in_records).records if records_path.exists() else []
    )
    in_result: list[str] = []
    try:
        result = validate_known(RunResult, {**data, "records": records}, in_result)
    except ValidationError as err:
        raise ResultFormatError(f"{p}: not a valid result: {_one_line(err)}") from err
    _warn_unknown(
        p.parent,
        {RESULT_FILE: in_result, RECORDS_FILE: in_records},
        result,
        stacklevel=stacklevel + 1,
    )
    return result


def _one_line(err: Exception) -> str:
    """A validation error as one line: the first bad field's path and what is wrong."""
    if not isinstance(err, ValidationError):
        return str(err)
    first = err.errors()[0]
    more = err.error_count() - 1
    field = ".".join(str(step) for step in first["loc"]) or "the line"
    return f"{field}: {first['msg']}" + (f" (and {more} more)" if more else "")


# Unknown fields named in the warning; the rest are counted (a newer writer's field inside
# a list is named once, with its indices as [], so this bounds only truly many new fields).
_NAMED = 12


def _warn_unknown(
    where: Path,
    unknown: dict[str, list[str]],
    writer: RunResult | RunHeader | None,
    *,
    stacklevel: int,
) -> None:
    """One :class:`ResultFormatWarning` naming the fields dropped from each file of
    ``where`` (none: no warning); ``writer`` is what the file says wrote it."""
    named = [
        f"{name}: {', '.join(paths[:_NAMED])}"
        + (f" and {len(paths) - _NAMED} more" if len(paths) > _NAMED else "")
        for name, paths in unknown.items()
        if paths
    ]
    if not named:
        return
    by = (
        "an unknown writer"
        if writer is None
        else f"workloads {writer.workloads_version} (format "
        f"{writer.format_version}.{writer.format_minor})"
    )
    warnings.warn(
        f"{where}: written by {by}, with fields this version of workloads ({__version__}, "
        f"format {FORMAT_VERSION}.{FORMAT_MINOR}) does not know; they were dropped: "
        f"{'; '.join(named)}. Upgrade workloads to read them",
        ResultFormatWarning,
        stacklevel=stacklevel + 1,
    )


def _rebuilt(records_path: Path, unknown: list[str]) -> RunResult:
    """A RunResult from records.jsonl alone (no summaries: ``summarized`` computes them);
    the fields it does not know go to ``unknown``."""
    found = read_records_file(records_path, unknown=unknown)
    header = found.header
    if header is None:
        raise ResultFormatError(
            f"{records_path.parent}: no result.json, and records.jsonl has no header line "
            "(format 1): the report cannot be rebuilt without the scenario"
        )
    scenario = header.scenario
    cells = None
    if scenario.swept:
        cells = [
            CellSummary(
                **cell_coordinates(scenario, cell),
                window=found.windows.get(cell.index, Window()),
                summary=Summary(turns=[], run=_empty_run_summary()),
            )
            for cell in scenario.cells()
            if any(r.cell == cell.index for r in found.records)
        ]
    fields = header.model_dump(exclude={"kind"})
    # As a finished run does: the identity gets the last system_fingerprint the server sent.
    fingerprints = [r.system_fingerprint for r in found.records if r.system_fingerprint]
    identity = header.target.server.model_copy(
        update={"system_fingerprint": fingerprints[-1] if fingerprints else None}
    )
    return RunResult.model_validate(
        {
            **fields,
            "scenario": header.scenario,
            "target": header.target.model_copy(update={"server": identity}),
            "complete": False,
            "nonces": found.nonces,
            "window": Window() if scenario.swept else found.windows.get(0, Window()),
            "summary": Summary(turns=[], run=_empty_run_summary()),
            "cells": cells,
            "warnings": [
                f"rebuilt from {records_path.name}: the run ended without writing result.json "
                f"(killed?); it is incomplete: {len(found.records)} turns were recorded, and the "
                "windows of unfinished cells are missing"
            ],
            "records": found.records,
        }
    )


def _empty_run_summary() -> RunSummary:
    """A placeholder until :func:`workloads.core.aggregate.summarized` fills it from the
    records (this layer cannot compute summaries)."""
    return RunSummary(
        users=0,
        measured_repetitions=0,
        records=0,
        valid=0,
        invalid=0,
        errors=0,
        warmup_records=0,
        per_user_rate=None,
        aggregate_rate=None,
        turn_aggregate_rate=None,
        ttft_s=None,
        completion_tokens=0,
    )
