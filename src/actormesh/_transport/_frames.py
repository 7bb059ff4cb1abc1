"""The frame format: how a message of several byte parts is laid out on a stream.

A frame is ``<u32 nparts><u64 body_bytes>`` followed by ``nparts`` little-endian u64
lengths, then the parts back to back. A length with the ``SHARED`` bit names a part that
travels as a shared-memory descriptor instead of inline bytes (with ``PRIVATE`` too, other
processes were sent the same memory, to be mapped copy-on-write). Parts are opaque: the first
is usually an envelope header, the next a pickle, the rest out-of-band buffers that the
receiver maps without a further copy. Everything here is pure.
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Sequence
from typing import Any

__all__ = [
    "Buffer",
    "PREFIX",
    "PRIVATE",
    "RETURNED",
    "SHARED",
    "encode_header",
    "frame_header",
    "header_size",
    "nbytes",
    "parse_inline",
    "parse_lengths",
    "parse_prefix",
]

Buffer = bytes | bytearray | memoryview | pickle.PickleBuffer

PREFIX = struct.Struct("<IQ")
# A length with this bit set is a part passed as shared memory: its bytes are not in the
# body, a file descriptor sent with the frame holds them (see ``_shm``).
SHARED = 1 << 63
# With SHARED: the same memory went to other processes too; map it copy-on-write.
PRIVATE = 1 << 62
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


# The two functions below are the per-message hot path; ``_cframes.c`` is their compiled
# twin (selected by ``_speedups``) and must behave exactly as they do.

_MAX_PARTS = 1 << 20


def frame_header(parts: Sequence[Buffer]) -> tuple[bytes, int, int]:
    """``(header, frame size, largest part)`` of a frame whose parts all travel inline."""
    lengths = [nbytes(part) for part in parts]
    if len(lengths) > _MAX_PARTS:
        raise ValueError(f"a frame of {len(lengths)} parts, over the limit")
    body = sum(lengths)
    header = encode_header(lengths, body=body)
    return header, len(header) + body, max(lengths, default=0)


def parse_inline(
    buffer: Any, start: int, end: int, max_frame_bytes: int
) -> tuple[list[list[memoryview]], int]:
    """Split the complete frames in ``buffer[start:end]`` into their parts.

    Returns the frames (each a list of writable memoryviews over a copy of its body: the
    read buffer is reused) and where parsing stopped: in front of an incomplete frame, a
    control frame (``RETURNED``) or a frame with ``SHARED`` parts, which need the
    descriptors that came with them (the connection handles those).

    Raises:
        OSError: a frame over ``max_frame_bytes`` or whose lengths do not add up.
    """
    if start < 0 or end < start or end > len(buffer):
        raise ValueError(f"bad range [{start}, {end}) of a buffer of {len(buffer)} bytes")
    frames: list[list[memoryview]] = []
    view = memoryview(buffer)
    while end - start >= PREFIX.size:
        nparts, body = parse_prefix(buffer, start)
        if nparts & RETURNED:
            break
        if body > max_frame_bytes or nparts > _MAX_PARTS:
            raise OSError(f"peer sent a frame of {body} bytes, over the limit")
        head = header_size(nparts)
        if end - start < head:
            break
        lengths = parse_lengths(buffer, start, nparts)
        shared = any(n & SHARED for n in lengths)
        if sum(lengths) != body and sum(n for n in lengths if not n & SHARED) != body:
            raise OSError(f"peer sent a frame whose part lengths do not add up to {body}")
        if shared or end - start - head < body:
            break
        whole = memoryview(bytearray(view[start + head : start + head + body]))
        if nparts == 1:
            frames.append([whole])
        else:
            parts, offset = [], 0
            for length in lengths:
                parts.append(whole[offset : offset + length])
                offset += length
            frames.append(parts)
        start += head + body
    return frames, start
