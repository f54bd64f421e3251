"""The Scenario model: what to run. Loaded from TOML by name or path, validated strictly.

A typo in a scenario file is an error that names the file and the field, never a silent
default (``extra="forbid"``). Overrides from the command line (``--set users=2``) are applied
to the raw data before validation, so they are checked by the same rules.
"""

from __future__ import annotations

import copy
import itertools
import math
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, model_validator

from workloads.model.base import Frozen
from workloads.model.errors import ScenarioError
from workloads.model.gate import GateMode
from workloads.model.slo import Slo

__all__ = [
    "Agent",
    "Arrivals",
    "Cell",
    "Compaction",
    "Content",
    "Distribution",
    "Fleet",
    "Pacing",
    "Repetitions",
    "Sampling",
    "Scenario",
    "Sizes",
    "Subagents",
    "Timeouts",
    "TokenCount",
    "TraceLimits",
    "apply_overrides",
    "high",
    "list_scenarios",
    "load_scenario",
    "nominal",
    "varies",
]


class Repetitions(Frozen):
    """How many passes over all sessions: warm-ups are run and discarded."""

    warmup: int = Field(default=1, ge=0, le=100)
    measured: int = Field(default=3, ge=1, le=1000)


def _check_points(points: list[tuple[float, float]] | None, kind: str) -> None:
    """A quantile table: ``[[q, value], ...]`` from q = 0 to q = 1, q rising, values not
    falling (raises ValueError naming what is wrong)."""
    if kind != "quantiles":
        if points is not None:
            raise ValueError(f'points is for kind = "quantiles", not {kind!r}')
        return
    if not points or len(points) < 2:
        raise ValueError('kind = "quantiles" needs points = [[0, low], ..., [1, high]]')
    qs = [q for q, _ in points]
    if qs[0] != 0.0 or qs[-1] != 1.0:
        raise ValueError("points must run from q = 0 to q = 1")
    for (q0, v0), (q1, v1) in itertools.pairwise(points):
        if not q1 > q0:
            raise ValueError(f"points' quantiles must rise: {q0} then {q1}")
        if v1 < v0:
            raise ValueError(f"points' values must not fall: {v0} at q = {q0}, {v1} at q = {q1}")
    if points[0][1] < 0:
        raise ValueError("points' values must not be negative")


class Distribution(Frozen):
    """A non-negative random duration in seconds.

    ``constant`` always gives ``median``; ``lognormal`` has the given median and shape
    ``sigma`` (a heavy right tail, like real tool and think times); ``exponential`` has the
    given median; ``quantiles`` interpolates a published quantile table ``points`` (``[[q,
    seconds], ...]`` from q = 0 to 1; log-linear between points, so a heavy tail stays heavy).
    ``max_s`` caps every draw so one unlucky draw cannot stall a run.
    """

    kind: Literal["constant", "lognormal", "exponential", "quantiles"] = "constant"
    median: float = Field(default=0.0, ge=0.0)
    sigma: float = Field(default=1.0, gt=0.0)
    max_s: float = Field(default=600.0, gt=0.0)
    points: list[tuple[float, float]] | None = None

    @model_validator(mode="after")
    def _points_fit_kind(self) -> Distribution:
        _check_points(self.points, self.kind)
        return self


class Sizes(Frozen):
    """A token count drawn per step (or per session, for an opening): integers in
    [``min``, ``max``].

    ``constant`` always gives ``median``; ``lognormal`` has the given median and shape
    ``sigma`` (real agents' output and tool-result sizes are right-skewed); ``quantiles``
    interpolates a published quantile table ``points`` (``[[q, tokens], ...]`` from q = 0 to
    1, log-linear between points). Draws come from the scenario's seed per (repetition,
    session, step), so both arms of a compare, and a replay, draw the same sizes.
    """

    kind: Literal["constant", "lognormal", "quantiles"] = "constant"
    median: float = Field(default=0.0, ge=0.0)
    sigma: float = Field(default=1.0, gt=0.0)
    min: int = Field(default=0, ge=0, le=2_000_000)
    max: int = Field(default=2_000_000, ge=0, le=2_000_000)
    points: list[tuple[float, float]] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Sizes:
        _check_points(self.points, self.kind)
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is above max ({self.max})")
        if self.kind == "lognormal" and self.median <= 0:
            raise ValueError('kind = "lognormal" needs a median above 0')
        return self

    @property
    def low(self) -> int:
        """The smallest value a draw can give."""
        if self.kind == "quantiles" and self.points:
            return min(max(round(self.points[0][1]), self.min), self.max)
        if self.kind == "constant":
            return min(max(round(self.median), self.min), self.max)
        return self.min


# A token count: a fixed integer, or sizes drawn from a distribution.
TokenCount = int | Sizes


def nominal(value: TokenCount) -> int:
    """A fixed count itself; a distribution's median (what a one-line description shows).
    Pure."""
    if isinstance(value, int):
        return value
    if value.kind == "quantiles" and value.points:
        below = [v for q, v in value.points if q <= 0.5]
        return min(max(round(below[-1]), value.min), value.max)
    return min(max(round(value.median), value.min), value.max)


def high(value: TokenCount) -> int:
    """A fixed count itself; a distribution's 99th percentile (a table's top), within its
    bounds: what to provision for (a server's context per session). Pure."""
    if isinstance(value, int):
        return value
    if value.kind == "quantiles" and value.points:
        top = value.points[-1][1]
    elif value.kind == "lognormal":
        top = value.median * math.exp(2.326 * value.sigma)
    else:
        top = value.median
    return min(max(round(top), value.min), value.max)


def describe(value: TokenCount) -> str:
    """A token count in a few characters: ``1,000``, or a distribution's median with a
    tilde, ``~214``. Pure."""
    if isinstance(value, int):
        return f"{value:,}"
    return f"{nominal(value):,}" if not varies(value) else f"~{nominal(value):,}"


def varies(value: TokenCount) -> bool:
    """Whether draws of ``value`` can differ. Pure."""
    return isinstance(value, Sizes) and value.kind != "constant" and value.min != value.max


class Arrivals(Frozen):
    """An open-loop fleet: sessions arrive as a Poisson process at ``rate_per_s``, until
    ``duration_s`` has passed (None: no time bound) or ``users`` sessions have arrived,
    whichever comes first. Concurrency is then an outcome, not a setting."""

    rate_per_s: float = Field(gt=0.0, le=100_000.0)
    duration_s: float | None = Field(default=None, gt=0.0)


class Pacing(Frozen):
    """When turns start.

    ``lockstep``: turn k of every session starts together (a barrier per turn), the way the
    seed records were made; a session with think or tool time waits that long after the
    barrier. ``free``: each session runs on its own clock. ``arrivals``: sessions arrive one
    by one (``arrivals``: a Poisson process), each then runs its turns on its own clock: an
    agent fleet. Either way a session waits ``think_time`` before every turn (before turn 1
    it staggers the starts) and also ``tool_time`` before turns after the first (the tool
    ran on the previous reply), counted from the end of its previous turn as an absolute
    deadline.
    """

    mode: Literal["lockstep", "free", "arrivals"] = "lockstep"
    think_time: Distribution = Distribution()
    tool_time: Distribution = Distribution()
    arrivals: Arrivals | None = None  # required with mode = "arrivals"
    # Multiplies every think and tool time drawn (after max_s), and a trace's arrival times
    # (run --trace): 0.01 plays a session's human pauses 100 times faster. Compressed pauses
    # change cache pressure (a prefix a real human's 5-minute pause would let the server
    # evict stays warm); the report says so.
    time_scale: float = Field(default=1.0, gt=0.0, le=1000.0)

    @model_validator(mode="after")
    def _arrivals_go_together(self) -> Pacing:
        if (self.mode == "arrivals") != (self.arrivals is not None):
            raise ValueError(
                'pacing.mode = "arrivals" and pacing.arrivals (rate_per_s, duration_s) go '
                "together: set both or neither"
            )
        return self


class TraceLimits(Frozen):
    """How much of a trace ``run --trace`` replays: reading stops after ``max_requests``
    requests or at the first later than ``max_duration_s`` seconds of trace time (before
    ``time_scale``; None: no time bound); the result says when it was cut. A file over
    ``max_bytes`` is refused before it is read."""

    max_requests: int = Field(default=100_000, ge=1, le=10_000_000)
    max_duration_s: float | None = Field(default=None, gt=0.0)
    max_bytes: int = Field(default=1 << 30, ge=1)


class Content(Frozen):
    """Where context text comes from, and what kind of user it imitates.

    ``corpus``: ``"stdlib"`` (the running Python's standard-library sources: real code,
    present offline; generated code-like text if this Python has no sources),
    ``"synthetic"`` (generated code-like text), or a directory path of the user's own
    repository. ``style``: ``"agent"`` (system prompt and tool schema, repository files,
    tool results each turn) or ``"chat"`` (a person asking short questions about code).
    ``seed`` makes the text reproducible: the same seed gives the same text, run after run;
    what keeps runs from warming each other's cache is the nonces, not the text.
    """

    corpus: str = "stdlib"
    style: Literal["agent", "chat"] = "agent"
    seed: int = 0


class Sampling(Frozen):
    """Sampling parameters sent with every request. ``None`` leaves the server's default."""

    temperature: float | None = Field(default=None, ge=0.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    seed: int | None = None


class Timeouts(Frozen):
    """Per-request limits. There is no total limit on a stream; a long answer is fine as long
    as bytes keep coming, so the read-gap timeout is what catches a stalled server."""

    connect_s: float = Field(default=10.0, gt=0.0)
    # the longest silence before the first or next chunk
    read_gap_s: float = Field(default=120.0, gt=0.0)
    turn_s: float = Field(default=1800.0, gt=0.0)  # hard cap for one request, prefill included
    # Hard cap for one correctness-gate request, waiting for a connection included (the cap
    # is never above read_gap_s or turn_s): the gate runs outside the windows, where a
    # stalling server should cost seconds, not read gaps. Its six cases are short (the
    # longest prompt ~1,500 tokens, the longest answer 96 tokens) and sent together; raise
    # this for a server that needs longer for them (one slot on a slow CPU serves them one
    # after another).
    gate_s: float = Field(default=30.0, gt=0.0)


class Compaction(Frozen):
    """Context compaction: before a step that would take the configured context past
    ``at_tokens``, the agent sends a summarisation request (the history + ``instruction``;
    the model's reply, ``summary_tokens`` long, is the summary, kept like any reply) and
    continues from the system message (prompt + tools) and the summary alone."""

    at_tokens: int = Field(ge=256, le=2_000_000)
    summary_tokens: TokenCount = 3000
    instruction: str = Field(
        default=(
            "Your context is nearly full. Write a detailed summary of this conversation so "
            "far: the task, the files read and changed, the decisions made, what is left to "
            "do. It replaces the conversation; continue from it."
        ),
        min_length=1,
        max_length=10_000,
    )


class Subagents(Frozen):
    """Sub-agents: a tool step spawns, with probability ``share``, ``count`` sub-agent
    sessions that share the parent's system message (prompt and tools) but not its history,
    each given a task of ``task_tokens`` and running ``steps`` tool steps of its own,
    concurrently; their final replies are the parent step's tool result."""

    share: float = Field(default=0.012, ge=0.0, le=1.0)
    count: TokenCount = 1
    steps: TokenCount = 8
    task_tokens: TokenCount = 300


class Agent(Frozen):
    """A real agent's session: a run of human requests, each followed by autonomous tool
    steps. A human request (``request_tokens`` of new text, after ``pacing.think_time``)
    starts ``steps_per_request`` steps in all: the first answers the human, the others each
    add a tool result (``turn_tokens``, after ``pacing.tool_time``). A session starts no
    human request once it has played ``steps_per_session`` steps (drawn; None: ``turns``):
    a request's loop always runs to its end, never past ``turns`` steps in all
    (compactions included)."""

    steps_per_session: TokenCount | None = None
    steps_per_request: TokenCount = 9
    request_tokens: TokenCount = 150
    compaction: Compaction | None = None
    subagents: Subagents | None = None
    # A per-step agent trace (JSONL; docs/architecture.md, "Trace replay") whose sessions'
    # steps are played instead of drawn ones: session i of the run plays the trace's i-th
    # session (by id), its pauses times pacing.time_scale. ``run --trace FILE`` sets it.
    trace: str | None = None


class Fleet(Frozen):
    """A fleet in steady state: ``users`` slots, each playing one agent session after
    another (a session that ends is replaced by a fresh one, with its own nonce and drawn
    plan) for as long as the run lasts, so sessions keep their real lengths and the server
    sees sessions starting, running and ending at once. Time bounds the run, not turns:
    each repetition is a **fleet window** of ``window_s`` seconds of one continuous fleet
    (the warm-up's first, then the measured ones); a step belongs to the window it is sent
    in, and no step is sent after the last window (steps in flight then finish).
    ``max_sessions`` bounds the sessions a cell's fleet starts (each has a fresh nonce).

    ``start``: "steady" (default) catches each slot's first session in mid-life, as a
    server that has been serving agents finds them: the session in progress at a random
    moment, drawn in proportion to its length, at a step drawn uniformly within it (the
    renewal process's stationary state); its first request carries the history of that
    depth, which the server has not seen. "fresh" starts every slot at a session's first
    step (all sessions young together: shallow contexts and short loops at first)."""

    window_s: float = Field(gt=0.0, le=86_400.0)
    max_sessions: int = Field(default=1024, ge=1, le=65_536)
    start: Literal["steady", "fresh"] = "steady"


@dataclass(frozen=True, slots=True)
class Cell:
    """One coordinate of a run: its concurrency and its prior depth. A scenario without sweep
    axes has exactly one cell, ``(users, opening_tokens)``."""

    index: int
    concurrency: int
    prior_tokens: int


class Scenario(Frozen):
    """What to run: users, turns, depths, output length, pacing, content, repetitions.

    Load a packaged one by name, or your own file::

        scenario = workloads.load_scenario("five-user-coding")
        smaller = scenario.with_overrides(["users=2", "repetitions.measured=1"])

    Depths are counted in the *target's* tokens, chat template included. ``opening_tokens``
    is the rendered chat before turn 1's new content (system prompt, tool schema, task,
    repository files). ``turn_tokens`` is what each turn adds to the prompt beyond what the
    server has already seen (the opening, or the previous prompt and its reply): the tool
    result or question and its template framing. So turn k's prompt is configured as
    ``opening_tokens + k × turn_tokens + (k − 1) × output_tokens``.

    A sweep lists its axes: ``concurrency`` replaces ``users`` and ``prior_tokens`` replaces
    ``opening_tokens``, cell by cell; every cell runs its own warm-up and measured
    repetitions, and the result has one summary per cell.
    """

    name: str
    description: str = ""
    users: int = Field(ge=1, le=4096)
    turns: int = Field(ge=1, le=1000)
    # Token counts: an integer, or a distribution drawn per session (the opening) or per
    # step (the others): ``{ kind = "lognormal", median = 214, sigma = 1.3, max = 4096 }``.
    opening_tokens: TokenCount = 0  # context before turn 1's content
    turn_tokens: TokenCount  # new tokens each turn (a tool result)
    output_tokens: TokenCount  # generated tokens each turn (max_tokens; exact_output forces it)
    exact_output: bool = True  # send ignore_eos + min_tokens; a turn is valid only at length
    repetitions: Repetitions = Repetitions()
    pacing: Pacing = Pacing()
    nonce: Literal["session", "run"] = "session"
    # nonce = "run" only: tokens of the byte-identical system message every session of a
    # repetition shares (prompt, tool schema, then shared repository files). None: the
    # system prompt and tool schema as they are.
    shared_prefix_tokens: int | None = Field(default=None, ge=1, le=2_000_000)
    # Whose tokens size the prompts: "auto" = the target's /tokenize when it has one (exact),
    # else tiktoken corrected from the warm-up's usage; "tiktoken" = never call /tokenize.
    tokenizer: Literal["auto", "tiktoken"] = "auto"
    concurrency: list[Annotated[int, Field(ge=1, le=4096)]] | None = Field(
        default=None, min_length=1
    )
    prior_tokens: list[Annotated[int, Field(ge=0, le=2_000_000)]] | None = Field(
        default=None, min_length=1
    )
    content: Content = Content()
    sampling: Sampling = Sampling()
    timeouts: Timeouts = Timeouts()
    extra_body: dict[str, Any] = Field(default_factory=dict)  # server-specific request fields
    # The correctness gate (workloads.core.gate), sent greedily before and after the measured
    # windows: "report" records and prints it; "required" also marks the run invalid when a
    # case fails; "off" does not send it.
    gate: GateMode = "report"
    # How turns are sized inside a measured window when streams may overlap (pacing "free"
    # or "arrivals"; lock-step sizes between barriers, always exactly): "estimate" = quiet
    # sizing, tiktoken corrected by what the warm-up's exact sizing taught, no /tokenize call
    # while measured streams are in flight; "exact" = the target's /tokenize anyway (exact
    # depths, but its calls load the server under test during the window).
    sizing_during_window: Literal["estimate", "exact"] = "estimate"
    trace: TraceLimits = TraceLimits()  # run --trace only: how much of the trace to replay
    # A real agent's session (human requests, tool steps, compaction, sub-agents); None:
    # every turn adds turn_tokens, the fixed shape of the hand-made records.
    agent: Agent | None = None
    # Tool schemas sent with every request: "coding" is a coding agent's tool set (read,
    # edit, write, bash, grep, glob, task); a list gives your own OpenAI-style tool objects;
    # "none" sends none.
    tools: Literal["none", "coding"] | list[dict[str, Any]] = "none"
    # How a request with tools asks for calls. "plan" (the default): the plan decides, so
    # every arm sends the same steps and each step follows the reply it needs: a request
    # whose next step is a tool result sends tool_choice "required", one whose next step is
    # a human request or a compaction (or that ends the session) "none" (vLLM, SGLang and
    # llama.cpp --jinja honour both). "auto": no tool_choice is sent; the model decides and
    # the plan is played as drawn whatever it did.
    tool_choice: Literal["plan", "auto"] = "plan"
    # The SLO each request is judged by (latency limits, per step kind if wanted): the
    # result then has goodput and session goodput (workloads.core.goodput). None: no SLO.
    slo: Slo | None = None
    # A steady-state fleet of agent sessions bounded by time (agent scenarios, free pacing).
    fleet: Fleet | None = None
    # Simulator overrides the scenario runs with on the embedded simulated server (no
    # target), as ``--sim`` sets them (``kv_capacity_tokens = 165000``): the caller's own
    # win key by key, and a caller's ``profile=NAME`` starts from that profile alone.
    sim: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _counts_in_range(self) -> Scenario:
        checks = [
            ("opening_tokens", self.opening_tokens, 0),
            ("turn_tokens", self.turn_tokens, 0),
            ("output_tokens", self.output_tokens, 1),
        ]
        for name, value, low in checks:
            if isinstance(value, int) and not low <= value <= 2_000_000:
                raise ValueError(f"{name} must be between {low} and 2,000,000 (got {value})")
            if isinstance(value, Sizes) and value.low < low:
                raise ValueError(f"{name} can draw {value.low}; its min must be at least {low}")
        return self

    @model_validator(mode="after")
    def _extra_body_cannot_override_core(self) -> Scenario:
        reserved = {"model", "messages", "stream", "stream_options"} & set(self.extra_body)
        if reserved:
            raise ValueError(f"extra_body may not set {sorted(reserved)}; the client owns them")
        return self

    @model_validator(mode="after")
    def _shared_prefix_fits(self) -> Scenario:
        if self.shared_prefix_tokens is None:
            return self
        if self.nonce != "run":
            raise ValueError(
                'shared_prefix_tokens needs nonce = "run" (with nonce = "session" '
                "sessions share nothing)"
            )
        opening = self.opening_tokens
        low = opening if isinstance(opening, int) else opening.low
        smallest = min(self.prior_tokens or [low])
        if self.shared_prefix_tokens > smallest:
            raise ValueError(
                f"shared_prefix_tokens ({self.shared_prefix_tokens}) must fit in the opening "
                f"context ({smallest} tokens); raise opening_tokens or lower it"
            )
        return self

    @model_validator(mode="after")
    def _fleet_plays_agents(self) -> Scenario:
        if self.fleet is None:
            return self
        if self.agent is None or self.agent.trace is not None:
            raise ValueError(
                "fleet: needs an [agent] table with drawn plans, not a trace (fleet=none "
                "plays repetitions of fixed sessions)"
            )
        if self.pacing.mode != "free":
            raise ValueError(
                f"fleet: needs pacing.mode = 'free' (got {self.pacing.mode!r}; fleet=none "
                "plays repetitions of fixed sessions)"
            )
        if self.fleet.max_sessions < self.users:
            raise ValueError(
                f"fleet.max_sessions: {self.fleet.max_sessions} is fewer than users "
                f"({self.users}): every slot needs a session"
            )
        return self

    @model_validator(mode="after")
    def _arrivals_set_no_concurrency(self) -> Scenario:
        if self.pacing.mode == "arrivals" and self.concurrency is not None:
            raise ValueError(
                'with pacing.mode = "arrivals" concurrency is an outcome of the arrival '
                "rate: sweep pacing.arrivals.rate_per_s in separate runs, not concurrency"
            )
        return self

    @property
    def swept(self) -> bool:
        """True when the scenario lists a sweep axis (even with a single value)."""
        return self.concurrency is not None or self.prior_tokens is not None

    def cells(self) -> list[Cell]:
        """The run's coordinates, concurrency outer, prior depth inner, in file order."""
        cs = self.concurrency or [self.users]
        ps = self.prior_tokens or [nominal(self.opening_tokens)]
        coords = [(c, p) for c in cs for p in ps]
        return [Cell(i, c, p) for i, (c, p) in enumerate(coords)]

    def for_cell(self, cell: Cell) -> Scenario:
        """This scenario at one cell: ``users`` and ``opening_tokens`` set, no sweep axes."""
        return self.model_copy(
            update={
                "users": cell.concurrency,
                "opening_tokens": cell.prior_tokens if self.prior_tokens else self.opening_tokens,
                "concurrency": None,
                "prior_tokens": None,
            }
        )

    def configured_prompt_tokens(self, turn: int) -> int:
        """Turn ``turn``'s configured prompt: prior context plus this turn's new tokens (with
        sizes drawn from distributions, at their medians; each record has its own)."""
        return self.configured_prior_tokens(turn) + nominal(self.turn_tokens)

    def configured_prior_tokens(self, turn: int) -> int:
        """Configured context before turn ``turn``'s new content (medians, as above)."""
        step = nominal(self.turn_tokens) + nominal(self.output_tokens)
        return nominal(self.opening_tokens) + (turn - 1) * step

    @property
    def sizes_vary(self) -> bool:
        """Whether any size is drawn from a distribution that can vary, or the agent model
        shapes the session (step kinds, compaction, sub-agents)."""
        counts = (self.opening_tokens, self.turn_tokens, self.output_tokens)
        return self.agent is not None or any(varies(c) for c in counts)

    def total_turns(self) -> int:
        """Requests the whole run sends, warm-ups and every cell included."""
        reps = self.repetitions.warmup + self.repetitions.measured
        return sum(reps * cell.concurrency * self.turns for cell in self.cells())

    def with_overrides(self, assignments: Iterable[str]) -> Scenario:
        """Return a copy with ``FIELD=VALUE`` assignments applied (dotted paths)."""
        return apply_overrides(self, assignments)


def _scenario_dirs() -> list[Path]:
    dirs: list[Path] = []
    packaged = resources.files("workloads") / "scenarios"
    if packaged.is_dir():
        dirs.append(Path(str(packaged)))
    # A source checkout (editable install) keeps them at the repository root.
    checkout = Path(__file__).resolve().parents[3] / "scenarios"
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


# Errors pydantic gives for each member of a union a value did not match: beside the real
# error of the member it was meant for (a distribution's table), "should be a valid integer"
# only misleads.
_UNION_MISMATCH = {
    "int_type",
    "int_parsing",
    "int_from_float",
    "model_type",
    "dict_type",
    "literal_error",
    "string_type",
    "list_type",
}


def _field_name(loc: tuple[int | str, ...]) -> str:
    """The dotted field of an error location, without pydantic's union member tags
    (``int``, ``function-after[...]``, ``Sizes``)."""
    parts = [
        str(p)
        for p in loc
        if not (isinstance(p, str) and ("[" in p or p in ("int", "str", "list") or p[:1].isupper()))
    ]
    return ".".join(parts) or "(top level)"


def _format_validation_error(err: ValidationError, source: str) -> str:
    by_field: dict[str, list[Any]] = {}
    for item in err.errors():
        by_field.setdefault(_field_name(item["loc"]), []).append(item)
    lines = []
    for field, items in by_field.items():
        real = [i for i in items if i["type"] not in _UNION_MISMATCH] or items[:1]
        for item in real:
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


def parse_value(text: str) -> Any:
    """A command-line value as TOML (``2``, ``true``, ``[1, 2]``); a bare word is a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text  # a bare word: take it as a string


def apply_overrides(scenario: Scenario, assignments: Iterable[str]) -> Scenario:
    """Apply ``FIELD=VALUE`` assignments (``repetitions.measured=1``, ``users=2``).

    VALUE is read as a TOML value (``2``, ``1.5``, ``true``, ``[1, 2]``, ``"text"``); a bare
    word is a string; ``none`` turns an optional table off (``fleet=none``).
    """
    data = copy.deepcopy(scenario.model_dump())
    for assignment in assignments:
        field, sep, value = assignment.partition("=")
        field = field.strip()
        if not sep or not field:
            raise ScenarioError(f"scenario override {assignment!r}: expected FIELD=VALUE")
        node: dict[str, Any] = data
        parts = field.split(".")
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                raise ScenarioError(
                    f"scenario override {assignment!r}: {part!r} is not a group of fields"
                )
            node = child
        if parts[-1] not in node and node is not data.get("extra_body"):
            raise ScenarioError(
                f"scenario override {assignment!r}: no field {field!r}; fields here: "
                f"{', '.join(sorted(node))}"
            )
        current = node.get(parts[-1])
        if value.strip() == "none" and (isinstance(current, dict) or current is None):
            node[parts[-1]] = None  # an optional table turned off (fleet=none, slo=none)
        else:
            node[parts[-1]] = parse_value(value.strip())
    return _validate(data, "scenario overrides")
