"""The life of an actormesh process that an owner started: workers and host agents alike.

Such a process joins its owner over the address in ``ACTORMESH_PARENT``, then serves until
told to shut down or until the owner goes away. It never outlives the owner: the kernel
sends it SIGTERM when the owner dies (``PR_SET_PDEATHSIG``), the owner's socket closing
ends it too, and a watchdog thread waiting on the owner's pidfd ends it even when its
event loop is blocked. On the way out it kills whatever it started: its process group and
every descendant, found through the process tree because it is their subreaper (orphans
of its descendants are re-parented to it, and reaped by it). Told to shut down, it then
ends as a Python program does, finalizing its interpreter (``atexit`` handlers run, and
the finalizers of module globals, as Monarch's processes do); the watchdogs, a failure
or an owner gone end it at once (``os._exit``).

A process whose owner is on another host (``tcp://`` address; started through Ray, or
joining by itself with ``actormesh worker --join``) has no owner pid to watch: a thread
watches the owner's connection instead, and the process exits when it hangs up.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .._config import Config
from .._core import new_event_loop
from .._transport import is_tcp
from ._native_stacks import let_owner_trace
from ._output import install_prefix_streams
from ._reaper import OrphanReaper, become_subreaper, kill_tree
from ._runtime import Runtime

__all__ = ["die_with_parent", "outlive_owner", "serve"]

_PR_SET_PDEATHSIG = 1
_REAP_INTERVAL = 1.0
# Whether this process' group is its own to kill on the way out: not when someone else
# started it (``actormesh worker --join`` shares the group of the shell or launcher).
_OWN_GROUP = True
# Seconds the event loop gets to act on its owner's hang-up before a thread ends us.
_OWNER_GRACE = 2.0
# Seconds the interpreter gets to finalize once the process has served (see _leave).
_FINALIZE_LIMIT = 10
# Set once this process holds a lease (a host agent of a job with ``keep_alive``): the
# owner's death no longer ends it; the lease does (see _hosts._lease).
_OUTLIVE_OWNER = threading.Event()


def die_with_parent(signum: int = signal.SIGTERM) -> None:
    """Have the kernel send ``signum`` to this process when its parent (the thread that
    started it) ends; exit now if the parent named by ``ACTORMESH_PARENT_PID`` is gone
    already."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    # The parent may have died before prctl took effect: then we were re-parented.
    expected = os.environ.get("ACTORMESH_PARENT_PID")
    if expected and os.getppid() != int(expected):
        os._exit(0)


def outlive_owner() -> None:
    """From now on, outlive the owner: no signal from the kernel when it dies, and the
    watchdogs below let it go. What ends the process then is its own business (a host
    agent's lease)."""
    _OUTLIVE_OWNER.set()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.environ.get("ACTORMESH_PARENT_PID"):
        # Started by the owner, with the owner's output: a process that outlives it must
        # not hold its terminal or pipes open (`python train.py | tee log` would wait
        # for the lease). What it says goes to the owner as events anyway.
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.close(devnull)


def _watch_parent(parent: int) -> None:
    """End this process soon after ``parent`` dies, even if the event loop is blocked."""
    try:
        pidfd = os.pidfd_open(parent)
    except ProcessLookupError:
        _exit_now()  # gone already
    except OSError:
        return  # no pidfd support: PR_SET_PDEATHSIG and the closed socket still end us

    def wait() -> None:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        while not poller.poll():
            pass
        if not _OUTLIVE_OWNER.is_set():
            _exit_now()

    threading.Thread(target=wait, name="actormesh-parent-watch", daemon=True).start()


def _watch_owner_connection(fd: int, still_owner: Callable[[], bool]) -> None:
    """End this process soon after the owner's TCP connection closes, even if the event
    loop is blocked (an owner on another host has no pid to watch); not if by then the
    owner is reached another way (``still_owner()`` False: a host agent adopted by the
    agent above it in a tree, see ``_uplink``)."""
    ended = select.POLLRDHUP | select.POLLHUP | select.POLLERR | select.POLLNVAL

    def wait() -> None:
        poller = select.poll()
        poller.register(fd, select.POLLRDHUP)  # only hang-ups: the loop reads the data
        while not any(mask & ended for _, mask in poller.poll()):
            pass
        # A free event loop sees the hang-up too and exits cleaner (its sockets and
        # directory removed) within milliseconds; step in only when it is blocked.
        time.sleep(_OWNER_GRACE)
        if not _OUTLIVE_OWNER.is_set() and still_owner():
            _exit_now()

    threading.Thread(target=wait, name="actormesh-owner-watch", daemon=True).start()


def _exit_now() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    kill_tree(include_group=_OWN_GROUP)
    os._exit(0)


def _reap_periodically(loop: asyncio.AbstractEventLoop, reaper: OrphanReaper) -> None:
    reaper.tick()
    loop.call_later(_REAP_INTERVAL, _reap_periodically, loop, reaper)


def serve(
    key: str,
    owner: str,
    info: dict[str, Any] | None = None,
    *,
    own_group: bool = True,
    prefix_output: bool = True,
    setup: Callable[[Runtime], None] | None = None,
    owner_sock: socket.socket | None = None,
) -> None:
    """Join the owner at address ``owner`` as process ``key`` and serve until shutdown.

    ``info`` travels in the HELLO (a process that joins by itself says who it is).
    ``own_group`` False: the process group belongs to whoever started this process, so
    only this process' descendants die with it. ``prefix_output``: prefix each line this
    process prints with its actor's label (when the owner asked for
    ``ACTORMESH_OUTPUT=prefix``). ``owner_sock``: the owner's connection, already made and
    authenticated (an owner that attached to us; ``owner`` names its address).
    ``setup`` runs once the runtime is up, before the loop (what the process is for:
    hosting actors, or being a host agent).
    """
    global _OWN_GROUP
    _OWN_GROUP = own_group
    die_with_parent()
    become_subreaper()
    parent = os.environ.get("ACTORMESH_PARENT_PID")
    if parent:
        _watch_parent(int(parent))
        let_owner_trace(int(parent))  # py-spy from the owner (``stacks --native``)
    config = Config.from_env()
    if prefix_output and os.environ.get("ACTORMESH_OUTPUT") == "prefix":
        coords = os.environ.get("ACTORMESH_COORDS", "{}")
        install_prefix_streams(f"[{os.environ.get('ACTORMESH_PROC_MESH', 'procs')} {coords}]")
    loop = new_event_loop(config)
    asyncio.set_event_loop(loop)
    # An owner on this host that lets other hosts call us made our TCP socket, and so our
    # address, before we started (see Children.start_processes).
    tcp_fd = os.environ.pop("ACTORMESH_TCP_FD", None)
    address = os.environ.pop("ACTORMESH_ADDRESS", None)
    runtime = Runtime.start_worker(
        config,
        loop,
        key,
        owner,
        info,
        tcp_fd=int(tcp_fd) if tcp_fd else None,
        address=address,
        parent_sock=owner_sock,
    )
    if is_tcp(owner):
        first = runtime.connection(owner)
        _watch_owner_connection(first.fileno(), lambda: runtime.parent is first)
    if setup is not None:
        setup(runtime)
    loop.add_signal_handler(signal.SIGTERM, runtime._exit_worker, "SIGTERM")
    _reap_periodically(loop, OrphanReaper())
    try:
        loop.run_forever()
    except BaseException:
        _exit_now()
        raise
    _leave(loop)


def _leave(loop: asyncio.AbstractEventLoop) -> None:
    """Leave as a fresh interpreter does at the end of its main module: what this process
    started is killed, then the interpreter finalizes (``atexit`` handlers, the
    finalizers of module globals) within ``_FINALIZE_LIMIT`` seconds, after which
    SIGALRM ends it (a thread that never ends, a hook that hangs)."""
    kill_tree(include_group=_OWN_GROUP)
    with contextlib.suppress(Exception):
        loop.close()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(_FINALIZE_LIMIT)
