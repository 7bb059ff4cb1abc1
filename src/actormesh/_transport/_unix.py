"""Unix domain sockets: a private directory, a listener, and a connect function.

Local meshes talk over Unix sockets in a directory only this user can open (mode 0700),
and the listener also checks each peer's uid (``SO_PEERCRED``) before a byte is read.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import tempfile
from collections.abc import Callable

__all__ = ["Listener", "connect_unix", "private_socket_dir"]

_SOCKET_BUFFER = 4 * 1024 * 1024
_PEERCRED = struct.Struct("3i")


def private_socket_dir(parent: str | None = None) -> str:
    """Create a fresh directory for sockets that only the current user can enter."""
    path = tempfile.mkdtemp(prefix="actormesh-", dir=parent)
    os.chmod(path, 0o700)
    return path


def _tune(sock: socket.socket) -> None:
    # Large kernel buffers let a big frame go out in few system calls.
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, option, _SOCKET_BUFFER)


def connect_unix(path: str) -> socket.socket:
    """A connected (blocking) socket to the listener at ``path``."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        _tune(sock)
        sock.connect(path)
    except BaseException:
        sock.close()
        raise
    return sock


class Listener:
    """Accepts connections on a Unix socket path from processes of the same user.

    Args:
        path: where to bind; the file is removed by ``close()``.
        loop: accepting runs on this loop; ``start()`` must be called on its thread.
        on_accept: called on the loop thread with each accepted socket.
    """

    def __init__(
        self,
        path: str,
        loop: asyncio.AbstractEventLoop,
        on_accept: Callable[[socket.socket], None],
    ) -> None:
        self.path = path
        self._loop = loop
        self._on_accept = on_accept
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(path)
        self._sock.listen(1024)
        self._sock.setblocking(False)
        self._uid = os.getuid()
        self._closed = False

    def start(self) -> None:
        """Begin accepting; call on the loop thread."""
        self._loop.add_reader(self._sock.fileno(), self._accept)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
            _, uid, _ = _PEERCRED.unpack(creds)
            if uid != self._uid and uid != 0:
                conn.close()
                continue
            _tune(conn)
            self._on_accept(conn)

    def close(self) -> None:
        """Stop accepting and remove the socket file; call on the loop thread."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(ValueError, OSError, RuntimeError):
            self._loop.remove_reader(self._sock.fileno())
        self._sock.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
