"""Simulated hosts for ``bench.simulate``: the real host agent over in-memory links, with
workers that cost almost nothing.

Each simulated host is one real ``Agent`` (``actormesh._hosts``) on a ``Runtime`` of its
own, joined to the real controller runtime by a ``MemoryLink`` (``actormesh._transport``)
instead of a TCP connection. Thousands of them share one event loop on one thread of
the controller's process. What is not real:

- the agent's runtime (``SimAgentRuntime``) starts no processes: ``start_processes``
  makes ``SimWorker`` objects, and nothing else of the agent's code is replaced;
- a ``SimWorker`` stands where the agent's Unix-socket connection to a worker would be.
  It answers what a worker's hosting code answers (one ``REPLY`` per rank for ``SPAWN``
  and ``CALL``, one for ``STOP_MESH``, an exit for ``SHUTDOWN``) on the agent's loop, at
  once, without unpickling the call's arguments. Its value is the rank, so a gather
  proves every reply reached the right place;
- the link copies each frame as a socket would, but there is no kernel, no network and
  no second core: wall times are this process' Python work, not a cluster's.

A ``Tally`` on the controller's ends of the links counts the frames and bytes (with the
frame header a socket would carry) the controller sends and receives, by kind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sys
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from actormesh import ActorDiedError, Config
from actormesh._core import dumps, headers
from actormesh._hosts import Agent, AgentLink, ChildProcess, JoinWait, Runtime, Status, is_agent
from actormesh._transport import MemoryLink, TransportClosed

__all__ = [
    "Dialing",
    "LoopThread",
    "SimAgentRuntime",
    "SimControllerRuntime",
    "SimHost",
    "SimWorker",
    "SimulatedHosts",
    "Tally",
]

log = logging.getLogger("bench.simulate")

_FAKE_PID = 4_000_000  # pids no process here has (the kernel's limit is 4,194,304)
_SPAWNED = dumps(None)[0]  # what a worker answers when an actor's __init__ ends
_BY_REFERENCE = 64 * 1024  # parts this large cross a simulated link uncopied


class LoopThread:
    """An event loop run by a daemon thread of its own (the simulated agents')."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()
        while self.thread.ident is None:  # (set by start(); never long)
            pass
        self.ident: int = self.thread.ident

    def run(self, coro: Any, timeout: float | None = None) -> Any:
        """Run ``coro`` on this loop from another thread; its value."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class Tally:
    """Frames and bytes through the controller's ends of the links, by header kind,
    while ``on`` (the header is decoded only then, so it costs nothing otherwise)."""

    def __init__(self) -> None:
        self.on = False
        self.sent: Counter[str] = Counter()
        self.sent_bytes: Counter[str] = Counter()
        self.received: Counter[str] = Counter()
        self.received_bytes: Counter[str] = Counter()
        self._lock = threading.Lock()

    def reset(self) -> None:
        with self._lock:
            for counter in (self.sent, self.sent_bytes, self.received, self.received_bytes):
                counter.clear()

    def count(self, outgoing: bool, parts: Sequence[Any]) -> None:
        kind = headers.KINDS[headers.decode(parts[0])[0]].__name__.upper()
        # <u32 nparts><u64 body> + one u64 per part + the parts: what a socket carries.
        size = 12 + 8 * len(parts) + sum(memoryview(p).nbytes for p in parts)
        with self._lock:
            if outgoing:
                self.sent[kind] += 1
                self.sent_bytes[kind] += size
            else:
                self.received[kind] += 1
                self.received_bytes[kind] += size


class CountedLink(MemoryLink):
    """A ``MemoryLink`` end that stands where a controller's ``Connection`` to an agent
    would: the two methods the owner's code asks of a connection beside ``Link``'s, and
    the tally."""

    tally: Tally | None = None

    def send(self, parts: Sequence[Any], share: Any = None) -> None:
        tally = self.tally
        if tally is not None and tally.on:
            tally.count(True, parts)
        if all(memoryview(part).nbytes < _BY_REFERENCE for part in parts):
            super().send(parts, share)
            return
        # A large part (a spawn's spec names every process of the mesh) is handed over
        # as it is, not copied: the simulated workers never read it, and copying it
        # once per process would make the simulation measure memcpy. Its bytes are
        # still counted as a socket would carry them.
        other = self._other
        if self._closed or other is None:
            raise TransportClosed(f"the link to {self.peer or 'its peer'} is closed")
        views = [
            memoryview(part).cast("B")
            if memoryview(part).nbytes >= _BY_REFERENCE
            else memoryview(bytes(memoryview(part).cast("B")))
            for part in parts
        ]
        with contextlib.suppress(RuntimeError):
            other._loop.call_soon_threadsafe(other._arrived, views)

    def _deliver(self, parts: list[memoryview]) -> None:
        tally = self.tally
        if tally is not None and tally.on:
            tally.count(False, parts)
        super()._deliver(parts)

    def read_remaining(self) -> None:
        """Nothing waits unread: frames are handed over as they arrive."""

    def fileno(self) -> int:
        return -1


class SimChild(ChildProcess):
    """A worker process that is a ``SimWorker``: its exit is reported on its agent's loop."""

    local = False  # no pid of it means anything here: never signal or reap one

    def __init__(self, key: str, rank: int, address: str, pid: int) -> None:
        super().__init__(key, rank, address, Status(pid))  # type: ignore[arg-type]
        self._on_exit: Callable[[ChildProcess], None] | None = None

    def watch(self, loop: Any, on_exit: Callable[[ChildProcess], None]) -> None:
        self._loop = loop
        self._on_exit = on_exit

    def end(self, code: int) -> None:
        """It exits with ``code`` (its agent hears of it on the next loop turn)."""
        status: Status = self.popen  # type: ignore[assignment]
        if status.returncode is not None:
            return
        status.returncode = code
        if self._on_exit is not None and self._loop is not None:
            self._loop.call_soon(self._on_exit, self)

    def signal_group(self, sig: int) -> None:
        self.end(-int(sig))


class SimWorker:
    """Where the agent's connection to a worker would be: answers at once, on the
    agent's loop, what the worker's hosting code would (see the module docstring)."""

    def __init__(self, runtime: SimAgentRuntime, child: SimChild) -> None:
        self.runtime = runtime
        self.child = child
        self.peer = child.listen_path
        self._closed = False
        self._values: dict[int, bytes] = {}  # rank -> its pickled value

    @property
    def closed(self) -> bool:
        return self._closed

    def start(self) -> None:
        """Nothing to read."""

    def read_remaining(self) -> None:
        """Nothing waits unread."""

    def fileno(self) -> int:
        return -1

    def close(self) -> None:
        self._closed = True

    def send(self, parts: Sequence[Any], share: Any = None) -> None:
        if self._closed:
            raise TransportClosed(f"the simulated worker at {self.peer} is gone")
        header = headers.decode(parts[0])
        kind = header[0]
        replies: list[list[Any]] = []
        if kind == headers.CALL:
            call = headers.read(headers.Call, header)
            if call.req_id:
                for rank in call.ranks:
                    value = self._values.get(rank)
                    if value is None:
                        value = self._values[rank] = dumps(rank)[0]
                    replies.append([headers.encode(headers.Reply(call.req_id, rank, True)), value])
        elif kind == headers.SPAWN:
            spawn = headers.read(headers.Spawn, header)
            for rank in spawn.ranks:
                replies.append([headers.encode(headers.Reply(spawn.req_id, rank, True)), _SPAWNED])
        elif kind == headers.STOP_MESH:
            stop = headers.read(headers.StopMesh, header)
            replies.append([headers.encode(headers.Reply(stop.req_id, -1, True)), _SPAWNED])
        elif kind == headers.SHUTDOWN:
            self._closed = True
            self.child.end(0)
            return
        else:
            log.debug("a simulated worker ignores a frame of kind %s", kind)
            return
        if replies:
            self.runtime.loop.call_soon(self._answer, replies)

    def _answer(self, replies: list[list[Any]]) -> None:
        if self._closed:
            return
        on_frame = self.runtime._on_frame
        for reply in replies:
            on_frame(self, [memoryview(part) for part in reply])  # type: ignore[arg-type]


_PREFIX = "tcp://10."  # every address of the simulation: agents and workers


def _address(index: int, port: int) -> str:
    return f"{_PREFIX}{(index >> 16) & 255}.{(index >> 8) & 255}.{index & 255}:{port}"


class Dialing:
    """How a runtime of the simulation reaches a simulated agent by its address: over a
    new in-memory link, which the agent takes as a connection it accepted. Code that
    dials an agent (a tree of agents, say) then works unchanged; an address of the
    simulation that no agent has fails at once, as a refused connection would."""

    def __init__(self) -> None:
        self.agents: dict[str, SimAgentRuntime] = {}
        self.tally: Tally | None = None  # counts the controller's links it dials

    def dial(self, runtime: Runtime, path: str, counted: bool, fresh: bool = False) -> Any:
        """The open link from ``runtime`` to the agent at ``path``; ``None`` when
        ``path`` is not an address of the simulation. ``fresh``: a new one, not started,
        known by no path (``Runtime.dial``)."""
        if not path.startswith(_PREFIX):
            return None
        target = self.agents.get(path)
        if target is None or target.closed:
            reason = f"cannot reach the process at {path}: nothing listens there (simulated)"
            raise ActorDiedError(reason, reason=reason)
        with runtime._conns_lock:
            known = runtime._conns.get(path)
            if known is not None and not known.closed and not fresh:
                return known
            mine, theirs = CountedLink.pair(
                (runtime.loop, runtime._on_frame, runtime._on_close),
                (target.loop, target._on_frame, target._on_close),
                peers=(path, runtime.address),
            )
            if counted:
                mine.tally = self.tally
            if not fresh:
                runtime._conns[path] = mine  # type: ignore[assignment]
        if not fresh:
            runtime.loop.call_soon_threadsafe(mine.start)
        target.loop.call_soon_threadsafe(theirs.start)
        target.accepted.append(theirs)
        return mine


def _known(runtime: Runtime, path: str) -> bool:
    """Whether ``runtime`` has a connection to ``path`` (a relayed worker's, say) or
    knows it dead: its own ``connection`` answers then, as it would anywhere."""
    conn = runtime._conns.get(path)
    return (conn is not None and not conn.closed) or path in runtime._dead_paths


class SimControllerRuntime(Runtime):
    """The controller's runtime, which reaches simulated agents it dials (not those that
    joined it: they are ordinary) over in-memory links; everything else as ``Runtime``.
    Start it with ``SimControllerRuntime.get()`` before anything asks for the runtime."""

    dialing: Dialing | None = None

    def connection(self, path: str) -> Any:
        dialing = self.dialing
        if dialing is None or _known(self, path):
            return super().connection(path)
        link = dialing.dial(self, path, counted=True)
        return super().connection(path) if link is None else link

    def dial(self, path: str) -> Any:
        dialing = self.dialing
        link = None if dialing is None else dialing.dial(self, path, counted=True, fresh=True)
        return super().dial(path) if link is None else link


class SimAgentRuntime(Runtime):
    """A host agent's runtime whose workers are ``SimWorker``\\ s, and whose end (asked
    to shut down, or its owner gone) closes its link instead of stopping the loop the
    simulated agents share. It reaches other simulated agents as ``Dialing`` says."""

    def __init__(
        self,
        config: Config,
        loop: asyncio.AbstractEventLoop,
        key: str,
        index: int,
        dialing: Dialing | None = None,
    ) -> None:
        super().__init__(config, loop, key)
        self.index = index
        self.dialing = dialing
        self.accepted = []
        self.loop_thread_id = None  # several share a loop: nothing may assume it is ours
        self.address = _address(index, 1)
        self.advertise = self.address.removeprefix("tcp://").rpartition(":")[0]

    async def start_processes(
        self,
        specs: Sequence[tuple[str, int, dict[str, str]]],
        commands: Sequence[Any] | None = None,
    ) -> list[ChildProcess]:
        children: list[ChildProcess] = []
        for key, rank, _env in specs:
            port = 2000 + len(self.children.processes)
            child = SimChild(key, rank, _address(self.index, port), _FAKE_PID + port)
            child.watch(self.loop, self.children.child_exited)
            self.children.processes[child.listen_path] = child
            with self._conns_lock:
                self._conns[child.listen_path] = SimWorker(self, child)  # type: ignore[assignment]
            children.append(child)
        return children

    def connection(self, path: str) -> Any:
        if self.dialing is None or _known(self, path):
            return super().connection(path)
        link = self.dialing.dial(self, path, counted=False)
        return super().connection(path) if link is None else link

    frozen = False  # a frozen host reads nothing (SimHost.freeze)
    accepted: list[Any]  # links other agents dialled to it (a tree's)

    def _on_frame(self, conn: Any, parts: list[memoryview]) -> None:
        if not self.frozen:
            super()._on_frame(conn, parts)

    def listen_tcp(
        self, host: str | None = None, port: int = 0, *, sock: socket.socket | None = None
    ) -> str:
        """Where other agents reach this one (a tree of agents): its address of the
        simulation, which ``Dialing`` serves over in-memory links; nothing is bound."""
        return self.address

    def _exit_worker(self, why: str) -> None:
        if self.closed:
            return
        for leave in self.on_exit:  # (an agent tells the agents it adopted to end)
            leave()
        for child in list(self.children.processes.values()):
            child.stopping = True
        self.children.processes.clear()
        self.close_links()

    def close_links(self) -> None:
        """Close every link of this agent, as its process' exit closes its TCP
        connections (to its owner, and to and from other agents in a tree)."""
        self.closed = True  # nothing dials it any more (Dialing refuses a closed one)
        with self._conns_lock:
            dialled = list(self._conns.values())
        for link in [self._parent, *dialled, *self.accepted]:
            if isinstance(link, MemoryLink):
                link.close()


@dataclass
class SimHost:
    """One simulated host: its agent, its runtime and both ends of its link."""

    runtime: SimAgentRuntime
    agent: Agent
    mine: CountedLink  # the agent's end
    theirs: CountedLink  # the controller's end
    frozen: bool = field(default=False)

    def freeze(self) -> None:
        """The agent stops reading its link (a host that hangs, or whose cable is cut
        without a reset): nothing is answered, nothing closes (any thread)."""
        self.frozen = True
        self.mine._on_frame = lambda link, parts: None
        self.runtime.frozen = True  # its links from other agents (a tree) go silent too

    def die(self) -> None:
        """The agent's process ends: its links close, as its TCP connections would (to
        the controller, and to and from other agents in a tree)."""
        self.mine.close()
        self.runtime.close_links()


class SimulatedHosts:
    """A ``HostAllocator`` of simulated hosts (see the module docstring), their agents on
    ``loop`` (another thread's)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, tally: Tally | None = None) -> None:
        self.loop = loop
        self.tally = tally or Tally()
        self.hosts: list[SimHost] = []
        self.by_link: dict[int, SimHost] = {}  # by id() of the controller's AgentLink
        self.dialing = Dialing()
        self.dialing.tally = self.tally
        self._config = Config(event_log=False, output="off", progress="never")

    def _make(self, index: int, controller: Runtime) -> SimHost:
        key = f"sim-agent-{index}"
        runtime = SimAgentRuntime(self._config, self.loop, key, index, self.dialing)
        self.dialing.agents[runtime.address] = runtime
        theirs, mine = CountedLink.pair(
            (controller.loop, controller._on_frame, controller._on_close),
            (self.loop, runtime._on_frame, runtime._on_close),
            peers=(runtime.address, controller.address),
        )
        theirs.tally = self.tally
        runtime.adopt_owner(mine)  # type: ignore[arg-type]
        stdout, stderr = sys.stdout, sys.stderr
        try:
            # An agent process sends its own output to its owner; this one shares ours.
            agent = Agent(runtime, runtime.advertise, None)
        finally:
            sys.stdout, sys.stderr = stdout, stderr
        mine.start()
        info = {"role": "agent", "host": f"sim{index}", "address": runtime.advertise, "cpus": 16}
        mine.send([headers.encode(headers.Hello(runtime.address, _FAKE_PID, key, info))])
        return SimHost(runtime, agent, mine, theirs)

    async def _make_batch(self, first: int, count: int, controller: Runtime) -> list[SimHost]:
        return [self._make(first + i, controller) for i in range(count)]

    async def start(self, runtime: Runtime, specs: Sequence[Any]) -> list[ChildProcess]:
        raise TypeError("simulated hosts give host meshes only (host_mesh), not proc_mesh")

    async def stop(self, runtime: Runtime, processes: Sequence[ChildProcess], grace: float) -> None:
        await runtime.stop_processes(processes, grace)

    async def start_hosts(self, runtime: Runtime, count: int) -> list[AgentLink]:
        """Make ``count`` simulated hosts and own their agents once they said HELLO
        (on the controller's loop)."""
        waiting = JoinWait(runtime, count, accept=is_agent)
        made: list[SimHost] = []
        first = len(self.hosts)
        for start in range(0, count, 256):  # in batches: the agents' loop runs meanwhile
            batch = self._make_batch(first + start, min(256, count - start), runtime)
            made += await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(batch, self.loop))
        for host in made:
            host.theirs.start()
        self.hosts += made
        joined = {j.key: j for j in await waiting.wait(runtime.config.spawn_timeout, "here")}
        links = [runtime.adopt_agent(joined[host.runtime.key]) for host in made]
        self.by_link.update((id(link), host) for link, host in zip(links, made, strict=True))
        return links

    async def stop_hosts(self, runtime: Runtime, links: Sequence[AgentLink], grace: float) -> None:
        await runtime.stop_processes([link.process for link in links], grace)

    def host_of(self, link: AgentLink) -> SimHost:
        """The simulated host behind an agent link of the controller."""
        return self.by_link[id(link)]
