"""The simulated engine's prefix cache: hash-chained blocks of ``block_size`` tokens.

A block's hash covers its tokens and the hash of the block before it, so a hit on block i
means the whole prefix up to block i matches, as in vLLM's automatic prefix caching.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

__all__ = ["PrefixCache", "block_hashes"]


def block_hashes(ids: Sequence[int], block_size: int) -> list[int]:
    """Chained hashes of every full block of ``ids``."""
    hashes: list[int] = []
    parent = 0
    for start in range(0, len(ids) - block_size + 1, block_size):
        parent = hash((parent, tuple(ids[start : start + block_size])))
        hashes.append(parent)
    return hashes


class PrefixCache:
    """Cached blocks with LRU eviction once ``capacity_blocks`` is reached."""

    def __init__(self, capacity_blocks: int) -> None:
        self.capacity_blocks = capacity_blocks
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def match(self, hashes: Sequence[int]) -> int:
        """Number of leading blocks present; marks them recently used."""
        n = 0
        for h in hashes:
            if h not in self._blocks:
                break
            self._blocks.move_to_end(h)
            n += 1
        return n

    def insert(self, hashes: Sequence[int]) -> None:
        for h in hashes:
            if h in self._blocks:
                self._blocks.move_to_end(h)
            else:
                self._blocks[h] = None
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)

    def clear(self) -> None:
        self._blocks.clear()
