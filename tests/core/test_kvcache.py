"""The paged KV block pool: sharing, reference counts, LRU eviction of unreferenced blocks."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workloads.core.kvcache import BlockPool, block_hashes


def fill(pool: BlockPool, ids: list[int], block_size: int = 4) -> list:
    """Allocate and register one sequence's blocks the way the engine does."""
    hashes = block_hashes(ids, block_size)
    hits = pool.longest_hit(hashes, len(hashes))
    pool.touch(hits)
    blocks = hits + pool.allocate(-(-len(ids) // block_size) - len(hits))
    for block, h in zip(blocks, hashes, strict=False):
        pool.cache(block, h)
    return blocks


def test_hashes_chain_so_a_hit_means_the_whole_prefix_matches():
    a = block_hashes([1, 2, 3, 4, 5, 6, 7, 8], 4)
    b = block_hashes([9, 9, 9, 9, 5, 6, 7, 8], 4)
    assert len(a) == 2 and a[1] != b[1]  # same second block, different parent
    assert block_hashes([1, 2, 3], 4) == []  # partial blocks have no hash


def test_sequences_with_a_common_prefix_share_its_blocks():
    pool = BlockPool(10)
    first = fill(pool, list(range(12)))
    second = fill(pool, [*range(8), 100, 101, 102, 103])
    assert first[:2] == second[:2]
    assert [b.ref for b in first] == [2, 2, 1]
    assert pool.num_free == 10 - 4


def test_freed_blocks_stay_cached_until_reused():
    pool = BlockPool(3)
    blocks = fill(pool, list(range(12)))
    pool.free(blocks)
    assert pool.num_free == 3 and pool.usage == 0.0
    hashes = block_hashes(list(range(12)), 4)
    assert len(pool.longest_hit(hashes, 3)) == 3


def test_eviction_takes_the_least_recently_freed_and_a_sequence_tail_first():
    pool = BlockPool(4)
    old = fill(pool, list(range(8)))  # 2 blocks
    pool.free(old)
    new = fill(pool, list(range(100, 108)))  # 2 more, never-used blocks first
    pool.free(new)
    assert pool.evictions == 0
    pool.allocate(1)  # evicts the oldest freed block: the tail of `old`
    assert pool.evictions == 1
    assert len(pool.longest_hit(block_hashes(list(range(8)), 4), 2)) == 1  # head survives
    assert len(pool.longest_hit(block_hashes(list(range(100, 108)), 4), 2)) == 2


def test_a_prefix_used_again_is_evicted_after_one_used_less_recently():
    # Least recently *used*, not first cached: session A's prefix, cached first, is hit
    # again (and freed again) after B's; a full pool then evicts B's, and A's stays.
    pool = BlockPool(4)
    a, b = list(range(8)), list(range(100, 108))
    pool.free(fill(pool, a))
    pool.free(fill(pool, b))
    pool.free(fill(pool, a))  # A's next step: a hit on both blocks, freed again
    pool.allocate(2)  # another session's new tokens: the pool is full of cached blocks
    assert pool.evictions == 2
    assert len(pool.longest_hit(block_hashes(a, 4), 2)) == 2
    assert len(pool.longest_hit(block_hashes(b, 4), 2)) == 0


def test_referenced_blocks_are_never_evicted():
    pool = BlockPool(2)
    held = fill(pool, list(range(8)))
    assert pool.num_free == 0
    with pytest.raises(MemoryError):
        pool.allocate(1)
    pool.free(held)
    pool.allocate(2)
    assert pool.evictions == 2 and pool.num_cached == 0


def test_a_hit_on_an_unreferenced_block_takes_it_out_of_the_free_queue():
    pool = BlockPool(2)
    pool.free(fill(pool, list(range(8))))
    hits = pool.longest_hit(block_hashes(list(range(8)), 4), 2)
    assert BlockPool.unreferenced(hits) == 2
    pool.touch(hits)
    assert pool.num_free == 0


def test_a_duplicate_block_stays_private():
    pool = BlockPool(4)
    h = block_hashes(list(range(4)), 4)[0]
    a, b = pool.allocate(2)
    pool.cache(a, h)
    pool.cache(b, h)
    assert a.hash == h and b.hash is None and pool.num_cached == 1


def test_reset_forgets_only_unreferenced_blocks():
    pool = BlockPool(4)
    held = fill(pool, list(range(8)))
    pool.free(fill(pool, list(range(50, 58))))
    assert pool.reset() == 2
    assert pool.num_cached == 2 and all(b.hash is not None for b in held)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(1, 40), st.booleans()), min_size=1, max_size=40
    )
)
def test_reference_counts_and_free_counts_stay_consistent(ops):
    """Whatever sequences come and go, free + referenced = capacity and the cache only maps
    blocks that hold their hash."""
    pool = BlockPool(12)
    live: list[list] = []
    for prefix, length, release in ops:
        ids = [prefix] * 4 + list(range(length))
        hashes = block_hashes(ids, 4)
        hits = pool.longest_hit(hashes, (len(ids) - 1) // 4)
        need = -(-len(ids) // 4) - len(hits)
        if need + BlockPool.unreferenced(hits) <= pool.num_free:
            pool.touch(hits)
            blocks = hits + pool.allocate(need)
            for block, h in zip(blocks, hashes, strict=False):
                pool.cache(block, h)
            live.append(blocks)
        if release and live:
            pool.free(live.pop(0))
        referenced = {id(b) for blocks in live for b in blocks}
        assert pool.num_free + len(referenced) == pool.num_blocks
        for blocks in live:
            for b in blocks:
                assert b.ref >= 1
        for h, block in pool._cached.items():
            assert block.hash == h
