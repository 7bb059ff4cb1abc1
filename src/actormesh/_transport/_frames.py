"""The frame format: how a message of several byte parts is laid out on a stream.

A frame is ``<u32 nparts><u64 body_bytes>`` followed by ``nparts`` little-endian u64
lengths, then the parts back to back. A length with the ``SHARED`` bit names a part that
travels as a shared-memory descriptor instead of inline bytes. Parts are opaque: the first
is usually an envelope header, the next a pickle, the rest out-of-band buffers that the
receiver maps without a further copy. Everything here is pure.
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Sequence

__all__ = [
    "Buffer",
    "PREFIX",
    "RETURNED",
    "SHARED",
    "encode_header",
    "header_size",
    "nbytes",
    "parse_lengths",
    "parse_prefix",
]

Buffer = bytes | bytearray | memoryview | pickle.PickleBuffer

PREFIX = struct.Struct("<IQ")
# A length with this bit set is a part passed as shared memory: its bytes are not in the
# body, a file descriptor sent with the frame holds them (see ``_shm``).
SHARED = 1 << 63
# A part count with this bit set is a control frame: the sender's shared-memory parts of
# earlier frames are unused on this side now, and their descriptors come back with it.
RETURNED = 1 << 31
_LENGTH = struct.Struct("<Q")
_HEADERS: dict[int, struct.Struct] = {}


def nbytes(part: Buffer) -> int:
    """Size of a part in bytes (a memoryview's ``len`` counts items, not bytes)."""
    if isinstance(part, bytes | bytearray):
        return len(part)
    return part.nbytes if isinstance(part, memoryview) else memoryview(part).nbytes


def _header_struct(nparts: int) -> struct.Struct:
    fmt = _HEADERS.get(nparts)
    if fmt is None:
        fmt = _HEADERS[nparts] = struct.Struct(f"<IQ{nparts}Q")
    return fmt


def encode_header(
    lengths: Sequence[int], *, returned: bool = False, body: int | None = None
) -> bytes:
    """The prefix and length table of a frame whose parts have these sizes.

    ``body``: the inline bytes, when the caller knows them (no part is ``SHARED``).
    """
    if body is None:
        body = sum(n for n in lengths if not n & SHARED)
    count = len(lengths) | (RETURNED if returned else 0)
    return _header_struct(len(lengths)).pack(count, body, *lengths)


def header_size(nparts: int) -> int:
    """Bytes of prefix plus length table for a frame of ``nparts`` parts."""
    return PREFIX.size + _LENGTH.size * nparts


def parse_prefix(buffer: Buffer, offset: int) -> tuple[int, int]:
    """``(nparts, body_bytes)`` of the frame starting at ``offset``."""
    nparts, body = PREFIX.unpack_from(buffer, offset)
    return int(nparts), int(body)


def parse_lengths(buffer: Buffer, offset: int, nparts: int) -> tuple[int, ...]:
    """The part lengths of the frame starting at ``offset`` (its prefix already parsed)."""
    return struct.unpack_from(f"<{nparts}Q", buffer, offset + PREFIX.size)
