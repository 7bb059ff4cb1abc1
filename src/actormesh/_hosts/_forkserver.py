"""The fork server: local workers forked from one pre-imported template per owner.

Starting a worker as a fresh interpreter costs its imports, about 0.15 s of CPU each on
a small machine, and a mesh of 4 on 2 cores waits for all of them. An owner (the
controller, or a host agent) instead starts one template (``_template.py``) that imports
the worker's modules once and forks each worker from there, in milliseconds.

What a worker is does not change (see ``_template``): it is the owner's own child
(reaped here, watched by pidfd, PR_SET_PDEATHSIG set by itself as before), in its own
session, with the output pipes, environment, working directory and command line a
``subprocess`` start would give it; restarts go through the same path. ``ForkedPopen`` is
the part of ``subprocess.Popen`` the runtime uses, for such a child.

The template is used only while it matches what a fresh interpreter would be: the same
interpreter and the variables that shape its start (``PYTHON*``, ``LD_*``, locale,
``PATH``, ``HOME``, ``ACTORMESH_NO_EXTENSIONS``); when those change, a new template
replaces it. Without the compiled fork (``_cfork``, or with ``Config.fork_server`` off,
``ACTORMESH_FORK_SERVER=0``), or when the template fails, workers start as fresh
interpreters, as before.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import logging
import os
import pickle
import signal
import socket
import threading
from collections.abc import Mapping
from typing import IO, Any

from .._config import extensions_disabled
from .._template_start import TemplateProcess, take_early, template_key

__all__ = ["ForkServer", "ForkServerError", "ForkedPopen", "available", "template_key"]

log = logging.getLogger("actormesh.hosts")

_MAX_MESSAGE = 1 << 20


class ForkServerError(RuntimeError):
    """The template could not fork a worker (the caller starts one the usual way)."""


def available() -> bool:
    """True when workers can be forked here (the compiled fork is built and enabled)."""
    if extensions_disabled():
        return False
    try:
        from . import _cfork  # noqa: F401
    except ImportError:
        return False
    return True


class ForkedPopen:
    """The ``subprocess.Popen`` interface the runtime uses, for a forked worker (our
    child: reaped here)."""

    def __init__(self, pid: int, stdout: IO[bytes] | None, stderr: IO[bytes] | None) -> None:
        self.pid = pid
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        """The exit status if it has exited (reaping it), else None."""
        return self._reap(os.WNOHANG)

    def wait(self, timeout: float | None = None) -> int:
        """Block until it exits; its exit status (negative: the signal that killed it)."""
        if timeout is not None:
            raise NotImplementedError("ForkedPopen.wait takes no timeout")
        status = self._reap(0)
        assert status is not None
        return status

    def _reap(self, flags: int) -> int | None:
        with self._lock:
            if self.returncode is not None:
                return self.returncode
            try:
                pid, status = os.waitpid(self.pid, flags)
            except ChildProcessError:  # reaped elsewhere: its status is lost
                self.returncode = 255
                return self.returncode
            if pid == 0:
                return None
            self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode

    def kill(self) -> None:
        """SIGKILL it (if not reaped yet)."""
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


class ForkServer:
    """One template process and the socket to it (see the module docstring).

    Start it on the thread that runs the owner's event loop and lives as long as the
    owner: the workers' parent-death signal follows the thread that started the template.
    ``ready()`` waits for its imports; ``spawn`` then forks one worker per call (any
    thread, one at a time); ``close`` ends it. A template started early in this process
    for the same environment (``_template_start.start_early``) is adopted, not started
    again.
    """

    def __init__(self, environ: Mapping[str, str]) -> None:
        key = template_key(environ)
        early = take_early(key)
        template = early or TemplateProcess(environ)
        self.key = key
        self.adopted_early = early is not None  # (for tests and diagnostics)
        self._template = template
        self._sock = template.sock
        self._lock = threading.Lock()
        self.room = 0
        self.broken: str | None = None
        self._ready: asyncio.Future[bool] | None = None

    @property
    def pid(self) -> int:
        """The template's process id."""
        return self._template.process.pid

    def fileno(self) -> int:
        """The owner's end of the socket to the template (-1 once closed)."""
        return self._sock.fileno()

    async def ready(self, timeout: float) -> bool:
        """Wait (on the owner's loop) until the template has imported; False if it failed.

        Callers that come while the first one waits wait for the same answer."""
        if self._ready is None:
            self._ready = asyncio.ensure_future(self._wait_ready(timeout))
        return await asyncio.shield(self._ready)

    async def _wait_ready(self, timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        readable: asyncio.Future[None] = loop.create_future()
        fd = self._sock.fileno()

        def woken() -> None:
            if not readable.done():
                readable.set_result(None)

        loop.add_reader(fd, woken)
        try:
            await asyncio.wait_for(readable, timeout)
        except TimeoutError:
            self._fail(f"the fork server did not start within {timeout:g} s")
            return False
        finally:
            loop.remove_reader(fd)
        self._sock.setblocking(True)  # (uvloop's add_reader made it non-blocking)
        hello = self._answer()
        if hello is None or "ready" not in hello:
            self._fail(f"the fork server did not start: {hello!r}")
            return False
        self.room = int(hello["room"])
        return True

    def spawn(
        self,
        env: Mapping[str, str],
        cwd: str,
        stdin: int,
        stdout: int,
        stderr: int,
        tcp: int | None = None,
    ) -> int:
        """Fork a worker with this environment, directory and standard streams (and a
        listening socket, if any); its pid.

        Raises:
            ForkServerError: the template cannot (its environment would not fit, it died,
                the fork failed); the caller starts the worker the usual way.
        """
        if self.broken is not None:
            raise ForkServerError(self.broken)
        if template_key(env) != self.key:
            raise ForkServerError("the environment changed since the template started")
        needed = sum(len(os.fsencode(k)) + len(os.fsencode(v)) + 2 for k, v in env.items())
        if needed > self.room:
            raise ForkServerError(f"an environment of {needed} bytes, over {self.room}")
        names, fds = ["stdin", "stdout", "stderr"], [stdin, stdout, stderr]
        if tcp is not None:
            names.append("tcp")
            fds.append(tcp)
        request = pickle.dumps({"env": dict(env), "cwd": cwd, "fds": names})
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
        with self._lock:
            try:
                self._sock.sendmsg([request], rights)
                answer = self._answer()
            except OSError as error:
                answer = {"error": f"the fork server is gone: {error}"}
        if answer is None:
            answer = {"error": "the fork server closed its socket"}
        if "pid" not in answer:
            self._fail(str(answer.get("error")))
            raise ForkServerError(str(answer.get("error")))
        return int(answer["pid"])

    def _answer(self) -> dict[str, Any] | None:
        try:
            data = self._sock.recv(_MAX_MESSAGE)
        except OSError:
            return None
        return pickle.loads(data) if data else None

    def _fail(self, why: str) -> None:
        if self.broken is None:
            log.warning("fork server (pid %s) unusable, starting workers afresh: %s", self.pid, why)
            self.broken = why
        self.close()

    def close(self) -> None:
        """End the template (it exits when its socket closes); idempotent."""
        with contextlib.suppress(OSError):
            self._sock.close()
        if self.broken is None:
            self.broken = "closed"
