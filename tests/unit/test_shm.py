"""Shared-memory segments: the sender's pool, shares lent to several receivers, and the
receiver's cache of mappings (real memory files, in this process)."""

from __future__ import annotations

import gc
import mmap
import os

import pytest

from actormesh._transport._shm import MappingCache, SegmentPool, SegmentShare, map_segment
from actormesh._transport._shm import pool as default_pool

MIB = 1 << 20


def _returned(fd: int) -> None:
    os.close(fd)


def test_a_cached_mapping_is_reused_and_shows_what_the_sender_wrote_since() -> None:
    pool = SegmentPool()
    fd, inode = pool.fill(b"a" * MIB, MIB)
    cache = MappingCache()
    returned: list[int] = []
    first = cache.view(fd, MIB, returned.append)
    assert bytes(first[:3]) == b"aaa"
    address = cache._by_inode[inode].address
    del first
    gc.collect()
    assert returned == [fd] and cache._by_inode[inode].busy is False
    pool.give(fd)  # back at the sender, which refills the same segment
    fd, again = pool.fill(b"b" * MIB, MIB)
    assert again == inode
    second = cache.view(fd, MIB // 2, returned.append)
    assert cache._by_inode[inode].address == address  # not mapped again
    assert bytes(second[:3]) == b"bbb" and len(second) == MIB // 2
    del second
    gc.collect()
    assert cache.mapped_bytes() >= MIB
    os.close(fd)


def test_free_mappings_beyond_the_budget_are_unmapped_oldest_first() -> None:
    cache = MappingCache(max_bytes=3 * MIB)
    pool = SegmentPool()
    sent = [pool.fill(bytes([i]) * MIB, MIB) for i in range(3)]  # 2 MiB granules each
    views = [cache.view(fd, MIB, _returned) for fd, _ in sent]
    assert cache.mapped_bytes() == 6 * MIB  # busy ones are never unmapped
    while views:  # freed oldest first: each free unmaps what the budget cannot keep
        del views[0]
        gc.collect()
    assert cache.mapped_bytes() <= 3 * MIB
    assert list(cache._by_inode) == [sent[2][1]]  # the last one freed stays


def test_a_shared_segment_returns_to_the_pool_once_every_holder_gave_it_back() -> None:
    share = SegmentShare()  # fills the process' own pool
    (fd1, inode), (fd2, inode2) = (share.segment(1, b"x" * MIB, MIB) for _ in range(2))
    assert inode == inode2

    assert default_pool._lent[inode].holders == 2
    default_pool.give(fd1)
    assert inode in default_pool._lent  # the other receiver still maps it
    default_pool.give(fd2)
    assert inode not in default_pool._lent
    assert any(segment.inode == inode for segment in default_pool._idle)


def test_a_share_whose_holder_was_forgotten_is_never_refilled() -> None:
    share = SegmentShare()
    (fd1, inode), (fd2, _) = (share.segment(1, b"y" * MIB, MIB) for _ in range(2))
    default_pool.forget({inode})  # one receiver's connection closed: it may still map it
    default_pool.give(fd1)
    assert inode not in default_pool._lent
    assert all(segment.inode != inode for segment in default_pool._idle)
    os.close(fd2)


def test_a_private_mapping_keeps_writes_to_itself() -> None:
    pool = SegmentPool()
    fd, _ = pool.fill(b"z" * MIB, MIB)
    mine = map_segment(os.dup(fd), MIB, os.close, private=True)
    theirs = mmap.mmap(fd, MIB, mmap.MAP_SHARED)
    mine[0] = ord("!")
    assert theirs[0] == ord("z") and mine[0] == ord("!")
    theirs.close()
    os.close(fd)


def test_a_cache_view_of_a_bad_descriptor_raises() -> None:
    with pytest.raises(OSError):
        MappingCache().view(-1, MIB, _returned)


def test_the_most_recently_returned_segment_is_lent_first() -> None:
    # Its pages are the likeliest to be in the caches still; the oldest idle one is cold.
    pool = SegmentPool()
    (fd_a, _), (fd_b, inode_b) = pool.fill(b"a" * MIB, MIB), pool.fill(b"b" * MIB, MIB)
    pool.give(fd_a)
    pool.give(fd_b)
    fd_c, inode_c = pool.fill(b"c" * MIB, MIB)
    assert inode_c == inode_b
    os.close(fd_c)


def test_the_smallest_fitting_capacity_is_lent_before_a_larger_recent_one() -> None:
    pool = SegmentPool()
    (fd_small, small), (fd_large, _) = (
        pool.fill(b"s" * MIB, MIB),
        pool.fill(b"l" * 3 * MIB, 3 * MIB),
    )
    pool.give(fd_small)
    pool.give(fd_large)  # returned last, and big enough for a 1 MiB part too
    fd, inode = pool.fill(b"t" * MIB, MIB)
    assert inode == small
    os.close(fd)


def test_a_reserved_segment_is_lent_as_written_and_reused_once_every_holder_gave_it_back() -> None:
    pool = default_pool  # (a share lends from the process' pool)
    view, inode = pool.reserve(MIB)
    view[:3] = b"abc"  # written here, as a host agent writes bulk chunks
    share = SegmentShare()
    share.holding(1, inode)
    fd, lent = share.segment(1, view, MIB)  # no copy: the same segment, lent
    assert lent == inode
    with mmap.mmap(fd, MIB, mmap.MAP_PRIVATE) as seen:
        assert seen[:3] == b"abc"
    view.release()
    pool.release(inode)  # the reserver let go; the receiver still holds it
    assert inode in pool._lent
    assert pool.give(fd) == inode  # the receiver gave it back: reusable now
    assert any(segment.inode == inode for segment in pool._idle)
    again, reused = pool.reserve(MIB)
    assert reused == inode
    again.release()
    pool.release(reused)
