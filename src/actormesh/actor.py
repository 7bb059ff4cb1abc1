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

from ._api import Accumulator as Accumulator
from ._api import Actor as Actor
from ._api import ActorMesh as ActorMesh
from ._api import BootstrapCommand as BootstrapCommand
from ._api import Channel as Channel
from ._api import ChannelTransport as ChannelTransport
from ._api import Context as Context
from ._api import Endpoint as Endpoint
from ._api import Failure as MeshFailure
from ._api import Future as Future
from ._api import HostMesh as HostMesh
from ._api import Port as Port
from ._api import PortReceiver as PortReceiver
from ._api import ProcId as ProcId
from ._api import ProcMesh as ProcMesh
from ._api import Uid as Uid
from ._api import as_endpoint as as_endpoint
from ._api import attach as attach
from ._api import attach_to_workers as attach_to_workers
from ._api import concurrent_endpoint as concurrent_endpoint
from ._api import config as config
from ._api import context as context
from ._api import current_actor_name as current_actor_name
from ._api import current_rank as current_rank
from ._api import current_size as current_size
from ._api import debug_controller as debug_controller
from ._api import default_bootstrap_cmd as default_bootstrap_cmd
from ._api import enable_transport as enable_transport
from ._api import endpoint as endpoint
from ._api import get_meter as get_meter
from ._api import get_or_spawn_controller as get_or_spawn_controller
from ._api import proc_mesh as proc_mesh
from ._api import returns_future as returns_future
from ._api import run_worker_loop_forever as run_worker_loop_forever
from ._api import run_worker_loop_until_shutdown as run_worker_loop_until_shutdown
from ._api import send as send
from ._api import shutdown_context as shutdown_context
from ._api import span as span
from ._api import start_worker_loop_forever as start_worker_loop_forever
from ._api import this_host as this_host
from ._api import this_proc as this_proc
from ._api import traced as traced
from ._api import unhandled_fault_hook as unhandled_fault_hook
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
