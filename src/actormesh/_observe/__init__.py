"""Seeing and debugging a running job: the controller's side (layer 4).

When a controller spawns its first mesh it starts its observer: the debugger hub that
receives breakpoints from its workers (always), and, unless ``Config.observe`` is off,
the job socket through which ``actormesh top``, ``actormesh stacks`` and ``actormesh
debug`` reach it (found through the per-user registry, ``_registry``). The command's side
is ``actormesh._cli``; the workers' side is ``actormesh._core`` (``_snapshot``,
``_debugger``). See docs/observability.md.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from .._hosts import Runtime
from ._hub import DebugHub
from ._metric_backends import (
    ConsoleBackend,
    JsonlBackend,
    MetricBackend,
    TensorBoardBackend,
    WandbBackend,
)
from ._metric_logger import MetricLogger
from ._registry import JobAddress, find_jobs, job_address
from ._report import Meshes, mesh_stacks
from ._service import JobService
from ._stacks import StackGroup, Stacks
from ._timeline import timeline, write_trace
from ._wire import read_message, write_message

__all__ = [
    "ConsoleBackend",
    "JobAddress",
    "JsonlBackend",
    "MetricBackend",
    "MetricLogger",
    "Observer",
    "StackGroup",
    "Stacks",
    "TensorBoardBackend",
    "WandbBackend",
    "find_jobs",
    "mesh_stacks",
    "observer",
    "read_message",
    "spawned",
    "timeline",
    "write_message",
    "write_trace",
]


class Observer:
    """One controller's observability: its meshes, debugger hub and job socket."""

    def __init__(self, runtime: Runtime) -> None:
        from .._core import headers

        self.runtime = runtime
        self.meshes = Meshes(runtime)
        self.address = job_address() if runtime.config.observe else None
        self.hub = DebugHub(runtime, job=str(os.getpid()) if self.address else None)
        runtime.frame_kinds[headers.DEBUG] = self.hub.on_frame
        self.service: JobService | None = None
        if self.address is not None:
            self.service = JobService(runtime, self.address, self.meshes, self.hub)
            runtime.call_soon(self.service.start)


_OBSERVERS: dict[int, Observer] = {}
_LOCK = threading.Lock()


def observer(runtime: Runtime | None = None) -> Observer | None:
    """This controller's observer, started on first use; ``None`` in a worker."""
    runtime = runtime or Runtime.get()
    if runtime._parent is not None:
        return None  # a worker: its owner's controller sees its meshes
    found = _OBSERVERS.get(id(runtime))
    if found is not None and found.runtime is runtime:
        return found
    with _LOCK:
        found = _OBSERVERS.get(id(runtime))
        if found is None or found.runtime is not runtime:
            for key, old in list(_OBSERVERS.items()):
                if old.runtime.closed:  # a runtime shut down earlier in this process
                    if old.service is not None:
                        old.service.abandon()
                    del _OBSERVERS[key]
            found = _OBSERVERS[id(runtime)] = Observer(runtime)
    return found


def spawned(mesh: Any) -> None:
    """``mesh`` was just spawned by this process (any thread)."""
    found = observer()
    if found is not None:
        ref = mesh._ref
        found.meshes.track(ref)
        found.runtime.record_event(
            "mesh_spawn",
            mesh=ref.name,
            message=ref.class_name,
            mesh_id=ref.mesh_id,
            labels=list(ref.labels),
            sizes=list(ref.sizes),
            addresses=list(ref.paths),
        )
        lines = found.runtime.output_lines
        if lines is not None:
            lines.declare(ref.name, ref.labels, ref.sizes)
