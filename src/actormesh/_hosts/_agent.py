"""The host agent: one small long-lived process per host that owns the host's workers.

An owner (the controller) reaches a remote host through its agent:

- **processes**: the owner asks for workers (``HOST spawn``); the agent starts them here,
  watches them (pidfds, heartbeats), relaunches one in place when asked (same rank, same
  TCP port), signals them, and tells the owner when one exits (``EVENT exited``) with
  how it died. When the owner goes away, the agent and everything it started end;
- **traffic**: every frame from the owner to a worker of this host comes through the
  agent (``RELAY`` for one worker, ``CAST`` for many at the price of one frame), over one
  authenticated connection, and leaves on the worker's Unix socket; the order of one
  sender's frames to one worker is kept because there is one path. Replies travel back
  the same way; those of a ``call`` are gathered per host into one ``REPLIES`` frame.
  When a host mesh has more hosts than its fan-out, the agents form a tree (``_tree``):
  a ``TREE_CAST`` from the parent is delivered here and forwarded to the child agents
  whose subtrees it touches (``_peers``), their replies merged into this host's one
  frame up (``_gather``); a ``ROUTE`` passes one actor's frame down the same path;
  Actors call each other directly, by TCP, never through agents;
- **output**: the workers' stdout and stderr reach the owner's streams (``EVENT output``),
  each line already prefixed by the worker with its actor's mesh and coordinates.

The agent is an actormesh process like a worker (``_lifetime``) that hosts no actors.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
import signal
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._core import dumps, error_payload, headers, loads
from .._transport import (
    Connection,
    SegmentShare,
    TransportClosed,
    is_tcp,
    route_source,
)
from ._agent_link import WorkerSpec
from ._child_watch import ChildWatch
from ._gather import DONE, Batch
from ._lease import Lease
from ._lifetime import serve
from ._native_stacks import native_stacks
from ._peers import Peers
from ._process import ChildProcess
from ._reduction import Reduction
from ._runtime import Runtime
from ._subtree import Subtree
from ._uplink import Uplink

__all__ = [
    "Agent",
    "HostInfo",
    "LOOP_FD_ENV",
    "main",
    "serve_agent",
    "serve_in_session",
]

log = logging.getLogger("actormesh.hosts")

# In a worker loop's session: the pipe on which the agent tells the loop to end with it.
LOOP_FD_ENV = "ACTORMESH_LOOP_FD"


@dataclass(frozen=True)
class HostInfo:
    """What an agent says of its host when it joins (sent back to the owner)."""

    hostname: str
    address: str  # the IP other hosts reach this one at (where its workers listen)
    cpus: int


class _OwnerStream(io.TextIOBase):
    """A text stream whose writes become ``EVENT output`` frames to the owner."""

    def __init__(self, agent: Agent, name: str) -> None:
        self._agent = agent
        self._name = name

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._agent.output(self._name, text)
        return len(text)


# Cast plans an agent keeps (_learn_plan): the newest few of each mesh (a cast may go by
# one a moment older than the newest), and of that many meshes, the most recent.
_PLANS_PER_MESH = 4
_MESHES_PLANNED = 4096


class Agent:
    """The service a host agent process runs on its runtime (see the module docstring).

    Args:
        runtime: the agent process' runtime, joined to its owner.
        advertise: the IP this host's workers listen on for other hosts (``None``: they
            listen on Unix sockets only, for an owner on this host).
    """

    def __init__(
        self, runtime: Runtime, advertise: str | None, info: dict[str, Any] | None = None
    ) -> None:
        # Nothing else needs to hold the agent: the handlers it registers below do.
        self.runtime = runtime
        # This host's workers listen where other hosts reach it (dual addresses).
        runtime.advertise = advertise
        runtime.children.owner_decides_restarts = True
        runtime.event_source = "agent"  # an event log of this host's workers
        self.info = dict(info or {})  # what its HELLO said of this host
        self._owner = runtime.parent  # (a controller attaching to a lease replaces it)
        # In a tree of agents: the way to the owner through the agent above, once that
        # one adopted this agent (_uplink); and where the other agents reach this one.
        self._uplink: Uplink | None = None
        self._tree_address = ""
        # Workers by the address the owner knows them by (their TCP address).
        self._workers: dict[str, ChildProcess] = {}
        self._batches: dict[int, Batch] = {}
        # The cast plans of each mesh (_cast_plan), the newest few, by number: this
        # host's workers (address, ranks), and the child agents its casts go on to.
        self._plans: dict[str, dict[int, tuple[list[headers.PlanTarget], list[str]]]] = {}
        # The agents this one relays to in a tree of agents (dialled on first use).
        self._peers = Peers(runtime, self._peer_lost)
        # Its own requests (to child agents) never take an id of its owner's.
        runtime.count_request_ids_down()
        # Workers started and stopped through the tree (_subtree), and the spawns the
        # owner dropped (their workers are killed, now or when they join).
        self._subtree = Subtree(runtime, self._peers.send)
        self._dropped: set[str] = set()
        # Its heartbeats to its child agents, when the controller leaves them to it.
        self._child_watch = ChildWatch(runtime.loop, self._peers.send, self._child_silent)
        runtime.children.pong_listener = self._child_watch.answered
        # A job that outlives its controller (see _lease); None: the agent ends with it.
        self.lease: Lease | None = None
        runtime.frame_kinds[headers.HOST] = self._host
        runtime.frame_kinds[headers.RELAY] = self._relay
        runtime.frame_kinds[headers.CAST] = self._cast
        runtime.frame_kinds[headers.TREE_CAST] = self._tree_cast
        runtime.frame_kinds[headers.ROUTE] = self._route
        runtime.frame_kinds[headers.CAST_PLAN] = self._learn_plan
        runtime.frame_kinds[headers.PLANNED_CAST] = self._planned_cast
        runtime.frame_kinds[headers.UP] = self._up_from_below
        runtime.on_exit.append(lambda: self.owner_gone_below("the agent above it ended"))
        runtime.forward_replies = self._replies_from_below
        runtime.children.close_listeners.append(self._connection_closed)
        # Bulk casts wait for their data (_bulk), and the frames for workers behind them.
        runtime.bulk.serve_casts(
            self._cast,
            (
                headers.RELAY,
                headers.CAST,
                headers.TREE_CAST,
                headers.ROUTE,
                headers.CAST_PLAN,
                headers.PLANNED_CAST,
            ),
        )
        runtime.forward_reply = self._reply_from_worker
        runtime.failure_handler = self._failure_from_worker
        runtime.children.exit_listeners.append(self._worker_exited)
        # Output the workers' pipes carry goes to the owner (PipeForwarder writes to sys).
        sys.stdout = _OwnerStream(self, "stdout")
        sys.stderr = _OwnerStream(self, "stderr")

    def adopt_owner(self, conn: Connection) -> None:
        """``conn`` is the owner's from now on: a controller attached to this agent's
        lease, or adopted it (``_be_adopted``). The way up through another agent, if it
        was one, is left (what it held goes to ``conn``)."""
        uplink = self._uplink
        if uplink is not None and uplink is not conn:
            uplink.handover(conn)
            self._uplink = None
        self.runtime.adopt_owner(conn)
        self._owner = conn

    @property
    def workers(self) -> dict[str, ChildProcess]:
        """This host's workers, by the address their owner knows them by."""
        return self._workers

    def drop_batches(self) -> None:
        """Forget the gathered replies being collected (their caller is gone)."""
        self._batches.clear()

    # -- the owner's requests ---------------------------------------------------------------

    def _host(self, conn: Connection, header: tuple[Any, ...], parts: list[memoryview]) -> None:
        req_id, op = headers.read(headers.HostOp, header)
        args = loads(parts[1], parts[2:])
        if op == "spawn":
            self.runtime.loop.create_task(self._answer(conn, req_id, self._spawn(*args)))
        elif op in ("spawn_tree", "stop_tree", "adopt_tree"):
            items, below, *extra = args
            if op == "spawn_tree":
                own: Any = self._spawn
            elif op == "stop_tree":
                own = functools.partial(self._stop, *extra)
            else:  # (at once: the frames that follow it may be the new owner's)
                self._be_adopted(conn, items)
                own = _nothing
            work = self._subtree.run(op, own, items, below, *extra)
            self.runtime.loop.create_task(self._answer(conn, req_id, work))
        elif op == "drop_spawn":
            self.runtime.loop.create_task(self._drop_spawn(*args))
        elif op == "relaunch":
            self.runtime.loop.create_task(self._answer(conn, req_id, self._relaunch(*args)))
        elif op == "native":
            self.runtime.loop.create_task(self._answer(conn, req_id, self._native(*args)))
        elif op == "signal":
            self._signal(*args)
        elif op == "release":
            self._release(*args)
        elif op == "retire":
            self._retire()
        elif op == "lease":
            self.runtime.loop.create_task(self._answer(conn, req_id, self._start_lease(*args)))
        elif op == "listen":
            self.runtime.loop.create_task(self._answer(conn, req_id, self._listen()))
        elif op == "owner_gone":
            # From the agent above (its owner is gone), or from the owner down the tree
            # (it let this agent go, as closing a connection of its own would).
            if conn is self._owner or (self._uplink is not None and conn is self._uplink.raw):
                self._owner_gone(str(args[0]))
        elif op == "forget_peer":
            self._peers.forget(*args)
        elif op == "watch":
            self._child_watch.watch(*args)
        elif op == "record":
            self._record(*args)
        elif op == "replay":
            self.runtime.loop.create_task(self._answer(conn, req_id, self._replay(conn)))
        else:
            raise ValueError(f"unknown host operation {op!r}")

    async def _answer(self, conn: Connection, req_id: int, work: Any) -> None:
        if not req_id:  # (a request that wants no answer: an owner adopting this agent)
            try:
                await work
            except Exception:
                log.exception("a host operation that wants no answer failed")
            return
        try:
            value = await work
        except Exception as error:
            payload = error_payload(error, mesh="host", point={}, endpoint="host")
            reply = [headers.encode(headers.Reply(req_id, -1, False)), payload]
        else:
            reply = [headers.encode(headers.Reply(req_id, -1, True)), dumps(value)[0]]
        with contextlib.suppress(TransportClosed):
            conn.send(reply)

    async def _spawn(self, specs: Sequence[WorkerSpec]) -> list[tuple[str, int]]:
        """Start the workers and wait until each joined; ``(address, pid)`` of each."""
        if any(spec.key in self._dropped for spec in specs):
            raise RuntimeError("the owner dropped this spawn before it reached this host")
        children = await self.runtime.start_processes(
            [(s.key, s.rank, s.env) for s in specs], [s.command for s in specs]
        )
        for child in children:
            self._workers[child.listen_path] = child
        if any(child.key in self._dropped for child in children):
            await self._drop_spawn([])
            raise RuntimeError("the owner dropped this spawn while it started")
        return [(child.listen_path, child.pid) for child in children]

    async def _stop(self, grace: float, addresses: Sequence[str]) -> list[tuple[str, int | None]]:
        """Stop this host's workers at ``addresses`` (asked to exit, then signalled after
        ``grace``); the exit status of each, ``(address, code)``, for the owner. (Their
        exits are not reported one by one: the owner asked for them.)"""
        workers = [self._workers.pop(a) for a in addresses if a in self._workers]
        await self.runtime.stop_processes(workers, grace)
        return [(worker.listen_path, worker.returncode) for worker in workers]

    async def _drop_spawn(self, keys: Sequence[str]) -> None:
        """The owner gave up a spawn (``_subtree``): stop the workers of ``keys``
        started here, and refuse them should the request come later."""
        self._dropped.update(keys)
        dropped = [w for w in self._workers.values() if w.key in self._dropped]
        for worker in dropped:
            del self._workers[worker.listen_path]
        await self.runtime.stop_processes(dropped, grace=0.0)

    async def _relaunch(self, address: str) -> int:
        """Start a new worker in the place of the dead one at ``address``; its pid."""
        # Same address, same port.
        new = await self.runtime.children.relaunch(self._workers[address])
        self._workers[new.listen_path] = new
        return new.pid

    async def _native(self, address: str, timeout: float) -> dict[str, Any]:
        """The worker's threads through py-spy, run here, on its host
        (``actormesh stacks --native``)."""
        worker = self._workers.get(address)
        if worker is None:
            return {"error": f"no worker at {address} on this host"}
        return await native_stacks(worker.pid, timeout)

    async def _listen(self) -> str:
        """Where other agents of the job reach this one (a tree of agents)."""
        if self.runtime.advertise is None:
            raise RuntimeError(
                f"the host agent on {self.info.get('host', '?')} has no address other hosts "
                "reach: it cannot be part of a tree of agents"
            )
        address: str = self.runtime.listen_tcp(self.runtime.advertise)
        self._tree_address = address
        return address

    def _be_adopted(self, conn: Connection, by_owner: Sequence[bool]) -> None:
        """Take ``conn`` as the way to the owner (``HOST adopt_tree``, ``_uplink``): the
        agent above dialled it, or, with ``by_owner`` ``[True]``, the owner itself (the
        agents above this one are dead). Nothing to do for the agent the request reached
        on its owner's connection (the top of the tree)."""
        if conn is self._owner:
            return
        if by_owner and by_owner[0]:
            self.adopt_owner(conn)
            return
        uplink = self._uplink
        if uplink is None:
            # An orphan waits twice the time the controller takes to find the agent above
            # it dead (a cut link): long enough to be adopted, not to outlive its owner.
            window = 2 * self.runtime.config.heartbeat_timeout
            uplink = Uplink(self.runtime.loop, self._tree_address, self._orphan_ends, window)
        uplink.attach(conn)
        if self._owner is not uplink:
            self.adopt_owner(uplink)
            self._uplink = uplink

    def _orphan_ends(self, why: str) -> None:
        if self.lease is not None:
            return  # a leased job's agent ends by its lease (it detaches, then expires)
        log.warning("host agent ending: %s", why)
        self.runtime._exit_worker(why)

    def owner_gone_below(self, why: str) -> None:
        """This agent is ending, or its owner went away: the agents it adopted
        (``_uplink``) hear of it at once, as if their own owner's connection had closed."""
        frame = [headers.encode(headers.HostOp(0, "owner_gone")), dumps((why,))[0]]
        self._peers.send_all(frame)

    def _owner_gone(self, why: str) -> None:
        """The owner is gone, says the agent above: end, or, holding a lease, detach."""
        if self.runtime.on_owner_lost is not None:
            self.runtime.on_owner_lost(why)
        else:
            self.runtime._exit_worker(why)

    def _up_from_below(
        self, conn: Connection, header: tuple[Any, ...], parts: list[memoryview]
    ) -> None:
        """A frame for the owner from an agent below (it names its origin): up as it came."""
        if self._uplink is not None and self._owner is self._uplink:
            self._uplink.forward(parts)
        else:
            with contextlib.suppress(TransportClosed):
                self._owner.send(parts)

    def _release(self, address: str) -> None:
        """The owner will not restart the dead worker at ``address``: let its port go."""
        worker = self._workers.get(address)
        if worker is not None and not worker.alive():
            del self._workers[address]
            worker.release_address()

    def _retire(self) -> None:
        """The owner shuts this host down for good: a worker loop serving us ends with
        this session instead of waiting for the next owner."""
        fd = os.environ.get(LOOP_FD_ENV)
        if fd:
            with contextlib.suppress(OSError):
                os.write(int(fd), b"r")

    def _signal(self, address: str, sig: int) -> None:
        child = self._workers.get(address)
        if child is not None and child.alive():
            child.signal_group(signal.Signals(sig))

    async def _start_lease(
        self, job: str, keep_alive: float, controller: dict[str, Any] | None = None
    ) -> str:
        """Outlive the owner by up to ``keep_alive`` seconds (see ``_lease``); the address
        where a controller attaches."""
        if self.lease is None:
            self.lease = Lease(self, job, float(keep_alive), controller)
        return self.lease.address

    def _record(self, key: str, blob: bytes | None) -> None:
        if self.lease is None:
            raise ValueError("a mesh record for an agent without a lease")
        if blob is None:
            self.lease.records.pop(key, None)
        else:
            self.lease.records[key] = bytes(blob)

    async def _replay(self, conn: Connection) -> int:
        """What happened while no controller was attached, sent to ``conn``."""
        return 0 if self.lease is None else self.lease.replay(conn)

    # -- traffic ----------------------------------------------------------------------------

    def _relay(self, conn: Connection, header: tuple[Any, ...], parts: list[memoryview]) -> None:
        self._to_worker(headers.read(headers.Relay, header).address, parts[1:])

    def _cast(
        self,
        conn: Connection,
        header: tuple[Any, ...],
        parts: list[Any],
        share: SegmentShare | None = None,
    ) -> None:
        gather, targets, combine = headers.read(headers.Cast, header)
        self._deliver(conn, gather, targets, combine, parts[1:], [], share=share)

    def _tree_cast(
        self, conn: Connection, header: tuple[Any, ...], parts: list[memoryview]
    ) -> None:
        gather, targets, combine, below = headers.read(headers.TreeCast, header)
        shared = parts[1:]
        children = [address for address, _, _ in below]
        self._deliver(conn, gather, targets, combine, shared, children, subtree=True)
        for address, their_targets, their_below in below:
            forward = headers.TreeCast(gather, their_targets, combine, their_below)
            self._peers.send(address, [headers.encode(forward), *shared])

    def _learn_plan(
        self, conn: Connection, header: tuple[Any, ...], parts: list[memoryview]
    ) -> None:
        """Keep a mesh's cast plan (this host's part), and pass each child its own."""
        mesh_id, plan, targets, below = headers.read(headers.CastPlan, header)
        known = self._plans.pop(mesh_id, {})  # (re-inserted: the dict is oldest first)
        known[plan] = (targets, [address for address, _, _ in below])
        while len(known) > _PLANS_PER_MESH:
            del known[min(known)]
        self._plans[mesh_id] = known
        while len(self._plans) > _MESHES_PLANNED:
            del self._plans[next(iter(self._plans))]
        for address, their_targets, their_below in below:
            forward = headers.CastPlan(mesh_id, plan, their_targets, their_below)
            self._peers.send(address, [headers.encode(forward)])

    def _planned_cast(
        self, conn: Connection, header: tuple[Any, ...], parts: list[memoryview]
    ) -> None:
        """A call to a whole mesh by its plan: this host's workers get their headers made
        here, the child agents the frame as it came."""
        cast = headers.read(headers.PlannedCast, header)
        known = self._plans.get(cast.mesh_id, {}).get(cast.plan)
        if known is None:
            self._unplanned(cast)
            return
        mine, children = known
        call = headers.Call(cast.req_id, cast.mesh_id, (), cast.endpoint, None, cast.port)
        targets = [
            (address, ranks, headers.encode(call._replace(ranks=ranks)))
            for address, ranks in mine
            if address in self._workers  # one that is gone: its exit tells the owner
        ]
        shared = parts[1:]
        self._deliver(conn, cast.gather, targets, cast.combine, shared, children, subtree=True)
        for address in children:
            self._peers.send(address, parts)

    def _unplanned(self, cast: headers.PlannedCast) -> None:
        """A cast by a plan this agent does not know. Plans go down the same links ahead
        of their casts, and the owner casts by one plan at a time per mesh, so this is a
        defect: the owner hears of it (a gathering call fails, naming this host) rather
        than wait for a subtree that was never called."""
        why = (
            f"the host agent on {self.info.get('host', '?')} does not know plan "
            f"{cast.plan} of mesh {cast.mesh_id} (it knows "
            f"{sorted(self._plans.get(cast.mesh_id, {}))})"
        )
        log.error("dropping a cast by plan: %s", why)
        if cast.gather:
            payload = error_payload(
                RuntimeError(why), mesh=cast.mesh_id, point={}, endpoint=cast.endpoint
            )
            reply = headers.Reply(cast.gather, headers.UNPLANNED, False)
            with contextlib.suppress(TransportClosed):
                self._owner.send([headers.encode(reply), payload])

    def _deliver(
        self,
        conn: Connection,
        gather: int,
        targets: list[headers.CastTarget],
        combine: bytes | None,
        shared: list[memoryview],
        children: list[str],
        subtree: bool = False,
        share: SegmentShare | None = None,
    ) -> None:
        """Hand a cast to this host's ``targets``; with ``gather``, wait for them and for
        the child agents at ``children`` before answering on ``conn``. ``share``: the shared
        memory a bulk cast's parts are in already (``_bulk``)."""
        # A gathering cast waits only for the workers connected here: one already gone is
        # the owner's to fail (its exit went there), and waiting for it would hold the
        # others' replies back for good.
        reached = [
            (address, ranks, inner, self._worker_conn(address)) for address, ranks, inner in targets
        ]
        if gather:
            waiting = {address: len(ranks) for address, ranks, _, to in reached if to is not None}
            waiting.update((address, 1) for address in children)
            reduction = Reduction(combine) if combine is not None else None
            # Between agents the frame up always goes (DONE); to the owner, only if any.
            batch = Batch(conn, waiting, reduction, subtree and conn is not self._owner)
            self._batches[gather] = batch
            if not waiting:
                self._flush(gather)
        # Large shared parts go to this host's workers in one shared-memory copy, lent to
        # each (as the owner does for the workers of its own host).
        # (A bulk cast's parts are in shared memory already: ``share`` lends it.)
        if share is None and len(targets) > 1:
            share = SegmentShare()
        for address, _, inner, to in reached:
            self._send_to(address, to, [inner, *shared], share)

    def _route(self, conn: Connection, header: tuple[Any, ...], parts: list[memoryview]) -> None:
        hops, address = headers.read(headers.Route, header)
        if not hops and address == headers.TO_AGENT:
            # The owner's frame for this agent, down the tree: handled as the owner's.
            uplink = self._uplink
            if uplink is not None and conn is uplink.raw and self._owner is uplink:
                self.runtime.receive(uplink, parts[1:])
            else:
                log.warning("dropping a frame routed to this agent by one not its owner")
        elif not hops:
            self._to_worker(address, parts[1:])
        else:
            onward = headers.encode(headers.Route(hops[1:], address))
            self._peers.send(hops[0], [onward, *parts[1:]])

    def _to_worker(self, address: str, parts: list[Any], share: SegmentShare | None = None) -> None:
        self._send_to(address, self._worker_conn(address), parts, share)

    def _worker_conn(self, address: str) -> Connection | None:
        """The connection to this host's worker at ``address``; None once it is gone."""
        worker = self._workers.get(address)
        return None if worker is None else self.runtime.known_connection(worker.listen_path)

    def _send_to(
        self, address: str, target: Connection | None, parts: list[Any], share: SegmentShare | None
    ) -> None:
        if target is None:
            # Gone (its exit is on its way to the owner, who fails the call then).
            log.debug("dropping a frame for %s: no such worker here now", address)
            return
        with contextlib.suppress(TransportClosed):
            target.send(parts, share)

    def _reply_from_worker(self, conn: Connection, parts: list[memoryview]) -> None:
        req_id, rank, ok = headers.read(headers.Reply, headers.decode(parts[0]))
        batch = self._batches.get(req_id)
        if batch is None:
            with contextlib.suppress(TransportClosed):
                self._owner.send(parts)
            return
        batch.add(req_id, rank, ok, parts[1:])
        if batch.answered(self._address_of(conn) or ""):
            self._flush(req_id)

    def _replies_from_below(
        self, conn: Connection, header: tuple[Any, ...], parts: list[memoryview]
    ) -> None:
        """A child agent's subtree answered (a REPLIES frame ending with DONE)."""
        source = self._peers.address_of(conn)
        orphans: list[tuple[int, int, bool, int]] = []
        orphan_parts: list[memoryview] = []
        offset = 1
        for req_id, rank, ok, count in headers.read(headers.Replies, header).replies:
            mine = parts[offset : offset + count]
            offset += count
            batch = self._batches.get(req_id)
            if rank == DONE:
                if batch is not None and source is not None and batch.answered(source):
                    self._flush(req_id)
            elif batch is not None:
                batch.add(req_id, rank, ok, mine)
            else:  # its batch went up already (the child was given up for lost, say)
                orphans.append((req_id, rank, ok, count))
                orphan_parts.extend(mine)
        if orphans:
            with contextlib.suppress(TransportClosed):
                self._owner.send([headers.encode(headers.Replies(orphans)), *orphan_parts])

    def _flush(self, req_id: int) -> None:
        batch = self._batches.pop(req_id)
        frame = batch.take(req_id, last=True)
        if frame is not None:
            with contextlib.suppress(TransportClosed):
                batch.upstream.send(frame)

    def _peer_lost(self, address: str) -> None:
        """The child agent at ``address`` is unreachable: stop waiting for its subtree
        (the owner fails the ranks it held: it watches every agent itself)."""
        self._subtree.lost(address)
        self._child_lost(address)
        for req_id, batch in list(self._batches.items()):
            if address in batch.waiting:
                batch.waiting[address] = 1
                if batch.answered(address):
                    self._flush(req_id)

    def _child_lost(self, address: str) -> None:
        """The connection to the child agent at ``address`` closed or could not be made:
        the owner, who reaches it only through this agent, hears of its loss now."""
        note = "closed its connection to the agent above it (it exited, or its host is unreachable)"
        self._event("agent_lost", address, {"note": note})

    def _child_silent(self, address: str, note: str) -> None:
        """A child agent stopped answering heartbeats: the owner declares it dead."""
        self._event("agent_silent", address, {"note": note})

    def _connection_closed(self, conn: Connection) -> None:
        if self._peers.closed(conn):
            return
        if self._uplink is not None:
            self._uplink.orphaned(conn)  # (if it was the way up: it waits to be adopted)
        # The parent agent went away: what its subtree owes goes straight to the owner.
        for batch in self._batches.values():
            if batch.upstream is conn:
                batch.upstream = self._owner
                batch.subtree = False

    def _address_of(self, conn: Connection) -> str | None:
        for address, worker in self._workers.items():
            if self.runtime.known_connection(worker.listen_path) is conn:
                return address
        return None

    def _failure_from_worker(self, mesh_id: str, rank: int, endpoint: str, payload: Any) -> None:
        header = headers.encode(headers.Failure(mesh_id, rank, endpoint))
        if self.lease is not None and self.lease.detached:
            self.lease.keep_failure([header, bytes(payload)])
            return
        with contextlib.suppress(TransportClosed):
            self._owner.send([header, payload])

    # -- events for the owner ---------------------------------------------------------------

    def _worker_exited(self, child: ChildProcess, reason: str) -> None:
        # Batches waiting on it go out with what they have: the owner fails its ranks.
        for req_id, batch in list(self._batches.items()):
            if batch.waiting.pop(child.listen_path, None) is None:
                continue
            if batch.upstream is not self._owner:
                # In a tree: what came so far goes to the owner directly, ahead of the
                # exit (a reply sent before the death is not taken for a lost one).
                early = batch.take(req_id, last=False)
                if early is not None:
                    with contextlib.suppress(TransportClosed):
                        self._owner.send(early)
            if not batch.waiting:
                self._flush(req_id)
        details = {"reason": reason, "code": child.returncode}
        if self.lease is not None and self.lease.detached:
            frame = [headers.encode(headers.Event("exited", child.listen_path)), dumps(details)[0]]
            self.lease.keep_failure(frame, exited=child.listen_path)
            return
        self._event("exited", child.listen_path, details)

    def output(self, stream: str, text: str) -> None:
        """Send output of this host's workers to the owner's ``stream`` (kept for the
        next controller while none is attached)."""
        if self.lease is not None and self.lease.detached:
            self.lease.keep_output(stream, text)
            return
        self._event("output", "", {"stream": stream, "text": text})

    def _event(self, what: str, address: str, details: dict[str, Any]) -> None:
        header = headers.encode(headers.Event(what, address))
        with contextlib.suppress(TransportClosed):
            self._owner.send([header, dumps(details)[0]])


async def _nothing(items: Sequence[Any]) -> None:
    """A host's own part of a request that has none left to do."""


def host_info(advertise: str) -> HostInfo:
    """This host, as its agent introduces it."""
    return HostInfo(socket.gethostname(), advertise, os.cpu_count() or 1)


def serve_agent(key: str, owner: str, *, own_group: bool = True) -> None:
    """Run this process as the host agent of its host, joined to ``owner``, until the
    owner goes away or stops it."""
    # Where other hosts reach this one: the interface traffic to the owner leaves from
    # (a controller on this very host: loopback).
    advertise = route_source(owner) if is_tcp(owner) else "127.0.0.1"
    _serve_as_agent(key, owner, advertise, own_group=own_group)


def _serve_as_agent(
    key: str,
    owner: str,
    advertise: str | None,
    *,
    own_group: bool,
    owner_sock: socket.socket | None = None,
) -> None:
    """Serve ``owner`` as the agent of this host, reached by other hosts at
    ``advertise`` (``None``: by none), until it goes away."""
    info = host_info(advertise or "")
    said = {"role": "agent", "host": info.hostname, "address": info.address, "cpus": info.cpus}
    serve(
        key,
        owner,
        said,
        own_group=own_group,
        prefix_output=False,
        setup=functools.partial(_become_agent, advertise=advertise, info=said),
        owner_sock=owner_sock,
    )


def _become_agent(runtime: Runtime, advertise: str | None, info: dict[str, Any]) -> None:
    Agent(runtime, advertise, info)  # the handlers it registers on the runtime keep it


def serve_in_session(owner: str, advertise: str | None, sock: socket.socket) -> None:
    """Serve ``owner``, who attached to a worker loop over ``sock`` (already
    authenticated), as this host's agent until it goes away or lets us go
    (``_worker_loop``)."""
    key = f"agent-{socket.gethostname()}-{os.getpid()}"
    _serve_as_agent(key, owner, advertise, own_group=False, owner_sock=sock)


def main() -> None:
    """An agent started by an allocator (``python -m actormesh._hosts._agent_main``)."""
    serve_agent(os.environ["ACTORMESH_KEY"], os.environ["ACTORMESH_PARENT"])
