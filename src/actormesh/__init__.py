"""actormesh: program many processes as one.

Spawn meshes of processes, spawn actors in them, and call their endpoints on all of
them, one, a slice, a load-balanced choice, or sharded::

    procs = await proc_mesh(gpus=4)
    trainers = await procs.spawn("trainer", Trainer, 1e-3)
    losses = await trainers.step.call(batch)
"""

from __future__ import annotations

import importlib
import logging
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._api import Accumulator as Accumulator
    from ._api import Actor as Actor
    from ._api import ActorMesh as ActorMesh
    from ._api import Answer as Answer
    from ._api import AttachRefusedError as AttachRefusedError
    from ._api import Channel as Channel
    from ._api import Endpoint as Endpoint
    from ._api import Failure as Failure
    from ._api import Future as Future
    from ._api import HostMesh as HostMesh
    from ._api import Job as Job
    from ._api import Port as Port
    from ._api import PortReceiver as PortReceiver
    from ._api import ProcMesh as ProcMesh
    from ._api import ReplicaStats as ReplicaStats
    from ._api import Service as Service
    from ._api import ServiceEndpoint as ServiceEndpoint
    from ._api import Session as Session
    from ._api import ValueStream as ValueStream
    from ._api import actor_mesh as actor_mesh
    from ._api import as_endpoint as as_endpoint
    from ._api import attach_job as attach
    from ._api import attach_to_workers as attach_to_workers
    from ._api import cancelled as cancelled
    from ._api import concurrent_endpoint as concurrent_endpoint
    from ._api import context as context
    from ._api import current_actor_name as current_actor_name
    from ._api import current_rank as current_rank
    from ._api import current_size as current_size
    from ._api import endpoint as endpoint
    from ._api import get_or_spawn_controller as get_or_spawn_controller
    from ._api import host_mesh as host_mesh
    from ._api import proc_mesh as proc_mesh
    from ._api import send as send
    from ._api import set_failure_hook as set_failure_hook
    from ._api import spawn_service as spawn_service
    from ._api import this_host as this_host
    from ._api import this_proc as this_proc
    from ._config import Config as Config
    from ._core import debug as debug
    from ._exceptions import ActorClassError as ActorClassError
    from ._exceptions import ActorDiedError as ActorDiedError
    from ._exceptions import ActorError as ActorError
    from ._exceptions import ActorFailedError as ActorFailedError
    from ._exceptions import ActorInitError as ActorInitError
    from ._exceptions import ActorMeshError as ActorMeshError
    from ._exceptions import CallTimeoutError as CallTimeoutError
    from ._exceptions import DimensionError as DimensionError
    from ._exceptions import EndpointNotFoundError as EndpointNotFoundError
    from ._exceptions import MeshBusyError as MeshBusyError
    from ._exceptions import MeshStoppedError as MeshStoppedError
    from ._exceptions import MessageTooLargeError as MessageTooLargeError
    from ._exceptions import NotAnEndpointError as NotAnEndpointError
    from ._exceptions import ReplicaFailedError as ReplicaFailedError
    from ._exceptions import SerializationError as SerializationError
    from ._exceptions import ServiceUnavailableError as ServiceUnavailableError
    from ._exceptions import SupervisionError as SupervisionError
    from ._pure import Affinity as Affinity
    from ._pure import ChoosePolicy as ChoosePolicy
    from ._pure import Dispatch as Dispatch
    from ._pure import LeastLoaded as LeastLoaded
    from ._pure import PowerOfTwo as PowerOfTwo
    from ._pure import Random as Random
    from ._pure import RoundRobin as RoundRobin
    from ._pure import WorkQueue as WorkQueue
    from ._pure import split_along as split_along
    from ._shape import Extent as Extent
    from ._shape import Point as Point
    from ._shape import Shape as Shape
    from ._shape import ValueMesh as ValueMesh

__all__ = [
    "Accumulator",
    "Actor",
    "ActorClassError",
    "ActorDiedError",
    "ActorError",
    "ActorFailedError",
    "ActorInitError",
    "ActorMesh",
    "ActorMeshError",
    "Affinity",
    "Answer",
    "AttachRefusedError",
    "CallTimeoutError",
    "Channel",
    "ChoosePolicy",
    "Config",
    "DimensionError",
    "Dispatch",
    "Endpoint",
    "EndpointNotFoundError",
    "Extent",
    "Failure",
    "Future",
    "HostMesh",
    "Job",
    "LeastLoaded",
    "MeshBusyError",
    "MeshStoppedError",
    "MessageTooLargeError",
    "NotAnEndpointError",
    "Point",
    "Port",
    "PortReceiver",
    "PowerOfTwo",
    "ProcMesh",
    "Random",
    "ReplicaFailedError",
    "ReplicaStats",
    "RoundRobin",
    "SerializationError",
    "Service",
    "ServiceEndpoint",
    "ServiceUnavailableError",
    "Session",
    "Shape",
    "SupervisionError",
    "ValueMesh",
    "ValueStream",
    "WorkQueue",
    "actor_mesh",
    "as_endpoint",
    "attach",
    "attach_to_workers",
    "cancelled",
    "concurrent_endpoint",
    "context",
    "current_actor_name",
    "current_rank",
    "current_size",
    "debug",
    "endpoint",
    "get_or_spawn_controller",
    "host_mesh",
    "proc_mesh",
    "send",
    "set_failure_hook",
    "spawn_service",
    "split_along",
    "this_host",
    "this_proc",
]

logging.getLogger("actormesh").addHandler(logging.NullHandler())

# Public names load on first use (PEP 562): a worker process imports only what the actors
# it hosts touch (the runtime, Actor, endpoint), which halves its start-up time; the
# controller pays for a module when the program first names something in it.
_WHERE: dict[str, str] = {
    "Accumulator": "._api._send",
    "Actor": "._api._actor",
    "ActorClassError": "._exceptions",
    "ActorDiedError": "._exceptions",
    "ActorError": "._exceptions",
    "ActorFailedError": "._exceptions",
    "ActorInitError": "._exceptions",
    "ActorMesh": "._api._actor_mesh",
    "ActorMeshError": "._exceptions",
    "Affinity": "._pure._routing",
    "Answer": "._api._service_values",
    "CallTimeoutError": "._exceptions",
    "Channel": "._api._ports",
    "ChoosePolicy": "._pure._routing",
    "Config": "._config",
    "DimensionError": "._exceptions",
    "Dispatch": "._pure._sharding",
    "Endpoint": "._api._endpoint",
    "EndpointNotFoundError": "._exceptions",
    "Extent": "._shape",
    "Failure": "._api._mesh_state",
    "Future": "._api._future",
    "HostMesh": "._api._host_mesh",
    "Job": "._api._attach",
    "AttachRefusedError": "._api._attach",
    "LeastLoaded": "._pure._routing",
    "MeshBusyError": "._exceptions",
    "MeshStoppedError": "._exceptions",
    "MessageTooLargeError": "._exceptions",
    "NotAnEndpointError": "._exceptions",
    "Point": "._shape",
    "Port": "._api._ports",
    "PortReceiver": "._api._ports",
    "PowerOfTwo": "._pure._routing",
    "ProcMesh": "._api._proc_mesh",
    "Random": "._pure._routing",
    "ReplicaFailedError": "._exceptions",
    "ReplicaStats": "._api._service_values",
    "RoundRobin": "._pure._routing",
    "SerializationError": "._exceptions",
    "Service": "._api._service",
    "ServiceEndpoint": "._api._service",
    "ServiceUnavailableError": "._exceptions",
    "Session": "._api._service",
    "Shape": "._shape",
    "SupervisionError": "._exceptions",
    "ValueMesh": "._shape",
    "ValueStream": "._api._requests",
    "WorkQueue": "._pure._routing",
    "actor_mesh": "._api._actor_group",
    "as_endpoint": "._api._endpoint",
    "attach": "._api._attach",
    "attach_to_workers": "._api._host_mesh",
    "cancelled": "._api._context",
    "concurrent_endpoint": "._api._endpoint",
    "context": "._api._context",
    "current_actor_name": "._api._context",
    "current_rank": "._api._context",
    "current_size": "._api._context",
    "debug": "._core._debugger",
    "endpoint": "._api._endpoint",
    "get_or_spawn_controller": "._api._monarch",
    "host_mesh": "._api._host_mesh",
    "proc_mesh": "._api._proc_mesh",
    "send": "._api._send",
    "set_failure_hook": "._api._supervision",
    "spawn_service": "._api._service",
    "split_along": "._pure._sharding",
    "this_host": "._api._host_mesh",
    "this_proc": "._api._host_mesh",
}


# The names of a program that spawns local actors: reaching for the first of them starts
# the fork server's template, whose imports then overlap ours (see ``_template_start``).
_SPAWNING = frozenset(
    {"Actor", "ProcMesh", "actor_mesh", "endpoint", "proc_mesh", "this_host", "this_proc"}
)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'actormesh' has no attribute {name!r}")
    if name in _SPAWNING:
        from ._template_start import start_early

        start_early()
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _Package(types.ModuleType):
    """The ``actormesh`` module, whose ``proc_mesh`` and ``actor_mesh`` stay functions.

    Monarch's programs import ``monarch.proc_mesh`` and ``monarch.actor_mesh`` as
    modules; their actormesh twins are submodules of the same names, and importing a
    submodule would otherwise replace the package's function of that name with it.
    """

    def __setattr__(self, name: str, value: object) -> None:
        if name in ("actor_mesh", "proc_mesh") and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # Pickled by name, as any module is: a class defined in ``__main__`` (sent by
        # value) whose methods use ``actormesh.…`` carries this module in its globals,
        # and pickle looks reducers up by exact type, so ModuleType's would not apply.
        return importlib.import_module, (self.__name__,)


sys.modules[__name__].__class__ = _Package
