"""Shared memory for large frame parts between processes of one host.

A part at least ``shm_threshold`` bytes long is copied once into an anonymous memory file
(``memfd_create``) whose descriptor travels with the frame (``SCM_RIGHTS``); the receiver
maps it and hands the mapping up as the part, so the bytes cross no socket and are never
copied again on the receiving side.

Fresh memory is the expensive part on most machines (the kernel zeroes and maps every
page on first touch), so segments are recycled: when the receiver's last reference to a
mapping dies (the tensor built over it is freed), the descriptor goes back to the sender
over the same connection, into the sender's ``SegmentPool``, ready for its next large
part with its pages already in place.

Nothing is ever named in ``/dev/shm``: the kernel frees a segment when its last
descriptor and mapping are gone, so a process that dies mid-transfer leaks nothing.
"""

from __future__ import annotations

import mmap
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["SegmentPool", "map_segment", "pool"]

_PROT = mmap.PROT_READ | mmap.PROT_WRITE
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
_GRANULE = 2 * 1024 * 1024


class _Segment:
    """A memory file and, once filled here, this process' mapping of it."""

    __slots__ = ("capacity", "fd", "inode", "mapping")

    def __init__(self, fd: int) -> None:
        stat = os.fstat(fd)
        self.fd = fd
        self.capacity = stat.st_size
        self.inode = stat.st_ino
        self.mapping: mmap.mmap | None = None

    def close(self) -> None:
        if self.mapping is not None:
            self.mapping.close()
        os.close(self.fd)


class SegmentPool:
    """Memory files this process may fill and send, smallest fitting first.

    A segment is idle (ready), or lent (sent; the receiver returns it when done). Lent
    segments keep this side's mapping, so a returning segment is refilled without
    mapping its pages again.

    Args:
        max_idle_bytes: capacity kept idle at most; segments beyond it are closed.
    """

    def __init__(self, max_idle_bytes: int = 1 << 30) -> None:
        self._lock = threading.Lock()
        self._idle: list[_Segment] = []  # sorted by capacity
        self._lent: dict[int, _Segment] = {}  # by inode
        self.max_idle_bytes = max_idle_bytes

    def fill(self, part: Any, size: int) -> tuple[int, int]:
        """Copy ``part`` (``size`` bytes) into a segment; ``(fd to send, inode)``.

        The caller closes the returned descriptor once sent; the segment stays lent until
        ``give`` gets it back or ``forget`` drops it.
        """
        segment = self._take(size)
        try:
            if segment.mapping is None:
                flags = mmap.MAP_SHARED | _POPULATE
                segment.mapping = mmap.mmap(segment.fd, segment.capacity, flags, _PROT)
            source = part if isinstance(part, memoryview) else memoryview(part)
            if source.format != "B" or source.ndim != 1:
                source = source.cast("B")
            segment.mapping[:size] = source
            fd = os.dup(segment.fd)
        except BaseException:
            segment.close()
            raise
        with self._lock:
            self._lent[segment.inode] = segment
        return fd, segment.inode

    def _take(self, size: int) -> _Segment:
        with self._lock:
            for index, segment in enumerate(self._idle):
                if size <= segment.capacity <= 2 * size + _GRANULE:
                    return self._idle.pop(index)
        fd = os.memfd_create("actormesh", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, -(-size // _GRANULE) * _GRANULE)
            return _Segment(fd)
        except BaseException:
            os.close(fd)
            raise

    def give(self, fd: int) -> int:
        """Take ``fd`` back for reuse: one of ours returning, or a received one released.

        Returns the segment's inode (0 if the descriptor was unusable).
        """
        try:
            segment = _Segment(fd)
        except OSError:
            return 0
        inode = segment.inode
        with self._lock:
            lent = self._lent.pop(segment.inode, None)
            if lent is not None:
                os.close(fd)  # ours: the copy we kept is the one with a mapping
                segment = lent
            if self._idle_bytes() + segment.capacity <= self.max_idle_bytes:
                self._idle.append(segment)
                self._idle.sort(key=lambda s: s.capacity)
                return inode
        segment.close()
        return inode

    def forget(self, inodes: set[int]) -> None:
        """Drop lent segments that will never come back (their receiver is gone)."""
        with self._lock:
            gone = [self._lent.pop(inode) for inode in inodes if inode in self._lent]
        for segment in gone:
            segment.close()

    def _idle_bytes(self) -> int:
        return sum(segment.capacity for segment in self._idle)

    def idle_bytes(self) -> int:
        """Capacity of the idle segments."""
        with self._lock:
            return self._idle_bytes()


pool = SegmentPool()


def map_segment(fd: int, size: int, release: Callable[[int], None]) -> memoryview:
    """Map a received segment; ``release(fd)`` runs once the mapping is no longer used."""
    try:
        mapping = mmap.mmap(fd, size, mmap.MAP_SHARED | _POPULATE, _PROT)
    except BaseException:
        os.close(fd)
        raise
    weakref.finalize(mapping, release, fd)
    return memoryview(mapping)
