"""The job socket: how the ``actormesh`` command talks to a running controller.

The controller listens at its registry name (``_registry``) with the transport's Unix
listener, which admits only processes of the same user. Each connection sends requests,
one JSON object per frame (``_wire``), and gets one answer per request, in order of
completion, with the request's ``id``:

- ``{"op": "info"}``: the job in a line (pid, program, start, number of meshes);
- ``{"op": "snapshot", "mesh": name?}``: every mesh and rank (``_report``);
- ``{"op": "stacks", "mesh": name?, "ranks": [..]?, "native": bool?}``: grouped stacks
  (``_stacks``), C frames and the GIL's holder too with ``native`` (py-spy);
- ``{"op": "timeline", "mesh": name?, "last": seconds?}``: the calls each rank ran, as a
  Chrome trace (``_timeline``);
- ``{"op": "debug.list"}``, ``{"op": "debug.attach", "session": id}``,
  ``{"op": "debug.input", "session": id, "text": line}``,
  ``{"op": "debug.detach", "session": id}``: breakpoints (``_hub``). A connection that
  listed or attached also receives events: ``opened``/``closed`` sessions, and the
  attached session's ``out`` (what pdb printed), ``read`` (pdb waits for a line) and
  ``state``.

Nothing here changes the job except typing at a debugger prompt: ``top`` and ``stacks``
are read-only. Everything runs on the controller's loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from .._transport import Connection, Listener, TransportClosed
from ._hub import DebugHub
from ._report import Meshes
from ._timeline import collect
from ._wire import MAX_MESSAGE, decode, encode

__all__ = ["JobService"]

log = logging.getLogger("actormesh.observe")


class JobService:
    """Answers the ``actormesh`` command on the job socket (see the module docstring).

    Args:
        runtime: the controller's runtime.
        address: the job socket's name (``@actormesh-job-...``).
        meshes: what the controller spawned.
        hub: its debugger sessions.
    """

    def __init__(self, runtime: Any, address: str, meshes: Meshes, hub: DebugHub) -> None:
        self.runtime = runtime
        self.address = address
        self.meshes = meshes
        self.hub = hub
        self._listener = Listener(address, runtime.loop, self._accepted)
        self._clients: set[_Client] = set()

    def start(self) -> None:
        """Begin accepting (loop thread)."""
        self._listener.start()

    def close(self) -> None:
        """Stop accepting and drop the clients (loop thread)."""
        self._listener.close()
        for client in list(self._clients):
            client.conn.close()

    def abandon(self) -> None:
        """Release the socket of a runtime whose loop has ended (any thread)."""
        self._listener._sock.close()

    def _accepted(self, sock: Any) -> None:
        client = _Client(self)
        conn = Connection(
            sock,
            self.runtime.loop,
            client.on_frame,
            client.on_close,
            max_frame_bytes=MAX_MESSAGE,
            peer="actormesh command",
        )
        client.conn = conn
        self._clients.add(client)
        conn.start()


class _Client:
    """One connection of the ``actormesh`` command."""

    def __init__(self, service: JobService) -> None:
        self.service = service
        self.conn: Connection
        self.watching = False
        self.attached: set[str] = set()

    def send(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(TransportClosed):
            self.conn.send([encode(message)])

    def event(self, event: str, details: dict[str, Any]) -> None:
        self.send({"event": event, **details})

    def on_close(self, conn: Connection, error: BaseException | None) -> None:
        hub = self.service.hub
        for sid in self.attached:
            hub.detach(sid, self.event)
        if self.event in hub.watchers:
            hub.watchers.remove(self.event)
        self.service._clients.discard(self)

    def on_frame(self, conn: Connection, parts: list[memoryview]) -> None:
        try:
            request = decode(parts[0])
        except ValueError as error:
            self.send({"error": f"unreadable request: {error}"})
            return
        self.service.runtime.loop.create_task(self._answer(request))

    async def _answer(self, request: dict[str, Any]) -> None:
        answer: dict[str, Any]
        try:
            answer = await self._handle(request)
        except Exception as error:
            log.exception("the job socket's request %r failed", request.get("op"))
            answer = {"error": f"{type(error).__name__}: {error}"}
        self.send({"id": request.get("id"), **answer})

    async def _handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        meshes, hub = self.service.meshes, self.service.hub
        if op == "info":
            return {"job": meshes.info()}
        if op == "snapshot":
            timeout = float(request.get("timeout", 1.0))
            return await meshes.snapshot(request.get("mesh"), timeout)
        if op == "stacks":
            found = await meshes.stacks(
                request.get("mesh"),
                request.get("ranks"),
                float(request.get("timeout", 3.0)),
                bool(request.get("native", False)),
            )
            return {"stacks": [stacks.to_json() for stacks in found]}
        if op == "timeline":
            last = request.get("last")
            trace = await collect(
                self.service.runtime,
                meshes.live(request.get("mesh")),
                None if last is None else float(last),
                float(request.get("timeout", 5.0)),
            )
            return {"trace": trace}
        if op == "debug.list":
            if self.event not in hub.watchers:
                hub.watchers.append(self.event)
            return {"sessions": hub.listing()}
        sid = str(request.get("session", ""))
        if op == "debug.attach":
            error = hub.attach(sid, self.event, "another `actormesh debug`")
            if error:
                return {"error": error}
            self.attached.add(sid)
            return {"attached": sid}
        if op == "debug.input":
            return {"sent": hub.send_line(sid, str(request.get("text", "")))}
        if op == "debug.detach":
            hub.detach(sid, self.event)
            self.attached.discard(sid)
            return {"detached": sid}
        return {"error": f"unknown request {op!r}"}


_ = asyncio  # the handlers are coroutines run as tasks on the controller's loop
