"""The owner's side of a host agent: its workers, and the way frames reach them.

``AgentLink`` is the owner's handle on one agent (see ``_agent``): it asks it for workers
and relaunches, hears of their exits and output, and sends them frames. Each worker of
that host is a ``RelayedProcess`` to the owner, reached by a ``RelayConnection`` that
wraps every frame in a ``RELAY`` (or, for several workers at once, one ``CAST``) to the
agent. Everything here runs on the owner's loop thread unless it says otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._core import dumps, error_from_payload, headers, loads
from .._exceptions import ActorDiedError
from .._transport import Buffer, Connection, SegmentShare, TransportClosed
from ._process import ChildProcess, LaunchCommand
from ._remote import RemoteProcess, Status

if TYPE_CHECKING:
    from ._cast_tree import CastTree

__all__ = ["AgentLink", "RelayConnection", "RelayedProcess", "WorkerSpec"]

log = logging.getLogger("actormesh.hosts")


@dataclass(frozen=True)
class WorkerSpec:
    """One worker an owner asks a host agent for.

    Attributes:
        key: its unique name in the job.
        rank: its rank in its process mesh.
        env: the environment it needs beyond the agent's own.
        command: how the agent starts it, if not as usual (the environment it inherits
            is then the agent's, changed as the command says).
    """

    key: str
    rank: int
    env: dict[str, str] = field(default_factory=dict)
    command: LaunchCommand | None = None


class RelayConnection(Connection):
    """The owner's way to a worker behind a host agent: frames go through the agent.

    It stands where a ``Connection`` to the worker would (requests wait on it, and fail
    with it), but owns no socket and reads nothing (replies come on the agent's
    connection): only sending, closing and the state of the base class are used.
    """

    def __init__(self, link: AgentLink, address: str) -> None:  # no super(): no socket
        self.link = link
        self.peer = address
        self._closed = False

    @property
    def closed(self) -> bool:
        """True once the worker is gone, or its agent is."""
        return self._closed or self.link.conn.closed

    @property
    def gone_with(self) -> str | None:
        """Why the worker is gone, once its agent is (before the owner has handled the
        agent's death, its workers' deaths are not recorded yet: this says it now)."""
        link = self.link
        if not link.conn.closed or link.leased:
            return None
        return link.lost_reason or f"the host agent on {link.where} is gone"

    def send(self, parts: Sequence[Buffer], share: SegmentShare | None = None) -> None:
        """Send one frame to the worker (through its agent); any thread.

        ``share`` is not used: the agent copies what it relays.
        """
        if self._closed:
            raise TransportClosed(f"the worker at {self.peer} is gone")
        self.link.to_worker(self.peer, parts)

    def start(self) -> None:
        """Nothing to read: replies come on the agent's connection."""

    def read_remaining(self) -> None:
        """Nothing to read here: the agent's connection carries what the worker said,
        in order with the agent's news of its exit."""

    def close(self) -> None:
        """Mark the worker gone."""
        self._closed = True

    def fileno(self) -> int:
        """The agent connection's descriptor."""
        return self.link.conn.fileno()


class RelayedProcess(ChildProcess):
    """A worker started by a host agent for this owner (see the module docstring)."""

    local = False

    def __init__(self, link: AgentLink, spec: WorkerSpec, address: str, pid: int) -> None:
        super().__init__(spec.key, spec.rank, address, Status(pid))  # type: ignore[arg-type]
        self.link = link
        self.spec = spec
        self.host = link.hostname
        self._on_exit: Callable[[ChildProcess], None] | None = None
        # True once its agent was told, or knows, that its port may go.
        self.released = False

    def watch(self, loop: Any, on_exit: Callable[[ChildProcess], None]) -> None:
        """Call ``on_exit`` on ``loop`` once its agent says it exited (or the agent died)."""
        self._loop = loop
        self._on_exit = on_exit

    def exited(self, how: str, code: int | None) -> None:
        """It is gone: ``how`` says how (loop thread)."""
        status: Status = self.popen  # type: ignore[assignment]
        if status.returncode is not None:
            return
        status.returncode = code if code is not None else 1
        if self.death_note is None:
            # The agent says "process P (rank R) exited ...": the owner names the process
            # itself, so only the how is kept.
            how = how.removeprefix(f"process {self.pid} (rank {self.rank}) ")
            self.death_note = f"on {self.link.where} {how}"
        if self._on_exit is not None:
            self._on_exit(self)

    def signal_group(self, sig: int) -> None:
        """Have its agent signal it and everything it started."""
        if self.alive():
            self.link.signal(self.listen_path, sig)

    def release_address(self) -> None:
        """Its agent may let its TCP port go: nobody will restart this rank."""
        if not self.released:
            self.released = True
            self.link.release(self.listen_path)


class _HostRequest:
    """One host operation waiting for the agent's answer (a core ``ReplyHandler``)."""

    def __init__(self, link: AgentLink) -> None:
        self.link = link
        self.future: asyncio.Future[Any] = link.loop.create_future()

    def on_reply(self, rank: int, ok: bool, parts: list[memoryview]) -> bool:
        if not self.future.done():
            if ok:
                self.future.set_result(loads(parts[0], parts[1:]))
            else:
                self.future.set_exception(error_from_payload(parts[0]))
        return True

    def on_lost(self, conn: Any, reason: str) -> bool:
        if conn is not self.link.conn:
            return False
        if not self.future.done():
            # (named by its host, not as the connection's peer process)
            why = self.link.lost_reason or f"the host agent on {self.link.where} is gone: {reason}"
            self.future.set_exception(ActorDiedError(why, reason=why))
        return True


class AgentLink:
    """The owner's handle on one host agent.

    Args:
        runtime: the owner's runtime (``_runtime.Runtime``).
        process: the agent process as the owner adopted it.
        info: what the agent said of its host (``host``, ``address``, ``cpus``).
    """

    def __init__(self, runtime: Any, process: RemoteProcess, info: dict[str, Any]) -> None:
        self.runtime = runtime
        self.loop: asyncio.AbstractEventLoop = runtime.loop
        self.process = process
        self.conn: Connection = process.conn
        self.hostname = str(info.get("host", "?"))
        self.address = str(info.get("address", ""))
        self.cpus = int(info.get("cpus", 1))
        self.workers: dict[str, RelayedProcess] = {}
        self.lost_reason: str | None = None
        # What an agent of a leased job said when this owner attached (see _hosts._lease):
        # the job, its mesh records, this host's workers; None for an agent without one.
        self.lease_info: dict[str, Any] | None = info.get("lease")
        # True once the agent holds a lease: it outlives this owner, which then never
        # kills it, and leaves it running when this process exits.
        self.leased = False
        self._detached_why: str | None = None
        # The tree of agents of this host's mesh, when it has more hosts than its
        # fan-out (``_cast_tree``); None: the owner reaches this agent directly.
        self.tree: CastTree | None = None

    def __repr__(self) -> str:
        return f"<host agent on {self.where}>"

    @property
    def where(self) -> str:
        """The host, as errors name it: its name and address (hosts that share a name,
        network namespaces or containers of one machine, differ by address)."""
        return f"{self.hostname} ({self.address})" if self.address else self.hostname

    # -- requests ---------------------------------------------------------------------------

    async def _request(self, op: str, *args: Any) -> Any:
        if self.lost_reason is not None:
            raise ActorDiedError(self.lost_reason, reason=self.lost_reason)
        request = _HostRequest(self)
        req_id = self.runtime.register(request)
        payload, buffers = dumps(args)
        try:
            self.conn.send([headers.encode(headers.HostOp(req_id, op)), payload, *buffers])
        except TransportClosed as error:
            self.runtime.forget(req_id)
            raise ActorDiedError(str(error), reason=str(error)) from None
        return await request.future

    async def spawn(self, specs: Sequence[WorkerSpec]) -> list[RelayedProcess]:
        """Start one worker per spec on this host; the processes, joined (loop thread)."""
        return self.spawned(specs, await self._request("spawn", list(specs)))

    async def down_tree(
        self, op: str, items: Sequence[Any], below: list[Any], *extra: Any
    ) -> dict[str, Any]:
        """Have the agent do ``op`` (``spawn_tree``, ``stop_tree``) with ``items`` on this
        host and pass each branch of ``below`` on to the agent at its head (``_subtree``);
        the answer of every host of the subtree, by agent address (this one's under
        ``""``; loop thread)."""
        answer: dict[str, Any] = await self._request(op, list(items), below, *extra)
        return answer

    def drop_spawn(self, keys: list[str]) -> None:
        """Tell the agent the spawn of the workers ``keys`` was given up: it stops those it
        started, and refuses them should the request reach it later."""
        self._tell("drop_spawn", keys)

    def spawned(
        self, specs: Sequence[WorkerSpec], answers: Sequence[tuple[str, int]]
    ) -> list[RelayedProcess]:
        """The workers the agent started for ``specs``, from its ``(address, pid)`` of
        each; this link's from now on."""
        processes = []
        for spec, (address, pid) in zip(specs, answers, strict=True):
            process = RelayedProcess(self, spec, address, pid)
            self.workers[address] = process
            processes.append(process)
        return processes

    async def relaunch(self, old: RelayedProcess) -> RelayedProcess:
        """A new worker in the place of ``old``: same rank, same address (loop thread)."""
        pid = await self._request("relaunch", old.listen_path)
        new = RelayedProcess(self, old.spec, old.listen_path, pid)
        new.restarts = old.restarts + 1
        self.workers[new.listen_path] = new
        return new

    async def lease(self, job: str, keep_alive: float) -> str:
        """Have the agent outlive this owner by up to ``keep_alive`` seconds (loop thread);
        the address where a controller attaches to it later."""
        me = {"pid": os.getpid(), "host": socket.gethostname()}
        address: str = await self._request("lease", job, keep_alive, me)
        self.hold()
        return address

    def hold(self) -> None:
        """The agent holds a lease: this owner leaves it running when it goes."""
        self.leased = True
        self.process.kill_with(None)
        if self.tree is not None:
            # A leased agent detaches when this owner's heartbeats stop (_lease): in a
            # tree too it hears them from the owner itself, not from its parent agent.
            self.runtime.host_agents.probe_directly(self)

    def record(self, key: str, blob: bytes | None) -> None:
        """Write (``None``: remove) the mesh record ``key`` at the agent (any thread)."""
        self._tell("record", key, blob)

    async def replay(self) -> int:
        """Have the agent send what it kept while detached (loop thread): its output and
        failures arrive before this returns; how many failures."""
        count: int = await self._request("replay")
        return count

    async def native_stacks(self, address: str, timeout: float) -> dict[str, Any]:
        """The threads of the worker at ``address`` as py-spy, run by the agent on its
        host, sees them (``_native_stacks``; loop thread)."""
        answer: dict[str, Any] = await self._request("native", address, timeout)
        return answer

    def signal(self, address: str, sig: int) -> None:
        """Ask the agent to send ``sig`` to the worker at ``address`` (fire and forget)."""
        self._tell("signal", address, int(sig))

    def release(self, address: str) -> None:
        """Tell the agent the dead worker at ``address`` will not be restarted."""
        self._tell("release", address)

    def retire(self) -> None:
        """Tell the agent its host is shut down for good: a worker loop it serves in
        ends with it, instead of waiting for the next owner (fire and forget; sent
        before the agent is stopped, on the same connection, so it arrives first)."""
        self._tell("retire")

    def _tell(self, op: str, *args: Any) -> None:
        payload, _ = dumps(args)
        with contextlib.suppress(TransportClosed):
            self.conn.send([headers.encode(headers.HostOp(0, op)), payload])

    async def listen_for_peers(self) -> str:
        """Have the agent accept other agents of the job (a tree of agents); where."""
        address: str = await self._request("listen")
        return address

    def watch(self, addresses: list[str], interval: float, timeout: float) -> None:
        """Have the agent probe the agents at ``addresses`` (its children in a tree) with
        heartbeats, and report one that falls silent (``EVENT agent_silent``)."""
        self._tell("watch", addresses, interval, timeout)

    def forget_peer(self, address: str) -> None:
        """Tell the agent the agent at ``address`` is gone (it hangs up on it)."""
        self._tell("forget_peer", address)

    def to_worker(self, address: str, parts: Sequence[Buffer]) -> None:
        """Send one frame to this host's worker at ``address``: a ``RELAY`` to the agent,
        or, in a tree of agents, a ``ROUTE`` down the path casts take (any thread)."""
        tree = self.tree
        if tree is not None:
            first, hops = tree.route(self)
            if hops:
                first.conn.send([headers.encode(headers.Route(hops, address)), *parts])
                return
        self.conn.send([headers.encode(headers.Relay(address)), *parts])

    def relay(self, address: str) -> RelayConnection:
        """The way to the worker at ``address``."""
        return RelayConnection(self, address)

    def cast(
        self,
        gather: int,
        targets: list[tuple[str, tuple[int, ...], bytes]],
        parts: list[Any],
        combine: bytes | None = None,
    ) -> None:
        """One frame for several workers of this host: each gets its header and ``parts``;
        a nonzero ``gather`` (a request id) has the agent send their replies as one, with
        their values folded by ``combine`` (a pickled function) if given."""
        header = headers.encode(headers.Cast(gather, targets, combine))
        self.conn.send([header, *parts])

    # -- what the agent tells us ------------------------------------------------------------

    def on_event(self, what: str, address: str, details: dict[str, Any]) -> None:
        """An ``EVENT`` from the agent (loop thread)."""
        if what == "output":
            lines = self.runtime.output_lines
            name = "stderr" if details.get("stream") == "stderr" else "stdout"
            if lines is not None:
                lines.feed((id(self), name), name, details["text"])
                return
            stream = getattr(sys, name)
            with contextlib.suppress(OSError, ValueError):
                stream.write(details["text"])
                stream.flush()
        elif what == "exited":
            worker = self.workers.pop(address, None)
            if worker is not None:
                worker.exited(str(details.get("reason", "exited")), details.get("code"))
        elif what == "detached":
            # Another controller took the job over; the hang-up follows. Its workers run
            # on: their going out of reach is no failure to report here.
            self._detached_why = str(details.get("why", "detached"))
            self.process.stopping = True
            for worker in self.workers.values():
                worker.stopping = True
        else:
            log.warning("%r sent an event of unknown kind %r", self, what)

    def lost(self, reason: str) -> None:
        """The agent is gone, and so is every worker of its host (loop thread); or, for a
        leased agent, this owner was detached from them (they run on)."""
        if self._detached_why is not None:
            reason = self._detached_why
            self.lost_reason = f"detached from the host agent on {self.where}: {reason}"
        else:
            self.lost_reason = f"the host agent on {self.where} is gone: {reason}"
        workers, self.workers = self.workers, {}
        how = "is gone with its host agent" if self._detached_why is None else "is out of reach"
        for worker in workers.values():
            worker.exited(f"{how} ({reason})", None)
