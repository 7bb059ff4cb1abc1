# The compiled twin of actormesh._core._dispatch.py_dispatch (see _cdispatch.c).
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

def dispatch(
    table: tuple[tuple[Callable[[Any, tuple[Any, ...], Any], Any], int] | None, ...],
    unreadable: Callable[[Any, Exception], Any],
    conn: Any,
    parts: Sequence[Any],
    /,
) -> Any: ...
