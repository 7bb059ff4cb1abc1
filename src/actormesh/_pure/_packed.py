"""Long tables in a pickle, compressed: where each process of a large mesh listens.

A mesh reference names the process of every rank, and a process mesh sent to another
process names every process (its key, rank, address and pid). At 10,000 hosts of 16
processes that is megabytes in every actors' spawn, sent down each link of a tree of
agents, and in every message that carries the mesh. Such a table is mostly the same few
prefixes and digits, so above ``PACK_ABOVE`` rows it is pickled compressed (zlib, its
fastest level) and rebuilt by the receiver; a shorter one is pickled as it is.
"""

from __future__ import annotations

import pickle
import zlib
from typing import Any

__all__ = ["PACK_ABOVE", "pack", "unpack"]

# Rows above which a table travels compressed: below it, compressing costs the sender
# and every receiver more than the bytes it saves.
PACK_ABOVE = 1024


def pack(table: tuple[Any, ...]) -> tuple[Any, ...] | bytes:
    """``table`` (of strings, numbers and tuples of them) as it is best pickled: itself,
    or, when longer than ``PACK_ABOVE``, its compressed pickle."""
    if len(table) <= PACK_ABOVE:
        return table
    return zlib.compress(pickle.dumps(table, protocol=pickle.HIGHEST_PROTOCOL), 1)


def unpack(packed: tuple[Any, ...] | bytes) -> tuple[Any, ...]:
    """The table ``pack`` made ``packed`` from."""
    if isinstance(packed, bytes):
        table: tuple[Any, ...] = pickle.loads(zlib.decompress(packed))
        return table
    return packed
