"""Layer 4: the actor API: actors and endpoints, adverbs, futures, ports, meshes of
hosts, processes and actors, ``choose`` and ``shard``, supervision, restarts, RDMA
buffers and Monarch's extra names.

The public modules (``actormesh``, ``actormesh.actor``, ``actormesh.rdma``, ...) and the
extensions (layer 5) import the actor API from here, never from its private modules.
"""

from __future__ import annotations

from . import _job_records as job_records
from ._actor import Actor, point_of
from ._actor_group import actor_mesh
from ._actor_logs import install as install_actor_logs
from ._actor_mesh import ActorMesh, MeshRef
from ._allocator import Allocator, HostAllocator, LocalAllocator, ProcessSpec
from ._attach import AttachRefusedError, Job
from ._attach import attach as attach_job
from ._bootstrap_command import BootstrapCommand
from ._context import (
    Context,
    cancelled,
    context,
    current_actor_name,
    current_rank,
    current_size,
)
from ._endpoint import Endpoint, as_endpoint, concurrent_endpoint, endpoint
from ._future import Future, from_concurrent, resolved
from ._host_mesh import HostMesh, attach_to_workers, host_mesh, this_host, this_proc
from ._mesh_state import Failure, MeshState, all_states
from ._monarch import (
    ChannelTransport,
    ProcId,
    Uid,
    attach,
    config,
    debug_controller,
    default_bootstrap_cmd,
    enable_transport,
    get_meter,
    get_or_spawn_controller,
    returns_future,
    run_worker_loop_forever,
    run_worker_loop_until_shutdown,
    shutdown_context,
    span,
    start_worker_loop_forever,
    traced,
)
from ._ports import Channel, Port, PortReceiver
from ._proc_mesh import ProcMesh, proc_mesh
from ._rdma import DroppedError, Region, Registry, ServiceActor, copy_local, vm_copy
from ._requests import ValueStream
from ._send import Accumulator, send
from ._service import Service, ServiceEndpoint, Session, spawn_service
from ._service_core import live_services
from ._service_values import Answer, ReplicaStats
from ._supervision import install as install_supervision
from ._supervision import set_failure_hook, unhandled_fault_hook
from ._system import ActorHost, run_in_actors

__all__ = [
    "Accumulator",
    "Actor",
    "ActorHost",
    "ActorMesh",
    "Allocator",
    "Answer",
    "AttachRefusedError",
    "BootstrapCommand",
    "Channel",
    "ChannelTransport",
    "Context",
    "DroppedError",
    "Endpoint",
    "Failure",
    "Future",
    "HostAllocator",
    "HostMesh",
    "Job",
    "LocalAllocator",
    "MeshRef",
    "MeshState",
    "Port",
    "PortReceiver",
    "ProcId",
    "ProcMesh",
    "ProcessSpec",
    "Region",
    "Registry",
    "ReplicaStats",
    "Service",
    "ServiceActor",
    "ServiceEndpoint",
    "Session",
    "Uid",
    "ValueStream",
    "actor_mesh",
    "all_states",
    "as_endpoint",
    "attach",
    "attach_job",
    "attach_to_workers",
    "cancelled",
    "concurrent_endpoint",
    "config",
    "context",
    "copy_local",
    "current_actor_name",
    "current_rank",
    "current_size",
    "debug_controller",
    "default_bootstrap_cmd",
    "enable_transport",
    "endpoint",
    "from_concurrent",
    "get_meter",
    "get_or_spawn_controller",
    "host_mesh",
    "install_actor_logs",
    "install_supervision",
    "job_records",
    "live_services",
    "point_of",
    "proc_mesh",
    "resolved",
    "returns_future",
    "run_in_actors",
    "run_worker_loop_forever",
    "run_worker_loop_until_shutdown",
    "send",
    "set_failure_hook",
    "shutdown_context",
    "span",
    "spawn_service",
    "start_worker_loop_forever",
    "this_host",
    "this_proc",
    "traced",
    "unhandled_fault_hook",
    "vm_copy",
]
