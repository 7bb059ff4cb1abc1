"""Bulk data of a cast down a chain (or a small tree) of host agents.

A cast to workers on several hosts whose large parts (weights, a code archive) add up
to ``Config.bulk_threshold`` does not send those parts to every agent. The sender
(the controller; or a worker told the agents of the workers it sends to, ``route``, as
a trainer in ``sync_weights`` is) sends each agent a small ``BULK_CAST`` (the cast, less
those parts) on its own connection, where it keeps its place in the sender's order, and
the large parts once, as one *transfer*, to the first agent of a chain (a sender feeds
one agent whatever the fan-out: its link carries the bytes once); each agent writes the
chunks
into shared memory as they arrive and forwards each chunk to the next agents as soon
as it holds it whole (``_bulk_plan``: ``Config.bulk_fanout`` children each, 1 being a
chain), so every link carries the bytes once and the transfer takes about one link's
time plus a chunk per hop. Once an agent holds the whole transfer it hands the cast to
its workers with the parts in that same shared memory, lent to each (no copy), and
only then the frames that came after the cast (``Bulk.serve_casts`` holds them).

Flow control: a parent sends at most ``WINDOW`` chunks (``_bulk_transfer``, which
holds one transfer's bytes and children) beyond what a child has acknowledged
(``BULK_ACK``), so a slow link backs up into the sender's memory no further than that.
Agents reach each other over TCP with the job's secret, as any two processes of the job
do (``CoreRuntime.connection``).

Failures: a child whose connection closes (its agent died, or its host) is replaced
by its own children, which its parent adopts and feeds from where each stands (a
child's first acknowledgement says how much it already holds), so the hosts after a
dead agent still get the data, from its nearest live ancestor, up to the sender
itself. The dead host's ranks fail as on any agent loss. A child that lacks data and
acknowledged nothing for ``Config.heartbeat_timeout`` (frozen, or the link to it cut) is
cut off and replaced the same way; an agent whose held cast got no data for twice that
fails the cast's ranks here with an error naming this host (``_give_up``). A sender
keeps its copy until every host below it holds everything (``done`` acknowledgements).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import secrets
import socket
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .._core import error_payload, headers
from .._exceptions import ActorDiedError
from .._transport import Connection, SegmentShare, TransportClosed, nbytes
from ._agent_link import RelayConnection
from ._bulk_transfer import Host, Transfer

if TYPE_CHECKING:
    from ._runtime import Runtime

__all__ = ["Bulk", "Deliver"]

log = logging.getLogger("actormesh.hosts")

# An agent's cast handler: (conn, CAST wire header, parts after a header, share).
Deliver = Callable[[Connection, tuple[Any, ...], list[Any], SegmentShare], None]
# A group of one cast: (connection to the agent, its address, its host, its targets).
Group = tuple[Connection, str, str, list[headers.CastTarget]]


def _untokened(header: Any) -> Any:
    """A call's header without its reply route's token: its answer must reach the agent,
    which gathers the replies of a bulk cast, not this process' route directly."""
    if isinstance(header, headers.Call) and header.token is not None:
        return header._replace(token=None)
    return header


class Bulk:
    """A process' part in bulk transfers: as a sender (``cast``), and, in a host agent
    (``serve_casts``), receiving, forwarding and delivering (see the module docstring).

    Args:
        runtime: this process' runtime; the frame kinds of bulk data are handled on it.
    """

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.transfers: dict[int, Transfer] = {}
        self._deliver: Deliver | None = None
        # Frames for this host's workers that came after a bulk cast still arriving
        # (with their handlers), in order; the head is that cast.
        self._held: deque[tuple[Callable[..., None], Connection, Any, list[Any]]] = deque()
        runtime.frame_kinds[headers.BULK_OPEN] = self._on_open
        runtime.frame_kinds[headers.BULK_DATA] = self._on_data
        runtime.frame_kinds[headers.BULK_ACK] = self._on_ack
        runtime.frame_kinds[headers.BULK_CAST] = self._on_cast
        runtime.connection_lost.append(self._lost)
        self._watching = False
        # Since when each held bulk cast waits (by transfer), and transfers whose cast
        # was failed for want of data (a late parent may still feed this host's subtree).
        self._held_since: dict[int, float] = {}
        self._abandoned: set[int] = set()
        # Workers this process sends to but does not own, by address: their agent
        # ``(address, host)``, as their owner told (``route``), so that its casts to
        # them go down a chain too (a trainer's weights, in ``sync_weights``).
        self.routes: dict[str, Host] = {}
        self.sent_bytes = 0  # bytes this process sent as the source of transfers

    # -- the sender -------------------------------------------------------------------------

    def cast(
        self,
        groups: list[tuple[list[tuple[Any, tuple[int, ...], Any]], list[Any]]],
        gather: int,
        combine: bytes | None,
        failed: list[tuple[tuple[int, ...], str]],
    ) -> list[tuple[list[tuple[Any, tuple[int, ...], Any]], list[Any]]]:
        """Send the casts of ``groups`` (``send_frames``' groups of frames for the
        workers of one agent, ``(RelayConnection, ranks, header)``, with their parts)
        whose parts are shared by several agents and large enough as bulk casts; the
        groups left for the caller to send as usual. Ranks that could not be reached go
        to ``failed``.
        """
        config = self.runtime.config
        if not config.bulk_threshold:
            return groups
        by_parts: dict[int, list[tuple[list[tuple[Any, tuple[int, ...], Any]], list[Any]]]] = {}
        for group, parts in groups:
            by_parts.setdefault(id(parts), []).append((group, parts))
        left = []
        for same in by_parts.values():
            parts = same[0][1]
            if len(same) < 2 or not self._large(parts):
                left.extend(same)  # (checked first: most casts are small)
                continue
            casts = [
                (
                    group[0][0].link.conn,
                    group[0][0].link.process.listen_path,
                    group[0][0].link.hostname,
                    [(c.peer, r, headers.encode(h)) for c, r, h in group],
                )
                for group, _ in same
            ]
            lost = self.send(casts, parts, gather, combine)
            if lost is None:
                left.extend(same)
                continue
            for index in lost:
                failed.extend(
                    (r, "the host agent's connection is closed") for _, r, _ in same[index][0]
                )
        return left

    def agents_of(self, paths: Sequence[str]) -> dict[str, Host]:
        """The agents of this process' workers at ``paths`` (those it reaches through
        one), to hand to another sender (``route``)."""
        found = {}
        for path in paths:
            conn = self.runtime.known_connection(path)
            if isinstance(conn, RelayConnection):
                found[path] = (conn.link.process.listen_path, conn.link.hostname)
        return found

    def route(self, agents: dict[str, Host]) -> None:
        """Send bulk casts to these workers (address -> their agent's ``(address,
        host)``, from ``agents_of`` in their owner) through their agents."""
        self.routes.update(agents)

    def cast_routed(
        self,
        frames: Sequence[tuple[Connection, tuple[int, ...], Any, list[Any]]],
        gather: int,
        combine: bytes | None,
        failed: list[tuple[tuple[int, ...], str]],
    ) -> list[tuple[Connection, tuple[int, ...], Any, list[Any]]]:
        """``cast`` for a sender that reaches the workers directly, not through agents
        it owns: frames of a gathering call (its agents send the replies back to this
        process) to workers with a ``route`` on several hosts, whose shared parts are
        large enough, go as bulk casts to their agents (dialled here, with the job's
        secret); the frames left for the caller to send as usual."""
        if not gather or not self.runtime.config.bulk_threshold:
            return list(frames)
        left = []
        by_parts: dict[int, dict[Host, list[tuple[Connection, tuple[int, ...], Any]]]] = {}
        parts_of: dict[int, list[Any]] = {}
        for conn, ranks, header, parts in frames:
            agent = self.routes.get(conn.peer)
            if agent is None:
                left.append((conn, ranks, header, parts))
                continue
            by_parts.setdefault(id(parts), {}).setdefault(agent, []).append((conn, ranks, header))
            parts_of[id(parts)] = parts
        for key, agents in by_parts.items():
            parts = parts_of[key]
            if len(agents) < 2 or not self._large(parts):
                left.extend((c, r, h, parts) for group in agents.values() for c, r, h in group)
                continue
            groups: list[Group] = []
            kept: list[tuple[Connection, tuple[int, ...], Any, list[Any]]] = []
            for (address, host), group in agents.items():
                reach: Connection | None = None
                with contextlib.suppress(ActorDiedError):
                    reach = self.runtime.connection(address)
                if reach is None:  # sent to the workers directly
                    kept.extend((c, r, h, parts) for c, r, h in group)
                    continue
                targets = [(c.peer, r, headers.encode(_untokened(h))) for c, r, h in group]
                groups.append((reach, address, host, targets))
            lost = self.send(groups, parts, gather, combine)
            if lost is None:
                kept = [(c, r, h, parts) for group in agents.values() for c, r, h in group]
            else:
                why = "its host agent is unreachable"
                failed.extend((r, why) for index in lost for _, r, _ in groups[index][3])
            left.extend(kept)
        return left

    def chains(self, parts: Sequence[Any]) -> bool:
        """Whether a cast of ``parts`` to the workers of several agents of one level
        sends them down a chain of agents (``cast``)."""
        return bool(self.runtime.config.bulk_threshold) and self._large(parts)

    def _large(self, parts: Sequence[Any]) -> bool:
        """Whether the large parts of ``parts`` are worth a transfer."""
        config = self.runtime.config
        least = max(1, config.shm_threshold)
        large = sum(size for size in map(nbytes, parts) if size >= least)
        return bool(large) and large >= config.bulk_threshold

    def send(
        self, groups: Sequence[Group], parts: Sequence[Any], gather: int, combine: bytes | None
    ) -> list[int] | None:
        """One cast to the workers of several agents, its large parts as one transfer
        (any thread); the indexes of the groups whose agent was unreachable, or
        ``None`` when the parts are too small for it (nothing was sent)."""
        config = self.runtime.config
        least = max(1, config.shm_threshold)
        places = [index for index, part in enumerate(parts) if nbytes(part) >= least]
        sizes = [nbytes(parts[index]) for index in places]
        if len(groups) < 2 or not sizes or sum(sizes) < config.bulk_threshold:
            return None
        ident = secrets.randbits(62)
        transfer = self._transfer(ident, sizes, config.bulk_chunk, config.bulk_fanout)
        # A copy of our own: the caller may change its tensors once the call returns,
        # while the chain still reads them.
        transfer.fill([parts[index] for index in places])
        transfer.delivered = True
        self.sent_bytes += transfer.total
        bulky = set(places)
        inline = [part for index, part in enumerate(parts) if index not in bulky]
        lost = []
        hosts: list[Host] = []
        for index, (conn, address, host, targets) in enumerate(groups):
            header = headers.BulkCast(transfer.ident, gather, targets, combine, places)
            try:
                conn.send([headers.encode(header), *inline])
            except TransportClosed:
                lost.append(index)
                continue
            hosts.append((address, host))
        self.runtime.call_soon(self._start, transfer, hosts)
        return lost

    def _transfer(self, ident: int, sizes: Sequence[int], chunk: int, fanout: int) -> Transfer:
        return Transfer(self.runtime, self.settle, ident, sizes, chunk, fanout)

    def _start(self, transfer: Transfer, hosts: list[Host]) -> None:
        self.transfers[transfer.ident] = transfer
        # The sender feeds one agent, whatever the fan-out: its link carries the bytes
        # once (the agents below split the rest).
        transfer.start(None, [("", "sender"), *hosts], fanout=1)
        transfer.check_done()

    # -- an agent ---------------------------------------------------------------------------

    def serve_casts(self, deliver: Deliver, kinds: Sequence[int]) -> None:
        """This process is a host agent: bulk casts go to ``deliver`` once their data is
        in, and frames of ``kinds`` (those for its workers) wait behind them, in order."""
        self._deliver = deliver
        for kind in kinds:
            handler = self.runtime.frame_kinds[kind]
            self.runtime.frame_kinds[kind] = functools.partial(self._in_order, handler)

    def _in_order(
        self, handler: Callable[..., None], conn: Connection, header: Any, parts: list[Any]
    ) -> None:
        if self._held:
            self._held.append((handler, conn, header, parts))
        else:
            handler(conn, header, parts)

    def _on_cast(self, conn: Connection, header: tuple[Any, ...], parts: list[Any]) -> None:
        if self._deliver is None:
            raise ValueError("a bulk cast reached a process that is no host agent")
        ident = headers.read(headers.BulkCast, header).transfer
        self._held_since[ident] = self.runtime.loop.time()
        self._held.append((self._deliver_cast, conn, header, parts))
        self._release_held()
        self._watch()

    def _release_held(self) -> None:
        while self._held:
            handler, conn, header, parts = self._held[0]
            if handler == self._deliver_cast:
                transfer = self.transfers.get(headers.read(headers.BulkCast, header).transfer)
                if transfer is None or transfer.have < transfer.total:
                    return  # its data is still coming
            self._held.popleft()
            try:
                handler(conn, header, parts)
            except Exception:
                log.exception("failed to handle a frame held behind a bulk cast")

    def _deliver_cast(self, conn: Connection, header: tuple[Any, ...], parts: list[Any]) -> None:
        cast = headers.read(headers.BulkCast, header)
        transfer = self.transfers[cast.transfer]
        places = dict(zip(cast.places, range(len(cast.places)), strict=True))
        inline = iter(parts[1:])
        full = [
            transfer.views[places[index]] if index in places else next(inline)
            for index in range(len(places) + len(parts) - 1)
        ]
        share = SegmentShare()
        for index, which in places.items():
            inode = transfer.inodes[which]
            if inode is not None:
                # A worker's frame is its own header, then these parts: index + 1.
                share.holding(index + 1, inode)
        assert self._deliver is not None
        self._held_since.pop(cast.transfer, None)
        wire = (headers.CAST, cast.gather, cast.targets, cast.combine)
        self._deliver(conn, wire, [parts[0], *full], share)
        del full
        transfer.delivered = True
        self.settle(transfer)

    def _on_open(self, conn: Connection, header: tuple[Any, ...], parts: list[Any]) -> None:
        opened = headers.read(headers.BulkOpen, header)
        transfer = self.transfers.get(opened.transfer)
        if transfer is not None:
            # A new parent: the old one is gone. It sends from what we hold.
            transfer.parent = conn
            transfer.ack()
            return
        transfer = self._transfer(opened.transfer, opened.sizes, opened.chunk, opened.fanout)
        transfer.delivered = opened.transfer in self._abandoned  # its cast failed already
        self.transfers[opened.transfer] = transfer
        transfer.start(conn, [tuple(host) for host in opened.hosts])  # type: ignore[misc]
        self._watch()

    def _on_data(self, conn: Connection, header: tuple[Any, ...], parts: list[Any]) -> None:
        ident, offset = headers.read(headers.BulkData, header)
        transfer = self.transfers.get(ident)
        if transfer is None or conn is not transfer.parent or offset != transfer.have:
            return  # a parent we left (it was cut off): the new one sends this again
        transfer.receive(offset, parts[1])
        transfer.ack()
        transfer.pump_all()
        if transfer.have == transfer.total:
            self._release_held()
            transfer.check_done()

    def _on_ack(self, conn: Connection, header: tuple[Any, ...], parts: list[Any]) -> None:
        ack = headers.read(headers.BulkAck, header)
        transfer = self.transfers.get(ack.transfer)
        if transfer is not None:
            transfer.on_ack(conn, ack.have, ack.done)

    # -- stalls -----------------------------------------------------------------------------

    def _watch(self) -> None:
        """Check for stalls now and then while transfers run or casts wait (loop)."""
        if not self._watching and (self.transfers or self._held_since):
            self._watching = True
            self.runtime.loop.call_later(self._stall / 4, self._check_stalls)

    @property
    def _stall(self) -> float:
        return self.runtime.config.heartbeat_timeout

    def _check_stalls(self) -> None:
        self._watching = False
        now, stall = self.runtime.loop.time(), self._stall
        for running in list(self.transfers.values()):
            if running.parent is not None:  # (a sender's heartbeats watch its agents)
                running.cut_stalled(now, stall)
        for ident, since in list(self._held_since.items()):
            transfer = self.transfers.get(ident)
            last = since if transfer is None else max(since, transfer.progressed)
            # Twice the time a parent takes to cut off a stalled child and feed the
            # hosts after it: by then, no data is coming.
            if now - last > 2 * stall and (transfer is None or transfer.have < transfer.total):
                self._give_up(ident, transfer, now - last)
        self._watch()

    def _give_up(self, ident: int, transfer: Transfer | None, silent: float) -> None:
        """No data came for too long: the cast waiting for it fails its ranks here."""
        runtime = self.runtime
        parent = None if transfer is None else transfer.parent
        upstream = " (none reached it)" if parent is None else f" from {parent.peer}"
        why = (
            f"the bulk data of this call stopped arriving at the host agent "
            f"{runtime.address} on {socket.gethostname()}{upstream} for {silent:.0f} s: "
            "an agent before it in the chain is frozen, or the link to it is cut"
        )
        log.warning("bulk transfer %x: %s", ident, why)
        self._held_since.pop(ident, None)
        self._abandoned.add(ident)
        kept: deque[tuple[Callable[..., None], Connection, Any, list[Any]]] = deque()
        for entry in self._held:
            _, conn, header, _ = entry
            if header[0] == headers.BULK_CAST and header[1] == ident:
                self._fail_cast(conn, headers.read(headers.BulkCast, header), why)
            else:
                kept.append(entry)
        self._held = kept
        if transfer is not None:
            transfer.delivered = True  # nothing to deliver any more; it may still forward
            self.settle(transfer)
        self._release_held()

    def _fail_cast(self, conn: Connection, cast: headers.BulkCast, why: str) -> None:
        """Answer every rank of ``cast`` that waits for an answer with ``why``."""
        error = ActorDiedError(why, reason=why)
        for _, ranks, inner in cast.targets:
            header = headers.decode(inner)
            if header[0] != headers.CALL:
                continue
            call = headers.read(headers.Call, header)
            if not call.req_id:
                continue
            for rank in ranks:
                payload = error_payload(error, mesh=call.mesh_id, point={}, endpoint=call.endpoint)
                reply = headers.encode(headers.Reply(call.req_id, rank, False))
                with contextlib.suppress(TransportClosed):
                    conn.send([reply, payload])

    def _lost(self, conn: Connection, reason: str) -> None:
        for transfer in list(self.transfers.values()):
            transfer.lost(conn, reason)

    def settle(self, transfer: Transfer) -> None:
        """Let a transfer go once its subtree holds everything and its cast went out."""
        if transfer.finished and self.transfers.get(transfer.ident) is transfer:
            del self.transfers[transfer.ident]
            transfer.close()
