"""The what-if cache oracle: replay a finished run's token sequences through the KV cache
model, with no timing, and say what hit rate a prefix cache of a given capacity would give.

A measured hit rate mixes two causes: the cache is too small for the working set, and
requests competing at the same time evict each other's prefixes. The oracle removes the
second. It admits requests one at a time, in arrival order, into the same block pool the
simulated engine uses (16-token hash-chained blocks, LRU eviction of unreferenced blocks,
tail-first freeing), so a report can say::

    turn 2: observed 31% · an LRU of 46,202 tokens would give 38% · unlimited 92%

    requests = [OracleRequest(prompt_ids, completion_ids, turn=t) for ... in arrival order]
    for row in what_if(requests, capacity_tokens=46_202):
        print(row.turn, row.lru_hit_rate, row.unlimited_hit_rate)

Inputs are token ids as the server sees them (``/tokenize`` with ``messages``, or the
simulated server's :meth:`~workloads.SimulatedServer.token_ids`). Give each request's
completion too when you have it: the next turn's prompt starts with it, and without it the
oracle cannot credit those tokens.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from workloads.core.kvcache import BlockPool, block_hashes
from workloads.model.whatif import OracleTurn, WhatIfTurn

__all__ = ["OracleRequest", "OracleTurn", "WhatIfTurn", "lru_hits", "replay", "what_if"]

# An "unlimited" pool is a pool with more blocks than any run can touch; the pool makes its
# blocks lazily, so the size costs nothing.
_UNLIMITED_BLOCKS = 1 << 62


@dataclass(frozen=True)
class OracleRequest:
    """One request of a run: its prompt ids, its completion ids, and the turn it belongs to
    (the label figures are grouped by). Every request that reached the server is replayed
    (it changed the cache); only ``counted`` ones enter the per-turn figures, so they are
    over the same requests as the observed hit rate (valid, cached tokens reported)."""

    prompt: Sequence[int]
    completion: Sequence[int] = ()
    turn: int = 1
    counted: bool = True


def lru_hits(
    requests: Iterable[OracleRequest], *, capacity_tokens: int | None, block_size: int = 16
) -> list[int]:
    """Cached tokens each request would get, admitted one at a time in order.

    Each request looks up its prompt (the hit stops short of the last prompt token, which must
    be computed, as in vLLM), takes blocks for prompt + completion, registers its full
    computed blocks (the last completion token never gets KV), and frees them.
    """
    if capacity_tokens is not None and capacity_tokens < block_size:
        raise ValueError(f"capacity_tokens must hold at least one block ({block_size})")
    blocks_total = _UNLIMITED_BLOCKS if capacity_tokens is None else capacity_tokens // block_size
    pool = BlockPool(blocks_total)
    out: list[int] = []
    for request in requests:
        prompt = list(request.prompt)
        tokens = prompt + list(request.completion)
        computed = len(tokens) - 1 if request.completion else len(tokens)
        hashes = block_hashes(tokens[:computed], block_size)
        hits = pool.longest_hit(hashes, (len(prompt) - 1) // block_size)
        out.append(len(hits) * block_size)
        pool.touch(hits)
        want = -(-len(tokens) // block_size) - len(hits)
        blocks = hits + pool.allocate(min(want, pool.num_free))
        for index in range(len(hits), min(len(blocks), len(hashes))):
            pool.cache(blocks[index], hashes[index])
        pool.free(blocks)
    return out


def replay(
    requests: Iterable[OracleRequest], *, capacity_tokens: int | None, block_size: int = 16
) -> list[OracleTurn]:
    """Per-turn ideal hits of an LRU prefix cache of ``capacity_tokens`` (None = unlimited)
    for ``requests`` in arrival order. Pure."""
    listed = list(requests)
    hits = lru_hits(listed, capacity_tokens=capacity_tokens, block_size=block_size)
    sums: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0])
    for request, hit in zip(listed, hits, strict=True):
        if not request.counted:
            continue
        row = sums[request.turn]
        row[0] += 1
        row[1] += len(request.prompt)
        row[2] += hit
    return [
        OracleTurn(
            turn=turn,
            requests=n,
            prompt_tokens=prompt,
            hit_tokens=hit,
            capacity_tokens=capacity_tokens,
        )
        for turn, (n, prompt, hit) in sorted(sums.items())
    ]


def what_if(
    requests: Iterable[OracleRequest], *, capacity_tokens: int, block_size: int = 16
) -> list[WhatIfTurn]:
    """:func:`replay` at ``capacity_tokens`` and at unlimited capacity, per turn."""
    listed = list(requests)
    limited = replay(listed, capacity_tokens=capacity_tokens, block_size=block_size)
    unlimited = {t.turn: t for t in replay(listed, capacity_tokens=None, block_size=block_size)}
    return [
        WhatIfTurn(
            turn=t.turn,
            requests=t.requests,
            prompt_tokens=t.prompt_tokens,
            capacity_tokens=capacity_tokens,
            lru_hit_tokens=t.hit_tokens,
            unlimited_hit_tokens=unlimited[t.turn].hit_tokens,
        )
        for t in limited
    ]
