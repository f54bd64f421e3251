"""Quiet sizing: with free or arrivals pacing, turns sized inside a measured window call no
/tokenize while measured streams are in flight (unless sizing_during_window = "exact"), and
still land on their configured sizes, corrected by what the warm-up's exact sizing taught."""

from __future__ import annotations

import asyncio
import threading
import time
from array import array
from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web

import workloads
from fakes import FakeChatClient, LlamaCppLikeServer, LocalTokenizer
from workloads.core.conversation import Conversation
from workloads.core.corpus import load_corpus
from workloads.core.tokens import EstimateTokenizer, TargetTokenizer, TokenizeError
from workloads.model.records import TurnRecord
from workloads.model.results import RunResult, TargetInfo
from workloads.report.console import sizing_line
from workloads.runner.options import SessionIO
from workloads.runner.outcome import Measured, build_result
from workloads.runner.session import Session
from workloads.runner.sizing import CellSizing
from workloads.runner.turn import TokenTrace
from workloads.servers.simulated.app import build_app
from workloads.servers.simulated.engine import Engine
from workloads.servers.simulated.profiles import get_profile

# Estimate-sized measured turns land within this fraction of their configured prompt (the
# threshold of the sizing-miss warning); without a warm-up to learn from they need not.
TOLERANCE = 0.01

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class CountingSimulator:
    """The simulated server, its app wrapped in a middleware that logs every request's path
    and when the server began and finished handling it (perf_counter_ns: one clock with the
    client's stamps, same host)."""

    def __init__(self, sim: dict[str, object]) -> None:
        self.profile = get_profile("fast", sim)
        self.log: list[tuple[str, int, int]] = []
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def target(self) -> workloads.Target:
        return workloads.Target(
            base_url=f"http://127.0.0.1:{self.port}/v1",
            model=self.profile.model,
            simulator_profile=self.profile.model_dump(),
        )

    def calls_during(self, records: list[TurnRecord], path: str = "/tokenize") -> int:
        """Requests to ``path`` the server was handling while a measured stream was open."""
        streams = [
            (r.started_ns, r.done_ns or r.error_ns or r.started_ns) for r in records if not r.warmup
        ]
        return sum(
            1
            for p, start, end in list(self.log)
            if p == path and any(start < done and end > sent for sent, done in streams)
        )

    def __enter__(self) -> CountingSimulator:
        ready = threading.Event()

        @web.middleware
        async def timed(request: web.Request, handler: Handler) -> web.StreamResponse:
            start = time.perf_counter_ns()
            try:
                return await handler(request)
            finally:
                self.log.append((request.path, start, time.perf_counter_ns()))

        async def start() -> web.AppRunner:
            engine = Engine(self.profile)
            engine.start()
            app = build_app(engine)
            app.middlewares.append(timed)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            self.port = int(runner.addresses[0][1])
            return runner

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            runner = loop.run_until_complete(start())
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=main, daemon=True)
        self._thread.start()
        assert ready.wait(30)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._thread is not None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def free_scenario(**fields: object) -> workloads.Scenario:
    """Four free-running sessions whose think times (drawn per session) stagger them, so
    one sizes its next turn while others stream."""
    base: dict[str, object] = {
        "name": "quiet",
        "users": 4,
        "turns": 3,
        "opening_tokens": 1500,
        "turn_tokens": 200,
        "output_tokens": 32,
        "repetitions": {"warmup": 1, "measured": 2},
        "gate": "off",
        "pacing": {"mode": "free", "think_time": {"kind": "exponential", "median": 0.03}},
    }
    return workloads.Scenario.model_validate({**base, **fields})


def estimate_sized(result: RunResult) -> list[TurnRecord]:
    return [r for r in result.records if not r.warmup and r.tokenized_prompt_tokens is None]


def miss(r: TurnRecord) -> float:
    assert r.prompt_tokens is not None and r.configured_prompt_tokens
    return abs(r.prompt_tokens - r.configured_prompt_tokens) / r.configured_prompt_tokens


@pytest.mark.slow
def test_free_pacing_calls_no_tokenize_during_measured_streams_unless_asked():
    # The fast profile's decode steps (about 3.7 ms at C4): a 32-token stream lasts about
    # 0.12 s, long beside a /tokenize (a few ms); the exact run's control finds dozens of
    # /tokenize calls inside measured streams.
    with CountingSimulator({}) as server:
        quiet = workloads.run(free_scenario(), server.target)
        assert server.calls_during(quiet.records) == 0
        assert any(p == "/tokenize" for p, _, _ in server.log)  # it has one, and sized with it
    with CountingSimulator({}) as server:
        exact = workloads.run(free_scenario(sizing_during_window="exact"), server.target)
        assert server.calls_during(exact.records) > 0  # the control: the user asked for them

    # Default: turns after the first are sized by the corrected estimate; the sizing line
    # says so, and at their configured prompts they are no warning.
    estimated = estimate_sized(quiet)
    assert {r.turn for r in estimated} == {2, 3} and len(estimated) == 2 * 4 * 2
    assert all(not r.shareable_exact for r in estimated)
    # Openings, turn 1 and the warm-up are sized before or outside the window: exactly.
    assert all(
        r.tokenized_prompt_tokens == r.prompt_tokens
        for r in quiet.records
        if r.warmup or r.turn == 1
    )
    assert max(miss(r) for r in estimated) <= TOLERANCE
    assert quiet.sizing is not None and quiet.sizing.exact and quiet.sizing.scale["0"]
    assert not [w for w in quiet.warnings if "sized by tiktoken estimate" in w]
    assert "except 16 measured turns sized by tiktoken estimate (quiet sizing" in (
        sizing_line(quiet) or ""
    )
    # Opted in: every turn exact, and the result says the calls overlapped measured streams.
    assert not estimate_sized(exact)
    assert any("loaded the server under test" in w for w in exact.warnings)
    assert "except" not in (sizing_line(exact) or "")
    # The what-if oracle's trace of the quiet run was rendered by the target after the
    # window: the same ids, so the same figures, as the exactly sized run's.
    assert quiet.cache_what_if is not None and exact.cache_what_if is not None
    assert [
        (t.turn, t.requests, t.prompt_tokens, t.lru_hit_tokens, t.unlimited_hit_tokens)
        for t in quiet.cache_what_if
    ] == [
        (t.turn, t.requests, t.prompt_tokens, t.lru_hit_tokens, t.unlimited_hit_tokens)
        for t in exact.cache_what_if
    ]


@pytest.mark.slow
def test_worker_processes_size_quietly_too():
    """Each worker process decides from its own sessions' warm-up flag: no signal from the
    run's process is needed."""
    with CountingSimulator({}) as server:
        result = workloads.run(free_scenario(), server.target, workers=2)
        assert server.calls_during(result.records) == 0
    estimated = estimate_sized(result)
    assert len(estimated) == 16 and max(miss(r) for r in estimated) <= TOLERANCE
    assert result.cache_what_if is not None  # traced in the workers, after the window


@pytest.mark.parametrize("warmup", [1, 0])
def test_a_foreign_tokenizer_is_corrected_by_the_warm_ups_exact_sizing(warmup):
    """The "words" tokenizer counts 1.4-1.8x tiktoken on code: uncorrected estimates miss by
    far more than the tolerance; the warm-up's exact sizing corrects them to within it."""
    scenario = free_scenario(
        repetitions={"warmup": warmup, "measured": 1}, turns=4, pacing={"mode": "free"}
    )
    with LlamaCppLikeServer(tokenizer="words") as server:
        result = workloads.run(scenario, workloads.Target(server.base_url, server.model))
    estimated = estimate_sized(result)
    assert {r.turn for r in estimated} == {2, 3, 4}
    lines = [w for w in result.warnings if "sized by tiktoken estimate" in w]
    if warmup:
        assert max(miss(r) for r in estimated) <= TOLERANCE
        assert not lines  # at their configured prompts: nothing to warn about
    else:
        assert max(miss(r) for r in estimated) > 0.1
        (line,) = lines
        assert f" of {len(estimated)} measured turns sized by tiktoken estimate" in line
        assert "missed their configured prompt by more than 1%" in line
        assert "uncorrected" in line and "repetitions.warmup = 1" in line


def test_lockstep_sizes_every_turn_exactly_between_barriers():
    with LlamaCppLikeServer(tokenizer="split") as server:
        result = workloads.run(
            free_scenario(pacing={"mode": "lockstep"}, users=2),
            workloads.Target(server.base_url, server.model),
        )
    assert not estimate_sized(result)
    assert not [w for w in result.warnings if "tiktoken" in w or "under test" in w]


def test_sizing_is_quiet_only_with_a_target_tokenizer_and_overlapping_pacing():
    class Exact(EstimateTokenizer):
        exact = True  # stands for a target tokenizer: only the flag is read here

    def quiet(scenario: workloads.Scenario, tok: TargetTokenizer | None = None) -> bool:
        return CellSizing(scenario, tok or Exact()).quiet

    assert quiet(free_scenario())
    assert quiet(free_scenario(pacing={"mode": "arrivals", "arrivals": {"rate_per_s": 5.0}}))
    assert not quiet(free_scenario(pacing={"mode": "lockstep"}))  # sized between barriers
    assert not quiet(free_scenario(sizing_during_window="exact"))
    assert not quiet(free_scenario(), EstimateTokenizer())  # no /tokenize to avoid


class DownTokenizer(EstimateTokenizer):
    """A target tokenizer whose every call fails (the server went away after the window)."""

    exact = True

    async def render(self, messages: object, mode: object) -> list[int]:
        raise TokenizeError("POST /tokenize: connection refused")

    async def encode(self, text: str) -> list[int]:
        raise TokenizeError("POST /tokenize: connection refused")


def traced_session(tok: TargetTokenizer) -> Session:
    scenario = free_scenario(users=1)
    conversation = Conversation(
        corpus=load_corpus("synthetic"), style="agent", seed=0, session=0, nonce="n", run_nonce="r"
    )
    session = Session(
        io=SessionIO(FakeChatClient(lambda body: (1, "x")), "m", lambda record: None),
        scenario=scenario,
        conversation=conversation,
        sizing=CellSizing(scenario, tok),
        repetition=1,
        warmup=False,
    )
    messages = [{"role": "user", "content": "def f(x):\n    return x + 1\n"}]
    session.token_log = [TokenTrace(10, 2, array("i"), messages=messages, reply="two words")]
    return session


def test_after_the_window_quiet_turns_are_traced_in_the_targets_ids_or_not_at_all():
    tok = LocalTokenizer("words")
    session = traced_session(tok)
    asyncio.run(session.finish_trace())
    (trace,) = session.token_log
    messages = [{"role": "user", "content": "def f(x):\n    return x + 1\n"}]
    assert list(trace.prompt) == asyncio.run(tok.render(messages, "generate"))
    assert list(trace.completion) == tok.tokenizer.encode("two words")
    assert trace.messages is None

    failed = traced_session(DownTokenizer())
    asyncio.run(failed.finish_trace())
    assert not failed.token_log[0].prompt  # not faked with estimate ids
    scenario = free_scenario(users=1)
    cell = scenario.cells()[0]
    measured = Measured(
        scenario=scenario,
        corpus=load_corpus("synthetic"),
        cells=[cell],
        target=TargetInfo(
            base_url="http://127.0.0.1:1/v1", model="m", simulated=False, kv_capacity_tokens=4096
        ),
        sizings={0: CellSizing(scenario, DownTokenizer())},
        tokenizer=DownTokenizer(),
        traces={0: [*session.token_log, *failed.token_log]},
    )
    assert build_result(measured, complete=True).cache_what_if is None  # no partial oracle
    measured.traces = {0: session.token_log}
    assert build_result(measured, complete=True).cache_what_if is not None  # the control
