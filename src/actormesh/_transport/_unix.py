"""Unix domain sockets: private names, a listener, and a connect function.

Processes of one host talk over Unix sockets in Linux's *abstract namespace* by default:
a name that starts with ``@`` (``@actormesh-<uid>-<random>/<key>``) is no file at all,
and the kernel releases it with the last descriptor, so no ending of any process (a
SIGKILL included) leaves anything on disk. What a file's mode 0700 gave, the peer
credentials give here, in both directions: the listener accepts only processes of this
user (or root), and a connector checks that the process it reached runs as this user
(or root) before sending a byte, so a stranger squatting on a name gets nothing. The
names carry 64 random bits, so they cannot be guessed in advance either. Abstract names
belong to the network namespace, which matches what they are for: processes of one host.

A ``socket_dir`` set in the configuration selects plain socket files in a fresh directory
only this user can open (mode 0700) instead; such a directory is removed by the process
that made it when it exits, but not after a SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import struct
import tempfile
from collections.abc import Callable

__all__ = ["Listener", "connect_unix", "is_abstract", "peer_is_trusted", "private_socket_dir"]

_SOCKET_BUFFER = 4 * 1024 * 1024
_PEERCRED = struct.Struct("3i")


# The private directory's path may take this much of the kernel's 107 bytes; the rest
# is for the socket names in it (a process' key: mesh name, a random part, its rank).
_MAX_SOCKET_DIR = 64


def private_socket_dir(parent: str | None = None) -> str:
    """A fresh place for this process' sockets that only the current user can use.

    ``parent`` None: a prefix in the abstract namespace (nothing on disk). Otherwise a
    new directory under ``parent`` with mode 0700.
    """
    if parent is None:
        return f"@actormesh-{os.getuid()}-{secrets.token_hex(8)}"
    path = tempfile.mkdtemp(prefix="actormesh-", dir=parent)
    if len(os.fsencode(path)) > _MAX_SOCKET_DIR:
        os.rmdir(path)
        raise ValueError(
            f"socket_dir {parent!r} is too long: Unix socket paths are limited to 107 "
            f"bytes, and sockets go in {path!r} ({len(path)} bytes; at most "
            f"{_MAX_SOCKET_DIR} leaves room for their names). Choose a shorter directory."
        )
    os.chmod(path, 0o700)
    return path


def is_abstract(path: str) -> bool:
    """True for a name in the abstract namespace (``@...``): no file, nothing to remove."""
    return path.startswith("@")


def _kernel_name(path: str) -> str:
    # The kernel spells an abstract name with a leading NUL byte.
    return "\0" + path[1:] if is_abstract(path) else path


def _tune(sock: socket.socket) -> None:
    # Large kernel buffers let a big frame go out in few system calls.
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, option, _SOCKET_BUFFER)


def _peer_is_trusted(sock: socket.socket) -> bool:
    """Whether the process at the other end runs as this user (or as root)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    _, uid, _ = _PEERCRED.unpack(creds)
    return uid in (os.getuid(), 0)


peer_is_trusted = _peer_is_trusted


def connect_unix(path: str) -> socket.socket:
    """A connected (blocking) socket to the listener at ``path``.

    Raises:
        PermissionError: the listener runs as another user.
        OSError: nothing listens there.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        _tune(sock)
        sock.connect(_kernel_name(path))
        if not _peer_is_trusted(sock):
            raise PermissionError(f"the process listening at {path} runs as another user")
    except BaseException:
        sock.close()
        raise
    return sock


class Listener:
    """Accepts connections on a Unix socket from processes of the same user.

    Args:
        path: where to bind (``@name``: abstract; else a file, removed by ``close()``).
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
        try:
            self._sock.bind(_kernel_name(path))
            self._sock.listen(1024)
        except BaseException:
            self._sock.close()
            raise
        self._sock.setblocking(False)
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
            if not _peer_is_trusted(conn):
                conn.close()
                continue
            _tune(conn)
            self._on_accept(conn)

    def close(self) -> None:
        """Stop accepting (and remove the socket file, if any); call on the loop thread."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(ValueError, OSError, RuntimeError):
            self._loop.remove_reader(self._sock.fileno())
        self._sock.close()
        if not is_abstract(self.path):
            with contextlib.suppress(OSError):
                os.unlink(self.path)
