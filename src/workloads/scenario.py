"""The Scenario model: what to run. Loaded from TOML by name or path, validated strictly.

A typo in a scenario file is an error that names the file and the field, never a silent
default (``extra="forbid"``). Overrides from the command line (``--set users=2``) are applied
to the raw data before validation, so they are checked by the same rules.
"""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from workloads.errors import ScenarioError

__all__ = [
    "Content",
    "Distribution",
    "Pacing",
    "Repetitions",
    "Sampling",
    "Scenario",
    "Timeouts",
    "apply_overrides",
    "list_scenarios",
    "load_scenario",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Repetitions(_Frozen):
    """How many passes over all sessions: warm-ups are run and discarded."""

    warmup: int = Field(1, ge=0, le=100)
    measured: int = Field(3, ge=1, le=1000)


class Distribution(_Frozen):
    """A non-negative random duration in seconds.

    ``constant`` always gives ``median``; ``lognormal`` has the given median and shape
    ``sigma`` (a heavy right tail, like real tool and think times); ``exponential`` has the
    given median. ``max_s`` caps every draw so one unlucky draw cannot stall a run.
    """

    kind: Literal["constant", "lognormal", "exponential"] = "constant"
    median: float = Field(0.0, ge=0.0)
    sigma: float = Field(1.0, gt=0.0)
    max_s: float = Field(600.0, gt=0.0)


class Pacing(_Frozen):
    """When turns start.

    ``lockstep``: turn k of every session starts together (a barrier per turn), the way the
    seed records were made. ``free``: each session runs on its own clock, waiting
    ``think_time`` (+ ``tool_time`` for turns after the first) between its turns.
    """

    mode: Literal["lockstep", "free"] = "lockstep"
    think_time: Distribution = Distribution()
    tool_time: Distribution = Distribution()


class Content(_Frozen):
    """Where context text comes from.

    ``corpus``: ``"stdlib"`` (the running Python's standard-library sources: real code,
    present offline), ``"synthetic"`` (generated code-like text), or a directory path of the
    user's own repository.
    """

    corpus: str = "stdlib"
    seed: int = 0


class Sampling(_Frozen):
    """Sampling parameters sent with every request. ``None`` leaves the server's default."""

    temperature: float | None = Field(None, ge=0.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    seed: int | None = None


class Timeouts(_Frozen):
    """Per-request limits. There is no total limit on a stream; a long answer is fine as long
    as bytes keep coming, so the read-gap timeout is what catches a stalled server."""

    connect_s: float = Field(10.0, gt=0.0)
    read_gap_s: float = Field(120.0, gt=0.0)  # longest silence before the first or next chunk
    turn_s: float = Field(1800.0, gt=0.0)  # hard cap for one request, prefill included


class Scenario(_Frozen):
    """What to run: users, turns, depths, output length, pacing, content, repetitions.

    Load a packaged one by name, or your own file::

        scenario = workloads.load_scenario("five-user-coding")
        smaller = scenario.with_overrides(["users=2", "repetitions.measured=1"])
    """

    name: str
    description: str = ""
    users: int = Field(ge=1, le=4096)
    turns: int = Field(ge=1, le=1000)
    opening_tokens: int = Field(ge=0, le=2_000_000)  # context before turn 1's new content
    turn_tokens: int = Field(ge=0, le=2_000_000)  # new tokens each turn (a tool result)
    output_tokens: int = Field(ge=1, le=1_000_000)
    exact_output: bool = True  # send ignore_eos + min_tokens; a turn is valid only at length
    repetitions: Repetitions = Repetitions()
    pacing: Pacing = Pacing()
    nonce: Literal["session", "run"] = "session"
    content: Content = Content()
    sampling: Sampling = Sampling()
    timeouts: Timeouts = Timeouts()
    extra_body: dict[str, Any] = Field(default_factory=dict)  # server-specific request fields

    @model_validator(mode="after")
    def _extra_body_cannot_override_core(self) -> Scenario:
        reserved = {"model", "messages", "stream", "stream_options"} & set(self.extra_body)
        if reserved:
            raise ValueError(f"extra_body may not set {sorted(reserved)}; the client owns them")
        return self

    def with_overrides(self, assignments: Iterable[str]) -> Scenario:
        """Return a copy with ``FIELD=VALUE`` assignments applied (dotted paths)."""
        return apply_overrides(self, assignments)


def _scenario_dirs() -> list[Path]:
    dirs: list[Path] = []
    packaged = resources.files("workloads") / "scenarios"
    if packaged.is_dir():
        dirs.append(Path(str(packaged)))
    # A source checkout (editable install) keeps them at the repository root.
    checkout = Path(__file__).resolve().parents[2] / "scenarios"
    if checkout.is_dir() and checkout not in dirs:
        dirs.append(checkout)
    return dirs


def list_scenarios() -> dict[str, Path]:
    """Names of the packaged scenarios and the files they load from."""
    found: dict[str, Path] = {}
    for directory in _scenario_dirs():
        for path in sorted(directory.glob("*.toml")):
            found.setdefault(path.stem, path)
    return found


def _format_validation_error(err: ValidationError, source: str) -> str:
    lines = []
    for item in err.errors():
        field = ".".join(str(p) for p in item["loc"]) or "(top level)"
        got = item.get("input")
        got_text = "" if isinstance(got, dict) or got is None else f" (got {got!r})"
        lines.append(f"{source}: field '{field}': {item['msg']}{got_text}")
    return "\n".join(lines)


def _validate(data: Mapping[str, Any], source: str) -> Scenario:
    try:
        return Scenario.model_validate(data)
    except ValidationError as err:
        raise ScenarioError(_format_validation_error(err, source)) from err


def load_scenario(name_or_path: str | Path) -> Scenario:
    """Load a scenario by packaged name (``"five-user-coding"``) or from a TOML file path."""
    path = Path(name_or_path)
    if not path.is_file():
        known = list_scenarios()
        if str(name_or_path) not in known:
            names = ", ".join(sorted(known)) or "none"
            raise ScenarioError(
                f"no scenario file or packaged scenario named {str(name_or_path)!r}; "
                f"packaged scenarios: {names}"
            )
        path = known[str(name_or_path)]
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise ScenarioError(f"{path}: not valid TOML: {err}") from err
    data.setdefault("name", path.stem)
    return _validate(data, str(path))


def _parse_value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text  # a bare word: take it as a string


def apply_overrides(scenario: Scenario, assignments: Iterable[str]) -> Scenario:
    """Apply ``FIELD=VALUE`` assignments (``repetitions.measured=1``, ``users=2``).

    VALUE is read as a TOML value (``2``, ``1.5``, ``true``, ``[1, 2]``, ``"text"``); a bare
    word is a string.
    """
    data = copy.deepcopy(scenario.model_dump())
    for assignment in assignments:
        field, sep, value = assignment.partition("=")
        field = field.strip()
        if not sep or not field:
            raise ScenarioError(f"--set {assignment!r}: expected FIELD=VALUE")
        node: dict[str, Any] = data
        parts = field.split(".")
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                raise ScenarioError(f"--set {assignment!r}: {part!r} is not a group of fields")
            node = child
        if parts[-1] not in node and node is not data.get("extra_body"):
            raise ScenarioError(
                f"--set {assignment!r}: no field {field!r}; fields here: {', '.join(sorted(node))}"
            )
        node[parts[-1]] = _parse_value(value.strip())
    return _validate(data, "--set")
