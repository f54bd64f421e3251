"""Benchmark: how long sizing a 115K-token session takes with the tiktoken estimate.

Seed 000's deepest cell has 115,404 prior tokens. Sizing must not cost O(context) per turn:
a turn appends ~1,500 tokens to a 115K history, and the estimate re-encodes only the new
part (core/tokens.py SegmentMemo). Prints wall and CPU time for the opening (once per
session) and for each of 4 turns. Not a test: a slow machine is not a failure.

    python benchmarks/sizing_115k.py
"""

from __future__ import annotations

import asyncio
import time

import workloads
from workloads.core import tokens
from workloads.core.conversation import Conversation, make_nonces, probe_nonce
from workloads.core.corpus import load_corpus
from workloads.core.tokens import EstimateTokenizer
from workloads.runner.sizing import CellSizing

SCENARIO = workloads.Scenario.model_validate(
    {
        "name": "sizing-115k",
        "users": 1,
        "turns": 4,
        "opening_tokens": 115_404,
        "turn_tokens": 1000,
        "output_tokens": 512,
    }
)


async def main() -> None:
    tokens.encoding()  # loaded once per process; not what is measured
    corpus = load_corpus("stdlib")
    tok = EstimateTokenizer()
    sizing = CellSizing(SCENARIO, tok)
    nonces = make_nonces(b"b" * 16, cell=0, repetition=0, users=1, mode=SCENARIO.nonce)
    conv = Conversation(
        corpus=corpus,
        style=SCENARIO.content.style,
        seed=0,
        session=0,
        nonce=nonces.sessions[0],
        run_nonce=nonces.run,
    )
    wall, cpu = time.perf_counter(), time.process_time()
    n_system = await sizing.fit_shared(conv, probe_nonce(nonces))
    messages, ids, _ = await sizing.fit_opening(conv, n_system)
    conv.set_opening(messages)
    print(
        f"opening {len(ids):,} tokens: {time.perf_counter() - wall:.3f} s wall, "
        f"{time.process_time() - cpu:.3f} s CPU"
    )
    base = len(ids)
    for turn in range(1, SCENARIO.turns + 1):
        wall, cpu = time.perf_counter(), time.process_time()
        prepared = await sizing.fit_turn(conv, turn, base, exact=False)
        took = time.perf_counter() - wall, time.process_time() - cpu
        conv.commit(prepared.messages)
        reply = corpus.reply_text(corpus.rng(0, "reply", turn), 512)
        conv.add_reply(reply)
        base = len(prepared.ids) + len(await tok.encode(reply))
        print(
            f"turn {turn}: prompt {len(prepared.ids):,} tokens: {took[0] * 1000:.0f} ms wall, "
            f"{took[1] * 1000:.0f} ms CPU"
        )


if __name__ == "__main__":
    asyncio.run(main())
