"""Monarch (``torchmonarch==0.7.0``): ``this_host().spawn_procs`` and its actors.

Facts about 0.7 this adapter relies on: ``this_host().spawn_procs(per_host={"gpus": n})``
returns the process mesh at once (it starts in the background); ``procs.spawn(name,
Cls)`` returns the actor mesh at once; endpoint calls return futures that are awaited
or ``.get()``; actors may not mix sync and async endpoints; ``procs.stop()`` is a future.
"""

from __future__ import annotations

from typing import Any

from monarch.actor import Actor, endpoint, this_host

from bench.systems._meshlike import MeshLikeSystem, echo_class

__all__ = ["SYSTEM", "Echo", "MonarchSystem"]

Echo = echo_class(Actor, endpoint, __name__, rdma_module="monarch.rdma")


class MonarchSystem(MeshLikeSystem):
    """Monarch on this host; several actor meshes may share one process mesh."""

    echo = Echo

    def start_procs(self, n: int) -> Any:
        return this_host().spawn_procs(per_host={"gpus": n})

    def spawn(self, procs: Any, name: str, cls: type) -> Any:
        return procs.spawn(name, cls)


SYSTEM = MonarchSystem
