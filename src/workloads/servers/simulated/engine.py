"""The simulated engine: one step loop with continuous batching, chunked prefill, a paged KV
cache with prefix caching, preemption, and speculative decoding — scheduled like vLLM V1.

Size: past 400 lines: the scheduler step, admission, preemption and the ground truth it
keeps are one state machine; its reason to change is vLLM's scheduling.

Each step (:meth:`Engine.plan_step`):

1. Running sequences, in admission order, get their tokens: the rest of a prefill (capped by
   the token budget), or one decode token plus ``spec_tokens`` drafts. Each needs KV blocks for
   what it computes; when the pool is out of blocks the most recently admitted running
   sequence is preempted — its blocks are freed (they stay cached until evicted) and it goes
   back to the front of the waiting queue, to be recomputed later.
2. If nothing was preempted, waiting sequences are admitted in order while the budget, the
   running cap and the KV pool allow: a prefix-cache lookup gives the cached tokens, and the
   rest of the prompt is scheduled for prefill.

The step then takes the profile's modelled time (absolute deadlines, so steps do not drift),
and :meth:`Engine.complete_step` applies it: prefill chunks advance, finished prefills and
decodes emit tokens, newly full blocks enter the prefix cache (generated tokens' blocks too,
as in vLLM), and finished sequences free their blocks.

``plan_step``/``complete_step`` never touch the clock, so tests drive the engine step by step
without sleeping; :meth:`Engine.start` runs the same two calls on a timer. Ground truth for
every request is kept in :class:`RequestTruth`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import random
import time
from array import array
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field

from workloads.core.kvcache import Block, BlockPool, chain_hash
from workloads.servers.simulated.profiles import Profile

__all__ = ["Engine", "RequestTruth", "ScheduledWork", "Sequence", "Step"]

TRUTH_LIMIT = 100_000
TOKEN_HISTORY_LIMIT = 10_000


@dataclass
class RequestTruth:
    """What the engine knows about one request, for comparison with client figures.

    Times are ``time.perf_counter_ns()`` of the server process (the same clock as the client's
    when both run in one process). ``cached_tokens`` is the prefix-cache hit at the request's
    first admission, which is what ``usage.prompt_tokens_details.cached_tokens`` reports even
    if the request is later preempted and recomputed (vLLM does the same).
    """

    request_id: str
    arrival_ns: int  # the server began handling the HTTP request
    prompt_tokens: int
    max_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    queued_ns: int | None = None  # entered the engine's waiting queue
    scheduled_ns: int | None = None  # first admitted to the running batch
    first_token_ns: int | None = None  # the step that produced the first token ended
    last_token_ns: int | None = None
    first_written_ns: int | None = None  # the first content chunk was written to the socket
    last_written_ns: int | None = None
    finish_reason: str | None = None
    preempted: bool = False
    num_preemptions: int = 0
    spec_steps: int = 0  # decode steps that verified drafts
    draft_tokens: int = 0
    accepted_tokens: int = 0
    http_status: int = 200
    fault: str | None = None  # the injected fault, if any (see profiles.Faults)


@dataclass(eq=False)
class Sequence:
    """One request inside the engine."""

    truth: RequestTruth
    prompt: list[int]
    plan: list[int]  # the exact output ids this request will produce
    max_tokens: int
    rng: random.Random  # draws for speculative acceptance, per request
    blocks: list[Block] = field(default_factory=list)
    hashes: list[int] = field(default_factory=list)  # chained hashes of full token blocks
    registered: int = 0  # leading blocks already offered to the prefix cache
    computed: int = 0  # tokens whose KV is in ``blocks``
    generated: int = 0
    admitted: bool = False  # admitted at least once (counted in the cache counters)
    out: asyncio.Queue[list[int] | None] = field(default_factory=asyncio.Queue)

    @property
    def num_tokens(self) -> int:
        """Prompt plus tokens generated so far."""
        return len(self.prompt) + self.generated

    @property
    def done(self) -> bool:
        return self.generated >= len(self.plan)

    @property
    def finished(self) -> bool:
        return self.truth.finish_reason is not None

    def tokens(self, start: int, stop: int) -> list[int]:
        """Token ids ``[start, stop)`` of prompt + generated output."""
        n = len(self.prompt)
        if stop <= n:
            return self.prompt[start:stop]
        head = self.prompt[start:] if start < n else []
        return head + self.plan[max(0, start - n) : stop - n]

    def extend_hashes(self, upto_tokens: int, block_size: int) -> None:
        """Hash every full block of the first ``upto_tokens`` tokens not hashed yet."""
        while (len(self.hashes) + 1) * block_size <= upto_tokens:
            start = len(self.hashes) * block_size
            parent = self.hashes[-1] if self.hashes else 0
            self.hashes.append(chain_hash(parent, self.tokens(start, start + block_size)))


@dataclass
class ScheduledWork:
    """One sequence's share of a step."""

    seq: Sequence
    tokens: int  # tokens fed to the model: a prefill chunk, or 1 + drafts when decoding
    drafts: int  # draft tokens verified (decode with speculation)
    context: int  # tokens already in KV that this work attends to
    decode: bool


@dataclass
class Step:
    """What one step computes and how long it takes."""

    work: list[ScheduledWork]
    duration_s: float
    preempted: list[Sequence]

    @property
    def prefill_tokens(self) -> int:
        return sum(w.tokens for w in self.work if not w.decode)


def accepted_drafts(rng: random.Random, drafts: int, p: float) -> int:
    """How many of ``drafts`` are accepted: each with probability ``p`` while all before it
    were, so the accepted ones are a prefix (rejection sampling accepts a prefix)."""
    n = 0
    while n < drafts and rng.random() < p:
        n += 1
    return n


class Engine:
    """Continuous-batching step loop over a paged KV cache.

    Start it with :meth:`start` inside a running loop, or drive it by hand::

        engine = Engine(get_profile("fast"))
        seq = engine.submit(prompt_ids, plan_ids, max_tokens=len(plan_ids))
        while not seq.finished:
            engine.complete_step(engine.plan_step())
    """

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.pool = BlockPool(profile.num_blocks)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        # Bounded so a long-running `serve` does not grow without end: ground truth for the
        # last TRUTH_LIMIT requests, token ids (for the what-if oracle) for the last
        # TOKEN_HISTORY_LIMIT finished ones, packed as 4-byte arrays.
        self.truths: deque[RequestTruth] = deque(maxlen=TRUTH_LIMIT)
        self.sequences: dict[str, Sequence] = {}  # by request id, until finished
        self._history: OrderedDict[str, tuple[array[int], array[int]]] = OrderedDict()
        self.counters: Counter[str] = Counter()
        self.finished_reasons: Counter[str] = Counter()
        self.accepted_per_pos: list[int] = [0] * profile.spec_tokens
        self.steps = 0
        self._ids = itertools.count(1)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # --- requests ---------------------------------------------------------------------------

    def next_request_id(self) -> str:
        return f"chatcmpl-sim{next(self._ids):08d}"

    def fits(self, prompt_tokens: int, max_tokens: int) -> bool:
        """Whether one request alone can ever fit in the KV cache (else it would wait
        forever); the server refuses such requests up front."""
        bs = self.profile.block_size
        return math.ceil((prompt_tokens + max_tokens) / bs) <= self.pool.num_blocks

    def submit(
        self,
        prompt: list[int],
        plan: list[int],
        max_tokens: int,
        *,
        truth: RequestTruth | None = None,
        rng_seed: int = 0,
    ) -> Sequence:
        """Queue a request that will produce exactly ``plan`` (its length ≤ ``max_tokens``)."""
        if not plan or len(plan) > max_tokens:
            raise ValueError("the plan must hold 1 to max_tokens tokens")
        if truth is None:
            truth = RequestTruth(
                request_id=self.next_request_id(),
                arrival_ns=time.perf_counter_ns(),
                prompt_tokens=len(prompt),
            )
        truth.prompt_tokens = len(prompt)
        truth.max_tokens = max_tokens
        truth.queued_ns = time.perf_counter_ns()
        self.truths.append(truth)
        seq = Sequence(
            truth=truth,
            prompt=prompt,
            plan=plan,
            max_tokens=max_tokens,
            rng=random.Random(rng_seed),
        )
        self.sequences[truth.request_id] = seq
        self.waiting.append(seq)
        self._wake.set()
        return seq

    def abort(self, seq: Sequence, reason: str = "abort") -> None:
        """Drop a request (client gone, or ``reason="error"`` for an injected engine error);
        frees its blocks. No-op once finished."""
        if seq.finished:
            return
        if seq in self.waiting:
            self.waiting.remove(seq)
        if seq in self.running:
            self.running.remove(seq)
        self._release(seq)
        self._finish(seq, reason)

    def token_ids(self, request_id: str) -> tuple[list[int], list[int]]:
        """(prompt ids, generated ids so far) of a request the engine has seen (one of the
        last TOKEN_HISTORY_LIMIT finished ones, or a live one); KeyError otherwise."""
        seq = self.sequences.get(request_id)
        if seq is not None:
            return list(seq.prompt), seq.plan[: seq.generated]
        prompt, completion = self._history[request_id]
        return prompt.tolist(), completion.tolist()

    def record(self, truth: RequestTruth) -> None:
        """Keep the truth of a request the engine never saw (a refused or faulted one)."""
        self.truths.append(truth)

    @property
    def kv_usage(self) -> float:
        """Fraction of KV blocks held by sequences (vLLM's ``kv_cache_usage_perc``)."""
        return self.pool.usage

    def reset_prefix_cache(self) -> int:
        """Forget every unreferenced cached block; returns how many."""
        return self.pool.reset()

    # --- one step -----------------------------------------------------------------------------

    def plan_step(self) -> Step:
        """Schedule one step: allocate its KV blocks, preempt and admit. No clock."""
        p = self.profile
        budget = p.token_budget
        work: list[ScheduledWork] = []
        preempted: list[Sequence] = []

        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            todo = seq.num_tokens - seq.computed
            decode = seq.generated > 0 and todo == 1
            drafts = 0
            if decode:
                drafts = min(p.spec_tokens, len(seq.plan) - seq.generated - 1, budget - 1)
                n = 1 + max(0, drafts)
            else:
                n = min(todo, budget)
            while not self._grow(seq, seq.computed + n):
                victim = self.running.pop()
                self._preempt(victim)
                preempted.append(victim)
                if victim is seq:
                    break
            if seq in preempted:
                break
            work.append(ScheduledWork(seq, n, max(0, drafts), seq.computed, decode))
            budget -= n
            i += 1

        if not preempted:
            while self.waiting and budget > 0 and len(self.running) < p.max_running:
                seq = self.waiting[0]
                n = self._admit(seq, budget)
                if n == 0:
                    break
                self.waiting.popleft()
                self.running.append(seq)
                work.append(ScheduledWork(seq, n, 0, seq.computed, False))
                budget -= n

        decoding = [w for w in work if w.decode]
        duration = (
            p.step_fixed_s
            + p.prefill_s_per_token * sum(w.tokens for w in work if not w.decode)
            + p.decode_s_per_seq * len(decoding)
            + p.draft_s_per_token * sum(w.drafts for w in decoding)
            + p.attend_s_per_token * sum(w.context for w in work)
        )
        return Step(work=work, duration_s=duration, preempted=preempted)

    def _grow(self, seq: Sequence, tokens: int) -> bool:
        """Make ``seq`` hold blocks for ``tokens`` tokens; False when the pool is out."""
        need = math.ceil(tokens / self.profile.block_size) - len(seq.blocks)
        if need <= 0:
            return True
        if need > self.pool.num_free:
            return False
        seq.blocks += self.pool.allocate(need)
        return True

    def _admit(self, seq: Sequence, budget: int) -> int:
        """Try to admit the head of the waiting queue; tokens scheduled, 0 if it must wait."""
        p = self.profile
        bs = p.block_size
        total = seq.num_tokens
        hits: list[Block] = []
        if p.prefix_caching:
            seq.extend_hashes(total, bs)
            # At least one token must be computed to produce logits: cap the hit below the
            # last token, as vLLM does (so a fully cached prompt recomputes its last block).
            hits = self.pool.longest_hit(seq.hashes, (total - 1) // bs)
        cached = len(hits) * bs
        n = min(total - cached, budget)
        hold = total if p.admission == "prompt" else cached + n
        need = math.ceil(hold / bs) - len(hits)
        if need + self.pool.unreferenced(hits) > self.pool.num_free:
            return 0
        self.pool.touch(hits)
        seq.blocks = hits + self.pool.allocate(need)
        seq.registered = len(hits)
        seq.computed = cached
        if not seq.admitted:
            seq.admitted = True
            seq.truth.cached_tokens = cached
            seq.truth.scheduled_ns = time.perf_counter_ns()
            # vLLM counts queries/hits of requests that were never preempted.
            self.counters["prefix_cache_queries"] += total
            self.counters["prefix_cache_hits"] += cached
        return n

    def _preempt(self, seq: Sequence) -> None:
        """Recompute-preemption: free the blocks (they stay cached until evicted) and put the
        sequence back at the front of the waiting queue."""
        self._release(seq)
        seq.computed = 0
        seq.truth.preempted = True
        seq.truth.num_preemptions += 1
        self.counters["num_preemptions"] += 1
        self.waiting.appendleft(seq)

    def _release(self, seq: Sequence) -> None:
        self.pool.free(seq.blocks)
        seq.blocks = []
        seq.registered = 0

    def complete_step(self, step: Step, now_ns: int | None = None) -> None:
        """Apply a planned step: advance prefills, emit tokens, cache full blocks, finish."""
        now = time.perf_counter_ns() if now_ns is None else now_ns
        p = self.profile
        self.steps += 1
        for w in step.work:
            seq = w.seq
            if seq.finished:
                continue  # aborted while the step ran
            if w.decode:
                accepted = accepted_drafts(seq.rng, w.drafts, p.spec_acceptance)
                if w.drafts:
                    self._count_spec(seq, w.drafts, accepted)
                seq.computed += 1 + accepted
                emitted = accepted + 1
            else:
                seq.computed += w.tokens
                if seq.computed < seq.num_tokens:
                    self._register_blocks(seq)
                    continue  # mid-prefill chunk: no token yet
                if seq.generated == 0:
                    # vLLM counts a request's prompt tokens when its prefill completes.
                    self.counters["prompt_tokens"] += len(seq.prompt)
                    self.counters["prompt_tokens_cached"] += seq.truth.cached_tokens
                emitted = 1
            self._emit(seq, emitted, now)
            self._register_blocks(seq)
            if seq.done:
                self.running.remove(seq)
                self._release(seq)
                self._finish(seq, "length" if seq.generated >= seq.max_tokens else "stop")

    def _count_spec(self, seq: Sequence, drafts: int, accepted: int) -> None:
        self.counters["spec_decode_num_drafts"] += 1
        self.counters["spec_decode_num_draft_tokens"] += drafts
        self.counters["spec_decode_num_accepted_tokens"] += accepted
        for pos in range(accepted):
            self.accepted_per_pos[pos] += 1
        seq.truth.spec_steps += 1
        seq.truth.draft_tokens += drafts
        seq.truth.accepted_tokens += accepted

    def _emit(self, seq: Sequence, n: int, now: int) -> None:
        ids = seq.plan[seq.generated : seq.generated + n]
        seq.generated += len(ids)
        self.counters["generation_tokens"] += len(ids)
        t = seq.truth
        t.completion_tokens = seq.generated
        if t.first_token_ns is None:
            t.first_token_ns = now
        t.last_token_ns = now
        seq.out.put_nowait(ids)

    def _register_blocks(self, seq: Sequence) -> None:
        """Offer every block that is full of computed tokens to the prefix cache."""
        if not self.profile.prefix_caching:
            return
        bs = self.profile.block_size
        full = min(seq.computed // bs, len(seq.blocks))
        if full <= seq.registered:
            return
        seq.extend_hashes(full * bs, bs)
        for index in range(seq.registered, full):
            self.pool.cache(seq.blocks[index], seq.hashes[index])
        seq.registered = full

    def _finish(self, seq: Sequence, reason: str) -> None:
        seq.truth.finish_reason = reason
        self.finished_reasons[reason] += 1
        seq.out.put_nowait(None)
        request_id = seq.truth.request_id
        self.sequences.pop(request_id, None)
        self._history[request_id] = (array("I", seq.prompt), array("I", seq.plan[: seq.generated]))
        while len(self._history) > TOKEN_HISTORY_LIMIT:
            self._history.popitem(last=False)

    # --- the loop -----------------------------------------------------------------------------

    def start(self) -> None:
        """Run the step loop as a task of the running event loop."""
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="sim-engine")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        deadline = time.perf_counter()
        while True:
            if not self.waiting and not self.running:
                self._wake.clear()
                await self._wake.wait()
                deadline = time.perf_counter()
            step = self.plan_step()
            # Absolute deadlines: a late wake-up shortens the next wait instead of shifting
            # every later step; more than 50 ms behind (a stalled host) is forgiven, not
            # caught up in a burst.
            deadline = max(deadline, time.perf_counter() - 0.05) + step.duration_s
            delay = deadline - time.perf_counter()
            await asyncio.sleep(delay if delay > 0 else 0)
            self.complete_step(step)
