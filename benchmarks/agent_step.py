"""Benchmark: the client's CPU to draw and prepare one agent step 100K tokens deep (issue 18:
"drawing and rendering a 100K-token agent step costs under 20 ms of CPU").

A session of the ``coding-agents`` scenario (its turns raised so the plan goes deep enough)
is played without a server: each step is sized as quiet sizing sizes it inside a measured
window (``CellSizing.fit_turn(base=None, exact=False)`` with an ``EstimateTokenizer``, the
coding tool schemas rendered into the system message), committed, and answered by a fake
reply of the step's drawn ``output_tokens``: corpus text, plus Hermes-style ``tool_calls``
when the next step is a tool step (2-4 parallel calls one time in ten), as the simulated
server answers. Played until the history renders to ``--depth`` estimate tokens. Then, on
that history, each row repeats N times (CPU time of this process, all threads:
``time.process_time_ns``):

* ``draw_plan``: one coding-agents session's whole plan (16 steps as configured, sub-agents
  included), divided by its steps: what drawing costs per step. Each repetition draws 20
  sessions (different generators) to stay well above the timer's noise.
* ``fit_turn, steady``: sizing the next step on the 100K history, the segment memo warm as in
  a session whose history was rendered at the previous step. Each repetition sizes a turn
  never sized before (the plan's next steps, their own kinds and new tokens), so the new
  content is encoded and fitted from scratch, and the history stays as it is.
* ``fit_turn, cold``: the same with a new tokenizer (empty memo): the first render of a
  100K history, as after the memo dropped it.
* ``with_text`` / ``with_turn``: building the step's messages alone (the new content given,
  or cut from its stream); ``render``: the estimate's render of the 100K history, memo warm.

Not a test: a slow machine is not a failure. Prints the table and the verdict; ``--profile
FILE`` also writes a cProfile of the steady rows and prints its top functions.

    PYTHONPATH=src python benchmarks/agent_step.py
    PYTHONPATH=src python benchmarks/agent_step.py --n 50 --profile steady.prof
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import hashlib
import json
import pstats
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import workloads
from workloads.core import tokens
from workloads.core.agent import CODING_TOOLS, Step, draw_plan, plan_steps, tool_schemas
from workloads.core.conversation import Conversation, make_nonces, probe_nonce
from workloads.core.corpus import Corpus, load_corpus
from workloads.core.tokens import EstimateTokenizer
from workloads.runner.sizing import CellSizing

TARGET_MS = 20.0  # issue 18: draw + render one 100K-token step
DRAWS_PER_REPETITION = 20
# Argument filler for fake tool calls: one cl100k token each, as the simulated server's.
WORDS = ["the", "file", "line", "test", "path", "value", "code", "change", "read", "check"]
NAMES = [t["function"]["name"] for t in CODING_TOOLS]


def fake_reply(corpus: Corpus, rng: random.Random, n: int, calls: bool) -> tuple[str, list[Any]]:
    """A reply of about ``n`` tiktoken tokens: corpus text, then tool calls when ``calls``
    (their markup ~25 tokens each, arguments padded with one-token words)."""
    if not calls or n < 48:
        return corpus.reply_text(rng, n), []
    k = rng.randint(2, 4) if rng.random() < 0.1 else 1
    k = min(k, max(1, (n - 8) // 40))
    content = corpus.reply_text(rng, max(4, n // 4))
    filler = max(k, n - tokens.count(content) - 25 * k)
    out = []
    for i in range(k):
        words = " ".join(rng.choice(WORDS) for _ in range(filler // k))
        call_id = "call_" + hashlib.sha256(f"{n}:{i}:{rng.random()}".encode()).hexdigest()[:24]
        out.append(
            {
                "id": call_id,
                "type": "function",
                "function": {"name": rng.choice(NAMES), "arguments": json.dumps({"path": words})},
            }
        )
    return content, out


def new_sizing(scenario: workloads.Scenario) -> CellSizing:
    tok = EstimateTokenizer()
    sizing = CellSizing(scenario, tok)
    tok.tools = tool_schemas(scenario.tools)  # main's CellSizing does this itself
    return sizing


async def build(
    scenario: workloads.Scenario, corpus: Corpus, depth: int
) -> tuple[CellSizing, Conversation, list[Step], int]:
    """A session played until its history renders to ``depth`` estimate tokens: the sizing
    (its memo holding the history), the conversation, the plan's steps not played yet (no
    compactions) and the history's tokens."""
    seed = scenario.content.seed
    sizing = new_sizing(scenario)
    nonces = make_nonces(b"agent-step-bench", cell=0, repetition=0, users=1, mode=scenario.nonce)
    conv = Conversation(
        corpus=corpus,
        style=scenario.content.style,
        seed=seed,
        session=0,
        nonce=nonces.sessions[0],
        run_nonce=nonces.run,
    )
    plan = draw_plan(
        scenario, corpus.rng(seed, "sizes", 0, 0, 0), corpus.rng(seed, "pacing", 0, 0, 0)
    )
    n_system = await sizing.fit_shared(conv, probe_nonce(nonces))
    messages, _, _ = await sizing.fit_opening(conv, n_system, plan[0].prior_tokens)
    conv.set_opening(messages)
    replies = corpus.rng(seed, "bench-replies")
    steps = [s for s in plan if s.kind != "compaction"]
    have = 0
    for i, step in enumerate(steps):
        conv.kinds[step.turn] = step.kind
        if step.children:  # the sub-agents' final replies head the tool result
            conv.heads[step.turn] = corpus.reply_text(replies, 300)
        prepared = await sizing.fit_turn(
            conv,
            step.turn,
            None,
            exact=False,
            new_tokens=step.new_tokens,
            prompt_tokens=step.prior_tokens + step.new_tokens if step.turn == 1 else None,
        )
        conv.commit(prepared.messages)
        text, calls = fake_reply(
            corpus, replies, step.output_tokens, calls=steps[i + 1].kind == "tool"
        )
        conv.add_reply(text, calls)
        have = len(await sizing.estimate.render(conv.messages, "continue"))
        if have >= depth:
            return sizing, conv, steps[i + 1 :], have
    raise SystemExit(f"the plan ended at {have:,} tokens, before {depth:,}: raise --turns")


class Tally:
    """CPU per step in the calls fit_turn makes, by part: the estimate's renders (of the
    history alone, "continue", and of history + new content, "generate"), its encodes of the
    new content alone, and the conversation's cuts of that content. Wraps the instances'
    methods (none of these calls nests in another)."""

    PARTS = (
        "render history (continue)",
        "render + new (generate)",
        "encode new content",
        "cut new content",
    )

    def __init__(self, est: EstimateTokenizer, conv: Conversation) -> None:
        self.objects = (est, conv)
        self.ns = dict.fromkeys(self.PARTS, 0)
        self.calls = dict.fromkeys(self.PARTS, 0)
        self.steps: list[tuple[dict[str, int], dict[str, int]]] = []
        render, encode, content = est.render, est.encode, conv.content

        async def timed_render(messages: Any, mode: Any) -> list[int]:
            part = self.PARTS[0] if mode == "continue" else self.PARTS[1]
            start = time.process_time_ns()
            try:
                return await render(messages, mode)
            finally:
                self._add(part, start)

        async def timed_encode(text: str) -> list[int]:
            start = time.process_time_ns()
            try:
                return await encode(text)
            finally:
                self._add(self.PARTS[2], start)

        def timed_content(turn: int, n: int, pad: str = "") -> str:
            start = time.process_time_ns()
            try:
                return content(turn, n, pad)
            finally:
                self._add(self.PARTS[3], start)

        est.render, est.encode = timed_render, timed_encode  # type: ignore[method-assign]
        conv.content = timed_content  # type: ignore[method-assign]

    def _add(self, part: str, start: int) -> None:
        self.ns[part] += time.process_time_ns() - start
        self.calls[part] += 1

    def close_step(self) -> None:
        self.steps.append((self.ns, self.calls))
        self.ns, self.calls = dict.fromkeys(self.PARTS, 0), dict.fromkeys(self.PARTS, 0)

    def remove(self) -> None:
        for obj in self.objects:
            for name in ("render", "encode", "content"):
                obj.__dict__.pop(name, None)

    def rows(self) -> list[tuple[str, list[float]]]:
        out = []
        for part in self.PARTS:
            calls = sorted(c[part] for _, c in self.steps)
            out.append(
                (
                    f"{part}, {calls[len(calls) // 2]} call(s)",
                    [ns[part] / 1e6 for ns, _ in self.steps],
                )
            )
        return out


def cpu_ns(fn: Callable[[], Any]) -> int:
    start = time.process_time_ns()
    fn()
    return time.process_time_ns() - start


def summary(values: list[float]) -> tuple[float, float, float]:
    """median, p90 (nearest rank), max."""
    xs = sorted(values)
    return xs[len(xs) // 2], xs[min(len(xs) - 1, int(0.9 * len(xs)))], xs[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=50, help="repetitions per row (default 50)")
    parser.add_argument("--cold", type=int, default=10, help="repetitions of the cold row")
    parser.add_argument("--depth", type=int, default=100_000, help="history tokens")
    parser.add_argument("--turns", type=int, default=400, help="the plan's steps (to go deep)")
    parser.add_argument("--profile", metavar="FILE", help="cProfile the steady fit_turn row")
    args = parser.parse_args()

    tokens.encoding()  # loaded once per process: not what is measured
    base = workloads.load_scenario("coding-agents")
    deep = base.with_overrides([f"turns={args.turns}", "users=1"])
    corpus = load_corpus(base.content.corpus)
    loop = asyncio.new_event_loop()

    def run(coro: Awaitable[Any]) -> Any:
        return loop.run_until_complete(coro)

    started = time.process_time()
    sizing, conv, ahead, depth = run(build(deep, corpus, args.depth))
    built_s = time.process_time() - started
    if len(ahead) < args.n:
        raise SystemExit(f"{len(ahead)} steps left after {depth:,} tokens: raise --turns")
    history = conv.messages
    rows: list[tuple[str, str, list[float]]] = []
    gc.collect()

    # 1. drawing plans, per step
    seed = base.content.seed
    per_step = []
    for r in range(args.n):
        gens = [
            (corpus.rng(seed, "sizes", 0, r, s), corpus.rng(seed, "pacing", 0, r, s))
            for s in range(DRAWS_PER_REPETITION)
        ]
        plans: list[tuple[Step, ...]] = []
        ns = cpu_ns(
            lambda gens=gens, plans=plans: plans.extend(draw_plan(base, a, b) for a, b in gens)
        )
        per_step.append(ns / 1e3 / sum(plan_steps(p) for p in plans))
    rows.append(("draw_plan (coding-agents), per step", "µs", per_step))

    # 2. fit_turn on the 100K history: steady (memo warm), then cold (a new memo)
    def fit(sizing: CellSizing, step: Step) -> Any:
        conv.kinds[step.turn] = step.kind
        return run(sizing.fit_turn(conv, step.turn, None, exact=False, new_tokens=step.new_tokens))

    steps = ahead[: args.n]
    profiler = cProfile.Profile() if args.profile else None
    parts = Tally(sizing.estimate, conv)
    steady = []
    for step in steps:
        if profiler:
            profiler.enable()
        steady.append(cpu_ns(lambda step=step: fit(sizing, step)) / 1e6)
        if profiler:
            profiler.disable()
        parts.close_step()
    parts.remove()
    assert conv.messages is history  # sizing never commits
    rows.append(("fit_turn, steady (memo warm, new content)", "ms", steady))
    rows += [(f"  of which {name}", "ms", values) for name, values in parts.rows()]
    cold = []
    for step in steps[: args.cold]:
        fresh = new_sizing(deep)
        cold.append(cpu_ns(lambda step=step, fresh=fresh: fit(fresh, step)) / 1e6)
    rows.append(("fit_turn, cold (first render, empty memo)", "ms", cold))

    # 3. the messages alone, and the render alone
    texts = [(s, conv.content(s.turn, s.new_tokens)) for s in steps]
    rows.append(
        (
            "with_text (new content given)",
            "ms",
            [cpu_ns(lambda s=s, t=t: conv.with_text(t, s.kind)) / 1e6 for s, t in texts],
        )
    )
    rows.append(
        (
            "with_turn (content cut from its stream)",
            "ms",
            [cpu_ns(lambda s=s: conv.with_turn(s.turn, s.new_tokens)) / 1e6 for s in steps],
        )
    )
    est = sizing.estimate
    rows.append(
        (
            "render the history (estimate, memo warm)",
            "ms",
            [cpu_ns(lambda: run(est.render(history, "continue"))) / 1e6 for _ in steps],
        )
    )

    kinds = {k: sum(s.kind == k for s in steps) for k in ("human", "tool")}
    print(
        f"history: {depth:,} estimate tokens, {len(history)} messages, built in "
        f"{built_s:.1f} s CPU; steps sized: {kinds['human']} human, {kinds['tool']} tool, "
        f"new tokens median {sorted(s.new_tokens for s in steps)[len(steps) // 2]:,}"
    )
    print(f"{'CPU per step':<58} {'n':>3} {'median':>9} {'p90':>9} {'max':>9}")
    for name, unit, values in rows:
        med, p90, top = summary(values)
        print(
            f"{name + ' (' + unit + ')':<58} {len(values):>3} {med:>9.3f} {p90:>9.3f} {top:>9.3f}"
        )
    draw_ms = summary(per_step)[0] / 1e3
    total = [draw_ms + s for s in steady]
    med, p90, top = summary(total)
    verdict = (
        "met" if p90 < TARGET_MS else "met at the median only" if med < TARGET_MS else "NOT met"
    )
    print(
        f"draw + fit_turn steady: median {med:.2f} ms, p90 {p90:.2f} ms, max {top:.2f} ms "
        f"of CPU against {TARGET_MS:.0f} ms: {verdict}; the cold first render "
        f"{summary(cold)[0]:.1f} ms (once per history, not per step)"
    )
    if profiler:
        profiler.dump_stats(args.profile)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(14)


if __name__ == "__main__":
    main()
