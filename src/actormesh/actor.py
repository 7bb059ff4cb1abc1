"""Monarch's ``monarch.actor``, so its programs run with only their imports changed.

``from monarch.actor import Actor, endpoint, this_host, context`` becomes
``from actormesh.actor import ...``. Every public name of ``monarch.actor`` 0.7 is here
with Monarch's semantics, where actormesh differs it says so in docs/from-monarch.md
(Monarch's tensor engine is out of scope). The seed's older names (``proc_mesh``,
``current_size``) are here too.

``unhandled_fault_hook`` is a module attribute a program may replace, as in Monarch::

    import actormesh.actor

    actormesh.actor.unhandled_fault_hook = my_hook
"""

from __future__ import annotations

from ._template_start import start_early

# A Monarch program spawns local processes: their template starts while we import.
start_early()

from ._api._actor import Actor as Actor
from ._api._actor_mesh import ActorMesh as ActorMesh
from ._api._bootstrap_command import BootstrapCommand as BootstrapCommand
from ._api._context import Context as Context
from ._api._context import context as context
from ._api._context import current_actor_name as current_actor_name
from ._api._context import current_rank as current_rank
from ._api._context import current_size as current_size
from ._api._endpoint import Endpoint as Endpoint
from ._api._endpoint import as_endpoint as as_endpoint
from ._api._endpoint import concurrent_endpoint as concurrent_endpoint
from ._api._endpoint import endpoint as endpoint
from ._api._future import Future as Future
from ._api._host_mesh import HostMesh as HostMesh
from ._api._host_mesh import attach_to_workers as attach_to_workers
from ._api._host_mesh import this_host as this_host
from ._api._host_mesh import this_proc as this_proc
from ._api._mesh_state import Failure as MeshFailure
from ._api._monarch import ChannelTransport as ChannelTransport
from ._api._monarch import ProcId as ProcId
from ._api._monarch import Uid as Uid
from ._api._monarch import attach as attach
from ._api._monarch import config as config
from ._api._monarch import debug_controller as debug_controller
from ._api._monarch import default_bootstrap_cmd as default_bootstrap_cmd
from ._api._monarch import enable_transport as enable_transport
from ._api._monarch import get_meter as get_meter
from ._api._monarch import get_or_spawn_controller as get_or_spawn_controller
from ._api._monarch import returns_future as returns_future
from ._api._monarch import run_worker_loop_forever as run_worker_loop_forever
from ._api._monarch import run_worker_loop_until_shutdown as run_worker_loop_until_shutdown
from ._api._monarch import shutdown_context as shutdown_context
from ._api._monarch import span as span
from ._api._monarch import start_worker_loop_forever as start_worker_loop_forever
from ._api._monarch import traced as traced
from ._api._ports import Channel as Channel
from ._api._ports import Port as Port
from ._api._ports import PortReceiver as PortReceiver
from ._api._proc_mesh import ProcMesh as ProcMesh
from ._api._proc_mesh import proc_mesh as proc_mesh
from ._api._send import Accumulator as Accumulator
from ._api._send import send as send
from ._api._supervision import unhandled_fault_hook as unhandled_fault_hook
from ._exceptions import ActorError as ActorError
from ._shape import Extent as Extent
from ._shape import Point as Point
from ._shape import ValueMesh as ValueMesh

__all__ = [
    "Accumulator",
    "Actor",
    "ActorError",
    "ActorMesh",
    "BootstrapCommand",
    "Channel",
    "ChannelTransport",
    "Context",
    "Endpoint",
    "Extent",
    "Future",
    "HostMesh",
    "MeshFailure",
    "Point",
    "Port",
    "PortReceiver",
    "ProcId",
    "ProcMesh",
    "Uid",
    "ValueMesh",
    "as_endpoint",
    "attach",
    "attach_to_workers",
    "concurrent_endpoint",
    "config",
    "context",
    "current_actor_name",
    "current_rank",
    "current_size",
    "debug_controller",
    "default_bootstrap_cmd",
    "enable_transport",
    "endpoint",
    "get_meter",
    "get_or_spawn_controller",
    "proc_mesh",
    "returns_future",
    "run_worker_loop_forever",
    "run_worker_loop_until_shutdown",
    "send",
    "shutdown_context",
    "span",
    "start_worker_loop_forever",
    "this_host",
    "this_proc",
    "traced",
    "unhandled_fault_hook",
]
