"""The fork server's process: ``python -m actormesh._hosts._template FD PAD``.

An owner starts one (``_forkserver.ForkServer``) and it imports what a worker needs once,
then forks a worker per request: a fork costs milliseconds where a fresh interpreter
importing the library costs a tenth of a second or more per worker, on every core.

Each worker is forked as a *sibling* (``_cfork.fork_sibling``, CLONE_PARENT): the owner's
own child, as a worker it starts with ``subprocess`` is. Before it runs the worker's code
(``actormesh._bootstrap``, run as ``__main__`` the way ``python -m`` runs it) the child
takes on everything a fresh worker would have: its own session, the standard streams the
owner sent, no other descriptor, the owner's working directory and environment (in
``os.environ`` and in the memory ``/proc/<pid>/environ`` shows, so tools and the test
suites that find processes by their environment still do), and the command line
``python -m actormesh._bootstrap``.

This process itself has a small environment (``_forkserver`` gives it only the variables
that shape an interpreter's start), so nothing takes it for a worker or for a test's
process. It exits when its owner closes the socket, or dies with the owner.

Protocol (a ``SOCK_SEQPACKET`` pair, one pickle per message): first this process says
``{"ready": pid, "room": bytes}`` (``room``: the largest environment a worker may have);
then per request ``{"env", "cwd", "fds": [names]}`` with the descriptors, answered with
``{"pid": pid}`` or ``{"error": text}``.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import gc
import importlib
import io
import os
import pickle
import runpy
import signal
import socket
import sys
import threading
from typing import Any

from ._lifetime import die_with_parent

__all__ = ["main"]

_MAX_MESSAGE = 1 << 20
_MAX_FDS = 8
# What a worker runs, as ``python -m`` would.
_WORKER_MODULE = "actormesh._bootstrap"
# Imported by a worker when it hosts its first actor and answers its first call (found by
# listing a worker's modules then); no thread starts in any of them (see ``_fork``).
_FIRST_USE_MODULES = (
    "actormesh._api._actor",
    "actormesh._api._actor_mesh",
    "cloudpickle",
    "concurrent.futures.thread",
    "uuid",
    "uvloop",
)
_START_CWD = ""  # this process' working directory when it started (``main``)


def main(argv: list[str]) -> None:
    """Serve fork requests on the socket whose number is ``argv[0]`` until it closes."""
    global _START_CWD
    _START_CWD = os.getcwd()
    sock = socket.socket(fileno=int(argv[0]))
    die_with_parent(signal.SIGKILL)  # nothing of its own to clean up
    # The C environment's strings lie in the memory rewritten below: copy them to the
    # heap (clearenv, then putenv each) so no pointer is left into it, here or in a child.
    ctypes.CDLL(None).clearenv()
    for name, value in os.environ.items():
        os.putenv(name, value)
    # The worker's modules: everything ``python -m actormesh._bootstrap`` imports before it
    # reaches its owner. Imported here once; every worker forked later has them.
    # (By name, as runpy runs it: the template serves the layer above it.)
    importlib.import_module(_WORKER_MODULE)
    # And what every worker imports later, on its first actor and first call: each would
    # otherwise import them on its own, all at once, on the same few cores.
    for name in _FIRST_USE_MODULES:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)

    # ...but not the module itself: each worker runs it as ``__main__`` (runpy warns of a
    # module it would run a second time).
    del sys.modules[_WORKER_MODULE]

    # What the imports left behind is garbage in every worker: collect it once here, keep
    # the survivors out of later collections (their pages stay shared with this process
    # instead of being written by each worker's collector), and hand the freed heap back.
    gc.collect()
    gc.freeze()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)
    room = _area(env=True)[1] - _area(env=True)[0]
    _rewrite(_area(env=True), b"ACTORMESH_FORK_SERVER=1\0")  # see the module docstring
    try:
        sock.sendall(pickle.dumps({"ready": os.getpid(), "room": room}))
    except OSError:
        return  # the owner is gone already (a program that imported actormesh and ended)
    while True:
        request, fds = _receive(sock)
        if request is None:
            return  # the owner closed the socket, or is gone
        pid = -1
        try:
            pid = _fork(sock, request, fds)
        except Exception as error:
            answer: dict[str, Any] = {"error": f"{type(error).__name__}: {error}"}
        else:
            answer = {"pid": pid}
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):  # (the worker closed its own already)
                    os.close(fd)
        if pid == 0:
            # In a worker that has finished: the interpreter finalizes from here as a fresh
            # one would at the end of its main module (atexit, module globals' __del__).
            return
        sock.sendall(pickle.dumps(answer))


def _receive(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    try:
        data, ancillary, _, _ = sock.recvmsg(_MAX_MESSAGE, socket.CMSG_SPACE(_MAX_FDS * 4))
    except OSError:
        return None, []
    fds: list[int] = []
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            received = array.array("i")
            received.frombytes(payload[: len(payload) - len(payload) % received.itemsize])
            fds.extend(received)
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    return pickle.loads(data), fds


def _fork(sock: socket.socket, request: dict[str, Any], fds: list[int]) -> int:
    from ._cfork import fork_sibling

    if threading.active_count() != 1:
        raise RuntimeError("the fork server has threads: it cannot fork safely")
    named = dict(zip(request["fds"], fds, strict=True))
    pid = fork_sibling()
    if pid == 0:
        try:
            _become_worker(sock, request, named)
        except SystemExit:
            raise  # the worker's own exit status, through the interpreter's exit
        except BaseException:
            import traceback

            traceback.print_exc()
            os._exit(70)
    return pid  # 0 in the worker, once it has finished


def _become_worker(sock: socket.socket, request: dict[str, Any], fds: dict[str, int]) -> None:
    """In the forked child: take on a fresh worker's state, then run the worker."""
    os.setsid()  # its own session and process group, as start_new_session gives
    for target, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        os.dup2(fds[name], target)
    keep = {0, 1, 2}
    env = dict(request["env"])
    tcp = fds.get("tcp")
    if tcp is not None:
        moved = os.dup(tcp)  # a number of its own, kept below
        keep.add(moved)
        env["ACTORMESH_TCP_FD"] = str(moved)
    sock.close()
    for fd in _open_fds():
        if fd not in keep:
            with contextlib.suppress(OSError):  # the listing's own descriptor, gone
                os.close(fd)
    _reopen_standard_streams(env)
    cwd = request["cwd"]
    os.chdir(cwd)
    if sys.path and sys.path[0] == _START_CWD:
        sys.path[0] = cwd  # ``python -m`` puts the working directory first
    os.environ.clear()  # (unsetenv: no C pointer into the memory rewritten below)
    os.environ.update(env)
    _rewrite(_area(env=True), b"".join(f"{k}={v}\0".encode() for k, v in env.items()))
    command = [os.fsencode(sys.executable), b"-m", _WORKER_MODULE.encode()]
    _rewrite(_area(env=False), b"".join(part + b"\0" for part in command))
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    sys.argv = [sys.argv[0]]
    runpy.run_module(_WORKER_MODULE, run_name="__main__", alter_sys=True)


def _open_fds() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc/self/fd")]


def _reopen_standard_streams(env: dict[str, str]) -> None:
    # The streams a fresh interpreter would make for these descriptors: line-buffered on
    # a terminal, stderr always, or unbuffered with PYTHONUNBUFFERED.
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        old = getattr(sys, name)
        encoding = getattr(old, "encoding", None) or "utf-8"
        errors = getattr(old, "errors", None) or "strict"
        # The streams live as long as the process: no context manager to close them.
        if fd == 0:
            raw: Any = open(fd, "rb", closefd=False)  # noqa: SIM115
            stream = io.TextIOWrapper(raw, encoding=encoding, errors=errors)
        else:
            raw = open(fd, "wb", buffering=0 if unbuffered else -1, closefd=False)  # noqa: SIM115
            line = os.isatty(fd) or fd == 2
            stream = io.TextIOWrapper(
                raw, encoding=encoding, errors=errors, line_buffering=line, write_through=unbuffered
            )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _area(*, env: bool) -> tuple[int, int]:
    """Where this process' environment (or command line) lies in its memory: what
    ``/proc/<pid>/environ`` (or ``cmdline``) reads (proc(5): fields 48 to 51 of stat)."""
    with open("/proc/self/stat", "rb") as stat:
        fields = stat.read().rsplit(b")", 1)[1].split()
    start, end = (47, 48) if env else (45, 46)  # counted from field 3
    return int(fields[start]), int(fields[end])


def _rewrite(area: tuple[int, int], content: bytes) -> None:
    """Put ``content`` in that memory, the rest zeroed; it must fit."""
    start, end = area
    if len(content) > end - start:
        raise ValueError(f"{len(content)} bytes do not fit in {end - start}")
    ctypes.memmove(start, content.ljust(end - start, b"\0"), end - start)


if __name__ == "__main__":
    main(sys.argv[1:])
