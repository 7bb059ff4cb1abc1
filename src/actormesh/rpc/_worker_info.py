"""``WorkerInfo``: a worker's name and id (its rank), as torch's."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["WorkerInfo", "check_worker_name"]

_NAME = re.compile(r"[A-Za-z0-9_:\-]*")
_MAX_NAME_LEN = 128


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A worker of the RPC group; get one with ``get_worker_info()``.

    Built as torch's, ``WorkerInfo(name, id)``.

    Attributes:
        name: the worker's unique name.
        id: the worker's rank.

    Raises:
        RuntimeError: the name is empty, too long, or has characters other than
            letters, digits, ``_``, ``:`` and ``-`` (torch's messages).
    """

    name: str
    id: int

    def __post_init__(self) -> None:
        check_worker_name(self.name)

    def __repr__(self) -> str:
        return f"WorkerInfo(id={self.id}, name={self.name})"

    __str__ = __repr__


def check_worker_name(name: object) -> str:
    """``name`` if it is a valid worker name; ``RuntimeError`` (``TypeError`` for a
    non-string) says why not, in torch's words."""
    if not isinstance(name, str):
        raise TypeError(f"the worker name must be a str, not {type(name).__name__}")
    if not name:
        raise RuntimeError("Worker name must be non-empty.")
    if len(name) >= _MAX_NAME_LEN:
        raise RuntimeError(
            f"Worker name must be shorter than {_MAX_NAME_LEN} characters, but got "
            f"{len(name)} characters"
        )
    if not _NAME.fullmatch(name):
        raise RuntimeError(
            f"Worker name must match ^[A-Za-z0-9-_:]*$, but got {name!r} (invalid worker name)"
        )
    return name


WorkerInfo.__module__ = "actormesh.rpc"
