"""The per-message hot path, compiled when possible: chosen once, at import.

``_cframes`` (C, built by the package's normal build from ``_cframes.c``) is the twin of
the pure-Python functions here and in ``_frames``: sizing a frame and encoding its
header, splitting received bytes into frames, and the ``recvmsg``/``sendmsg`` calls of a
connection. Both behave the same (``tests/unit/test_speedups.py`` runs them side by
side); the compiled one saves the Python-level calls around each step, which is most of
what a small message costs. As aiohttp, yarl and msgpack do, the pure one is used when
the extension is missing (no compiler where the package was built) or when
``ACTORMESH_NO_EXTENSIONS`` is set to a non-empty value (tests of the fallback, and a way
out if the extension misbehaves).
"""

from __future__ import annotations

import array
import socket
from collections.abc import Sequence

from .._config import extensions_disabled
from ._frames import Buffer, frame_header, parse_inline

__all__ = [
    "COMPILED",
    "frame_header",
    "parse_inline",
    "py_receive",
    "py_send_buffers",
    "receive",
    "send_buffers",
]

_MAX_FDS = 64
_ANCILLARY = socket.CMSG_SPACE(_MAX_FDS * 4)
# Plain ints: the socket module's enum members cost a Python-level call per operation.
_SOL_SOCKET = int(socket.SOL_SOCKET)
_SCM_RIGHTS = int(socket.SCM_RIGHTS)
_MSG_CTRUNC = int(socket.MSG_CTRUNC)


def py_receive(sock: socket.socket, fd: int, into: memoryview) -> tuple[int, list[int], bool]:
    """One ``recvmsg`` into ``into``: ``(bytes read, descriptors received, truncated)``.

    ``truncated``: the peer sent more descriptors than fit (they are lost). ``fd`` is the
    socket's descriptor (the compiled twin reads through it, this one through ``sock``).
    """
    n, ancillary, flags, _ = sock.recvmsg_into([into], _ANCILLARY)
    fds: list[int] = []
    for level, kind, data in ancillary:
        if level == _SOL_SOCKET and kind == _SCM_RIGHTS:
            received = array.array("i")
            received.frombytes(data[: len(data) - len(data) % received.itemsize])
            fds.extend(received)
    return int(n), fds, bool(flags & _MSG_CTRUNC)


def py_send_buffers(sock: socket.socket, fd: int, buffers: Sequence[Buffer]) -> int:
    """One ``sendmsg`` of ``buffers`` (no descriptors); the bytes sent.

    Raises:
        BlockingIOError: the socket's buffer is full (nothing was sent).
    """
    return sock.sendmsg(buffers)


# The pure ones keep their names above, for the tests that hold the twins side by side.
receive = py_receive
send_buffers = py_send_buffers
COMPILED = False
if not extensions_disabled():
    try:
        from ._cframes import (  # type: ignore[assignment]
            frame_header,
            parse_inline,
            receive,
            send_buffers,
        )
    except ImportError:  # not built here (no compiler when installed): the Python ones
        pass
    else:
        COMPILED = True
