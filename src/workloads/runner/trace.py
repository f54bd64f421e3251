"""Trace replay (``run --trace``): a recorded Mooncake trace's requests, sent open loop at
their timestamps × ``pacing.time_scale``, each its own one-turn session.

The prompt of a request is one user message: the repetition's run nonce (so no earlier run
or repetition warms the cache; shared by the repetition's requests, so what the trace shares
stays shared), then its blocks. Each hash id is a block of text cut from the corpus by an
RNG seeded with the id (:meth:`Corpus.block_stream`), sized to 512 of the target's tokens
(its ``/tokenize`` where it has one, else the tiktoken estimate); a request's last block is
cut to what remains of its ``input_length``. A cut of a block is a prefix of its longer
cuts, so a request that extends an earlier one's partial block shares that part too.

Sizing is done once, in the first repetition's :meth:`TracePlayers.open`, before the window
opens; the blocks are only text afterwards. A block is measured alone: joined, a block
boundary may merge two tokens, so a prompt's count is within a few tokens of
``input_length`` (plus the nonce and the chat template), as the records show
(``prompt_tokens`` beside ``configured_prompt_tokens``).

Each request is sent with ``max_tokens = min_tokens = output_length`` (``exact_output``)
and recorded as a TurnRecord of turn 1, session = its index in the trace, whose
``shareable_tokens`` is what the trace's ideal cache serves of it.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from workloads.core.clock import sleep_until_or
from workloads.core.conversation import make_nonces
from workloads.core.corpus import Corpus
from workloads.core.tokens import TargetTokenizer, TokenizeError, fit
from workloads.core.traces import (
    BLOCK_TOKENS,
    MooncakeRequest,
    MooncakeTrace,
    ideal_cached_tokens,
    ideal_hit_rate,
    load_mooncake,
)
from workloads.model.errors import TraceError
from workloads.model.records import TurnRecord
from workloads.model.results import RepetitionNonces, TraceReplay
from workloads.model.scenario import Scenario, TraceLimits
from workloads.runner.monitor import ClientMonitor
from workloads.runner.options import SessionIO, Stopping
from workloads.runner.players import LocalPlayers
from workloads.runner.repetition import Barrier, Repetition
from workloads.runner.session import Session
from workloads.runner.sizing import CellSizing
from workloads.runner.turn import RecordHead, build_body, identity, record_from_response
from workloads.wire.client import ChatResponse, partial_response

__all__ = ["BlockTexts", "TracePlayers", "find_trace", "read_trace", "trace_scenario"]

_MAX_USERS = 4096  # Scenario.users' bound: a longer trace's aggregate needs that many valid


def find_trace(name: str | Path) -> Path:
    """``name`` as a path, else a packaged sample trace (``mooncake-sample``, with or
    without ``.jsonl``)."""
    path = Path(name)
    if path.is_file():
        return path
    stem = path.name.removesuffix(".jsonl").removesuffix(".json")
    for directory in _trace_dirs():
        for suffix in (".jsonl", ".json"):  # JSON Lines, or one document (WEKA)
            found = directory / f"{stem}{suffix}"
            if found.is_file():
                return found
    raise TraceError(
        f"no trace file or packaged trace named {str(name)!r}; packaged "
        f"traces: {', '.join(sorted(_packaged())) or 'none'}"
    )


def _trace_dirs() -> list[Path]:
    from importlib import resources

    dirs = []
    packaged = resources.files("workloads") / "traces"
    if packaged.is_dir():
        dirs.append(Path(str(packaged)))
    checkout = Path(__file__).resolve().parents[3] / "traces"  # a source checkout
    if checkout.is_dir():
        dirs.append(checkout)
    return dirs


def _packaged() -> set[str]:
    return {p.stem for d in _trace_dirs() for p in d.glob("*.json*")}


def read_trace(name: str | Path, limits: TraceLimits) -> MooncakeTrace:
    """Find and read a Mooncake trace within ``limits`` (TraceError: one line)."""
    return load_mooncake(
        find_trace(name),
        max_requests=limits.max_requests,
        max_duration_s=limits.max_duration_s,
        max_bytes=limits.max_bytes,
    )


def trace_scenario(scenario: Scenario, trace: MooncakeTrace) -> Scenario:
    """The scenario a trace replay runs and records: one turn, one session per request
    (``users``, at most 4096: the connection pool and the aggregate rate's count), no
    opening or turn tokens of its own, ``output_tokens`` the trace's largest."""
    return scenario.model_copy(
        update={
            "users": max(1, min(len(trace.requests), _MAX_USERS)),
            "turns": 1,
            "opening_tokens": 0,
            "turn_tokens": max(r.input_length for r in trace.requests),
            "output_tokens": max(r.output_length for r in trace.requests),
            "concurrency": None,
            "prior_tokens": None,
        }
    )


def trace_info(trace: MooncakeTrace, scenario: Scenario, *, exact: bool) -> TraceReplay:
    """What the result says about the trace (its observed hit rate comes at the end)."""
    requests = trace.requests
    return TraceReplay(
        file=trace.path.name,
        sha256=trace.sha256,
        requests=len(requests),
        truncated=trace.truncated,
        input_tokens=sum(r.input_length for r in requests),
        output_tokens=sum(r.output_length for r in requests),
        duration_s=requests[-1].timestamp_ms / 1000 if requests else 0.0,
        time_scale=scenario.pacing.time_scale,
        block_tokens=BLOCK_TOKENS,
        exact_blocks=exact,
        ideal_hit_rate=ideal_hit_rate(requests),
    )


class BlockTexts:
    """The text of every block of a trace, each sized once to the target's tokens.

    Keeps per (block id, tokens) the tiktoken length of the cut, and the texts of the most
    recently used blocks (``max_texts``); an evicted text is cut again from the corpus.
    """

    def __init__(
        self, corpus: Corpus, seed: int, tokenizer: TargetTokenizer, *, max_texts: int = 50_000
    ) -> None:
        self.corpus = corpus
        self.seed = seed
        self.tokenizer = tokenizer
        self.cuts: dict[tuple[int, int], int] = {}  # (block, target tokens) -> tiktoken n
        self.ratio = 1.0  # target tokens per tiktoken token, learned as blocks are sized
        self.fallbacks = 0  # blocks sized by estimate because a /tokenize call failed
        self.max_texts = max_texts
        self._texts: OrderedDict[tuple[int, int], str] = OrderedDict()

    def text(self, block: int, n: int) -> str:
        """Block ``block`` cut to ``n`` tiktoken tokens (memoised: sizing leaves every text
        here, so a request's prompt is only joined when it is due, unless the trace has more
        than ``max_texts`` block cuts)."""
        key = (block, n)
        found = self._texts.get(key)
        if found is not None:
            self._texts.move_to_end(key)
            return found
        return self._keep(key, self.corpus.block_stream(self.seed, block).take(n))

    def _keep(self, key: tuple[int, int], text: str) -> str:
        self._texts[key] = text
        if len(self._texts) > self.max_texts:
            self._texts.popitem(last=False)
        return text

    @staticmethod
    def wanted(requests: tuple[MooncakeRequest, ...]) -> list[tuple[int, int]]:
        """Every (block, target tokens) the requests need, in first-use order."""
        out: dict[tuple[int, int], None] = {}
        for r in requests:
            for i, block in enumerate(r.hash_ids):
                out[(block, min(BLOCK_TOKENS, r.input_length - i * BLOCK_TOKENS))] = None
        return list(out)

    async def size(self, keys: list[tuple[int, int]], *, parallel: int = 16) -> None:
        """Size every (block, target tokens) not sized yet. The first one alone, so the
        others start from the ratio it taught (one or two calls each, not six)."""
        todo = [k for k in keys if k not in self.cuts]
        if not todo:
            return
        await self._size(*todo[0])
        gate = asyncio.Semaphore(parallel)

        async def one(key: tuple[int, int]) -> None:
            async with gate:
                await self._size(*key)

        async with asyncio.TaskGroup() as tg:
            for key in todo[1:]:
                tg.create_task(one(key))

    async def _size(self, block: int, target: int) -> None:
        tok = self.tokenizer
        stream = self.corpus.block_stream(self.seed, block)
        if not tok.exact:
            self.cuts[(block, target)] = target  # tiktoken is the unit: the cut is exact
            self._keep((block, target), stream.take(target))
            return

        async def measure(n: int) -> int:
            return len(await tok.encode(stream.take(n)))

        try:
            found = await fit(
                measure,
                target,
                guess=max(1, round(target / self.ratio)),
                slope=self.ratio,
                lo=1,
                max_calls=6,
            )
        except TokenizeError:
            self.fallbacks += 1
            self.cuts[(block, target)] = max(1, round(target / self.ratio))
            return
        self.cuts[(block, target)] = found.n
        self._keep((block, found.n), stream.take(found.n))
        if found.value > 0:
            self.ratio = found.value / found.n

    def prompt(self, nonce: str, request: MooncakeRequest) -> str:
        """The request's user message: the nonce line, then its blocks."""
        parts = [nonce, "\n"]
        for i, block in enumerate(request.hash_ids):
            target = min(BLOCK_TOKENS, request.input_length - i * BLOCK_TOKENS)
            parts.append(self.text(block, self.cuts[(block, target)]))
        return "".join(parts)


class TracePlayers(LocalPlayers):
    """Plays a trace's requests in every repetition: one-turn sessions, open loop, each
    sent at its timestamp × ``time_scale`` from the repetition's start, none waiting for
    another. Stop and grace work as for a scenario (:class:`LocalPlayers`)."""

    def __init__(
        self,
        *,
        trace: MooncakeTrace,
        tokenizer: TargetTokenizer,
        sizings: dict[int, CellSizing],
        corpus: Corpus,
        entropy: bytes,
        io: SessionIO,
        stopping: Stopping,
        monitor: ClientMonitor | None = None,
    ) -> None:
        super().__init__(
            sizings=sizings,
            corpus=corpus,
            entropy=entropy,
            io=io,
            stopping=stopping,
            monitor=monitor,
        )
        self.trace = trace
        scenario = sizings[0].scenario
        self.blocks = BlockTexts(corpus, scenario.content.seed, tokenizer)
        self.ideal = ideal_cached_tokens(trace.requests)
        self.nonce = ""
        self._scenarios: dict[int, Scenario] = {}  # per output length: build_body reads it

    async def open(self, repetition: Repetition) -> RepetitionNonces:
        """Fresh nonce; every block sized (the first repetition only), nothing sent."""
        nonces = make_nonces(
            self.entropy,
            cell=repetition.cell.index,
            repetition=repetition.index,
            users=1,
            mode="run",
        )
        assert nonces.run is not None
        self.nonce = nonces.run
        await self.blocks.size(self.blocks.wanted(self.trace.requests))
        self.sizings[repetition.cell.index].fallbacks = self.blocks.fallbacks
        self.sessions = []
        return RepetitionNonces(
            cell=repetition.cell.index,
            repetition=repetition.index,
            warmup=repetition.warmup,
            run_nonce=nonces.run,
            sessions=[],
        )

    def _sends(
        self,
        repetition: Repetition,
        sessions: list[Session],
        scenario: Scenario,
        barrier: Barrier | None,
    ) -> Coroutine[Any, Any, bool]:
        return self._dispatch(repetition, scenario)

    async def _dispatch(self, repetition: Repetition, scenario: Scenario) -> bool:
        """Start each request at its due time (absolute deadlines from one start); False
        when stop came first (the requests in flight go on: the caller gives them grace)."""
        scale = scenario.pacing.time_scale
        start = time.perf_counter()
        async with asyncio.TaskGroup() as tg:
            for index, request in enumerate(self.trace.requests):
                late = await sleep_until_or(start + request.timestamp_ms / 1000 * scale, self.stop)
                if late is None:
                    return False
                tg.create_task(self._send(repetition, index, request, round(late * 1e9)))
        return True

    def _scenario(self, output_tokens: int) -> Scenario:
        found = self._scenarios.get(output_tokens)
        if found is None:
            found = self.sizings[0].scenario.model_copy(update={"output_tokens": output_tokens})
            self._scenarios[output_tokens] = found
        return found

    async def _send(
        self, repetition: Repetition, index: int, request: MooncakeRequest, lag_ns: int
    ) -> None:
        scenario = self._scenario(request.output_length)
        messages = [{"role": "user", "content": self.blocks.prompt(self.nonce, request)}]
        head = RecordHead(
            repetition=repetition.index,
            warmup=repetition.warmup,
            session=index,
            turn=1,
            configured_prior_tokens=0,
            configured_prompt_tokens=request.input_length,
            cell=repetition.cell.index,
            pacing_lag_ns=lag_ns,
        )

        def recorded(response: ChatResponse) -> TurnRecord:
            return record_from_response(
                response,
                head,
                output_tokens=request.output_length,
                exact_output=scenario.exact_output,
                shareable_tokens=self.ideal[index],
                shareable_exact=False,
            )

        io = self.io
        started = time.perf_counter_ns()
        try:
            response = await io.client.stream_chat(build_body(scenario, io.model, messages))
        except asyncio.CancelledError as err:
            partial = partial_response(err)
            if partial is not None:
                io.on_record(
                    recorded(partial).model_copy(update={"output_tokens": request.output_length})
                )
            else:
                io.on_record(
                    TurnRecord(
                        **head.fields(),
                        status="incomplete",
                        error_kind="cancelled",
                        error_message="the run ended while this request was in flight",
                        started_ns=started,
                        output_tokens=request.output_length,
                    )
                )
            raise
        record = recorded(response)
        reached = response.http_status == 200 and (
            response.first_content_ns is not None or response.usage is not None
        )
        reply = response.text if reached else None
        record = record.model_copy(
            update={**identity(messages, reply), "output_tokens": request.output_length}
        )
        if io.on_exchange is not None:
            io.on_exchange(record, messages, reply, None)
        io.on_record(record)

    async def learn(self, repetition: Repetition) -> None:
        """Nothing to learn: blocks are sized by their own token counts."""
