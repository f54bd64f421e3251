"""The simulated engine: one step loop with continuous batching and chunked prefill.

Each step admits waiting sequences, gives every decoding sequence one token, fills the rest
of the token budget with prefill chunks, and takes the profile's modelled time, waiting on
absolute deadlines so steps do not drift. Ground truth for every request (arrival, first and
last token written, prompt and cached tokens) is kept for tests and benchmarks.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import Counter, deque
from dataclasses import dataclass, field

from workloads.simulated_server.kvcache import PrefixCache, block_hashes
from workloads.simulated_server.profiles import Profile

__all__ = ["Engine", "RequestTruth", "Sequence"]


@dataclass
class RequestTruth:
    """What the engine knows about one request, for comparison with client figures."""

    request_id: str
    arrival_ns: int
    prompt_tokens: int
    cached_tokens: int = 0
    completion_tokens: int = 0
    first_token_ns: int | None = None  # the step that produced the first token ended
    last_token_ns: int | None = None
    finish_reason: str | None = None
    preempted: bool = False


@dataclass
class Sequence:
    """One request inside the engine."""

    truth: RequestTruth
    prompt: list[int]
    plan: list[int]  # the exact output ids this request will produce
    max_tokens: int
    hashes: list[int] = field(default_factory=list)
    computed: int = 0  # prompt tokens whose KV exists (cached + prefilled)
    generated: int = 0
    out: asyncio.Queue[list[int] | None] = field(default_factory=asyncio.Queue)

    @property
    def prefilling(self) -> bool:
        return self.computed < len(self.prompt)

    @property
    def done(self) -> bool:
        return self.generated >= len(self.plan)


class Engine:
    """Continuous-batching step loop. Start it with :meth:`start` inside a running loop."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.cache = PrefixCache(profile.kv_capacity_tokens // profile.block_size)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.truths: list[RequestTruth] = []
        self.counters: Counter[str] = Counter()
        self.finished_reasons: Counter[str] = Counter()
        self._ids = itertools.count(1)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="sim-engine")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def submit(self, prompt: list[int], plan: list[int], max_tokens: int) -> Sequence:
        truth = RequestTruth(
            request_id=f"chatcmpl-sim{next(self._ids):08d}",
            arrival_ns=time.perf_counter_ns(),
            prompt_tokens=len(prompt),
        )
        self.truths.append(truth)
        seq = Sequence(truth=truth, prompt=prompt, plan=plan, max_tokens=max_tokens)
        self.waiting.append(seq)
        self._wake.set()
        return seq

    def abort(self, seq: Sequence) -> None:
        if seq in self.waiting:
            self.waiting.remove(seq)
        if seq in self.running:
            self.running.remove(seq)
        if seq.truth.finish_reason is None:
            self._finish(seq, "abort")

    @property
    def kv_usage(self) -> float:
        used = sum(s.computed + s.generated for s in self.running)
        return min(1.0, used / self.profile.kv_capacity_tokens)

    # --- the loop ---------------------------------------------------------------------------

    async def _loop(self) -> None:
        deadline = time.perf_counter()
        while True:
            if not self.waiting and not self.running:
                self._wake.clear()
                await self._wake.wait()
                deadline = time.perf_counter()
            self._admit()
            step_s, work = self._plan_step()
            deadline = max(deadline, time.perf_counter() - 0.05) + step_s
            delay = deadline - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)
            self._complete_step(work)

    def _admit(self) -> None:
        p = self.profile
        while self.waiting and len(self.running) < p.max_running:
            seq = self.waiting.popleft()
            seq.hashes = block_hashes(seq.prompt, p.block_size)
            hit_blocks = self.cache.match(seq.hashes)
            # At least one prompt token must be computed to produce logits (vLLM does the same).
            hit_blocks = min(hit_blocks, (len(seq.prompt) - 1) // p.block_size)
            seq.computed = hit_blocks * p.block_size
            seq.truth.cached_tokens = seq.computed
            self.counters["prefix_cache_queries"] += len(seq.prompt)
            self.counters["prefix_cache_hits"] += seq.computed
            self.running.append(seq)

    def _plan_step(self) -> tuple[float, list[tuple[Sequence, int]]]:
        """Decide this step's work: (sequence, prefill tokens) pairs; 0 means decode."""
        p = self.profile
        budget = p.token_budget
        work: list[tuple[Sequence, int]] = []
        attended = 0
        for seq in self.running:
            if not seq.prefilling:
                work.append((seq, 0))
                budget -= 1
                attended += seq.computed + seq.generated
        prefill_tokens = 0
        for seq in self.running:
            if seq.prefilling and budget > 0:
                chunk = min(budget, len(seq.prompt) - seq.computed)
                work.append((seq, chunk))
                budget -= chunk
                prefill_tokens += chunk
        decoding = sum(1 for _, n in work if n == 0)
        step_s = (
            p.step_fixed_s
            + p.prefill_s_per_token * prefill_tokens
            + p.decode_s_per_seq * decoding
            + p.attend_s_per_token * attended
        )
        return step_s, work

    def _complete_step(self, work: list[tuple[Sequence, int]]) -> None:
        now = time.perf_counter_ns()
        for seq, prefill in work:
            if seq not in self.running:
                continue  # aborted during the step
            if prefill:
                seq.computed += prefill
                if seq.prefilling:
                    continue
                # Prefill finished: the prompt's blocks are now shareable, and this same step
                # samples the first token.
                self.cache.insert(seq.hashes)
                self.counters["prompt_tokens"] += len(seq.prompt)
                self.counters["prompt_tokens_cached"] += seq.truth.cached_tokens
            token = seq.plan[seq.generated]
            seq.generated += 1
            self.counters["generation_tokens"] += 1
            seq.truth.completion_tokens = seq.generated
            if seq.truth.first_token_ns is None:
                seq.truth.first_token_ns = now
            seq.truth.last_token_ns = now
            seq.out.put_nowait([token])
            if seq.done:
                self.running.remove(seq)
                # Blocks of prompt + output (all but the last token, which has no KV yet).
                full = seq.prompt + seq.plan[: seq.generated - 1]
                self.cache.insert(block_hashes(full, self.profile.block_size))
                self._finish(seq, "length" if seq.generated >= seq.max_tokens else "stop")

    def _finish(self, seq: Sequence, reason: str) -> None:
        seq.truth.finish_reason = reason
        self.finished_reasons[reason] += 1
        seq.out.put_nowait(None)
