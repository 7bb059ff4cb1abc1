"""A received frame's dispatch: its header decoded, checked against the layouts of its
kind, and handed to that kind's handler, in one step (compiled where built).

The table is a tuple indexed by message kind: ``None`` for a kind this process does not
know, else ``(handler, layouts)``, where bit *n* of the int ``layouts`` is set when a
header of that kind may have *n* items (see ``frame_table``). ``_cdispatch`` (C, built
by the package's normal build from ``_cdispatch.c``) is the twin of ``py_dispatch``;
``tests/unit/test_dispatch.py`` runs both on the same frames. As for the frame path
(``_transport._speedups``), the pure one is used when the extension is missing or
``ACTORMESH_NO_EXTENSIONS`` is set.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._config import extensions_disabled

__all__ = ["COMPILED", "Handler", "dispatch", "entry_for", "frame_table", "py_dispatch"]

# handler(conn, header, parts), for each frame of its kind.
Handler = Callable[[Any, tuple[Any, ...], Any], Any]
Table = tuple[tuple[Handler, int] | None, ...]


def frame_table(
    layouts: Mapping[int, Sequence[int]],
    handlers: Mapping[int, Handler],
    other: Handler | None = None,
) -> Table:
    """The table for ``dispatch``: every kind of ``layouts`` (kind -> the item counts its
    headers may have) handled by ``handlers[kind]``, else by ``other`` (else unknown)."""
    size = max(layouts) + 1 if layouts else 0
    table: list[tuple[Handler, int] | None] = [None] * size
    for kind, counts in layouts.items():
        handle = handlers.get(kind, other)
        if handle is not None:
            table[kind] = (handle, sum(1 << count for count in counts))
    return tuple(table)


def entry_for(table: Table, header: Any) -> tuple[Handler, int]:
    """The table's entry for ``header``.

    Raises:
        ValueError: not a header tuple, of a kind the table has, with one of its layouts.
    """
    if not isinstance(header, tuple) or not header:
        raise ValueError(f"malformed envelope header: {header!r}")
    kind = header[0]
    entry = table[kind] if isinstance(kind, int) and 0 <= kind < len(table) else None
    if entry is None:
        raise ValueError(f"unknown message kind {kind!r}")
    items = len(header)
    if items >= 64 or not entry[1] >> items & 1:
        raise ValueError(f"a header of kind {kind} with {items} items: {header!r}")
    return entry


def py_dispatch(
    table: Table,
    unreadable: Callable[[Any, Exception], Any],
    conn: Any,
    parts: Sequence[Any],
) -> Any:
    """Decode the header in ``parts[0]`` and return ``handler(conn, header, parts)``.

    A frame that cannot be read (no parts, not a pickle, not a header this table knows)
    calls ``unreadable(conn, error)`` instead and returns what it returns; what the
    handler raises propagates.
    """
    try:
        header = pickle.loads(parts[0])
        handle = entry_for(table, header)[0]
    except Exception as error:
        return unreadable(conn, error)
    return handle(conn, header, parts)


dispatch = py_dispatch
COMPILED = False
if not extensions_disabled():
    try:
        from ._cdispatch import dispatch  # type: ignore[assignment]
    except ImportError:  # not built here (no compiler when installed): the Python one
        pass
    else:
        COMPILED = True
