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

One frame sent to several processes of the host (a broadcast of a large argument, a
weight sync to every generator) fills one segment for all of them: each receiver maps it
copy-on-write (``MAP_PRIVATE``), so every actor still holds its own logical copy, pages
are shared until one of them writes, and the segment is reused only once every holder
returned it.

Nothing is ever named in ``/dev/shm``: the kernel frees a segment when its last
descriptor and mapping are gone, so a process that dies mid-transfer leaks nothing.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import ctypes
import mmap
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["MappingCache", "SegmentPool", "SegmentShare", "map_segment", "mappings", "pool"]

_PROT = mmap.PROT_READ | mmap.PROT_WRITE
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
# Maps a private mapping's pages for reading without copying them (Linux 5.14);
# MAP_POPULATE would break copy-on-write on every page, copying the whole segment.
_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)
_GRANULE = 2 * 1024 * 1024


class _Segment:
    """A memory file and, once filled here, this process' mapping of it."""

    __slots__ = ("capacity", "fd", "holders", "inode", "mapping", "tainted")

    def __init__(self, fd: int) -> None:
        stat = os.fstat(fd)
        self.fd = fd
        self.capacity = stat.st_size
        self.inode = stat.st_ino
        self.mapping: mmap.mmap | None = None
        self.holders = 0  # receivers it is lent to
        # A holder was forgotten (its connection closed) and may still map it: never
        # refill it, or that holder's copy would change under it.
        self.tainted = False

    def close(self) -> None:
        if self.mapping is not None:
            # A view of a reserved segment still alive somewhere: the mapping goes
            # with its last view instead.
            with contextlib.suppress(BufferError):
                self.mapping.close()
        os.close(self.fd)


def _capacity(segment: _Segment) -> int:
    return segment.capacity


class SegmentPool:
    """Memory files this process may fill and send, smallest fitting first.

    A segment is idle (ready), or lent (sent; each receiver returns it when done: one
    frame may lend it to several). Lent segments keep this side's mapping, so a
    returning segment is refilled without mapping its pages again.

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
        segment.holders = 1
        with self._lock:
            self._lent[segment.inode] = segment
        return fd, segment.inode

    def lend_again(self, inode: int) -> int:
        """Lend a segment ``fill`` returned to one more receiver; the descriptor to send.

        Raises:
            KeyError: the segment is no longer lent (every holder already gave it back).
        """
        with self._lock:
            segment = self._lent[inode]
            segment.holders += 1
        return os.dup(segment.fd)

    def _take(self, size: int) -> _Segment:
        with self._lock:
            # The smallest capacity that fits; of the segments of that capacity, the most
            # recently returned (the last: ``give`` inserts after its equals): its pages
            # are likely still in the processor's caches, here and where it was read.
            # Taking the oldest cycled through every idle segment, all cold: a 1 MiB
            # copy took 80 µs instead of 30 here.
            idle = self._idle
            for segment in idle:
                if size <= segment.capacity <= 2 * size + _GRANULE:
                    return idle.pop(bisect.bisect_right(idle, segment.capacity, key=_capacity) - 1)
        fd = os.memfd_create("actormesh", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, -(-size // _GRANULE) * _GRANULE)
            return _Segment(fd)
        except BaseException:
            os.close(fd)
            raise

    def reserve(self, size: int) -> tuple[memoryview, int]:
        """A segment of at least ``size`` bytes held by this process, to be written
        here and then lent like a filled one (``SegmentShare.holding``): its first
        ``size`` bytes, writable, and its inode. ``release(inode)`` ends this
        process' hold (the segment is reused once every receiver gave it back too).
        """
        segment = self._take(size)
        try:
            if segment.mapping is None:
                flags = mmap.MAP_SHARED | _POPULATE
                segment.mapping = mmap.mmap(segment.fd, segment.capacity, flags, _PROT)
        except BaseException:
            segment.close()
            raise
        segment.holders = 1
        with self._lock:
            self._lent[segment.inode] = segment
        return memoryview(segment.mapping)[:size], segment.inode

    def release(self, inode: int) -> None:
        """End this process' hold on a segment ``reserve`` gave (every view of it
        given out must be released first)."""
        with self._lock:
            segment = self._lent.get(inode)
            if segment is None:
                return
            segment.holders -= 1
            if segment.holders > 0:
                return  # receivers still map it
            del self._lent[inode]
            if self._keep_idle(segment):
                return
        segment.close()

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
            lent = self._lent.get(inode)
            if lent is not None:
                os.close(fd)  # ours: the copy we kept is the one with a mapping
                lent.holders -= 1
                if lent.holders > 0:
                    return inode  # other receivers still map it
                del self._lent[inode]
                segment = lent
            if self._keep_idle(segment):
                return inode
        segment.close()
        return inode

    def _keep_idle(self, segment: _Segment) -> bool:
        # With the lock held: keep a segment nobody holds for reuse, if it may be.
        if segment.tainted or self._idle_bytes() + segment.capacity > self.max_idle_bytes:
            return False
        # (No allocation under the lock: a collector-run finalizer that returns a
        # segment would take it again.)
        bisect.insort(self._idle, segment, key=_capacity)
        return True

    def forget(self, inodes: set[int]) -> None:
        """Drop lent segments that will never come back (their receiver is gone).

        A segment lent to other receivers too stays until they give it back, and is then
        closed rather than reused.
        """
        gone = []
        with self._lock:
            for inode in inodes:
                segment = self._lent.get(inode)
                if segment is None:
                    continue
                segment.tainted = True
                segment.holders -= 1
                if segment.holders <= 0:
                    gone.append(self._lent.pop(inode))
        for segment in gone:
            segment.close()

    def _idle_bytes(self) -> int:
        return sum(segment.capacity for segment in self._idle)

    def idle_bytes(self) -> int:
        """Capacity of the idle segments."""
        with self._lock:
            return self._idle_bytes()


pool = SegmentPool()


class SegmentShare:
    """The segments of one frame's large parts, as it goes to several receivers.

    The first receiver's send fills a segment per large part; the others are lent the
    same segments. Use one share per frame (parts are told apart by their index).
    """

    __slots__ = ("_inodes",)

    def __init__(self) -> None:
        self._inodes: dict[int, int] = {}  # part index -> inode

    def holding(self, index: int, inode: int) -> None:
        """Part ``index`` is already in segment ``inode`` (``SegmentPool.reserve``,
        still held): receivers are lent that segment, with no copy."""
        self._inodes[index] = inode

    def segment(self, index: int, part: Any, size: int) -> tuple[int, int]:
        """``(fd to send, inode)`` for part ``index``; the caller closes the fd once sent."""
        inode = self._inodes.get(index)
        if inode is not None:
            try:
                return pool.lend_again(inode), inode
            except KeyError:
                pass  # every earlier receiver already gave it back: fill a new one
        fd, inode = pool.fill(part, size)
        self._inodes[index] = inode
        return fd, inode


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value


class _Mapping:
    """This process' mapping of a received segment, kept for the segment's next visit.

    Mapped with libc rather than ``mmap.mmap``, which would hold a descriptor per cached
    mapping; nothing here keeps the segment's descriptor (it goes back to its sender).
    """

    __slots__ = ("address", "busy", "capacity")

    def __init__(self, fd: int, capacity: int) -> None:
        flags = mmap.MAP_SHARED | _POPULATE
        address = _libc.mmap(None, capacity, _PROT, flags, fd, 0)
        if address is None or address == _MAP_FAILED:
            errno = ctypes.get_errno()
            raise OSError(errno, f"mapping a received segment failed: {os.strerror(errno)}")
        self.address: int = address
        self.capacity = capacity
        self.busy = True  # a delivery's buffer is over it

    def unmap(self) -> None:
        _libc.munmap(self.address, self.capacity)


class MappingCache:
    """Mappings of received segments, by inode, so a segment that comes back is not
    mapped again.

    Mapping a segment (and its page tables) costs about as much as copying it on some
    machines (100 µs a MiB on this VM), and a sender's pool sends the same few segments
    again and again. Each delivery gets its own buffer object over the cached mapping;
    when that buffer dies the segment goes back to its sender and the mapping waits for
    its return. Free mappings beyond ``max_bytes`` are unmapped, least recently used
    first (a cached mapping keeps its segment's memory alive).
    """

    def __init__(self, max_bytes: int = 256 << 20) -> None:
        self._lock = threading.Lock()
        self._by_inode: collections.OrderedDict[int, _Mapping] = collections.OrderedDict()
        self.max_bytes = max_bytes

    def view(self, fd: int, size: int, release: Callable[[int], None]) -> memoryview:
        """A buffer of ``size`` bytes over segment ``fd``; ``release(fd)`` once unused."""
        stat = os.fstat(fd)
        with self._lock:
            entry = self._by_inode.get(stat.st_ino)
            if entry is not None and not entry.busy and entry.capacity >= size:
                entry.busy = True
                self._by_inode.move_to_end(stat.st_ino)
            else:
                entry = None
        if entry is None:
            entry = _Mapping(fd, stat.st_size)
            with self._lock:
                old = self._by_inode.pop(stat.st_ino, None)
                self._by_inode[stat.st_ino] = entry
            if old is not None and not old.busy:
                old.unmap()
        # The buffer a delivery holds: its death (no tensor or view over it any more)
        # frees the mapping for the next visit and returns the segment.
        buffer = (ctypes.c_ubyte * size).from_address(entry.address)
        weakref.finalize(buffer, self._done, stat.st_ino, entry, release, fd)
        return memoryview(buffer).cast("B")

    def _done(self, inode: int, entry: _Mapping, release: Callable[[int], None], fd: int) -> None:
        # Free first: the sender reuses the segment only after ``release`` returned it.
        try:
            self._free(inode, entry)
        finally:
            release(fd)

    def _free(self, inode: int, entry: _Mapping) -> None:
        unmap = []
        with self._lock:
            entry.busy = False
            if self._by_inode.get(inode) is not entry:
                unmap.append(entry)  # replaced meanwhile: nobody will use it again
            total = sum(e.capacity for e in self._by_inode.values())
            for key, cached in list(self._by_inode.items()):
                if total <= self.max_bytes:
                    break
                if not cached.busy:
                    del self._by_inode[key]
                    total -= cached.capacity
                    unmap.append(cached)
        for stale in unmap:
            stale.unmap()

    def mapped_bytes(self) -> int:
        """Capacity of the mappings kept."""
        with self._lock:
            return sum(entry.capacity for entry in self._by_inode.values())


mappings = MappingCache()


def map_segment(
    fd: int, size: int, release: Callable[[int], None], *, private: bool = False
) -> memoryview:
    """Map a received segment; ``release(fd)`` runs once the mapping is no longer used.

    ``private``: other processes map the same segment, so map it copy-on-write (writes
    stay in this process; such mappings are not cached: each is this delivery's own).
    """
    if not private:
        try:
            return mappings.view(fd, size, release)
        except BaseException:
            os.close(fd)
            raise
    try:
        mapping = mmap.mmap(fd, size, mmap.MAP_PRIVATE, _PROT)
        with contextlib.suppress(OSError):  # an older kernel faults pages in lazily
            mapping.madvise(_POPULATE_READ, 0, size)
    except BaseException:
        os.close(fd)
        raise
    weakref.finalize(mapping, release, fd)
    return memoryview(mapping)
