"""``Runtime``: the per-process runtime of layer 2 with the parts of layer 3 plugged in.

Every process runs one (``Runtime.get()`` in a controller, ``Runtime.start_worker`` in a
worker). On top of the core runtime's connections, requests and hosted actors it is an
assembly of parts, each a module of its own that gets only what it needs from the rest:

- ``children`` (``_children.Children``): the processes it starts or adopts, watched and
  relaunched; the core asks it, as its ``ProcessOwner``, about HELLOs, heartbeats, lost
  connections and shutdown;
- ``host_agents`` (``_agents.Agents``): the host agents it owns (``agents``: their links
  by connection), their trees and their events;
- ``router`` (``_agent_router.AgentRouter``): ``send_frames``, a call's frames batched
  per agent (``CAST``, ``TREE_CAST``, bulk);
- ``bulk`` (``_bulk.Bulk``): large parts of casts down a chain of agents;
- ``cast_plans`` (``_cast_plan.CastPlans``): whole-mesh casts to host agents, at a cost
  that does not grow with the mesh;
- the job event log (``events``) and the merger of output lines (``output_lines``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import Any

from .._config import Config
from .._core import CoreRuntime, headers
from .._core import otel as _otel
from ._agent_link import AgentLink
from ._agent_router import AgentRouter
from ._agents import Agents
from ._aggregate import LineAggregator
from ._bulk import Bulk
from ._cast_plan import CastPlans
from ._children import Children
from ._debug_relay import DebugRelay
from ._event_log import EventLog, open_event_log
from ._process import ChildProcess, LaunchCommand
from ._remote import Joined, RemoteProcess

__all__ = ["Runtime"]


class Runtime(CoreRuntime):
    """This process' runtime: the core's, with the parts that own processes and agents
    (see the module docstring). It overrides nothing of the core's."""

    def __init__(self, config: Config, loop: asyncio.AbstractEventLoop, key: str) -> None:
        super().__init__(config, loop, key)
        self.children = Children(self)
        self.owner = self.children
        self.bulk = Bulk(self)  # bulk data of casts, down a chain of agents (_bulk)
        self.host_agents = Agents(self, self.children)
        # Host agents this process owns, by their connection (see _agent_link).
        self.agents: dict[Any, AgentLink] = self.host_agents.links
        self.router = AgentRouter(self.send, self.bulk)
        # (bound here, not wrapped: it is on every call's path)
        self.send_frames = self.router.send_frames
        # Whole-mesh casts through a tree of agents, by plan (_cast_plan).
        self.cast_plans = CastPlans(self.connection, self.children.relaunching, self.bulk.chains)
        self._aggregator: LineAggregator | None = None
        # Breakpoints in workers: passed up to the owner (a controller puts its own
        # debugger hub here, see actormesh._observe).
        self.frame_kinds[headers.DEBUG] = DebugRelay(self).on_frame
        # Who keeps a job event log here: the controller, or an agent (which says so).
        self.event_source: str | None = None
        self._events: EventLog | bool | None = None  # False: none is kept here
        self._events_lock = threading.Lock()
        self.on_shutdown.append(self._close_events)

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

    def _close_events(self) -> None:
        if isinstance(self._events, EventLog):
            self._events.close()  # after the workers stopped: their exits are in it

    # -- output -----------------------------------------------------------------------------

    @property
    def progress_mode(self) -> str:
        """``Config.progress`` in the controller; "never" in workers (whose stderr is no
        one's terminal)."""
        return self.config.progress if self._parent is None else "never"

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

    def flush_output(self) -> None:
        """Print the merged lines held back (processes stopped: theirs come first)."""
        if self._aggregator is not None:
            self._aggregator.flush()

    def owned_descriptors(self) -> set[int]:
        """Descriptors the runtime keeps open across meshes beside its connections: the
        sockets of threads' reply routes and the fork server's (for leak checks)."""
        found = self.routes.descriptors()
        forks = self.children.forks
        if forks is not None and forks.fileno() >= 0:
            found.add(forks.fileno())
        return found

    # -- the allocator kit (docs/multihost.md): what an allocator calls ----------------------

    async def start_processes(
        self,
        specs: Sequence[tuple[str, int, dict[str, str]]],
        commands: Sequence[LaunchCommand | None] | None = None,
    ) -> list[ChildProcess]:
        """Start one worker per ``(key, rank, env)``: ``Children.start_processes``."""
        return await self.children.start_processes(specs, commands)

    async def stop_processes(self, children: Sequence[ChildProcess], grace: float) -> None:
        """Ask workers to exit, then signal them: ``Children.stop_processes``."""
        await self.children.stop_processes(children, grace)

    def adopt(
        self, joined: Joined, rank: int, kill: Callable[[], None] | None = None
    ) -> RemoteProcess:
        """Own a process that joined over TCP, as ``rank``: ``Children.adopt``."""
        return self.children.adopt(joined, rank, kill)

    def adopt_agent(self, joined: Joined, kill: Callable[[], None] | None = None) -> AgentLink:
        """Own a host agent that joined: ``Agents.adopt_agent``."""
        return self.host_agents.adopt_agent(joined, kill)

    async def start_agents(self, count: int) -> list[AgentLink]:
        """Start ``count`` host agents on this host: ``Agents.start_agents``."""
        return await self.host_agents.start_agents(count)
