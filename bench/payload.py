"""Tensor payloads with contents the receiving side can verify.

Tensors are float32 ``arange`` values: cheap to make at any size, different in every
element, and identical wherever the same size is made. torch is imported inside the
functions, so an idle worker that never sees a tensor never loads it.
"""

from __future__ import annotations

import os
import zlib
from typing import Any

__all__ = [
    "KIB",
    "MIB",
    "EchoMethods",
    "checksum",
    "fingerprint",
    "make_tensor",
    "size_label",
]

KIB = 1024
MIB = 1024 * 1024
PAGE_ELEMENTS = 1024  # float32 elements in a 4 KiB page


def make_tensor(nbytes: int) -> Any:
    """A contiguous float32 CPU tensor of ``nbytes`` bytes (a multiple of 4)."""
    import torch

    return torch.arange(nbytes // 4, dtype=torch.float32)


def _crc(t: Any) -> int:
    return zlib.crc32(memoryview(t.contiguous().numpy()).cast("B"))


def fingerprint(t: Any) -> tuple[int, int]:
    """``(numel, crc32 of one element per 4 KiB page)``: cheap, but touches every page.

    This is what the receiving side computes inside timed loops: a transport that maps
    the data lazily still has to fault in every page, as a real consumer would.
    """
    flat = t.reshape(-1)
    return int(flat.numel()), _crc(flat[::PAGE_ELEMENTS])


def checksum(t: Any) -> tuple[int, int]:
    """``(numel, crc32 of every byte)``: the full check, run once outside timed loops."""
    flat = t.reshape(-1)
    return int(flat.numel()), _crc(flat)


def size_label(nbytes: int) -> str:
    """``1KiB``, ``64MiB``: the names payload sizes have in results and charts."""
    if nbytes >= MIB and nbytes % MIB == 0:
        return f"{nbytes // MIB}MiB"
    if nbytes >= KIB and nbytes % KIB == 0:
        return f"{nbytes // KIB}KiB"
    return f"{nbytes}B"


class EchoMethods:
    """The plain echo-actor methods every system's actor shares (its endpoints proper
    are wrapped by each system: Ray's ``@ray.remote``, RPC's RRef-owned object)."""

    def __init__(self) -> None:
        self._held: Any = None

    def ping(self, x: Any) -> Any:
        return x

    def pid(self) -> int:
        return os.getpid()

    def fingerprint(self, t: Any) -> tuple[int, int]:
        return fingerprint(t)

    def checksum(self, t: Any) -> tuple[int, int]:
        return checksum(t)

    def hold(self, nbytes: int) -> None:
        self._held = make_tensor(nbytes) if nbytes else None

    def give(self) -> Any:
        return self._held
