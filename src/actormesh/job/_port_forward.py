"""``PortForwarder``: TCP port forwarding between two process meshes (Monarch's).

``forwarder.forward(dst, dst_port, src, src_address)`` pairs the processes of two meshes
of one shape point by point: each source process listens at its ``src_address`` and, for
every connection it accepts, has the destination process at the same point connect to
``127.0.0.1:dst_port`` there; the bytes travel both ways as actor messages on ports
(a port per direction per connection, in order per sender). Either side's end of
stream is passed on as a half close; an error on either side aborts both. Stopping the
forwarder actor stops every forward it made (the source and destination actors are
its children: their listeners and connections close with them).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

from .._api import Actor, Channel, Port, PortReceiver, ProcMesh, current_rank, endpoint
from .._shape import Point

__all__ = ["PortForwarder"]

_LOOPBACK = "127.0.0.1"
_CHUNK = 64 * 1024


class _Data(NamedTuple):
    data: bytes


class _Eof(NamedTuple):
    pass


class _Abort(NamedTuple):
    pass


def _check_port(name: str, port: Any) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"{name} must be an integer from 1 through 65535, not {port!r}")
    return port


def _parse_address(address: Any) -> tuple[str, int]:
    if not isinstance(address, str):
        raise ValueError(f"src_address must be 'address:port', not {address!r}")
    host, colon, port = address.rpartition(":")
    if not colon or not host:
        raise ValueError(f"src_address must be 'address:port', not {address!r}")
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"src_address port must be an integer, not {port!r}") from None
    return host.strip("[]"), _check_port("src_address port", number)


async def _socket_to_port(reader: asyncio.StreamReader, port: Port[Any]) -> None:
    while data := await reader.read(_CHUNK):
        port.send(_Data(data))
    port.send(_Eof())


async def _port_to_socket(
    receiver: PortReceiver[Any], writer: asyncio.StreamWriter, eof: asyncio.Event
) -> None:
    """Write what arrives to the socket; after the other side's end of stream, go on
    listening (never returning) for an abort, until the relay is done."""
    while True:
        message = await receiver.recv()
        if isinstance(message, _Data):
            if writer.transport.is_closing():
                # The peer hung up (a reset can read as a plain end of stream): asyncio
                # would drop what we write without a word, so end the forward here.
                raise ConnectionResetError("the forwarded connection was closed")
            writer.write(message.data)
            await writer.drain()
        elif isinstance(message, _Eof):
            if writer.can_write_eof() and not writer.transport.is_closing():
                writer.write_eof()
            eof.set()
        else:
            raise ConnectionAbortedError("the other end of the forward aborted")


class _Connections:
    """The relays of one forwarding actor, cancelled together when it stops."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def relay(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        send: Port[Any],
        receive: PortReceiver[Any],
    ) -> None:
        task = asyncio.get_running_loop().create_task(_relay(reader, writer, send, receive))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _relay(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    send: Port[Any],
    receive: PortReceiver[Any],
) -> None:
    """Carry one connection both ways until both directions have ended, or abort both
    (and tell the other side to) as soon as either fails."""
    eof = asyncio.Event()
    outgoing = asyncio.ensure_future(_socket_to_port(reader, send))
    incoming = asyncio.ensure_future(_port_to_socket(receive, writer, eof))

    async def both_ended() -> None:
        await outgoing
        await eof.wait()

    ended = asyncio.ensure_future(both_ended())
    try:
        done, _ = await asyncio.wait((incoming, ended), return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()  # raises the failure that ended it
    except BaseException as error:
        with contextlib.suppress(Exception):
            send.send(_Abort())  # the other side drops its connection too
        writer.transport.abort()
        if isinstance(error, asyncio.CancelledError):
            raise
    finally:
        for task in (outgoing, incoming, ended):
            task.cancel()
        await asyncio.gather(outgoing, incoming, ended, return_exceptions=True)
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


class _Destination(Actor):
    """Connects to the local service for each forwarded connection."""

    def __init__(self) -> None:
        self._port: int | None = None
        self._connections = _Connections()

    @endpoint
    async def configure(self, port: int | Callable[[Point], int]) -> None:
        chosen = port(current_rank()) if callable(port) else port
        self._port = _check_port("dst_port", chosen)

    @endpoint
    async def open(self, send: Port[Any]) -> Port[Any]:
        if self._port is None:
            raise RuntimeError("the port forward's destination is not configured")
        reader, writer = await asyncio.open_connection(_LOOPBACK, self._port)
        mine, receive = Channel[Any].open()
        self._connections.relay(reader, writer, send, receive)
        return mine

    async def __cleanup__(self, exc: Exception | None) -> None:
        await self._connections.close()


class _Source(Actor):
    """Listens at the source address and forwards each connection it accepts."""

    def __init__(self) -> None:
        self._destination: Any = None
        self._server: asyncio.AbstractServer | None = None
        self._connections = _Connections()

    @endpoint
    async def start(self, destination: Any, address: str | Callable[[Point], str]) -> None:
        point = current_rank()
        self._destination = destination.slice(**dict(point))
        host, port = _parse_address(address(point) if callable(address) else address)
        self._server = await asyncio.start_server(self._accept, host, port, reuse_port=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            send, receive = Channel[Any].open()
            theirs = await self._destination.open.call_one(send)
        except Exception:
            writer.transport.abort()  # the destination could not connect: nor do we
            return
        self._connections.relay(reader, writer, theirs, receive)

    async def __cleanup__(self, exc: Exception | None) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()
        await self._connections.close()


class PortForwarder(Actor):
    """An actor that owns TCP port forwards; stop it to close them all.

    Spawn one (``this_proc().spawn("forwarder", PortForwarder)``) and call ``forward``
    for each forward.
    """

    @endpoint
    async def forward(
        self,
        dst_proc_mesh: ProcMesh,
        dst_port: int | Callable[[Point], int],
        src_proc_mesh: ProcMesh,
        src_address: str | Callable[[Point], str],
    ) -> None:
        """Forward, point by point, connections to ``src_address`` on each process of
        ``src_proc_mesh`` to ``127.0.0.1:dst_port`` on the process of ``dst_proc_mesh`` at
        the same point. ``dst_port`` and ``src_address`` (``"address:port"``) may be
        functions of that point.

        Raises (wrapped in ``ActorError`` at the caller):
            ValueError: the meshes differ in shape, or a port or address is invalid.
            OSError: a source cannot listen (the forward's actors are stopped again).
        """
        if dst_proc_mesh.extent != src_proc_mesh.extent:
            raise ValueError(
                "destination and source process meshes must have the same shape: "
                f"{dst_proc_mesh.extent} != {src_proc_mesh.extent}"
            )
        if not callable(dst_port):
            _check_port("dst_port", dst_port)
        if not callable(src_address):
            _parse_address(src_address)
        suffix = uuid.uuid4().hex[:12]
        source = src_proc_mesh.spawn(f"port_forward_source_{suffix}", _Source)
        destination = dst_proc_mesh.spawn(f"port_forward_destination_{suffix}", _Destination)
        try:
            await destination.configure.call(dst_port)
            await source.start.call(destination, src_address)
        except BaseException:
            # Nothing of a forward that failed to start stays listening.
            for mesh in (source, destination):
                with contextlib.suppress(Exception):
                    await mesh.stop()
            raise
