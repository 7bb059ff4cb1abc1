"""``WorkerInfo``: a worker's name and id (its rank), as torch's."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["WorkerInfo", "check_worker_name"]

_NAME = re.compile(r"[A-Za-z0-9_:\-]{1,127}")


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A worker of the RPC group; get one with ``get_worker_info()``.

    Attributes:
        id: the worker's rank.
        name: the worker's unique name.
    """

    id: int
    name: str

    def __repr__(self) -> str:
        return f"WorkerInfo(id={self.id}, name={self.name})"

    __str__ = __repr__


def check_worker_name(name: object) -> str:
    """``name`` if it is a valid worker name; ``ValueError`` says why not."""
    if not isinstance(name, str):
        raise TypeError(f"the worker name must be a str, not {type(name).__name__}")
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"invalid worker name {name!r}: use 1 to 127 letters, digits, '_', ':' or '-'"
        )
    return name


WorkerInfo.__module__ = "actormesh.rpc"
