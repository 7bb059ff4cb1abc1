"""A worker loop: a process that waits at an address and serves owners one after another
(Monarch's ``run_worker_loop_forever``).

The loop process only listens. Each owner that attaches (and passes the handshake) is
served by a **session**: a child process that is this host's agent for that owner, given
the owner's connection. When the owner goes away (it exited, was killed, or its link was
cut) the session ends with everything it started, and the loop serves the next owner at
the same address: a re-run of a controller re-attaches to the same hosts (``actormesh.job``
relies on this). Only an owner that shuts its host mesh down ends the loop
(``AgentLink.retire`` before the usual stop: the session tells the loop through a pipe),
as Monarch's worker loop ends with its host mesh.

An owner that arrives while another is served waits (its handshake is done, its agent's
HELLO comes when the session before it ended), up to its own spawn timeout.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import signal
import socket
import subprocess
import sys
from typing import Any, NoReturn

from .._transport import (
    Gatekeeper,
    accept_steps,
    bind_socket,
    format_tcp,
    is_abstract,
    open_accept_steps,
    parse_worker_address,
    peer_is_trusted,
)
from ._agent import LOOP_FD_ENV, serve_in_session
from ._lifetime import die_with_parent

__all__ = ["main", "serve_worker_loop"]

log = logging.getLogger("actormesh.hosts")

# How the loop hands a session what it needs (the owner's socket is an inherited fd).
_OWNER_FD_ENV = "ACTORMESH_LOOP_OWNER_FD"
_OWNER_ENV = "ACTORMESH_LOOP_OWNER"
_ADVERTISE_ENV = "ACTORMESH_LOOP_ADVERTISE"


def serve_worker_loop(address: str, secret: str | None) -> NoReturn:
    """Wait at ``address`` for owners and serve each in turn as this host's agent, until
    one shuts its host mesh down; then exit (``SystemExit(0)``).

    ``address`` is in any form of ``parse_worker_address`` (``tcp://host:port``,
    ``tcp://host:fdN``, ``ipc://path``, ``DIAL@BIND``, ``PROC_ID@...``); the loop listens
    at its bind side. With ``secret`` (the job's), every owner proves it before anything
    else; without, each owner is taken unauthenticated and hands over its job's secret
    (``ca="trust_all_connections"``, see ``_transport._auth``). A Unix socket admits only
    processes of this user (or root), either way.

    Raises:
        ValueError: ``address`` is not a worker address.
        OSError: it cannot be listened at (``listen: ...``: in use, not this host's).
    """
    where = parse_worker_address(address)
    if os.environ.get("ACTORMESH_PARENT_PID"):
        die_with_parent()  # started by start_worker_loop_forever: it ends with that process
    try:
        listener = bind_socket(where.bind)
    except OSError as error:
        raise OSError(error.errno, f"listen: {address}: {error.strerror or error}") from None
    unix = where.bind.transport == "unix"
    # SIGTERM (a job killed, a launcher ending) leaves through the finally below, so a
    # socket file goes with the loop; the session, if any, follows (PDEATHSIG).
    signal.signal(signal.SIGTERM, _leave_on_signal)
    arrived: queue.SimpleQueue[tuple[socket.socket, Any, Any]] = queue.SimpleQueue()

    def admit(sock: socket.socket, peer: Any, result: Any) -> None:
        if unix and not peer_is_trusted(sock):
            sock.close()  # another user's process: not an owner of ours
            return
        arrived.put((sock, peer, result))

    gate = Gatekeeper(
        listener,
        (lambda: accept_steps(secret)) if secret else open_accept_steps,
        admit,
        name=f"worker loop {address}",
    )
    gate.start()
    try:
        while True:
            sock, peer, given = arrived.get()
            if unix:
                # An owner on this host: its workers need no TCP (nobody else reaches them).
                owner, advertise = f"unix:{where.bind.path}#owner", ""
            else:
                owner = format_tcp(str(peer[0]), int(peer[1]))
                advertise = str(sock.getsockname()[0])  # where the owner reached us
            if _serve_one(sock, owner, advertise, secret or str(given)):
                break
    finally:
        gate.close()
        if unix and not is_abstract(where.bind.path):
            with contextlib.suppress(OSError):
                os.unlink(where.bind.path)
    # Monarch's worker loop never returns: its process ends with the host mesh it served.
    raise SystemExit(0)


def _leave_on_signal(signum: int, frame: Any) -> None:
    raise SystemExit(0)


def _serve_one(sock: socket.socket, owner: str, advertise: str, secret: str) -> bool:
    """Serve one owner in a session process until it ends; whether the owner retired
    this worker loop (shut its host mesh down)."""
    retired_r, retired_w = os.pipe()
    env = {
        **os.environ,
        "ACTORMESH_SECRET": secret,
        "ACTORMESH_PARENT_PID": str(os.getpid()),  # the session dies with the loop
        LOOP_FD_ENV: str(retired_w),
        _OWNER_FD_ENV: str(sock.fileno()),
        _OWNER_ENV: owner,
        _ADVERTISE_ENV: advertise,
    }
    try:
        session = subprocess.Popen(
            [sys.executable, "-m", "actormesh._hosts._worker_loop_main"],
            env=env,
            pass_fds=(sock.fileno(), retired_w),
        )
    finally:
        sock.close()  # the session has its own copy; ours would keep the owner connected
        os.close(retired_w)
    try:
        code = session.wait()
        if code != 0:
            log.warning("the session for the owner at %s ended with status %s", owner, code)
        os.set_blocking(retired_r, False)
        try:
            return bool(os.read(retired_r, 1))
        except BlockingIOError:
            return False
    finally:
        os.close(retired_r)


def main() -> None:
    """One session of a worker loop (``python -m actormesh._hosts._worker_loop_main``)."""
    sock = socket.socket(fileno=int(os.environ.pop(_OWNER_FD_ENV)))
    owner = os.environ.pop(_OWNER_ENV)
    advertise = os.environ.pop(_ADVERTISE_ENV) or None
    serve_in_session(owner, advertise, sock)
