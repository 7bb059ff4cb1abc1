"""What the controller tells ``actormesh top`` and ``actormesh stacks`` about its meshes.

The meshes are the ones this controller spawned (``track``). For each, the processes of
its ranks are asked what they are doing (an OBSERVE each, see ``_core._snapshot``) and
the answers are put together with what only the controller knows: which host and pid
each rank has, how often it was restarted, the calls it has in flight and their round
trips as this process saw them (``MeshState``). The services this controller runs
(``spawn_service``) come with the report, one entry per replica (``ServiceCore.report``).
CPU use is the change of a process' CPU seconds between two reports, so the first report
has none. Runs on the loop thread.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time
from typing import Any

from .._api import MeshRef, MeshState, all_states, live_services
from .._core import observe, process_usage
from .._hosts import native_stacks
from ._stacks import Stacks, rank_stacks

__all__ = ["Meshes"]


class Meshes:
    """The meshes one controller spawned, and reports on them (loop thread).

    Args:
        runtime: the controller's runtime (``Runtime``).
    """

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self.refs: dict[str, MeshRef] = {}
        self.started = time.time()
        self._cpu: dict[int, tuple[float, float]] = {}  # pid -> (monotonic, cpu seconds)
        self._host = socket.gethostname()  # the kernel's name: no lookup

    def track(self, ref: MeshRef) -> None:
        """A mesh spawned here (any thread)."""
        self.refs[ref.mesh_id] = ref

    def _states(self) -> dict[str, MeshState]:
        return {state.mesh_id: state for state in all_states()}

    def info(self) -> dict[str, Any]:
        """The job in a line: its pid, program, start and meshes."""
        return {
            "pid": os.getpid(),
            "program": _program(),
            "cwd": os.getcwd(),
            "started": self.started,
            "meshes": len(self.refs),
            "controller": process_usage(),
        }

    def _live(self, name: str | None) -> list[MeshRef]:
        states = self._states()
        picked = []
        for ref in self.refs.values():
            state = states.get(ref.mesh_id)
            if state is not None and state.stopped:
                continue
            if name is None or ref.name == name:
                picked.append(ref)
        return picked

    def live(self, name: str | None = None) -> list[MeshRef]:
        """The live meshes (those named ``name``, when given)."""
        return self._live(name)

    def _cpu_percent(self, pid: int, cpu: float | None) -> float | None:
        if cpu is None:
            return None
        now = time.monotonic()
        last = self._cpu.get(pid)
        self._cpu[pid] = (now, cpu)
        if last is None or now - last[0] <= 0:
            return None
        return max(0.0, 100.0 * (cpu - last[1]) / (now - last[0]))

    def _process(self, path: str) -> tuple[int | None, str, int]:
        child = self.runtime.children.processes.get(path)
        if child is None:
            return None, self._host, 0
        return child.pid, str(getattr(child, "host", None) or self._host), child.restarts

    async def snapshot(self, mesh: str | None = None, timeout: float = 1.0) -> dict[str, Any]:
        """Every live mesh (or those named ``mesh``) and each of its ranks."""
        refs = self._live(mesh)
        paths = {path for ref in refs for path in ref.paths}
        answers = await observe(self.runtime, paths, "stats", timeout)
        states = self._states()
        cpu: dict[str, float | None] = {}
        for path, answer in answers.items():
            pid = answer.get("pid")
            cpu[path] = self._cpu_percent(pid, answer.get("cpu")) if pid else None
        meshes = []
        for ref in refs:
            state = states.get(ref.mesh_id)
            seen = state.stats() if state is not None else {}
            ranks = []
            hosts: list[str] = []
            for rank, path in enumerate(ref.paths):
                answer = answers.get(path, {})
                pid, host, restarts = self._process(path)
                if host not in hosts:
                    hosts.append(host)
                actor = _actor(answer, ref.mesh_id, rank)
                ranks.append(
                    _row(ref, rank, answer, actor, seen.get(rank, {}), pid, host, restarts, cpu)
                )
            meshes.append(
                {
                    "id": ref.mesh_id,
                    "name": ref.name,
                    "class": ref.class_name,
                    "labels": list(ref.labels),
                    "sizes": list(ref.sizes),
                    "hosts": hosts,
                    "ranks": ranks,
                }
            )
        services = [core.report() for core in live_services()]
        return {"job": self.info(), "time": time.time(), "meshes": meshes, "services": services}

    async def stacks(
        self,
        mesh: str | None = None,
        ranks: list[int] | None = None,
        timeout: float = 3.0,
        native: bool = False,
    ) -> list[Stacks]:
        """The stacks of the selected ranks of every live mesh (or those named ``mesh``);
        ``native``: C and Python frames of every thread, through py-spy."""
        refs = self._live(mesh)
        return [await mesh_stacks(self.runtime, ref, ranks, timeout, native) for ref in refs]


async def mesh_stacks(
    runtime: Any, ref: MeshRef, ranks: list[int] | None, timeout: float, native: bool = False
) -> Stacks:
    """The stacks of ``ranks`` (all when ``None``) of the mesh ``ref`` (loop thread);
    ``native``: each process' threads through py-spy, its Python answer for the state
    line only (a process whose loop is blocked still gets its native stacks)."""
    every = range(len(ref.paths))
    chosen = [rank for rank in (every if ranks is None else ranks) if rank in every]
    paths = {ref.paths[rank] for rank in chosen}
    asked = observe(runtime, paths, "stats" if native else "stacks", timeout)
    dumps: dict[str, dict[str, Any]] = {}
    if native:
        answers, found = await asyncio.gather(asked, _native(runtime, paths, timeout))
        dumps = found
    else:
        answers = await asked
    return rank_stacks(
        ref.name,
        (
            (rank, _actor(answers[ref.paths[rank]], ref.mesh_id, rank), answers[ref.paths[rank]])
            for rank in chosen
        ),
        {rank: dumps[ref.paths[rank]] for rank in chosen} if native else None,
    )


async def _native(runtime: Any, paths: set[str], timeout: float) -> dict[str, dict[str, Any]]:
    """py-spy's view of each process at ``paths`` that runs on this host."""

    async def one(path: str) -> dict[str, Any]:
        child = runtime.children.processes.get(path)
        wait = max(timeout, 10.0)
        link = getattr(child, "link", None)
        if link is not None:  # behind a host agent: py-spy runs there, on its host
            try:
                return await asyncio.wait_for(link.native_stacks(path, wait), wait + 5.0)
            except Exception as error:
                return {"error": f"its host agent did not say: {error}"}
        if child is None or not getattr(child, "local", False):
            return {"error": "not a process this controller started"}
        return await native_stacks(child.pid, wait)

    found = await asyncio.gather(*(one(path) for path in paths))
    return dict(zip(paths, found))


def _actor(answer: dict[str, Any], mesh_id: str, rank: int) -> dict[str, Any] | None:
    for actor in answer.get("actors", ()):
        if actor["mesh_id"] == mesh_id and actor["rank"] == rank:
            return dict(actor)
    return None


def _row(
    ref: MeshRef,
    rank: int,
    answer: dict[str, Any],
    actor: dict[str, Any] | None,
    seen: dict[str, Any],
    pid: int | None,
    host: str,
    restarts: int,
    cpu: dict[str, float | None],
) -> dict[str, Any]:
    path = ref.paths[rank]
    coords = _coords(ref, rank)
    endpoints = dict(actor.get("endpoints") or {}) if actor else {}
    if "error" in answer:
        state = "silent" if "no answer" in answer["error"] else "gone"
    elif actor is None:
        state = "absent"
    else:
        state = str(actor["state"])
    if seen.get("alive") is False:
        state = "dead"
    busiest = max(endpoints.items(), key=lambda item: item[1]["calls"], default=None)
    shown = actor.get("endpoint") if actor else None
    if shown not in endpoints:
        shown = busiest[0] if busiest else None
    return {
        "rank": rank,
        "point": coords,
        "host": host,
        "pid": answer.get("pid", pid),
        "restarts": restarts,
        "state": state,
        "error": answer.get("error"),
        "endpoint": actor.get("endpoint") if actor else None,
        "seconds": actor.get("seconds") if actor else None,
        "paused_at": actor.get("paused_at") if actor else None,
        "queued": actor.get("queued", 0) if actor else 0,
        "concurrent": len(actor.get("concurrent") or ()) if actor else 0,
        "in_flight": seen.get("in_flight", 0),
        "calls": sum(e["calls"] for e in endpoints.values()),
        "errors": sum(e["errors"] for e in endpoints.values()),
        "shown_endpoint": shown,
        "p50": endpoints[shown]["p50"] if shown else None,
        "p99": endpoints[shown]["p99"] if shown else None,
        "endpoints": endpoints,
        "rtt_p50": seen.get("p50"),
        "rtt_p99": seen.get("p99"),
        "cpu": cpu.get(path),
        "rss": answer.get("rss"),
    }


def _coords(ref: MeshRef, rank: int) -> dict[str, int]:
    coords: list[int] = []
    rest = rank
    for size in reversed(ref.sizes):
        rest, index = divmod(rest, size)
        coords.append(index)
    return dict(zip(ref.labels, reversed(coords)))


def _program() -> str:
    """The job's command line as ``top`` shows it: the script by its name, as ``ps`` does
    (a full path would fill an 80-column header before the arguments)."""
    if not sys.argv or not sys.argv[0]:
        return sys.executable
    return " ".join([os.path.basename(sys.argv[0]), *sys.argv[1:]])
