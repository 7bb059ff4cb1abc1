"""``Agents``: the host agents a runtime owns, as a part of their own.

Each agent is an ``AgentLink`` (``_agent_link``) by its connection: adopted once it
joined (``adopt_agent``), started on this host (``start_agents``) or dialled
(``attach_agent``). The workers it starts are owned by ``Children`` like any other
(``start_relayed``); its ``EVENT`` frames (a worker's exit, output, a silent child agent)
are heard here. A host mesh of more agents than its fan-out makes them a tree
(``form_tree``, ``_cast_tree``): heartbeats follow the tree, and the death of an
interior agent fails what waited on the hosts below it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .._core import dumps, error_from_payload, headers, loads
from .._exceptions import ActorDiedError
from .._transport import Connection, connect_address
from ._agent_link import AgentLink, RelayedProcess, WorkerSpec
from ._cast_tree import CastTree
from ._children import Children
from ._joining import JoinWait
from ._process import ChildProcess, describe_exit, launch_agent
from ._remote import Joined, RemoteProcess
from ._routed import RoutedConnection, as_routed
from ._tree_requests import down_each, down_tree

if TYPE_CHECKING:
    from ._runtime import Runtime

__all__ = ["Agents"]

log = logging.getLogger("actormesh.hosts")


class Agents:
    """The host agents of one runtime, by their connection (see the module docstring)."""

    def __init__(self, runtime: Runtime, children: Children) -> None:
        self.runtime = runtime
        self.children = children
        self.loop = runtime.loop
        self.links: dict[Connection, AgentLink] = {}
        self._agent_ids = itertools.count()
        runtime.frame_kinds[headers.EVENT] = self._on_agent_event
        runtime.frame_kinds[headers.UP] = self._from_below
        children.agents = self

    def agent_exited(self, process: RemoteProcess, how: str) -> None:
        """``process`` died (loop thread); a host agent's workers went with it."""
        link = self.links.pop(process.conn, None)
        if link is not None:  # a host agent: its workers went with it
            if link.tree is None:
                link.lost(how)
                return
            # The tree routes around it first: a program woken by the death of this
            # host's ranks (link.lost) and calling again must not go through it. Its own
            # ranks are marked dead then, before the calls below it fail: a program woken
            # by those finds them dead, with why.
            adopted = [other for other in link.tree.under(link) if as_routed(other.conn)]
            below, above = link.tree.lost(link)
            self.runtime.topology += 1  # the way to the hosts below it changed
            routed_before = self.runtime.topology
            link.lost(how)
            self._tree_agent_lost(link, how, below, above, routed_before)
            self._orphans(link, below, adopted)

    def adopt_agent(self, joined: Joined, kill: Callable[[], None] | None = None) -> AgentLink:
        """Own a host agent that joined (loop thread); its heartbeats are watched."""
        process = self.children.adopt(joined, rank=-1, kill=kill)
        link = AgentLink(self.runtime, process, dict(joined.info))
        self.links[joined.conn] = link
        return link

    async def start_agents(self, count: int) -> list[AgentLink]:
        """Start ``count`` host agents on this host and own them (loop thread).

        Each is a child of this process that joins it over loopback TCP, as an agent on
        another host would, and then starts, watches and relays to its own workers; it
        dies with this process. On failure every agent started here is killed.
        """
        address = self.runtime.listen_tcp("127.0.0.1")
        keys = [f"agent-{os.getpid()}-{next(self._agent_ids)}" for _ in range(count)]
        waiting = JoinWait(self.runtime, count, accept=lambda joined: joined.key in keys)
        started = []
        try:
            for key in keys:
                started.append(launch_agent(key, address, self.runtime.secret))
            joined = await waiting.wait(self.runtime.config.spawn_timeout, f"at {address}")
        except BaseException:
            waiting.close()
            for popen in started:
                popen.kill()
            raise
        by_key = {j.key: j for j in joined}
        return [self.adopt_agent(by_key[k], kill=p.kill) for k, p in zip(keys, started)]

    async def attach_agent(
        self, address: str, dial: Callable[[], socket.socket] | None = None
    ) -> AgentLink:
        """Dial a host agent waiting at ``address`` (``tcp://``), prove the job's secret,
        and own it once it says HELLO (loop thread).

        ``dial``: how to connect instead (a blocking call, run on a thread), for the
        forms of address and handshakes of Monarch's worker loops (``_dial.dial_agent``).
        """
        connect = dial or (lambda: connect_address(address, secret=self.runtime.secret))
        sock = await asyncio.to_thread(connect)
        conn = self.runtime._new_connection(sock, peer=address, same_host=False)
        self.children.attaching.add(conn)
        hello: asyncio.Future[Joined] = self.loop.create_future()

        def take(joined: Joined) -> bool:
            if joined.conn is not conn or hello.done():
                return False
            hello.set_result(joined)
            return True

        stop = self.children.joins.wait(take)
        conn.start()
        try:
            joined = await asyncio.wait_for(hello, self.runtime.config.spawn_timeout)
        except BaseException:
            conn.close()
            raise
        finally:
            stop()
            self.children.attaching.discard(conn)
        return self.adopt_agent(joined)

    async def start_relayed(
        self, link: AgentLink, specs: Sequence[WorkerSpec]
    ) -> list[RelayedProcess]:
        """Have ``link``'s agent start one worker per spec; they are ours from then on."""
        processes = await link.spawn(specs)
        for process in processes:
            self.children.own_relayed(process)
        return processes

    def one_tree(self, links: Sequence[AgentLink | None]) -> CastTree | None:
        """The tree of agents every one of ``links`` belongs to, alive; None: there is no
        such tree (one level, this host, a dead host among them)."""
        tree = links[0].tree if links and links[0] is not None else None
        if tree is None:
            return None
        for link in links:
            if link is None or link.tree is not tree or link.lost_reason is not None:
                return None
            if tree.position(link) in tree.dead:
                return None
        return tree

    async def start_relayed_tree(
        self, tree: CastTree, groups: Sequence[tuple[AgentLink, Sequence[WorkerSpec]]]
    ) -> list[list[RelayedProcess] | BaseException]:
        """Have the agents of ``groups`` start their workers through ``tree``: one request
        per child of this process (``_subtree``). Each group's processes, or why it
        failed; a host that gave no answer is told to drop the spawn."""
        results: list[list[RelayedProcess] | BaseException] = []
        answers = await down_tree(tree, "spawn_tree", groups)
        for (link, specs), (kind, value) in zip(groups, answers, strict=True):
            if kind == "ok":
                processes = link.spawned(specs, value)
                for process in processes:
                    self.children.own_relayed(process)
                results.append(processes)
            elif kind == "error":
                results.append(error_from_payload(value))
            else:  # an agent on its way died: the request may still start workers there
                link.drop_spawn([spec.key for spec in specs])
                results.append(ActorDiedError(value, reason=value))
        return results

    async def stop_relayed(self, workers: Sequence[ChildProcess], grace: float) -> None:
        """Stop ``workers`` through their agents (``_subtree``), if they are all workers
        of agents of one tree (one request per child of this process) or of one level
        (one request per agent): each agent stops its own, asked to exit and signalled
        after ``grace``, and answers with their exit statuses. The workers of a host
        that gave no answer are left alive, for the caller to stop one by one."""
        by_link: dict[int, tuple[AgentLink, list[RelayedProcess]]] = {}
        for worker in workers:
            if not isinstance(worker, RelayedProcess):
                return
            by_link.setdefault(id(worker.link), (worker.link, []))[1].append(worker)
        links = [link for link, _ in by_link.values()]
        groups = [(link, [w.listen_path for w in mine]) for link, mine in by_link.values()]
        tree = self.one_tree(links)
        if tree is not None:
            answers = await down_tree(tree, "stop_tree", groups, grace)
        elif all(link.tree is None and link.lost_reason is None for link in links):
            answers = await down_each("stop_tree", groups, grace)
        else:
            return
        for (link, _), (kind, value) in zip(groups, answers, strict=True):
            for address, code in value if kind == "ok" else ():
                if address in link.workers:
                    worker = link.workers.pop(address)
                    worker.released = True  # (the agent let its port go)
                    worker.exited(f"was stopped: {describe_exit(code)}", code)

    def _on_agent_event(
        self, conn: Connection, header: tuple[Any, ...], parts: list[memoryview]
    ) -> None:
        link = self.links.get(conn)
        if link is None:
            raise ValueError(f"an EVENT from {conn.peer}, which is no host agent of ours")
        what, address = headers.read(headers.Event, header)
        if what == "agent_lost" and link.tree is not None:
            # Its parent's connection to an agent that joined through it closed.
            gone = link.tree.link_at(address)
            routed = as_routed(gone.conn) if gone is not None else None
            if routed is not None and gone is not None and gone.process.alive():
                routed.lost(str(loads(parts[1])["note"]))
            return
        if what == "agent_silent" and link.tree is not None:
            # A parent agent's heartbeats found its child silent (_child_watch).
            silent = link.tree.link_at(address)
            if silent is not None and silent.process.alive():
                self.children.declare_dead(silent.process, str(loads(parts[1])["note"]))
            return
        link.on_event(what, address, loads(parts[1]))

    async def form_tree(self, links: Sequence[AgentLink], k: int) -> CastTree | None:
        """Make ``links`` (a host mesh's agents, in its order) a tree of fan-out ``k``
        when there are more than ``k`` (``_cast_tree``); None: one level is enough."""
        if len(links) <= k:
            return None
        addresses = await asyncio.gather(*(link.listen_for_peers() for link in links))
        tree = CastTree(links, k, addresses)
        self._watch_tree(tree)
        await self._join_below(tree)
        return tree

    async def _join_below(self, tree: CastTree) -> None:
        """Have every agent of ``tree`` below the top adopted by its parent agent, and hang
        up on it (``_uplink``): this process keeps a connection only to the agents it
        reaches first. One whose adoption failed keeps its own connection."""
        answers = await down_tree(tree, "adopt_tree", [(link, []) for link in tree.links])
        for link, (kind, value) in zip(tree.links, answers, strict=True):
            if tree.on_top(link) or link.lost_reason is not None:
                continue
            if kind == "ok":
                old = link.conn
                self._reconnect(link, RoutedConnection(link, self.runtime._on_close))
                old.close()
            else:
                log.warning("%r stays joined to the controller: its parent did not adopt it "
                            "(%s)", link, value)  # fmt: skip

    def _reconnect(self, link: AgentLink, conn: Connection) -> None:
        """Reach ``link``'s agent on ``conn`` from now on."""
        self.links.pop(link.conn, None)
        self.links[conn] = link
        link.conn = conn
        self.children.reconnect(link.process, conn)

    def _from_below(
        self, conn: Connection, header: tuple[Any, ...], parts: list[memoryview]
    ) -> None:
        """A frame an agent below sent up (``UP``): handled as if its own connection
        carried it (``_routed``)."""
        link = self.links.get(conn)
        origin = headers.read(headers.Up, header).origin
        source = link.tree.link_at(origin) if link is not None and link.tree else None
        if source is None or source.lost_reason is not None:
            log.debug("dropping a frame from the gone or unknown agent at %s", origin)
            return
        self.runtime.receive(source.conn, parts[1:])

    def _orphans(self, link: AgentLink, below: list[AgentLink], adopted: list[AgentLink]) -> None:
        """``link``'s agent died: the agents it had adopted are adopted by their nearest
        live ancestor, or by this process itself (``_uplink``). While a host mesh shuts
        down, every agent whose way up went through it is gone to us instead: they were
        asked to end, and it can no longer tell us they did."""
        if link.process.stopping or self.runtime.closed:
            for other in below:
                routed = as_routed(other.conn)
                if routed is not None:
                    other.process.stopping = True
                    routed.lost(f"ended with the host agent above it, on {link.where}")
            return
        for orphan in adopted:
            routed = as_routed(orphan.conn)
            if orphan.lost_reason is None and routed is not None:
                routed.adopting = True  # (now: a request already woken may send to it)
                self.loop.create_task(self._adopt(orphan, routed))

    async def _adopt(self, orphan: AgentLink, routed: RoutedConnection) -> None:
        """Have ``orphan``'s agent adopted by its nearest live ancestor, or dial it and
        adopt it here; lost if neither can be done."""
        tree = orphan.tree
        assert tree is not None
        parent = tree.parent_of(orphan)
        address = tree.address(orphan)
        try:
            if parent is not None:
                answer = await parent.down_tree("adopt_tree", [], [(address, [], [])])
                if answer.get(address, ("",))[0] != "ok":
                    raise ConnectionError(f"{parent!r} could not adopt it: {answer.get(address)}")
                routed.resume()
            else:
                conn = await asyncio.to_thread(self.runtime.dial, address)
                self._reconnect(orphan, conn)
                conn.start()
                request = headers.encode(headers.HostOp(0, "adopt_tree"))
                conn.send([request, dumps(([True], []))[0]])
                routed.handover(conn)
        except Exception as error:
            if parent is not None and isinstance(error, ActorDiedError):
                # The agent asked to adopt it died meanwhile: the handling of that death
                # adopts it again, higher up (``_orphans``; its frames held until then).
                return
            if orphan.lost_reason is None:
                routed.lost(f"could not be adopted again after the agent above it died: {error}")

    def _watch_tree(self, tree: CastTree, adopted: Sequence[AgentLink] = ()) -> None:
        """Probe only the agents that hang under this process in ``tree`` (``adopted``:
        agents that may have come up to it, not probed by it yet); have each interior
        agent probe its own children (``_child_watch``)."""
        config = self.runtime.config
        for link, children in tree.watchers():
            if link is not None:
                addresses = [tree.address(child) for child in children]
                link.watch(addresses, config.heartbeat_interval, config.heartbeat_timeout)
        monitor = self.children.monitor()
        for link in tree.links:
            if not tree.on_top(link) and not link.leased:
                monitor.untrack(link.process)
            elif any(link is other for other in adopted) and link.process.alive():
                monitor.track(link.process)

    def probe_directly(self, link: AgentLink) -> None:
        """Probe ``link``'s agent with this process' own heartbeats, whatever tree it is in
        (a leased agent's: see ``AgentLink.hold``)."""
        if link.process.alive():
            self.children.monitor().track(link.process)

    def _tree_agent_lost(
        self,
        link: AgentLink,
        how: str,
        below: list[AgentLink],
        above: list[AgentLink],
        routed_before: int,
    ) -> None:
        """An agent of a tree died and the tree routes around it since the runtime's
        topology reached ``routed_before`` (loop thread): calls routed before it to the
        hosts ``below`` fail, naming it (their frames and replies went through it), and
        the agents ``above`` it hang up on it (a cut link would leave them waiting). A
        call routed since went around it and must not fail with it, however long ago it
        was made (a call to thousands of hosts takes a while to route)."""
        assert link.tree is not None
        reason = f"the host agent on {link.where}, which relays to this host, is gone: {how}"
        for other in below:
            for path in list(other.workers):
                conn = self.runtime.connection_at(path)
                if conn is not None:
                    self.runtime.fail_connection(conn, reason, routed_before)
        address = link.tree.address(link)
        for other in above:
            other.forget_peer(address)
        if not link.process.stopping:  # (a host mesh shutting down ends them all)
            self._watch_tree(link.tree, below)  # its children have another parent now

    def leased(self, child: ChildProcess) -> bool:
        """True for a host agent holding a lease, and for the workers it started: they
        outlive this owner."""
        link = child.link if isinstance(child, RelayedProcess) else None
        if isinstance(child, RemoteProcess):
            link = self.links.get(child.conn)
        return link is not None and link.leased
