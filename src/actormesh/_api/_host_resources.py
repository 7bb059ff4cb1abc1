"""This host's resources for placement: which GPUs exist, and pinning a process to CPUs.

The two functions of placement that touch the system; the planning itself is pure
(``actormesh._pure._placement``).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["pin", "visible_gpus"]


def visible_gpus(environ: Mapping[str, str] | None = None, root: str = "/") -> list[str]:
    """The GPU ids this process may hand out, found without importing torch.

    ``CUDA_VISIBLE_DEVICES`` when set (its ids as given, so UUIDs work); otherwise one id
    per NVIDIA device the driver lists under ``/proc/driver/nvidia/gpus`` or ``/dev``.
    """
    env = os.environ if environ is None else environ
    listed = env.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [part.strip() for part in listed.split(",") if part.strip()]
    proc = Path(root, "proc/driver/nvidia/gpus")
    with contextlib.suppress(OSError):
        count = sum(1 for _ in proc.iterdir())
        if count:
            return [str(i) for i in range(count)]
    with contextlib.suppress(OSError):
        nodes = [p.name for p in Path(root, "dev").iterdir() if re.fullmatch(r"nvidia\d+", p.name)]
        return [str(i) for i in range(len(nodes))]
    return []


def pin(pid: int, cpus: Sequence[int]) -> None:
    """Restrict every thread of process ``pid`` to ``cpus``; threads it starts later inherit.

    Raises:
        OSError: the process is gone, or the CPUs are not allowed.
    """
    threads = [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    for tid in threads:
        with contextlib.suppress(ProcessLookupError):  # a thread that just ended
            os.sched_setaffinity(tid, cpus)
