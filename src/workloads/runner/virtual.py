"""The simulated engine on a virtual clock, and the sessions a prediction plays against it
(:mod:`workloads.runner.predict`): no server, no HTTP, no sleeping.

The engine (:class:`~workloads.servers.simulated.engine.Engine`) plans a step and completes
it apart; here the clock between the two is a number: a step planned at ``now`` completes at
``now`` + its modelled duration, and the requests that reach the engine meanwhile join the
next step, as they would join a running server's. Requests pass the server's intake one at
a time, in the order they fell due (:data:`INTAKE_NS`).

Sessions play their plans (``core/agent``: the same draws as a run's) as
:mod:`workloads.runner.repetition`, :mod:`~workloads.runner.fleet` and
:mod:`~workloads.runner.subagents` play them: lock-step barriers, free-running sessions,
arrivals, sub-agents that run before their parent's step and hand it their replies, a fleet's
slots replacing sessions until its last window ends. Prompts are token counts made of ids:
a session's step sends its last prompt, that reply's ids and the step's ``new_tokens``, so
the engine's prefix cache serves what it would serve the session's own history (the reply's
last token was never computed, as on the simulated server); a compaction's follow-up keeps
the system message's ids alone; sub-agents open with their parent's. Every session opens
with an id of its own (its nonce), after the shared prefix's with nonce "run".
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workloads.core import stats
from workloads.core.agent import Step, child_session, fleet_plan, session_plan, top_sessions
from workloads.core.corpus import stream_rng
from workloads.model.records import TurnRecord
from workloads.model.results import RepetitionNonces
from workloads.model.scenario import Cell, Scenario
from workloads.runner.pacing import arrival_times
from workloads.runner.turn import step_fields
from workloads.servers.simulated.engine import Engine, RequestTruth, Sequence
from workloads.servers.simulated.profiles import Profile

__all__ = ["INTAKE_NS", "START_NS", "VirtualEngine", "VirtualRun"]

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


@dataclass(eq=False)
class _Session:
    """One session's state between its steps: what the engine has seen of it."""

    number: int
    plan: tuple[Step, ...]
    system: list[int]  # the leading ids a compaction keeps and its sub-agents open with
    opening: list[int]  # turn 1's ids before its filler: the system's, then its nonce
    repetition: int
    warmup: bool
    parent: _Session | None = None
    shared: object | None = None  # its group's key when the system is shared (nonce "run")
    history: list[int] = field(default_factory=list)  # the last prompt and its reply's ids
    done: int = 0  # steps played: the next is plan[done]
    since: int = 0  # when its last step ended (or it started)
    compacted: bool = False  # its last step was a compaction, answered
    spawned: int = 0  # sub-agents it spawned, in all
    kids_left: int = 0  # sub-agents of its next step still playing
    kids_done: bool = False  # its next step's sub-agents have all ended
    on_end: Callable[[], None] | None = None  # a fleet slot's: its plan ended in time


@dataclass(eq=False)
class _Request:
    """One step of one session: what it sends, and what the engine did with it."""

    session: _Session
    step: Step
    cell: int
    prompt: list[int]
    output_tokens: int  # the reply's length (the server's, when not exact)
    shareable: int
    due_ns: int
    seed: int
    emitted: list[int] = field(default_factory=list)  # virtual ns of each content chunk
    truth: RequestTruth | None = None


class VirtualEngine:
    """The simulated engine on a virtual clock: requests are sent at their due time, pass
    the intake, take their steps' modelled durations, and nothing sleeps. ``on_sent`` gets
    each request as it reaches the engine, ``on_done`` once its last token is out (it may
    send more)."""

    def __init__(
        self,
        profile: Profile,
        on_done: Callable[[_Request], None],
        on_sent: Callable[[_Request], None],
        *,
        intake_ns: int = INTAKE_NS,  # the server's intake of one request (serial)
    ) -> None:
        self.engine = Engine(profile)
        self.intake_ns = intake_ns
        self.now = START_NS
        self.on_done = on_done
        self.on_sent = on_sent
        self._due: list[tuple[int, int, _Request]] = []
        self._inbound: deque[tuple[int, _Request]] = deque()  # through the intake, in order
        self._intake = START_NS  # when the intake took the last request
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
            self._intake = max(due, self._intake) + self.intake_ns
            self._inbound.append((self._intake, r))
        while self._inbound and self._inbound[0][0] <= self.now:
            _, r = self._inbound.popleft()
            self.on_sent(r)
            r.truth = truth = RequestTruth(
                request_id=engine.next_request_id(), arrival_ns=r.due_ns, prompt_tokens=0
            )
            limit = r.step.output_tokens
            if len(r.prompt) + limit > engine.profile.max_model_len or not engine.fits(
                len(r.prompt), limit
            ):
                truth.http_status = 400  # the server refuses it up front
                self.on_done(r)
                continue
            plan = [FILLER] * r.output_tokens
            self._live[engine.submit(r.prompt, plan, limit, truth=truth, rng_seed=r.seed)] = r

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
            for seq, generated in before:
                if seq.generated > generated:
                    self._live[seq].emitted.append(end)
            for seq, _ in before:
                if seq.finished and seq in self._live:
                    self.on_done(self._live.pop(seq))


class VirtualRun:
    """A scenario's cells played in a run's order against a :class:`VirtualEngine`: their
    records, nonces and measured windows (virtual ns)."""

    def __init__(self, scenario: Scenario, profile: Profile, *, intake_ns: int) -> None:
        self.scenario = scenario
        self.here = scenario  # the cell's scenario (cells play one after another)
        self.profile = profile
        self.sim = VirtualEngine(profile, self._done, self._sent, intake_ns=intake_ns)
        self.records: list[TurnRecord] = []
        self.nonces: list[RepetitionNonces] = []
        self.windows: dict[int, tuple[int, int]] = {}  # per cell: its measured span
        self._ids = itertools.count(_FIRST_ID)
        self._cell = 0
        self._lockstep = scenario.pacing.mode == "lockstep"
        self._sent_groups: set[object] = set()  # shared prefixes some request has sent
        self._end: int | None = None  # a fleet's: no step of a user's session starts after
        self._window: Callable[[int], tuple[int, bool]] | None = None  # a fleet's

    def cell(self, cell: Cell) -> None:
        """Play one cell: its warm-up and measured repetitions, or its fleet."""
        self.here = s = self.scenario.for_cell(cell)
        self._cell = cell.index
        if s.fleet is not None:
            self._fleet()
            return
        reps = s.repetitions
        for rep in range(reps.warmup + reps.measured):
            start = self.sim.now
            self._repetition(rep, rep < reps.warmup)
            if rep >= reps.warmup:
                first, _ = self.windows.get(cell.index, (start, 0))
                self.windows[cell.index] = (first, self.sim.now)

    # --- sessions --------------------------------------------------------------------------

    def _shared(self, group: object) -> tuple[list[int], object | None]:
        s = self.here
        if s.nonce == "run" and s.shared_prefix_tokens:
            return [next(self._ids)] + [FILLER] * (s.shared_prefix_tokens - 1), group
        return [], None

    def _open(
        self,
        number: int,
        plan: tuple[Step, ...],
        system: list[int],
        rep: int,
        warmup: bool,
        *,
        parent: _Session | None = None,
        shared: object | None = None,
    ) -> _Session:
        opening = [*system, next(self._ids)]
        return _Session(number, plan, system, opening, rep, warmup, parent, shared)

    def _begin(self, session: _Session, at: int) -> None:
        session.since = at
        self._next(session)

    def _next(self, session: _Session) -> None:
        """Send a free-running session's next step (after its sub-agents, if it spawns any),
        or end it."""
        if session.done >= len(session.plan):
            self._ended(session)
            return
        step = session.plan[session.done]
        due = session.since + round(step.pause_s * 1e9)
        if step.children:  # the tool's run time is its sub-agents'
            if not session.kids_done:
                if not self._over(session, due):
                    self._spawn(session)
                return
            due = self.sim.now
        if not self._over(session, due):
            self.sim.send(self._request(session, due))

    def _over(self, session: _Session, due: int) -> bool:
        """A fleet's user session due after its last window: it starts nothing more (its
        slot neither; sub-agents finish what they started)."""
        return session.parent is None and self._end is not None and due >= self._end

    def _lockstep_parent(self, session: _Session) -> bool:
        return self._lockstep and session.parent is None

    def _spawn(self, session: _Session) -> None:
        """Start the sub-agents ``session``'s next step spawns, each on its own clock."""
        children = session.plan[session.done].children
        session.kids_left = len(children)
        top = top_sessions(self.here)
        for plan in children:
            number = child_session(top, session.number, session.spawned)
            session.spawned += 1
            kid = self._open(
                number, plan, session.system, session.repetition, session.warmup, parent=session
            )
            self._begin(kid, self.sim.now)

    def _ended(self, session: _Session) -> None:
        parent = session.parent
        if parent is not None:
            parent.kids_left -= 1
            if parent.kids_left == 0:
                parent.kids_done = True
                if not self._lockstep_parent(parent):
                    self._next(parent)
        elif session.on_end is not None:
            session.on_end()

    def _request(self, session: _Session, due: int) -> _Request:
        """``session``'s next step, sent at ``due``."""
        step = session.plan[session.done]
        session.kids_done = False
        if step.turn == 1 or session.compacted:
            # sized to its whole prompt: the opening (after a compaction, the system
            # message and the summary: a fresh id), then filler to prior + new
            head = session.opening if step.turn == 1 else [*session.system, next(self._ids)]
            whole = step.prior_tokens + step.new_tokens
            prompt = head + [FILLER] * max(0, whole - len(head))
            shareable = len(session.system)  # turn 1: another session sent it (or a parent)
        else:
            prompt = session.history + [FILLER] * step.new_tokens
            shareable = len(session.history)
        key = (self._cell, session.repetition, session.number, step.turn)
        seed = stream_rng(self.profile.seed, "predict", *key).getrandbits(32)
        output = step.output_tokens
        if not self.here.exact_output:  # the simulated model stops at EOS half the time
            draw = random.Random(seed ^ 0x5EED)
            output = draw.randint(1, output) if draw.random() < 0.5 else output
        return _Request(session, step, self._cell, prompt, output, shareable, due, seed)

    def _sent(self, r: _Request) -> None:
        """The first of a group's turn-1 requests finds nothing of the shared prefix."""
        group = r.session.shared
        first = r.step.turn == 1 and r.session.parent is None
        if first and group is not None and group not in self._sent_groups:
            self._sent_groups.add(group)
            r.shareable = 0

    def _done(self, r: _Request) -> None:
        session = r.session
        truth = r.truth
        assert truth is not None
        self.records.append(self._record(r))
        ok = truth.http_status == 200
        if ok:  # what the next step sends: this prompt and its reply
            session.history = r.prompt + [FILLER] * truth.completion_tokens
        session.compacted = ok and r.step.kind == "compaction"
        session.done += 1
        session.since = self.sim.now
        if not self._lockstep_parent(session):
            self._next(session)  # lock-step: the barrier sends the next turn

    # --- pacings ---------------------------------------------------------------------------

    def _repetition(self, rep: int, warmup: bool) -> None:
        s, cell = self.here, self._cell
        system, group = self._shared((cell, rep))
        sessions = [
            self._open(i, session_plan(s, cell, rep, i), system, rep, warmup, shared=group)
            for i in range(s.users)
        ]
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
        if not self._lockstep:
            starts = {i: start for i in range(s.users)}
            if s.pacing.arrivals is not None:  # sessions past the last arrival never start
                rng = stream_rng(s.content.seed, "arrivals", cell, rep)
                times = arrival_times(s.pacing.arrivals, s.users, rng)
                starts = {i: start + round(t * 1e9) for i, t in enumerate(times)}
            for i, at in starts.items():
                self._begin(sessions[i], at)
            self.sim.run()
            return
        for turn in range(1, s.turns + 1):  # a barrier: every session's turn before ended
            playing = [x for x in sessions if turn <= len(x.plan)]
            for x in playing:  # sub-agents first, each on its own clock
                if x.plan[turn - 1].children:
                    self._spawn(x)
            self.sim.run()
            at = self.sim.now
            for x in playing:
                self.sim.send(self._request(x, at + round(x.plan[turn - 1].pause_s * 1e9)))
            self.sim.run()

    def _fleet(self) -> None:
        """A fleet's slots, each playing session after session until its last window."""
        s, cell = self.here, self._cell
        fleet = s.fleet
        assert fleet is not None
        reps = s.repetitions
        window_ns = round(fleet.window_s * 1e9)
        start = self.sim.now
        self._end = end = start + (reps.warmup + reps.measured) * window_ns
        last = reps.warmup + reps.measured - 1

        def window(now: int) -> tuple[int, bool]:
            index = min(max(0, (now - start) // window_ns), last)
            return index, index < reps.warmup

        self._window = window
        system, group = self._shared((cell, "fleet"))
        started = 0

        def slot(at: int) -> None:
            nonlocal started
            if started >= fleet.max_sessions or at >= end:
                return  # a session that ends after the last window is not replaced
            number, started = started, started + 1
            x = self._open(number, fleet_plan(s, cell, number), system, 0, False, shared=group)
            x.on_end = lambda: slot(self.sim.now)
            self._begin(x, at)

        for _ in range(s.users):
            slot(start)
        self.sim.run()
        self.nonces.append(
            RepetitionNonces(
                cell=cell,
                repetition=0,
                warmup=reps.warmup > 0,
                run_nonce=f"virtual-{cell}" if s.nonce == "run" else None,
                sessions=[f"virtual-{cell}.{i}" for i in range(started)],
            )
        )
        self.windows[cell] = (start + reps.warmup * window_ns, self.sim.now)
        self._end = self._window = None

    # --- records ---------------------------------------------------------------------------

    def _record(self, r: _Request) -> TurnRecord:
        truth = r.truth
        assert truth is not None
        step, session = r.step, r.session
        repetition, warmup = session.repetition, session.warmup
        if self._window is not None:  # a fleet's step belongs to the window it was sent in
            repetition, warmup = self._window(r.due_ns)
        parent = session.parent.number if session.parent is not None else None
        head: dict[str, Any] = {
            "repetition": repetition,
            "warmup": warmup,
            "session": session.number,
            "turn": step.turn,
            "cell": r.cell,
            "configured_prior_tokens": step.prior_tokens,
            "configured_prompt_tokens": step.prior_tokens + step.new_tokens,
            "tokenized_prompt_tokens": len(r.prompt),
            "pacing_lag_ns": 0,
            "started_ns": r.due_ns,
            "sent_ns": r.due_ns,
            "headers_ns": r.due_ns,
            "request_id": truth.request_id,
            "shareable_tokens": min(r.shareable, len(r.prompt)),
            "shareable_exact": True,
            **step_fields(step, parent),
        }
        if truth.http_status != 200:
            return TurnRecord(
                **head,
                status="error",
                error_kind="http_4xx",
                error_message=f"{len(r.prompt)} prompt tokens and {step.output_tokens} to "
                "generate do not fit the profile's context or KV cache",
                http_status=truth.http_status,
                error_ns=r.due_ns,
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
            ttft_ns=first - r.due_ns,
            decode_tokens_per_s=(completion - 1) / ((last - first) / 1e9) if last > first else None,
            first_content_ns=first,
            last_content_ns=last,
            done_ns=last,
            content_events=len(r.emitted),
            chunk_gaps_us=stats.chunk_gaps_us(r.emitted),
        )
