"""The simulated engine's paged KV cache: one pool of fixed-size blocks shared by the running
sequences and the prefix cache, shaped like vLLM V1's block pool.

* A block holds the KV of ``block_size`` tokens. Once full (and computed) it gets a hash that
  covers its tokens *and the hash of the block before it*, so a hit on block i means the whole
  prefix up to block i matches (vLLM's automatic prefix caching).
* Blocks are reference-counted. A running sequence holds one reference on each of its blocks;
  sequences with a common prefix share those blocks.
* When its count drops to zero a block goes to the tail of the free queue but keeps its hash:
  it is still a cache hit until it is handed out again. Allocation takes from the head of the
  queue, so the least recently freed block is evicted first (LRU). A sequence frees its blocks
  tail first, so the first blocks of a prefix — the ones other requests can share — are the
  last of that sequence to be evicted.
* Capacity is fixed. When the queue is empty allocation fails and the scheduler must preempt.

The pool creates :class:`Block` objects lazily, so a 4M-token profile costs nothing until its
blocks are used.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["Block", "BlockPool", "block_hashes", "chain_hash"]


def chain_hash(parent: int, tokens: Sequence[int]) -> int:
    """The hash of one full block, chained to the hash of the block before it (0 for none)."""
    return hash((parent, tuple(tokens)))


def block_hashes(ids: Sequence[int], block_size: int, parent: int = 0) -> list[int]:
    """Chained hashes of every full block of ``ids``."""
    hashes: list[int] = []
    for start in range(0, len(ids) - block_size + 1, block_size):
        parent = chain_hash(parent, ids[start : start + block_size])
        hashes.append(parent)
    return hashes


@dataclass(eq=False, slots=True)
class Block:
    """One KV block. ``hash`` is set once the block is full and registered in the cache."""

    id: int
    hash: int | None = None
    ref: int = 0


class BlockPool:
    """A fixed number of KV blocks: allocation, sharing, the free queue and the prefix cache.

    pool = BlockPool(num_blocks=2887)
    hits = pool.longest_hit(hashes, max_blocks=len(hashes))
    pool.touch(hits); blocks = hits + pool.allocate(10)
    ...; pool.free(blocks)
    """

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError("a block pool needs at least one block")
        self.num_blocks = num_blocks
        # Blocks never handed out are the head of the free queue; only their count is kept.
        self._next_id = 0
        # Freed blocks in the order they were freed: the head is evicted first.
        self._free: OrderedDict[int, Block] = OrderedDict()
        self._cached: dict[int, Block] = {}  # hash -> block, whatever its reference count
        self.evictions = 0  # cached blocks handed out again (their hash dropped)

    @property
    def num_free(self) -> int:
        """Blocks that can be allocated now: never used, or unreferenced (cached or not)."""
        return self.num_blocks - self._next_id + len(self._free)

    @property
    def num_cached(self) -> int:
        """Blocks currently registered in the prefix cache (referenced or not)."""
        return len(self._cached)

    @property
    def usage(self) -> float:
        """Fraction of blocks in use by sequences, as vLLM's ``kv_cache_usage_perc`` counts it
        (unreferenced cached blocks count as free)."""
        return 1.0 - self.num_free / self.num_blocks

    def longest_hit(self, hashes: Sequence[int], max_blocks: int) -> list[Block]:
        """The cached blocks of the longest cached prefix of ``hashes``, at most ``max_blocks``."""
        out: list[Block] = []
        for h in hashes[: max(0, max_blocks)]:
            block = self._cached.get(h)
            if block is None:
                break
            out.append(block)
        return out

    @staticmethod
    def unreferenced(blocks: Iterable[Block]) -> int:
        """How many of ``blocks`` sit in the free queue (touching them uses free capacity)."""
        return sum(1 for b in blocks if b.ref == 0)

    def touch(self, blocks: Iterable[Block]) -> None:
        """Take a reference on cache hits; unreferenced ones leave the free queue."""
        for block in blocks:
            if block.ref == 0:
                del self._free[block.id]
            block.ref += 1

    def allocate(self, n: int) -> list[Block]:
        """``n`` blocks with one reference each, evicting LRU cached blocks as needed."""
        if n > self.num_free:
            raise MemoryError(f"asked for {n} KV blocks, {self.num_free} free")
        out: list[Block] = []
        for _ in range(n):
            if self._next_id < self.num_blocks:
                block = Block(self._next_id)
                self._next_id += 1
            else:
                _, block = self._free.popitem(last=False)
                if block.hash is not None:
                    del self._cached[block.hash]
                    block.hash = None
                    self.evictions += 1
            block.ref = 1
            out.append(block)
        return out

    def free(self, blocks: Sequence[Block]) -> None:
        """Drop one reference on each of a sequence's blocks, tail first (see module doc)."""
        for block in reversed(blocks):
            block.ref -= 1
            if block.ref == 0:
                self._free[block.id] = block

    def cache(self, block: Block, block_hash: int) -> None:
        """Register a full, computed block under ``block_hash``.

        If another sequence already registered the same content (both computed it at once),
        this copy stays private and is simply freed later — vLLM does the same.
        """
        if block.hash is not None or block_hash in self._cached:
            return
        block.hash = block_hash
        self._cached[block_hash] = block

    def reset(self) -> int:
        """Drop every unreferenced cached block from the cache (``/reset_prefix_cache``);
        returns how many were dropped. Blocks in use keep their hashes."""
        dropped = 0
        for block in self._free.values():
            if block.hash is not None:
                del self._cached[block.hash]
                block.hash = None
                dropped += 1
        return dropped
