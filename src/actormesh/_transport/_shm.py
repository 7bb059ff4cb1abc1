"""Shared memory for large frame parts between processes of one host.

A part at least ``shm_threshold`` bytes long is copied once into an anonymous memory file
(``memfd_create``) whose descriptor travels with the frame (``SCM_RIGHTS``); the receiver
maps it and hands the mapping up as the part, so the bytes cross no socket and are never
copied again on the receiving side. Nothing is ever named in ``/dev/shm``: the kernel frees
the memory when the last descriptor and mapping are gone, so a sender or receiver that
dies mid-transfer leaks nothing.
"""

from __future__ import annotations

import mmap
import os
from typing import Any

__all__ = ["map_segment", "to_segment"]

_PROT = mmap.PROT_READ | mmap.PROT_WRITE
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


def to_segment(part: Any, size: int) -> int:
    """A new memory file holding a copy of ``part``; returns its descriptor (caller closes)."""
    fd = os.memfd_create("actormesh", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, size)
        # Populating at map time faults the pages in one go instead of one by one.
        with mmap.mmap(fd, size, mmap.MAP_SHARED | _POPULATE, _PROT) as target:
            source = part if isinstance(part, memoryview) else memoryview(part)
            target[:] = source.cast("B") if source.format != "B" or source.ndim != 1 else source
    except BaseException:
        os.close(fd)
        raise
    return fd


def map_segment(fd: int, size: int) -> memoryview:
    """Map a received memory file (and close the descriptor); a writable view of it."""
    try:
        mapping = mmap.mmap(fd, size, mmap.MAP_SHARED | _POPULATE, _PROT)
    finally:
        os.close(fd)
    return memoryview(mapping)
