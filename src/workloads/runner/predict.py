"""predict(): a scenario played against the simulated engine on a virtual clock — no
server, no HTTP, no sleeping — into the RunResult a run makes, marked predicted.

    result = predict("five-user-coding", profile="fast")              # a named profile
    result = predict("five-user-coding", profile="server.toml")       # what `fit` wrote
    python -m workloads predict five-user-coding --profile server.toml

The engine (:class:`~workloads.servers.simulated.engine.Engine`) plans a step and completes
it apart; here the clock between the two is a number: a step planned at ``now`` completes at
``now`` + its modelled duration, and the requests due meanwhile join the next step, as they
would join a running server's. Each session plays its plan (``core/agent.session_plan``, the
same draws as a run's): turn 1 is sent when the repetition starts (lock-step: the barrier)
plus its pause, each later turn at the previous one's end plus its pause (lock-step: the
barrier, when every session's turn before it ended). Prompts are token counts made of ids:
a session's turn k sends its turn k − 1 prompt, that reply's ids and ``new_tokens`` more,
so the engine's prefix cache serves what it would serve the session's own history (the
reply's last token was never computed, as on the simulated server: 9,696 of 9,704 cached at
five-user-coding's turn 2). Warm-up and measured repetitions, cells and their order are a
run's; every session of every repetition starts from ids of its own (fresh nonces), but for
``shared_prefix_tokens`` with nonce "run".

The records are a run's with virtual stamps: sent, first and last token, the gap between
every emission (a content chunk each, as the simulated server writes them), usage with
cached tokens, the shareable prefix (exact). What a run adds around the engine is the
server's intake (:data:`INTAKE_NS`, or the round trip a fit measured: a profile file's
``provenance.overhead_s``), one request at a time; not modelled: the correctness gate, the
likelihood probe, server telemetry and the profile's faults.

Agent scenarios (``[agent]``: human requests, tool steps, sub-agents, compactions) and
fleets are refused: their sub-agents and windows are not played here yet.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import random
import time
import tomllib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workloads.core import aggregate, stats
from workloads.core.agent import Step, session_plan
from workloads.core.concurrency import concurrency
from workloads.core.corpus import stream_rng
from workloads.core.pressure import kv_figures
from workloads.model.errors import ScenarioError
from workloads.model.records import TurnRecord
from workloads.model.results import (
    CellSummary,
    PredictionInfo,
    RepetitionNonces,
    RunResult,
    TargetInfo,
    Window,
    cell_coordinates,
    environment,
)
from workloads.model.scenario import Cell, Scenario, load_scenario
from workloads.runner.pacing import arrival_times
from workloads.runner.turn import step_fields
from workloads.servers.simulated.engine import Engine, RequestTruth, Sequence
from workloads.servers.simulated.profiles import Profile, sim_profile

__all__ = ["INTAKE_NS", "VirtualEngine", "predict", "predictable", "profile_identity"]

# The virtual clock starts at 1 s, so that no stamp is 0.
START_NS = 1_000_000_000
# Token ids: a session's prompts open with an id of its own (the nonce: its blocks' chained
# hashes are then its own), and are filled with FILLER after it; a shared prefix opens with
# an id of its repetition's. Only block hashes are computed from ids: their values mean
# nothing else.
FILLER = 7
_FIRST_ID = 1_000
# Requests reach the engine one after another, in the order they fell due, each taking the
# server's intake at least this long: the client sends requests due together a send slice
# apart (core/send_slice.py: ~40-80 µs of work each), and the server parses, tokenizes and
# plans each on one thread, first come, first served (the simulated server: one worker
# thread). So an idle engine starts its first step with the first request alone and the
# others join the next, as on the simulated server (and vLLM, whose engine core takes the
# first request it is handed). Any gap under a step gives that schedule: five-user-coding on
# fast, whose turn-2 step alone takes 7.5 ms, read turn 2's median TTFT 11% short of the
# run's with the requests reaching the engine together. A profile `fit` wrote also has the
# round trip its lone cold prompts' TTFT carried beyond the engine (provenance.overhead_s:
# 7.0 ms [4.0-9.9] on the simulated server of a 2-core host, whose intake took 3-8 ms a
# request and its engine's wake-up 1-3 ms): each request's intake then takes that long.
INTAKE_NS = 200_000


def predictable(scenario: Scenario) -> None:
    """Raise :class:`ScenarioError` (one line) for a scenario :func:`predict` does not play."""
    if scenario.fleet is not None or scenario.agent is not None:
        what = "a fleet of agent sessions" if scenario.fleet is not None else "[agent] steps"
        raise ScenarioError(
            f"scenario {scenario.name!r} has {what} (sub-agents, compactions, fleet windows), "
            "which predict does not play yet: predict fixed-shape scenarios (no [agent]), or "
            f"run {scenario.name} on the embedded simulator"
        )


def profile_identity(profile: str | Profile, sim: dict[str, Any] | None = None) -> PredictionInfo:
    """What a prediction's result says of its profile: the name, the file it came from, a
    sha256 (of the file's bytes, which ``sha256sum FILE`` tells, or, for a named profile or
    one with ``sim`` overrides, of the played profile's canonical JSON), and the round trip
    the fit measured beyond the engine (a file's ``provenance.overhead_s``; None: none)."""
    played = _profile(profile, sim)
    file = profile if isinstance(profile, str) and profile.endswith(".toml") else None
    trip = None
    if file is not None:
        data = Path(file).read_bytes()  # load_profile read it already: a bad file was told
        value = tomllib.loads(data.decode()).get("provenance", {}).get("overhead_s", {})
        if isinstance(value, dict) and isinstance(value.get("value"), int | float):
            trip = max(0.0, float(value["value"]))
    if file is not None and not _overrides(sim):
        digest = hashlib.sha256(data).hexdigest()
    else:
        digest = hashlib.sha256(played.model_dump_json().encode()).hexdigest()
    return PredictionInfo(profile=played.name, file=file, profile_sha256=digest, round_trip_s=trip)


def _overrides(sim: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (sim or {}).items() if k != "profile"}


def _profile(profile: str | Profile, sim: dict[str, Any] | None) -> Profile:
    return sim_profile(_overrides(sim), default=profile)


@dataclass(eq=False)
class _Request:
    """One turn of one session: what it sends, and what the engine did with it."""

    cell: int
    repetition: int
    warmup: bool
    session: int
    step: Step
    prompt: list[int]
    output_tokens: int  # the reply's length (the server's, when not exact)
    shareable: int
    due_ns: int
    seed: int
    emitted: list[int] = field(default_factory=list)  # virtual ns of each content chunk
    truth: RequestTruth | None = None


class VirtualEngine:
    """The simulated engine on a virtual clock: requests are sent at their due time, steps
    take their modelled duration, and nothing sleeps. ``on_done`` gets each request once its
    last token is out (it may send more)."""

    def __init__(
        self,
        profile: Profile,
        on_done: Callable[[_Request], None],
        *,
        intake_ns: int = INTAKE_NS,  # the server's intake of one request (serial)
    ) -> None:
        self.engine = Engine(profile)
        self.intake_ns = intake_ns
        self.now = START_NS
        self.on_done = on_done
        self.steps = 0
        self._due: list[tuple[int, int, _Request]] = []
        self._inbound: deque[tuple[int, _Request]] = deque()  # through the intake, in order
        self._intake = START_NS  # when the intake takes the next request
        self._order = itertools.count()
        self._live: dict[Sequence, _Request] = {}

    def send(self, request: _Request) -> None:
        heapq.heappush(self._due, (request.due_ns, next(self._order), request))

    def _arrive(self) -> None:
        """Hand the engine every request through the intake by now: in the order they fell
        due, each ``intake_ns`` after it fell due or the one before went through."""
        engine = self.engine
        while self._due and self._due[0][0] <= self.now:
            due, _, r = heapq.heappop(self._due)
            at = max(due, self._intake) + self.intake_ns
            self._intake = at
            self._inbound.append((at, r))
        while self._inbound and self._inbound[0][0] <= self.now:
            _, r = self._inbound.popleft()
            truth = RequestTruth(
                request_id=engine.next_request_id(),
                arrival_ns=r.due_ns,
                prompt_tokens=len(r.prompt),
            )
            r.truth = truth
            max_tokens = r.step.output_tokens
            if len(r.prompt) + max_tokens > engine.profile.max_model_len or not engine.fits(
                len(r.prompt), max_tokens
            ):
                truth.http_status = 400  # the server refuses it up front
                self.on_done(r)
                continue
            seq = engine.submit(
                r.prompt, [FILLER] * r.output_tokens, max_tokens, truth=truth, rng_seed=r.seed
            )
            self._live[seq] = r

    def run(self) -> int:
        """Play until nothing is due and the engine is idle; the clock then."""
        engine = self.engine
        while True:
            self._arrive()
            if not engine.waiting and not engine.running:
                if not self._due and not self._inbound:
                    return self.now
                # idle: the clock jumps to the next request due, or through the intake
                nexts = [self._due[0][0]] if self._due else []
                if self._inbound:
                    nexts.append(self._inbound[0][0])
                self.now = min(nexts)
                continue
            step = engine.plan_step()
            before = [(w.seq, w.seq.generated) for w in step.work]
            end = self.now + max(1, round(step.duration_s * 1e9))
            engine.complete_step(step, now_ns=end)
            self.now = end
            self.steps += 1
            for seq, generated in before:
                if seq.generated > generated:
                    self._live[seq].emitted.append(end)
            for seq, _ in before:
                if seq.finished and seq in self._live:
                    self.on_done(self._live.pop(seq))


@dataclass
class _Session:
    """A session's history as the engine saw it: its last prompt and reply."""

    plan: tuple[Step, ...]
    opening: list[int]
    history: list[int] = field(default_factory=list)  # last prompt + its reply's ids


class _Play:
    """One prediction: the scenario's cells and repetitions, in a run's order."""

    def __init__(self, scenario: Scenario, profile: Profile, intake_ns: int) -> None:
        self.scenario = scenario
        self.here = scenario  # the cell's scenario (cells play one after another)
        self.profile = profile
        self.sim = VirtualEngine(profile, self._done, intake_ns=intake_ns)
        self.records: list[TurnRecord] = []
        self.nonces: list[RepetitionNonces] = []
        self.windows: dict[int, tuple[int, int]] = {}  # per cell: measured span (virtual ns)
        self._ids = itertools.count(_FIRST_ID)
        self._sessions: dict[tuple[int, int, int], _Session] = {}
        self._lockstep = scenario.pacing.mode == "lockstep"

    def cell(self, cell: Cell) -> None:
        self.here = s = self.scenario.for_cell(cell)
        reps = s.repetitions
        for rep in range(reps.warmup + reps.measured):
            warmup = rep < reps.warmup
            start = self.sim.now
            self._repetition(cell.index, rep, warmup)
            if not warmup:
                first, last = self.windows.get(cell.index, (start, self.sim.now))
                self.windows[cell.index] = (min(first, start), max(last, self.sim.now))

    def _repetition(self, cell: int, rep: int, warmup: bool) -> None:
        s = self.here
        shared: list[int] = []
        if s.nonce == "run" and s.shared_prefix_tokens:
            shared = [next(self._ids)] + [FILLER] * (s.shared_prefix_tokens - 1)
        for i in range(s.users):
            self._sessions[(cell, rep, i)] = _Session(
                session_plan(s, cell, rep, i), [*shared, next(self._ids)]
            )
        self.nonces.append(
            RepetitionNonces(
                cell=cell,
                repetition=rep,
                warmup=warmup,
                run_nonce=f"virtual-{cell}.{rep}" if s.nonce == "run" else None,
                sessions=[f"virtual-{cell}.{rep}.{i}" for i in range(s.users)],
            )
        )
        start = self.sim.now
        starts = {i: start for i in range(s.users)}
        if s.pacing.arrivals is not None:  # sessions past the last arrival never start
            times = arrival_times(
                s.pacing.arrivals, s.users, stream_rng(s.content.seed, "arrivals", cell, rep)
            )
            starts = {i: start + round(t * 1e9) for i, t in enumerate(times)}
        firsts = [self._request(cell, rep, warmup, i, 1, at) for i, at in starts.items()]
        if firsts and shared:
            # turn 1 finds the shared prefix cached, but for the first to send it
            first = min(firsts, key=lambda r: (r.due_ns, r.session))
            for r in firsts:
                r.shareable = 0 if r is first else len(shared)
        for r in firsts:
            self.sim.send(r)
        self.sim.run()
        if not self._lockstep:
            return  # each session sent its next turn as its last one ended
        for turn in range(2, s.turns + 1):  # the barrier: every session's turn before ended
            at = self.sim.now
            for i in range(s.users):
                if turn <= len(self._sessions[(cell, rep, i)].plan):
                    self.sim.send(self._request(cell, rep, warmup, i, turn, at))
            self.sim.run()

    def _request(
        self, cell: int, rep: int, warmup: bool, i: int, turn: int, since: int
    ) -> _Request:
        """Session ``i``'s turn ``turn``, due its pause after ``since``."""
        session = self._sessions[(cell, rep, i)]
        step = session.plan[turn - 1]
        if turn == 1:  # sized to its whole prompt: the opening, then filler to prior + new
            whole = step.prior_tokens + step.new_tokens
            prompt = session.opening + [FILLER] * max(0, whole - len(session.opening))
        else:
            prompt = session.history + [FILLER] * step.new_tokens
        seed = stream_rng(self.profile.seed, "predict", cell, rep, i, turn).getrandbits(32)
        output = step.output_tokens
        if not self.here.exact_output:  # the simulated model stops at EOS half the time
            draw = random.Random(seed ^ 0x5EED)
            output = draw.randint(1, output) if draw.random() < 0.5 else output
        return _Request(
            cell=cell,
            repetition=rep,
            warmup=warmup,
            session=i,
            step=step,
            prompt=prompt,
            output_tokens=output,
            shareable=len(session.history),
            due_ns=since + round(step.pause_s * 1e9),
            seed=seed,
        )

    def _done(self, r: _Request) -> None:
        self.records.append(self._record(r))
        session = self._sessions[(r.cell, r.repetition, r.session)]
        truth = r.truth
        assert truth is not None
        if truth.http_status == 200:  # what the next turn sends: this prompt and its reply
            session.history = r.prompt + [FILLER] * truth.completion_tokens
        turn = r.step.turn
        if not self._lockstep and turn < len(session.plan):
            self.sim.send(
                self._request(r.cell, r.repetition, r.warmup, r.session, turn + 1, self.sim.now)
            )

    def _record(self, r: _Request) -> TurnRecord:
        truth = r.truth
        assert truth is not None
        step = r.step
        head: dict[str, Any] = {
            "repetition": r.repetition,
            "warmup": r.warmup,
            "session": r.session,
            "turn": step.turn,
            "cell": r.cell,
            "configured_prior_tokens": step.prior_tokens,
            "configured_prompt_tokens": step.prior_tokens + step.new_tokens,
            "tokenized_prompt_tokens": len(r.prompt),
            "pacing_lag_ns": 0,
            "started_ns": r.due_ns,
            "sent_ns": r.due_ns,
            "request_id": truth.request_id,
            **step_fields(step, None),
        }
        if truth.http_status != 200:
            return TurnRecord(
                **head,
                status="error",
                error_kind="http_4xx",
                error_message=f"{len(r.prompt)} prompt tokens and {step.output_tokens} to "
                f"generate do not fit the profile's context or KV cache",
                http_status=truth.http_status,
                headers_ns=r.due_ns,
                error_ns=r.due_ns,
                shareable_tokens=r.shareable,
                shareable_exact=True,
            )
        first, last = r.emitted[0], r.emitted[-1]
        completion = truth.completion_tokens
        exact = self.here.exact_output
        return TurnRecord(
            **head,
            status="ok",
            http_status=200,
            finish_reason=truth.finish_reason,
            valid=not exact or completion == step.output_tokens,
            prompt_tokens=len(r.prompt),
            completion_tokens=completion,
            cached_tokens=truth.cached_tokens,
            shareable_tokens=min(r.shareable, len(r.prompt)),
            shareable_exact=True,
            ttft_ns=first - r.due_ns,
            decode_tokens_per_s=(completion - 1) / ((last - first) / 1e9) if last > first else None,
            headers_ns=r.due_ns,
            first_content_ns=first,
            last_content_ns=last,
            done_ns=last,
            content_events=len(r.emitted),
            chunk_gaps_us=stats.chunk_gaps_us(r.emitted),
        )


def predict(
    scenario: Scenario | str | Path,
    profile: str | Profile = "fast",
    *,
    sim: dict[str, Any] | None = None,
    label: str | None = None,
    note: str | None = None,
) -> RunResult:
    """Play ``scenario`` against the simulated engine with ``profile`` (a name, a profile
    file as ``workloads fit`` writes it, or a :class:`Profile`; ``sim`` overrides its
    fields) on a virtual clock, and return the RunResult a run would make, its
    ``predicted`` naming the profile. Raises :class:`ScenarioError` for a scenario it does
    not play (:func:`predictable`) or a bad profile.

        result = predict("five-user-coding", profile="fast")
        print(result.summary.run.per_user_rate)
    """
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)
    predictable(scenario)
    played = _profile(profile, sim)
    info = profile_identity(profile, sim)
    trip = info.round_trip_s
    cpu = time.process_time()
    play = _Play(scenario, played, max(INTAKE_NS, round((trip or 0.0) * 1e9)))
    for cell in scenario.cells():
        play.cell(cell)
    info = info.model_copy(update={"cpu_s": round(time.process_time() - cpu, 3)})
    return _result(scenario, played, info, play, label=label, note=note)


def _window(span: tuple[int, int] | None) -> Window:
    return Window() if span is None else Window(duration_s=(span[1] - span[0]) / 1e9)


def _result(
    s: Scenario,
    profile: Profile,
    info: PredictionInfo,
    play: _Play,
    *,
    label: str | None,
    note: str | None,
) -> RunResult:
    records = sorted(play.records, key=lambda r: (r.cell, r.repetition, r.sent_ns or 0, r.session))
    lockstep = s.pacing.mode == "lockstep"
    target = TargetInfo(
        base_url=f"virtual:{info.file or profile.name}",
        model=profile.model,
        simulated=True,
        simulator_profile=profile.model_dump(),
    )
    kv = kv_figures(None, target)
    cells = None
    if s.swept:
        cells = [
            CellSummary(
                **cell_coordinates(s, cell),
                window=_window(play.windows.get(cell.index)),
                **aggregate.cell_figures(mine, users=cell.concurrency, lockstep=lockstep, **kv),
                goodput=aggregate.judged_goodput(mine, s.slo),
            )
            for cell in s.cells()
            if (mine := [r for r in records if r.cell == cell.index])
        ]
    spans = list(play.windows.values())
    run_span = (min(a for a, _ in spans), max(b for _, b in spans)) if spans else None
    warnings = []
    if any(rate for _, rate in profile.faults.rates()):
        warnings.append("the profile's faults are not predicted: every request was served")
    if s.nonce == "run" and not s.shared_prefix_tokens:
        warnings.append(
            'nonce = "run" without shared_prefix_tokens: the system message the sessions '
            "share has no token count here, so nothing of it was shared"
        )
    return RunResult(
        created_unix=time.time(),
        label=label,
        note=note,
        scenario=s,
        target=target,
        corpus={"name": "none (predicted: token counts, no text)"},
        nonces=play.nonces,
        window=_window(play.windows.get(0) if not s.swept else run_span),
        summary=aggregate.summarize(records, users=s.users, lockstep=lockstep, **kv),
        cells=cells,
        warnings=warnings,
        environment={**environment(), "clock": "virtual"},
        records=records,
        concurrency=concurrency(records),
        goodput=aggregate.judged_goodput(records, s.slo),
        predicted=info,
    )
