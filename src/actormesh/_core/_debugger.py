"""Breakpoints in actors: ``pdb`` running in a worker, typed at from the controller's side.

``breakpoint()`` (or ``actormesh.debug()``) in an endpoint stops that actor's thread in a
``pdb`` whose input and output travel to the worker's owner over a connection opened for
this stop alone, read and written by the stopped thread itself with blocking calls. The
worker's event loop plays no part, so a stop inside an ``async`` endpoint (which blocks
the loop) still talks; and since the owner knows the worker is at a breakpoint, its
silence to heartbeats meanwhile is no death (see ``Children.debugging`` in ``_hosts``).

The frames (``DEBUG``, session, op) + a pickled dict::

    worker -> owner   "open"   who stopped (mesh, rank, coordinates, endpoint, where)
                      "state"  stopped again (where) or running on to a breakpoint
                      "out"    text pdb printed
                      "read"   pdb waits for a line
                      "close"  the session is over (continued, or quit)
    owner -> worker   "in"     a line typed at the prompt

An owner that is not the controller (a host agent) passes them on by session id.
``quit`` ends the session by raising ``bdb.BdbQuit`` in the endpoint (its caller gets
that error), as it would in a local pdb; ``continue`` resumes the actor.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pdb
import pickle
import socket
import sys
import threading
from types import FrameType
from typing import Any

from .._transport import connect_address, read_frame, write_frame
from . import _headers as hdr
from ._mailbox import CURRENT_MESSAGE

__all__ = ["debug", "install", "paused", "set_trace"]

# Actors stopped at a breakpoint in this process, by (mesh id, rank): what the answer to
# an OBSERVE says of them (written by the stopped threads, read on the loop).
_PAUSED: dict[tuple[str, int], dict[str, Any]] = {}
_SESSIONS = itertools.count(1)


def paused() -> dict[tuple[str, int], dict[str, Any]]:
    """The actors of this process stopped at a breakpoint now."""
    return dict(_PAUSED)


# What ``ray.init()`` puts in ``PYTHONBREAKPOINT`` (``ray.util.rpdb.set_trace`` or
# ``..._driver_set_trace``).
_RAYS_DEBUGGER = "ray.util.rpdb."


def install() -> None:
    """Make ``breakpoint()`` in this worker open a session with the owner.

    ``PYTHONBREAKPOINT`` keeps its meaning: ``0`` turns breakpoints off and any other
    value picks that debugger (the default hook honours both). Except Ray's: ``ray.init()``
    sets it in the process that calls it (a controller that also uses Ray), and this
    worker would inherit a debugger that works only in Ray's own processes.
    """
    chosen = os.environ.get("PYTHONBREAKPOINT", "")
    if chosen and not chosen.startswith(_RAYS_DEBUGGER):
        return
    sys.breakpointhook = _breakpointhook


def debug() -> None:
    """Stop here in a debugger: ``breakpoint()`` that works whatever ``PYTHONBREAKPOINT``
    says. In an actor, the actor pauses and a pdb session opens in the controller's
    terminal (or in ``actormesh debug`` from another one), naming its mesh and rank; the
    rest of the mesh keeps running, and ``continue`` resumes it. Elsewhere, plain pdb.
    """
    set_trace(sys._getframe(1))


def _breakpointhook(*args: Any, **kwargs: Any) -> None:
    set_trace(sys._getframe(1))


def set_trace(frame: FrameType) -> None:
    """Stop the calling thread in a debugger at ``frame``, driven by the owner.

    Outside an actor's message (or in a process with no owner), the local ``pdb``.
    """
    from ._runtime import CoreRuntime  # the runtime module imports this one's users

    runtime = CoreRuntime.current()
    message = CURRENT_MESSAGE.get()
    owner = runtime._parent if runtime is not None else None
    if runtime is None or owner is None or message is None:
        pdb.Pdb().set_trace(frame)
        return
    info = {
        "mesh": getattr(message, "mesh_name", "?"),
        "mesh_id": getattr(message, "mesh_id", "?"),
        "rank": getattr(message, "rank", -1),
        "point": getattr(message, "point", {}),
        "endpoint": message.endpoint,
        "pid": os.getpid(),
        "host": socket.gethostname(),  # the kernel's name for this host: no lookup
        "address": runtime.address,
        "thread": threading.current_thread().name,
        "where": _where(frame),
    }
    try:
        sock = connect_address(owner.peer, secret=runtime.secret)
    except OSError as error:
        print(f"actormesh: breakpoint ignored, cannot reach the owner: {error}", file=sys.stderr)
        return
    session = _Session(sock, f"{runtime.key}-{next(_SESSIONS)}", info)
    session.send("open", info)
    _RemotePdb(session).set_trace(frame)  # last: tracing starts as it returns


def _where(frame: FrameType) -> str:
    return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"


class _Session:
    """One stop's connection to the owner, used by the stopped thread alone (blocking)."""

    def __init__(self, sock: socket.socket, sid: str, info: dict[str, Any]) -> None:
        sock.setblocking(True)
        self.sock = sock
        self.sid = sid
        self.info = info
        self.key = (str(info["mesh_id"]), int(info["rank"]))
        self.closed = False
        _PAUSED[self.key] = info

    def send(self, op: str, details: dict[str, Any]) -> None:
        if self.closed:
            return
        parts = [hdr.encode(hdr.Debug(self.sid, op)), pickle.dumps(details, 5)]
        try:
            write_frame(self.sock, parts)
        except OSError:
            self.close()

    def receive_line(self) -> str:
        """The next line typed for this session; ``""`` once the owner is gone."""
        self.send("read", {})  # the owner lets its person type now
        while not self.closed:
            try:
                parts = read_frame(self.sock, "a debug session")
            except (OSError, ConnectionError):
                self.close()
                return ""
            header = hdr.decode(parts[0])
            if header[0] == hdr.DEBUG and hdr.read(hdr.Debug, header).op == "in":
                text = str(pickle.loads(parts[1]).get("text", ""))
                return text if text.endswith("\n") else text + "\n"
        return ""

    def state(self, running: bool, where: str = "") -> None:
        if running:
            _PAUSED.pop(self.key, None)
        else:
            self.info["where"] = where
            _PAUSED[self.key] = self.info
        self.send("state", {"running": running, "where": where})

    def close(self, why: str = "") -> None:
        if self.closed:
            return
        if why:
            self.send("close", {"why": why})
        self.closed = True
        _PAUSED.pop(self.key, None)
        with contextlib.suppress(OSError):
            self.sock.close()


class _Input:
    def __init__(self, session: _Session) -> None:
        self._session = session

    def readline(self) -> str:
        return self._session.receive_line()


class _Output:
    def __init__(self, session: _Session) -> None:
        self._session = session

    def write(self, text: str) -> int:
        if text:
            self._session.send("out", {"text": text})
        return len(text)

    def flush(self) -> None:
        pass


class _RemotePdb(pdb.Pdb):
    """``pdb`` reading and printing through a ``_Session``; tells the owner each stop."""

    def __init__(self, session: _Session) -> None:
        super().__init__(
            stdin=_Input(session),  # type: ignore[arg-type]
            stdout=_Output(session),  # type: ignore[arg-type]
            skip=["actormesh._core.*", "actormesh._api.*", "actormesh._hosts.*"],
            nosigint=True,
        )
        self.session = session
        self.use_rawinput = False

    def interaction(self, frame: FrameType | None, tb: Any) -> None:
        if self.session.closed:  # the owner is gone: nobody to ask, run on
            self.set_continue()
            return
        self.session.state(False, _where(frame) if frame is not None else "")
        super().interaction(frame, tb)

    def do_continue(self, arg: str) -> bool | None:
        resumed = super().do_continue(arg)
        if self.breaks:
            self.session.state(True)  # runs on to the next breakpoint set in this session
        else:
            self.session.close("continued")
        return resumed

    do_c = do_cont = do_continue

    def do_quit(self, arg: str) -> bool | None:
        ended = super().do_quit(arg)
        self.session.close("quit")
        return ended

    do_q = do_exit = do_quit

    def do_EOF(self, arg: str) -> bool | None:
        ended = super().do_EOF(arg)
        self.session.close("quit")
        return ended
