"""``Runtime``: the per-process runtime of layer 2, plus the worker processes it owns.

Every process runs one (``Runtime.get()`` in a controller, ``Runtime.start_worker`` in a
worker). On top of the core runtime's connections, requests and hosted actors, this one
starts worker processes, or adopts processes that join over TCP, and watches them: workers
say HELLO when connected; their deaths are seen through pidfds (local) or connection loss
(remote), reported to pending calls and to ``exit_listeners``; a heartbeat monitor finds
workers that are alive but frozen; a dead worker may be relaunched in place.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import errno
import itertools
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any

from .._config import Config
from .._core import CoreRuntime, Deferrals, Resume, headers, loads
from .._core import otel as _otel
from .._exceptions import ActorDiedError
from .._transport import (
    Connection,
    SegmentShare,
    TransportClosed,
    connect_address,
    dual_address,
    format_tcp,
    is_abstract,
    is_tcp,
    listening_socket,
    unix_part,
)
from ._agent_link import AgentLink, RelayConnection, RelayedProcess, WorkerSpec
from ._aggregate import LineAggregator
from ._bulk import Bulk
from ._cast_tree import CastTree, branch_ranks
from ._debug_relay import DebugRelay
from ._event_log import EventLog, open_event_log
from ._forkserver import ForkServer, template_key
from ._forkserver import available as forks_available
from ._heartbeat import HeartbeatMonitor
from ._joining import JoinWait
from ._output import PipeForwarder
from ._process import ChildProcess, LaunchCommand, describe_exit, launch, launch_agent
from ._progress import Progress
from ._reaper import kill_tagged
from ._remote import Joined, Joins, RemoteProcess

__all__ = ["Runtime"]

log = logging.getLogger("actormesh.runtime")


class Runtime(CoreRuntime):
    """This process' runtime, owner of the processes it started or adopted."""

    def __init__(self, config: Config, loop: asyncio.AbstractEventLoop, key: str) -> None:
        super().__init__(config, loop, key)
        self._children: dict[str, ChildProcess] = {}
        self._child_conns: dict[Connection, ChildProcess] = {}
        self._forwarders: dict[str, list[PipeForwarder]] = {}
        self._hello: dict[str, asyncio.Future[None]] = {}
        self._heartbeat: HeartbeatMonitor | None = None
        self.exit_listeners: list[Callable[[ChildProcess, str], None]] = []
        # Asked first when a worker dies: True when it will be restarted at the same path
        # (then calls to it wait for the new process, see relaunching / when_back).
        self.relaunch_policy: Callable[[ChildProcess], bool] | None = None
        self._deferrals = Deferrals()
        self.joins = Joins()  # who waits for processes that dial in over TCP
        # A host agent relaunches a worker when its owner asks, maybe after the worker
        # died: it keeps a dead worker's TCP socket until the owner says (see release).
        self.owner_decides_restarts = False
        # Host agents this process owns, by their connection (see _agent_link).
        self.agents: dict[Connection, AgentLink] = {}
        self._agent_ids = itertools.count()
        self._attaching: set[Connection] = set()  # agents dialled, not joined yet
        self.frame_kinds[headers.EVENT] = self._on_agent_event
        self.bulk = Bulk(self)  # bulk data of casts, down a chain of agents (_bulk)
        self._aggregator: LineAggregator | None = None
        # Where local workers are forked from (see _forkserver), once a spawn needs one.
        self._forks: ForkServer | None = None
        self._forks_failures = 0
        # Breakpoints in workers: passed up to the owner (a controller puts its own
        # debugger hub here, see actormesh._observe).
        self.frame_kinds[headers.DEBUG] = DebugRelay(self).on_frame
        # Who keeps a job event log here: the controller, or an agent (which says so).
        self.event_source: str | None = None
        self._events: EventLog | bool | None = None  # False: none is kept here
        self._events_lock = threading.Lock()
        # Told of every connection that closes and is no worker's (a host agent hears
        # of its peers in a tree of agents this way, see _peers).
        self.close_listeners: list[Callable[[Connection], None]] = []
        # Told of every PONG by the peer's address (an agent's heartbeats to its child
        # agents, see _child_watch).
        self.pong_listener: Callable[[str], None] | None = None

    # -- the job event log ----------------------------------------------------------------

    @property
    def events(self) -> EventLog | None:
        """This process' job event log (``_event_log``), opened on first use; ``None`` in a
        worker, or when ``Config.event_log`` is off."""
        events = self._events
        if events is None:
            with self._events_lock:
                if self._events is None:
                    source = self.event_source or ("controller" if self._parent is None else None)
                    opened = open_event_log(self.config, source) if source else None
                    self._events = opened if opened is not None else False
                events = self._events
        return events if isinstance(events, EventLog) else None

    def record_event(self, kind: str, **fields: Any) -> None:
        """Add an event to the job event log, if this process keeps one (any thread)."""
        events = self.events
        if events is not None:
            events.record(kind, **fields)
        if _otel.ACTIVE:
            _otel.event(kind, fields)

    def shutdown(self) -> None:
        super().shutdown()
        if isinstance(self._events, EventLog):
            self._events.close()  # after the workers stopped: their exits are in it

    # -- the core runtime's hooks ---------------------------------------------------------

    def _heartbeat_answered(self, peer: str) -> None:
        if self._heartbeat is not None:
            self._heartbeat.answered(peer)
        if self.pong_listener is not None:
            self.pong_listener(peer)

    def _owns_processes(self) -> bool:
        return bool(self._children)

    def _child_connection_closed(self, conn: Connection, error: BaseException | None) -> bool:
        child = self._child_conns.get(conn)
        if child is None:
            for listener in list(self.close_listeners):
                listener(conn)
            return False
        if isinstance(child, RemoteProcess):
            child.connection_lost()  # no exit status crosses hosts: this is its death
        elif child.alive():
            # The process is exiting: wait for its exit status so the error can say how
            # it died; if it somehow lives on, fail its calls after a short grace anyway.
            self.loop.call_later(1.0, self._fail_if_still_pending, conn, child)
        return True

    def _fail_if_still_pending(self, conn: Connection, child: ChildProcess) -> None:
        if child.alive():
            self._fail_connection(conn, f"process {child.pid} closed its connection")

    def owned_descriptors(self) -> set[int]:
        """Descriptors the runtime keeps open across meshes beside its connections: the
        sockets of threads' reply routes and the fork server's (for leak checks)."""
        found = self.routes.descriptors()
        forks = self._forks
        if forks is not None and forks.fileno() >= 0:
            found.add(forks.fileno())
        return found

    def _stop_children(self) -> None:
        if self._forks is not None:
            self._forks.close()
        # A leased job's agents and workers outlive this process (see _lease): left alone.
        children = [c for c in self._children.values() if not self.leased(c)]
        if children and not self.in_loop_thread() and self.loop.is_running():
            try:
                self.run_sync(self.stop_processes(children, grace=1.0), timeout=15)
            except Exception:
                log.exception("stopping worker processes failed")
        for child in children:
            child.signal_group(signal.SIGKILL)

    # -- worker processes -----------------------------------------------------------------

    async def start_processes(
        self,
        specs: Sequence[tuple[str, int, dict[str, str]]],
        commands: Sequence[LaunchCommand | None] | None = None,
    ) -> list[ChildProcess]:
        """Start one worker per ``(key, rank, env)`` and wait until each has joined.

        ``commands``: how to start each (``None``: as usual; see ``LaunchCommand``).

        Once this process advertises an interface to other hosts (``advertise``), each
        worker listens there too, on a socket made here and inherited: its dual address
        (Unix socket and TCP) is known before it starts, and stays its own across
        restarts. On failure (a worker dies early, or the spawn timeout passes) every
        process started here is killed before the error propagates.
        """
        children: list[ChildProcess] = []
        progress = Progress(
            self.loop, f"spawning {len(specs)} processes", "joined", len(specs), self.progress_mode
        )
        try:
            forks = await self._fork_server()
            for index, (key, rank, extra_env) in enumerate(specs):
                command = None if commands is None else commands[index]
                children.append(self._launch(key, rank, extra_env, forks=forks, command=command))
            waits = [self._hello[c.listen_path] for c in children]
            for waiter in waits:
                waiter.add_done_callback(lambda _: progress.update(sum(w.done() for w in waits)))
            done, _ = await asyncio.wait(
                waits, timeout=self.config.spawn_timeout, return_when=asyncio.FIRST_EXCEPTION
            )
            for waiter in done:
                waiter.result()  # a worker that died before joining: its error
            if len(done) < len(waits):
                late = [c.rank for c in children if not self._hello[c.listen_path].done()]
                raise TimeoutError(
                    f"worker processes of rank(s) {late} did not join within "
                    f"{self.config.spawn_timeout:g} s (Config.spawn_timeout, "
                    "ACTORMESH_SPAWN_TIMEOUT); the machine may be overloaded"
                )
        except BaseException:
            await self.stop_processes(children, grace=0.0)
            raise
        finally:
            progress.done()
            for child in children:
                hello = self._hello.pop(child.listen_path, None)
                if hello is not None and hello.done() and not hello.cancelled():
                    # Those killed above ended with an error nobody waits for: seen, so
                    # asyncio does not print "Future exception was never retrieved".
                    hello.exception()
        return children

    @property
    def progress_mode(self) -> str:
        """``Config.progress`` in the controller; "never" in workers (whose stderr is no
        one's terminal)."""
        return self.config.progress if self._parent is None else "never"

    async def _fork_server(self) -> ForkServer | None:
        """The fork server new workers come from, started on first use (loop thread);
        None where workers start as fresh interpreters (see ``_forkserver``)."""
        if not self.config.fork_server or self._forks_failures >= 2 or not forks_available():
            return None
        forks = self._forks
        if forks is None or forks.broken is not None or forks.key != template_key(os.environ):
            if forks is not None:
                forks.close()  # made for another environment (or failed)
            forks = self._forks = ForkServer(os.environ)
        if not await forks.ready(self.config.spawn_timeout):
            self._forks_failures += 1
            return None
        return forks

    def _launch(
        self,
        key: str,
        rank: int,
        extra_env: dict[str, str],
        tcp: socket.socket | None = None,
        forks: ForkServer | None = None,
        command: LaunchCommand | None = None,
    ) -> ChildProcess:
        """Start one worker (loop thread); it joins by its HELLO."""
        output = self.config.output
        path = os.path.join(self.socket_dir, f"{key}.sock")
        process_env = {
            **extra_env,
            "ACTORMESH_KEY": key,
            "ACTORMESH_PARENT": self.listen_path,
            "ACTORMESH_PARENT_PID": str(os.getpid()),
            "ACTORMESH_OWNER_SOCKET_DIR": self.socket_dir,
            "ACTORMESH_OUTPUT": output,
            "ACTORMESH_SECRET": self.secret,
        }
        if tcp is None and self.advertise is not None:
            try:
                tcp = listening_socket(self.advertise)
            except OSError as error:
                if error.errno != errno.EADDRNOTAVAIL:
                    raise
                # The interface this process advertised is gone (a network namespace or
                # a VPN torn down): new workers are reached on this host only.
                log.warning("interface %s is gone; workers listen locally", self.advertise)
                self.advertise = None
        if tcp is not None:
            host, port = tcp.getsockname()[:2]
            path = dual_address(path, format_tcp(host, port))
            process_env["ACTORMESH_ADDRESS"] = path
        self._hello[path] = self.loop.create_future()
        child = launch(
            key=key,
            rank=rank,
            listen_path=path,
            env=process_env,
            output=output,
            tcp_socket=tcp,
            forks=forks,
            command=command,
        )
        self._children[path] = child
        if output == "prefix":
            sink = self._output_sink(path)
            forwarders = [
                PipeForwarder(self.loop, child.popen.stdout, "stdout", sink),
                PipeForwarder(self.loop, child.popen.stderr, "stderr", sink),
            ]
            for forwarder in forwarders:
                forwarder.start()
            self._forwarders[path] = forwarders
        child.watch(self.loop, self._child_exited)
        self.record_event("process_start", rank=rank, pid=child.pid, address=path, key=key)
        return child

    @property
    def output_lines(self) -> LineAggregator | None:
        """The controller's merger of identical lines of large meshes (``_aggregate``);
        ``None`` in other processes, or when ``Config.output_aggregate`` is 0."""
        if self._aggregator is None and self._parent is None:
            config = self.config
            if config.output == "prefix" and config.output_aggregate > 0:
                self._aggregator = LineAggregator(
                    self.loop, above=config.output_aggregate, window=config.output_window
                )
        return self._aggregator

    def _output_sink(self, source: str) -> Callable[[str, str | None], None] | None:
        lines = self.output_lines
        if lines is None:
            return None

        def sink(stream: str, text: str | None) -> None:
            if text is None:
                lines.end((source, stream))
            else:
                lines.feed((source, stream), stream, text)

        return sink

    def _handle_hello(self, conn: Connection, header: tuple[Any, ...]) -> None:
        path, pid, key, info = headers.read(headers.Hello, header)
        child = self._children.get(path)
        if conn in self._attaching or (child is None and is_tcp(path)):
            # A process this one did not start dialled in, or one we dialled (a host agent
            # on a Unix socket, say): whoever waits for it adopts it.
            self.joins.offer(Joined(conn, path, pid, key, info))
            return
        with self._conns_lock:
            self._conns[path] = conn
        conn.peer = path
        if child is not None:
            self._child_conns[conn] = child
            self._monitor().track(child)
        waiter = self._hello.get(path)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def adopt(
        self, joined: Joined, rank: int, kill: Callable[[], None] | None = None
    ) -> RemoteProcess:
        """Own a process that joined over TCP, as ``rank`` (loop thread).

        From now on it is one of this runtime's workers: probed by heartbeats, stopped by
        ``stop_processes``, and its death (its connection closing) reported like a local
        worker's exit. ``kill`` is how to end it for sure (see ``RemoteProcess``).
        """
        child = RemoteProcess(joined, rank, kill)
        path = joined.address
        self._children[path] = child
        self._dead_paths.pop(path, None)
        with self._conns_lock:
            self._conns[path] = joined.conn
        joined.conn.peer = path
        self._child_conns[joined.conn] = child
        child.watch(self.loop, self._child_exited)
        if child.alive():
            self._monitor().track(child)
        return child

    # -- host agents ------------------------------------------------------------------------

    def adopt_agent(self, joined: Joined, kill: Callable[[], None] | None = None) -> AgentLink:
        """Own a host agent that joined (loop thread); its heartbeats are watched."""
        process = self.adopt(joined, rank=-1, kill=kill)
        link = AgentLink(self, process, dict(joined.info))
        self.agents[joined.conn] = link
        return link

    async def start_agents(self, count: int) -> list[AgentLink]:
        """Start ``count`` host agents on this host and own them (loop thread).

        Each is a child of this process that joins it over loopback TCP, as an agent on
        another host would, and then starts, watches and relays to its own workers; it
        dies with this process. On failure every agent started here is killed.
        """
        address = self.listen_tcp("127.0.0.1")
        keys = [f"agent-{os.getpid()}-{next(self._agent_ids)}" for _ in range(count)]
        waiting = JoinWait(self, count, accept=lambda joined: joined.key in keys)
        started = []
        try:
            for key in keys:
                started.append(launch_agent(key, address, self.secret))
            joined = await waiting.wait(self.config.spawn_timeout, f"at {address}")
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
        forms of address and handshakes of Monarch's worker loops (``_agent.dial_agent``).
        """
        connect = dial or (lambda: connect_address(address, secret=self.secret))
        sock = await asyncio.to_thread(connect)
        conn = self._new_connection(sock, peer=address, same_host=False)
        self._attaching.add(conn)
        hello: asyncio.Future[Joined] = self.loop.create_future()

        def take(joined: Joined) -> bool:
            if joined.conn is not conn or hello.done():
                return False
            hello.set_result(joined)
            return True

        stop = self.joins.wait(take)
        conn.start()
        try:
            joined = await asyncio.wait_for(hello, self.config.spawn_timeout)
        except BaseException:
            conn.close()
            raise
        finally:
            stop()
            self._attaching.discard(conn)
        return self.adopt_agent(joined)

    async def start_relayed(
        self, link: AgentLink, specs: Sequence[WorkerSpec]
    ) -> list[RelayedProcess]:
        """Have ``link``'s agent start one worker per spec; they are ours from then on."""
        processes = await link.spawn(specs)
        for process in processes:
            self._own_relayed(process)
        return processes

    def _own_relayed(self, process: RelayedProcess) -> None:
        path = process.listen_path
        self._children[path] = process
        self._dead_paths.pop(path, None)
        with self._conns_lock:
            self._conns[path] = process.link.relay(path)
        # Its agent watches it (pidfd, heartbeats) and tells us when it ends.
        process.watch(self.loop, self._child_exited)

    def _on_agent_event(
        self, conn: Connection, header: tuple[Any, ...], parts: list[memoryview]
    ) -> None:
        link = self.agents.get(conn)
        if link is None:
            raise ValueError(f"an EVENT from {conn.peer}, which is no host agent of ours")
        what, address = headers.read(headers.Event, header)
        if what == "agent_silent" and link.tree is not None:
            # A parent agent's heartbeats found its child silent (_child_watch).
            silent = link.tree.link_at(address)
            if silent is not None and silent.process.alive():
                self._declare_dead(silent.process, str(loads(parts[1])["note"]))
            return
        link.on_event(what, address, loads(parts[1]))

    def send_frames(
        self,
        frames: Sequence[tuple[Connection, tuple[int, ...], tuple[Any, ...], list[Any]]],
        gather: int = 0,
        combine: bytes | None = None,
    ) -> list[tuple[tuple[int, ...], str]]:
        """Send ``(conn, ranks, header, parts)`` frames; the ``(ranks, why)`` that failed.

        Frames for several workers behind one host agent that share their parts leave as
        one ``CAST`` to that agent (one frame per host, not per process); a nonzero
        ``gather`` (the request's id) has each agent send its workers' replies as one, and
        a ``combine`` (a reducing call's function, pickled) has it fold their values.
        """
        failed: list[tuple[tuple[int, ...], str]] = []
        by_agent: dict[tuple[int, int], list[tuple[RelayConnection, tuple[int, ...], Any]]] = {}
        parts_of: dict[tuple[int, int], list[Any]] = {}
        # Frames to several processes of this host with the same parts copy their large
        # parts into shared memory once, for all of them.
        direct = []
        for conn, ranks, header, parts in frames:
            if isinstance(conn, RelayConnection) and not conn.closed:
                key = (id(conn.link), id(parts))
                by_agent.setdefault(key, []).append((conn, ranks, header))
                parts_of[key] = parts
            else:
                direct.append((conn, ranks, header, parts))
        if gather and self.bulk.routes:  # workers of agents another process owns (_bulk)
            direct = self.bulk.cast_routed(direct, gather, combine, failed)
        shares: dict[int, SegmentShare] = {}
        if len(direct) > 1:
            readers = collections.Counter(id(parts) for _, _, _, parts in direct)
            shares = {key: SegmentShare() for key, count in readers.items() if count > 1}
        for conn, ranks, header, parts in direct:
            try:
                self.send(conn, header, parts, shares.get(id(parts)))
            except ActorDiedError as error:
                failed.append((ranks, error.reason or str(error)))
        trees: dict[tuple[int, int], tuple[CastTree, list[Any], list[Any]]] = {}
        level = []
        for key, group in by_agent.items():
            parts = parts_of[key]
            tree = group[0][0].link.tree
            if tree is None:
                level.append((group, parts))
            else:
                trees.setdefault((id(tree), id(parts)), (tree, parts, []))[2].extend(group)
        # Large parts for several agents of one level go down a chain of them (_bulk). In
        # a tree they go down with the cast, one copy per child link: bulk frames sent to
        # each agent straight could overtake the casts the tree brings it.
        if len(level) > 1:
            level = self.bulk.cast(level, gather, combine, failed)
        for group, parts in level:
            first = group[0][0]
            try:
                if len(group) == 1:
                    self.send(first, group[0][2], parts)
                else:
                    targets = [(c.peer, r, headers.encode(h)) for c, r, h in group]
                    first.link.cast(gather, targets, parts, combine)
            except (ActorDiedError, TransportClosed) as error:
                failed.extend((r, str(error)) for _, r, _ in group)
        for tree, parts, members in trees.values():
            failed.extend(self._tree_cast(tree, members, parts, gather, combine))
        return failed

    def _tree_cast(
        self,
        tree: CastTree,
        group: list[tuple[RelayConnection, tuple[int, ...], Any]],
        parts: list[Any],
        gather: int,
        combine: bytes | None,
    ) -> list[tuple[tuple[int, ...], str]]:
        """Send one cast into a tree of agents: one ``TREE_CAST`` per child of this
        process whose subtree it touches (``_cast_tree``); the ``(ranks, why)`` that
        failed."""
        targets: dict[int, list[headers.CastTarget]] = {}
        for conn, ranks, header in group:
            position = tree.position(conn.link)
            targets.setdefault(position, []).append((conn.peer, ranks, headers.encode(header)))
        failed: list[tuple[tuple[int, ...], str]] = []
        for top, own, below in tree.branches(targets):
            header = headers.encode(headers.TreeCast(gather, own, combine, below))
            try:
                top.conn.send([header, *parts])
            except TransportClosed as error:
                failed.append((tuple(branch_ranks(own, below)), str(error)))
        return failed

    async def form_tree(self, links: Sequence[AgentLink], k: int) -> CastTree | None:
        """Make ``links`` (a host mesh's agents, in its order) a tree of fan-out ``k``
        when there are more than ``k`` (``_cast_tree``); None: one level is enough."""
        if len(links) <= k:
            return None
        addresses = await asyncio.gather(*(link.listen_for_peers() for link in links))
        tree = CastTree(links, k, addresses)
        self._watch_tree(tree)
        return tree

    def _watch_tree(self, tree: CastTree, adopted: Sequence[AgentLink] = ()) -> None:
        """Probe only the agents that hang under this process in ``tree`` (``adopted``:
        agents that may have come up to it, not probed by it yet); have each interior
        agent probe its own children (``_child_watch``)."""
        config = self.config
        for link, children in tree.watchers():
            if link is not None:
                addresses = [tree.address(child) for child in children]
                link.watch(addresses, config.heartbeat_interval, config.heartbeat_timeout)
        monitor = self._monitor()
        for link in tree.links:
            if not tree.on_top(link) and not link.leased:
                monitor.untrack(link.process)
            elif any(link is other for other in adopted) and link.process.alive():
                monitor.track(link.process)

    def probe_directly(self, link: AgentLink) -> None:
        """Probe ``link``'s agent with this process' own heartbeats, whatever tree it is in
        (a leased agent's: see ``AgentLink.hold``)."""
        if link.process.alive():
            self._monitor().track(link.process)

    def _tree_agent_lost(self, link: AgentLink, how: str) -> None:
        """An agent of a tree died (loop thread): calls under way to the hosts below it
        fail, naming it (their frames and replies went through it), and the agents above
        it hang up on it (a cut link would leave them waiting)."""
        assert link.tree is not None
        below, above = link.tree.lost(link)
        reason = f"the host agent on {link.where}, which relays to this host, is gone: {how}"
        for other in below:
            for path in list(other.workers):
                conn = self._conns.get(path)
                if conn is not None:
                    self._fail_connection(conn, reason)
        address = link.tree.address(link)
        for other in above:
            other.forget_peer(address)
        self._watch_tree(link.tree, below)  # its children have another parent now

    def _monitor(self) -> HeartbeatMonitor:
        if self._heartbeat is None:
            self._heartbeat = HeartbeatMonitor(
                self.loop,
                interval=self.config.heartbeat_interval,
                timeout=self.config.heartbeat_timeout,
                probe=self._probe,
                declare_dead=self._declare_dead,
            )
        return self._heartbeat

    def _probe(self, child: ChildProcess, seq: int) -> bool:
        conn = self._conns.get(child.listen_path)
        if conn is None or conn.closed:
            return False
        try:
            conn.send([headers.encode(headers.Ping(seq))])
        except TransportClosed:
            return False
        return True

    def _declare_dead(self, child: ChildProcess, note: str) -> None:
        # Killing it turns silence into an ordinary death: the pidfd fires and
        # _child_exited reports it once, with this note as the cause.
        log.warning("worker %s (rank %s) %s", child.pid, child.rank, note)
        child.death_note = note
        child.signal_group(signal.SIGKILL)

    def _child_exited(self, child: ChildProcess) -> None:
        path = child.listen_path
        # The pidfd may fire before the loop read the worker's last frames (an actor's
        # answer to its spawn, then a call that killed the process): hear them first.
        for conn in (self._conns.get(path), *self._owned_conns(child)):
            if conn is not None:
                conn.read_remaining()
        if not child.stopping and self.relaunch_policy is not None and self.relaunch_policy(child):
            self._deferrals.begin(path)
        how = child.death_note or describe_exit(child.returncode)
        reason = f"process {child.pid} (rank {child.rank}) {how}"
        if child.restart_note:
            reason += f"; {child.restart_note}"
        code = child.returncode
        self.record_event(
            "process_exit",
            rank=child.rank,
            pid=child.pid,
            address=path,
            exit_code=code if code is not None and code >= 0 else None,
            signal=-code if code is not None and code < 0 else None,
            message=reason,
            asked=child.stopping,
        )
        if isinstance(child, RemoteProcess):
            link = self.agents.pop(child.conn, None)
            if link is not None:  # a host agent: its workers went with it
                link.lost(how)
                if link.tree is not None:
                    self._tree_agent_lost(link, how)
        if self._heartbeat is not None:
            self._heartbeat.untrack(child)
        self._dead_paths[path] = reason
        for forwarder in self._forwarders.pop(path, []):
            forwarder.drain()
        waiter = self._hello.get(path)
        if waiter is not None and not waiter.done():
            waiter.set_exception(
                ActorDiedError(f"worker {reason} before joining its mesh", reason=reason)
            )
        conn = self._conns.get(path)
        for known in self._owned_conns(child):
            conn = known
            del self._child_conns[known]
        # The owner's listeners (supervision, restarts) hear of the death before any
        # waiting call does: a caller woken by its ActorDiedError finds the mesh already
        # knowing which ranks are dead, whatever it does next (no race decides it).
        if not child.stopping:  # when the owner asked for this exit, nothing to report
            for listener in list(self.exit_listeners):
                try:
                    listener(child, reason)
                except Exception:
                    log.exception("a process-exit listener failed")
        if conn is not None:
            self._fail_connection(conn, reason)
            conn.close()
        # Whatever the worker started dies with it: no orphans. Its process group covers
        # what its actors started. A worker that exited cleanly killed its descendants
        # itself; after a crash, the environment tag finds the ones that left the group.
        child.signal_group(signal.SIGKILL)
        if child.returncode != 0 and child.local:
            kill_tagged("ACTORMESH_KEY", child.key)
        if not self._deferrals.active(path) and not self.owner_decides_restarts:
            child.release_address()  # no successor will listen there

    def leased(self, child: ChildProcess) -> bool:
        """True for a host agent holding a lease, and for the workers it started: they
        outlive this owner."""
        link = child.link if isinstance(child, RelayedProcess) else None
        if isinstance(child, RemoteProcess):
            link = self.agents.get(child.conn)
        return link is not None and link.leased

    def _owned_conns(self, child: ChildProcess) -> list[Connection]:
        """The connections ``child`` made to us (its HELLO)."""
        return [known for known, owned in self._child_conns.items() if owned is child]

    def debugging(self, address: str, stopped: bool) -> None:
        """A worker of ours at ``address`` stopped at a breakpoint, or went on (loop thread):
        while stopped, missing heartbeats does not make it dead."""
        if self._heartbeat is not None and address in self._children:
            self._heartbeat.hold(address, stopped)

    def relaunching(self, path: str) -> bool:
        """True while the process at ``path`` is being restarted (any thread)."""
        return self._deferrals.active(path)

    def when_back(self, path: str, resume: Resume) -> bool:
        """Run ``resume`` (loop thread) once ``path`` is restarted or its restart failed.

        Returns False, holding nothing, when no restart of ``path`` is under way.
        """
        return self._deferrals.defer(path, resume)

    async def relaunch(self, child: ChildProcess) -> ChildProcess:
        """Start a process in the place of the dead ``child``: same rank, same socket path.

        Keeping the path keeps every mesh reference to it valid; callers that had a
        connection to the old process find the new one on their next connect.
        """
        if isinstance(child, RelayedProcess):  # on another host: its agent starts it
            relayed = await child.link.relaunch(child)
            self._own_relayed(relayed)
            return relayed
        unix = unix_part(child.listen_path)
        if not is_abstract(unix):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(unix)  # the dead process could not remove its socket
        env = {**child.env, "ACTORMESH_RESTARTS": str(child.restarts + 1)}
        # The same TCP socket too: the new process answers at the old address.
        new = self._launch(
            child.key,
            child.rank,
            env,
            child.tcp_socket,
            await self._fork_server(),
            child.command,
        )
        try:
            waiter = self._hello[new.listen_path]
            await asyncio.wait_for(waiter, self.config.spawn_timeout)
        except BaseException:
            await self.stop_processes([new], grace=0.0)
            raise
        finally:
            self._hello.pop(new.listen_path, None)
        new.restarts = child.restarts + 1
        return new

    def end_relaunch(self, path: str, error: BaseException | None) -> None:
        """The restart of ``path`` is over (loop thread): release or fail the held sends."""
        if error is None:
            self._dead_paths.pop(path, None)
        self._deferrals.end(path, error)

    async def stop_processes(self, children: Sequence[ChildProcess], grace: float) -> None:
        """Ask workers to exit, then SIGTERM, then SIGKILL their process groups."""
        for child in children:
            child.stopping = True
            if self._heartbeat is not None:
                self._heartbeat.untrack(child)
        for child in children:
            conn = self._conns.get(child.listen_path)
            if conn is not None and child.alive():
                with contextlib.suppress(TransportClosed):
                    conn.send([headers.encode(headers.Shutdown())])
        progress = Progress(
            self.loop, f"stopping {len(children)} processes", "exited", len(children),
            self.progress_mode,
        )  # fmt: skip
        for sig, wait in ((None, grace), (signal.SIGTERM, 1.0), (signal.SIGKILL, 5.0)):
            alive = [c for c in children if c.alive()]
            if not alive:
                break
            if sig is not None:
                for child in alive:
                    child.signal_group(sig)
            deadline = self.loop.time() + wait
            while any(c.alive() for c in alive) and self.loop.time() < deadline:
                progress.update(sum(not c.alive() for c in children))
                await asyncio.sleep(0.01)
        progress.update(sum(not c.alive() for c in children))
        progress.done()
        for child in children:
            child.signal_group(signal.SIGKILL)
            self._children.pop(child.listen_path, None)
            child.release_address()
            for forwarder in self._forwarders.pop(child.listen_path, []):
                forwarder.drain()
        if self._aggregator is not None:
            self._aggregator.flush()  # what the stopped processes said comes before "stopped"

    def let_go(self, children: Sequence[ChildProcess]) -> None:
        """Stop owning ``children`` without ending them (a controller detaching from a
        leased job: they run on, and another owner may take them)."""
        for child in children:
            child.stopping = True
            if self._heartbeat is not None:
                self._heartbeat.untrack(child)
            self._children.pop(child.listen_path, None)

    def children(self) -> list[ChildProcess]:
        """Worker processes started by this runtime that have not been stopped."""
        return list(self._children.values())
