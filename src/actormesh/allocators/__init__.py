"""Where the processes of a mesh come from: this host, a Ray cluster, or anywhere.

Pass one to ``proc_mesh(..., allocator=...)``:

- `LocalAllocator` (the default): subprocesses of this process on this host, talking
  over Unix sockets and shared memory.
- `RayAllocator`: processes placed on a Ray cluster, one placement-group bundle each
  (``PACK`` / ``SPREAD``), GPUs assigned by Ray.
- `ExternalAllocator`: processes started by someone else (``srun``, ``torchrun``, a
  Kubernetes job) that run ``actormesh worker --join HOST:PORT``.

Processes on other hosts talk over TCP, every connection authenticated with the job's
secret (``Config.secret`` / ``ACTORMESH_SECRET``) before anything is unpickled.

Write your own by implementing the `Allocator` protocol (processes for ``proc_mesh``)
or `HostAllocator` (host agents for ``host_mesh`` too), with the kit exported here: the
`Runtime` the methods get, the `ChildProcess` and `AgentLink` they return, `JoinWait`
and `is_agent`/`join_order` to wait for processes that dial in (`Joined`), and
`ProcessSetup`/`prepare` to give joined workers their environment. See
docs/multihost.md, "Writing an allocator".
"""

from __future__ import annotations

from .._api import Allocator, HostAllocator, LocalAllocator, ProcessSpec
from .._hosts import (
    AgentLink,
    ChildProcess,
    Joined,
    JoinWait,
    ProcessSetup,
    Runtime,
    is_agent,
    join_order,
    prepare,
)
from ._external import ExternalAllocator
from ._ray import RayAllocator

__all__ = [
    "AgentLink",
    "Allocator",
    "ChildProcess",
    "ExternalAllocator",
    "HostAllocator",
    "JoinWait",
    "Joined",
    "LocalAllocator",
    "ProcessSetup",
    "ProcessSpec",
    "RayAllocator",
    "Runtime",
    "is_agent",
    "join_order",
    "prepare",
]
