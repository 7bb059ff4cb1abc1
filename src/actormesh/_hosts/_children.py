"""``Children``: the processes a runtime owns, as a part of their own.

It starts worker processes (through the fork server, ``_forkserver``), or adopts
processes that join over TCP, and watches them: workers say HELLO when connected; their
deaths are seen through pidfds (local) or connection loss (remote), reported to pending
calls and to ``exit_listeners``; a heartbeat monitor finds workers that are alive but
frozen; a dead worker may be relaunched in place. It is the core runtime's
``ProcessOwner`` (``_core``): the core asks it about HELLOs, heartbeat answers, lost
connections and shutdown, and it gets from the runtime only what ``Below`` names.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import socket
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol, TypeVar

from .._config import Config
from .._core import Deferrals, Resume, headers
from .._exceptions import ActorDiedError
from .._transport import (
    Connection,
    TransportClosed,
    dual_address,
    format_tcp,
    is_abstract,
    is_tcp,
    listening_socket,
    unix_part,
)
from ._agent_link import RelayedProcess
from ._aggregate import LineAggregator
from ._forkserver import ForkServer, template_key
from ._forkserver import available as forks_available
from ._heartbeat import HeartbeatMonitor
from ._output import PipeForwarder
from ._process import ChildProcess, LaunchCommand, describe_exit, launch
from ._progress import Progress
from ._reaper import kill_tagged
from ._remote import Joined, Joins, RemoteProcess

__all__ = ["AgentOwner", "Below", "Children"]

log = logging.getLogger("actormesh.runtime")
T = TypeVar("T")


class Below(Protocol):
    """What ``Children`` needs of the runtime it is part of (``_hosts.Runtime``)."""

    loop: asyncio.AbstractEventLoop
    config: Config
    socket_dir: str
    listen_path: str
    secret: str
    advertise: str | None

    @property
    def progress_mode(self) -> str: ...

    @property
    def output_lines(self) -> LineAggregator | None: ...

    def connection_at(self, path: str) -> Connection | None: ...

    def name_connection(self, path: str, conn: Connection) -> None: ...

    def mark_dead(self, path: str, reason: str) -> None: ...

    def revive(self, path: str) -> None: ...

    def fail_connection(
        self, conn: Connection, reason: str, routed_before: int | None = None
    ) -> None: ...

    def record_event(self, kind: str, **fields: Any) -> None: ...

    def flush_output(self) -> None: ...

    def in_loop_thread(self) -> bool: ...

    def run_sync(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T: ...


class AgentOwner(Protocol):
    """What ``Children`` asks of the part that owns host agents (``_agents.Agents``)."""

    def leased(self, child: ChildProcess) -> bool:
        """True when ``child`` outlives this owner (a leased agent, or its worker)."""
        ...

    def agent_exited(self, process: RemoteProcess, how: str) -> None:
        """``process`` died (loop thread); if it was a host agent, its workers went too."""
        ...

    async def stop_relayed(self, workers: Sequence[ChildProcess], grace: float) -> None:
        """Stop ``workers`` through their agents, if they are all of one tree's agents
        or of one level's; those still alive after it are stopped one by one."""
        ...


class _NoAgents:
    def leased(self, child: ChildProcess) -> bool:
        return False

    def agent_exited(self, process: RemoteProcess, how: str) -> None:
        pass

    async def stop_relayed(self, workers: Sequence[ChildProcess], grace: float) -> None:
        pass


class Children:
    """The processes one runtime started or adopted (see the module docstring)."""

    def __init__(self, runtime: Below) -> None:
        self.runtime = runtime
        self.loop = runtime.loop
        # The processes owned, by the address they listen at.
        self.processes: dict[str, ChildProcess] = {}
        self._child_conns: dict[Connection, ChildProcess] = {}
        # The same, the other way: each child's connections, by id(child) (a death looks
        # them up; a scan of every child's would make a mesh's stop quadratic).
        self._conns_of: dict[int, list[Connection]] = {}
        self._forwarders: dict[str, list[PipeForwarder]] = {}
        self._hello: dict[str, asyncio.Future[None]] = {}
        self.heartbeat: HeartbeatMonitor | None = None
        self.exit_listeners: list[Callable[[ChildProcess, str], None]] = []
        # Asked first when a worker dies: True when it will be restarted at the same path
        # (then calls to it wait for the new process, see relaunching / when_back).
        self.relaunch_policy: Callable[[ChildProcess], bool] | None = None
        self._deferrals = Deferrals()
        self.joins = Joins()  # who waits for processes that dial in over TCP
        self.attaching: set[Connection] = set()  # agents dialled, not joined yet
        # A host agent relaunches a worker when its owner asks, maybe after the worker
        # died: it keeps a dead worker's TCP socket until the owner says (see release).
        self.owner_decides_restarts = False
        # The part that owns host agents (set by the runtime that has one).
        self.agents: AgentOwner = _NoAgents()
        # Where local workers are forked from (see _forkserver), once a spawn needs one.
        self.forks: ForkServer | None = None
        self._forks_failures = 0
        # Told of every connection that closes and is no worker's (a host agent hears
        # of its peers in a tree of agents this way, see _peers).
        self.close_listeners: list[Callable[[Connection], None]] = []
        # Told of every PONG by the peer's address (an agent's heartbeats to its child
        # agents, see _child_watch).
        self.pong_listener: Callable[[str], None] | None = None

    # -- what the core runtime asks (ProcessOwner) ----------------------------------------

    def hello(self, conn: Connection, header: tuple[Any, ...]) -> None:
        """A process said HELLO: one we started joins, or one that dialled is offered."""
        path, pid, key, info = headers.read(headers.Hello, header)
        child = self.processes.get(path)
        if conn in self.attaching or (child is None and is_tcp(path)):
            # A process this one did not start dialled in, or one we dialled (a host agent
            # on a Unix socket, say): whoever waits for it adopts it.
            self.joins.offer(Joined(conn, path, pid, key, info))
            return
        self.runtime.name_connection(path, conn)
        conn.peer = path
        if child is not None:
            self._own_conn(conn, child)
            self.monitor().track(child)
        waiter = self._hello.get(path)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def answered(self, peer: str) -> None:
        """The process at ``peer`` answered a heartbeat."""
        if self.heartbeat is not None:
            self.heartbeat.answered(peer)
        if self.pong_listener is not None:
            self.pong_listener(peer)

    def owns_processes(self) -> bool:
        """True while any process is owned here."""
        return bool(self.processes)

    def connection_closed(self, conn: Connection, error: BaseException | None) -> bool:
        """True when ``conn`` was a worker's: its exit (or death) is handled here."""
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
            self.runtime.fail_connection(conn, f"process {child.pid} closed its connection")

    def stop_all(self) -> None:
        """Stop every process owned here but the leased ones (at shutdown, off the loop)."""
        if self.forks is not None:
            self.forks.close()
        # A leased job's agents and workers outlive this process (see _lease): left alone.
        children = [c for c in self.processes.values() if not self.agents.leased(c)]
        if children and not self.runtime.in_loop_thread() and self.loop.is_running():
            try:
                self.runtime.run_sync(self.stop_processes(children, grace=1.0), timeout=15)
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
            self.loop,
            f"spawning {len(specs)} processes",
            "joined",
            len(specs),
            self.runtime.progress_mode,
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
                waits,
                timeout=self.runtime.config.spawn_timeout,
                return_when=asyncio.FIRST_EXCEPTION,
            )
            for waiter in done:
                waiter.result()  # a worker that died before joining: its error
            if len(done) < len(waits):
                late = [c.rank for c in children if not self._hello[c.listen_path].done()]
                raise TimeoutError(
                    f"worker processes of rank(s) {late} did not join within "
                    f"{self.runtime.config.spawn_timeout:g} s (Config.spawn_timeout, "
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

    async def _fork_server(self) -> ForkServer | None:
        """The fork server new workers come from, started on first use (loop thread);
        None where workers start as fresh interpreters (see ``_forkserver``)."""
        if (
            not self.runtime.config.fork_server
            or self._forks_failures >= 2
            or not forks_available()
        ):
            return None
        forks = self.forks
        if forks is None or forks.broken is not None or forks.key != template_key(os.environ):
            if forks is not None:
                forks.close()  # made for another environment (or failed)
            forks = self.forks = ForkServer(os.environ)
        if not await forks.ready(self.runtime.config.spawn_timeout):
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
        output = self.runtime.config.output
        path = os.path.join(self.runtime.socket_dir, f"{key}.sock")
        process_env = {
            **extra_env,
            "ACTORMESH_KEY": key,
            "ACTORMESH_PARENT": self.runtime.listen_path,
            "ACTORMESH_PARENT_PID": str(os.getpid()),
            "ACTORMESH_OWNER_SOCKET_DIR": self.runtime.socket_dir,
            "ACTORMESH_OUTPUT": output,
            "ACTORMESH_SECRET": self.runtime.secret,
        }
        if tcp is None and self.runtime.advertise is not None:
            try:
                tcp = listening_socket(self.runtime.advertise)
            except OSError as error:
                if error.errno != errno.EADDRNOTAVAIL:
                    raise
                # The interface this process advertised is gone (a network namespace or
                # a VPN torn down): new workers are reached on this host only.
                log.warning("interface %s is gone; workers listen locally", self.runtime.advertise)
                self.runtime.advertise = None
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
        self.processes[path] = child
        if output == "prefix":
            sink = self._output_sink(path)
            forwarders = [
                PipeForwarder(self.loop, child.popen.stdout, "stdout", sink),
                PipeForwarder(self.loop, child.popen.stderr, "stderr", sink),
            ]
            for forwarder in forwarders:
                forwarder.start()
            self._forwarders[path] = forwarders
        child.watch(self.loop, self.child_exited)
        self.runtime.record_event("process_start", rank=rank, pid=child.pid, address=path, key=key)
        return child

    def _output_sink(self, source: str) -> Callable[[str, str | None], None] | None:
        lines = self.runtime.output_lines
        if lines is None:
            return None

        def sink(stream: str, text: str | None) -> None:
            if text is None:
                lines.end((source, stream))
            else:
                lines.feed((source, stream), stream, text)

        return sink

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
        self.processes[path] = child
        self.runtime.revive(path)
        self.runtime.name_connection(path, joined.conn)
        joined.conn.peer = path
        self._own_conn(joined.conn, child)
        child.watch(self.loop, self.child_exited)
        if child.alive():
            self.monitor().track(child)
        return child

    def own_relayed(self, process: RelayedProcess) -> None:
        """Own ``process``, a worker an agent started for us (loop thread): reached
        through the agent, which tells us when it ends."""
        path = process.listen_path
        self.processes[path] = process
        self.runtime.revive(path)
        self.runtime.name_connection(path, process.link.relay(path))
        # Its agent watches it (pidfd, heartbeats) and tells us when it ends.
        process.watch(self.loop, self.child_exited)

    def monitor(self) -> HeartbeatMonitor:
        """The heartbeat monitor of the processes owned here, made on first use."""
        if self.heartbeat is None:
            self.heartbeat = HeartbeatMonitor(
                self.loop,
                interval=self.runtime.config.heartbeat_interval,
                timeout=self.runtime.config.heartbeat_timeout,
                probe=self._probe,
                declare_dead=self.declare_dead,
            )
        return self.heartbeat

    def _probe(self, child: ChildProcess, seq: int) -> bool:
        conn = self.runtime.connection_at(child.listen_path)
        if conn is None or conn.closed:
            return False
        try:
            conn.send([headers.encode(headers.Ping(seq))])
        except TransportClosed:
            return False
        return True

    def declare_dead(self, child: ChildProcess, note: str) -> None:
        """``child`` stopped answering: it is killed, with ``note`` as the cause."""
        # Killing it turns silence into an ordinary death: the pidfd fires and
        # child_exited reports it once, with this note as the cause.
        log.warning("worker %s (rank %s) %s", child.pid, child.rank, note)
        child.death_note = note
        child.signal_group(signal.SIGKILL)

    def child_exited(self, child: ChildProcess) -> None:
        """``child`` is gone (loop thread): what it sent is read first, its exit listeners
        hear of it before the calls waiting on it fail, and what it started is killed."""
        path = child.listen_path
        # The pidfd may fire before the loop read the worker's last frames (an actor's
        # answer to its spawn, then a call that killed the process): hear them first.
        for conn in (self.runtime.connection_at(path), *self._conns_of.get(id(child), ())):
            if conn is not None:
                conn.read_remaining()
        if not child.stopping and self.relaunch_policy is not None and self.relaunch_policy(child):
            self._deferrals.begin(path)
        how = child.death_note or describe_exit(child.returncode)
        reason = f"process {child.pid} (rank {child.rank}) {how}"
        if child.restart_note:
            reason += f"; {child.restart_note}"
        code = child.returncode
        self.runtime.record_event(
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
            self.agents.agent_exited(child, how)
        if self.heartbeat is not None:
            self.heartbeat.untrack(child)
        self.runtime.mark_dead(path, reason)
        for forwarder in self._forwarders.pop(path, []):
            forwarder.drain()
        waiter = self._hello.get(path)
        if waiter is not None and not waiter.done():
            waiter.set_exception(
                ActorDiedError(f"worker {reason} before joining its mesh", reason=reason)
            )
        conn = self.runtime.connection_at(path)
        for known in self._conns_of.pop(id(child), ()):
            if self._child_conns.get(known) is child:
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
            self.runtime.fail_connection(conn, reason)
            conn.close()
        # Whatever the worker started dies with it: no orphans. Its process group covers
        # what its actors started. A worker that exited cleanly killed its descendants
        # itself; after a crash, the environment tag finds the ones that left the group.
        child.signal_group(signal.SIGKILL)
        if child.returncode != 0 and child.local:
            kill_tagged("ACTORMESH_KEY", child.key)
        if not self._deferrals.active(path) and not self.owner_decides_restarts:
            child.release_address()  # no successor will listen there

    def reconnect(self, child: RemoteProcess, conn: Connection) -> None:
        """``child`` is reached on ``conn`` from now on, instead of its old connection
        (a host agent adopted by the agent above it, or by this process again): the old
        one's closing is no death of it (loop thread)."""
        old = child.conn
        if self._child_conns.get(old) is child:
            del self._child_conns[old]
        known = self._conns_of.get(id(child), [])
        if old in known:
            known.remove(old)
        child.conn = conn
        self.runtime.name_connection(child.listen_path, conn)
        self._own_conn(conn, child)

    def _own_conn(self, conn: Connection, child: ChildProcess) -> None:
        """``conn`` is ``child``'s connection to us (its HELLO)."""
        self._child_conns[conn] = child
        self._conns_of.setdefault(id(child), []).append(conn)

    def debugging(self, address: str, stopped: bool) -> None:
        """A worker of ours at ``address`` stopped at a breakpoint, or went on (loop thread):
        while stopped, missing heartbeats does not make it dead."""
        if self.heartbeat is not None and address in self.processes:
            self.heartbeat.hold(address, stopped)

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
            self.own_relayed(relayed)
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
            await asyncio.wait_for(waiter, self.runtime.config.spawn_timeout)
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
            self.runtime.revive(path)
        self._deferrals.end(path, error)

    async def stop_processes(self, children: Sequence[ChildProcess], grace: float) -> None:
        """Ask workers to exit, then SIGTERM, then SIGKILL their process groups."""
        for child in children:
            child.stopping = True
            if self.heartbeat is not None:
                self.heartbeat.untrack(child)
        # Workers of host agents are stopped by their agents: one request per child of
        # this process in a tree, per agent in one level (``_subtree``); what is left
        # alive, one by one.
        alive = [child for child in children if child.alive()]
        if alive:
            await self.agents.stop_relayed(alive, grace)
        for child in children:
            conn = self.runtime.connection_at(child.listen_path)
            if conn is not None and child.alive():
                with contextlib.suppress(TransportClosed):
                    conn.send([headers.encode(headers.Shutdown())])
        progress = Progress(
            self.loop, f"stopping {len(children)} processes", "exited", len(children),
            self.runtime.progress_mode,
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
            self.processes.pop(child.listen_path, None)
            child.release_address()
            for forwarder in self._forwarders.pop(child.listen_path, []):
                forwarder.drain()
        self.runtime.flush_output()  # what the stopped processes said comes before "stopped"

    def let_go(self, children: Sequence[ChildProcess]) -> None:
        """Stop owning ``children`` without ending them (a controller detaching from a
        leased job: they run on, and another owner may take them)."""
        for child in children:
            child.stopping = True
            if self.heartbeat is not None:
                self.heartbeat.untrack(child)
            self.processes.pop(child.listen_path, None)

    def owned(self) -> list[ChildProcess]:
        """Worker processes started by this runtime that have not been stopped."""
        return list(self.processes.values())
