"""Where the processes of a mesh come from: this host, a Ray cluster, or anywhere.

Pass one to ``proc_mesh(..., allocator=...)``:

- `LocalAllocator` (the default): subprocesses of this process on this host, talking
  over Unix sockets and shared memory.
- `RayAllocator`: processes placed on a Ray cluster, one placement-group bundle each
  (``PACK`` / ``SPREAD``), GPUs assigned by Ray.
- `ExternalAllocator`: processes started by someone else (``srun``, ``torchrun``, a
  Kubernetes job) that run ``actormesh worker --join HOST:PORT``.

Processes on other hosts talk over TCP, every connection authenticated with the job's
secret (``Config.secret`` / ``ACTORMESH_SECRET``) before anything is unpickled. Write your
own allocator by implementing the `Allocator` protocol. See docs/multihost.md.
"""

from __future__ import annotations

from .._api._allocator import Allocator, LocalAllocator, ProcessSpec
from ._external import ExternalAllocator
from ._ray import RayAllocator

__all__ = ["Allocator", "ExternalAllocator", "LocalAllocator", "ProcessSpec", "RayAllocator"]
