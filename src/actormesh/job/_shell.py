"""``shell``: an interactive shell on one host of a job (Monarch's ``monarch.job.shell``).

A process is started on the host, and an actor there runs ``$SHELL -i`` (``/bin/bash`` by
default) on a new pseudo-terminal, as the leader of its own session. Keystrokes travel
from this terminal to the actor on one port, the terminal's output comes back on another,
in order; a resize of this terminal is passed on. When this side's input ends, the shell
and its foreground job get SIGHUP (then SIGTERM, SIGKILL); when the shell exits, ``shell``
returns its exit status (128 + N for a signal N). Then the process is stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import shutil
import signal
import struct
import sys
import termios
import tty
from collections.abc import Iterator
from typing import Any, NamedTuple

from .._api import Actor, Channel, HostMesh, Port, PortReceiver, endpoint
from ._exec import rank_environment

__all__ = ["shell"]

_CHUNK = 16 * 1024
_GRACE = 1.0  # seconds a signalled shell gets before the next, harder signal


class _Input(NamedTuple):
    data: bytes


class _Resize(NamedTuple):
    rows: int
    columns: int


class _Close(NamedTuple):
    pass


class _Output(NamedTuple):
    data: bytes


class _Exited(NamedTuple):
    status: int


class _Failed(NamedTuple):
    error: str


def _set_size(fd: int, rows: int, columns: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))


def _size_of(fd: int) -> tuple[int, int]:
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return 24, 80
    return size.lines, size.columns


class _ShellActor(Actor):
    """Runs one interactive shell on a pseudo-terminal of its host."""

    def __init__(self) -> None:
        self._process: asyncio.subprocess.Process | None = None
        self._master: int | None = None
        self._tasks: list[asyncio.Task[None]] = []

    @endpoint
    async def start(
        self,
        output: Port[Any],
        env: dict[str, str] | None,
        workdir: str | None,
        client_cwd: str,
        terminal: str,
        size: tuple[int, int],
    ) -> Port[Any]:
        """Start the shell; the port its input goes to."""
        if self._process is not None:
            raise RuntimeError("the shell is already running")
        master, slave = os.openpty()
        _set_size(master, *size)
        child_env = {**os.environ, **rank_environment(), **(env or {}), "TERM": terminal}
        program = child_env.get("SHELL", "/bin/bash")
        setsid = shutil.which("setsid")
        if setsid is None:
            os.close(master)
            os.close(slave)
            raise RuntimeError("shell needs util-linux's setsid on the host")
        try:
            self._process = await asyncio.create_subprocess_exec(
                setsid,
                "--ctty",  # a session of its own, this terminal its controlling one
                program,
                "-i",
                stdin=slave,
                stdout=slave,
                stderr=slave,
                cwd=workdir or (client_cwd if os.path.isdir(client_cwd) else None),
                env=child_env,
            )
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        self._master = master
        port, receiver = Channel[Any].open()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._copy_output(output)),
            loop.create_task(self._copy_input(receiver)),
        ]
        return port

    async def _copy_output(self, output: Port[Any]) -> None:
        assert self._master is not None and self._process is not None
        loop = asyncio.get_running_loop()
        try:
            while True:
                try:
                    data = await loop.run_in_executor(None, os.read, self._master, _CHUNK)
                except OSError as error:
                    if error.errno == errno.EIO:  # the terminal's last user is gone
                        break
                    raise
                if not data:
                    break
                output.send(_Output(data))
            code = await self._process.wait()
            output.send(_Exited(code if code >= 0 else min(128 - code, 255)))
        except Exception as error:
            with contextlib.suppress(Exception):
                output.send(_Failed(str(error)))

    async def _copy_input(self, receiver: PortReceiver[Any]) -> None:
        assert self._master is not None
        while True:
            message = await receiver.recv()
            if isinstance(message, _Input):
                os.write(self._master, message.data)
            elif isinstance(message, _Resize):
                _set_size(self._master, message.rows, message.columns)
            else:
                await self._stop_shell()
                return

    async def _stop_shell(self) -> None:
        """SIGHUP, then SIGTERM, then SIGKILL to the shell and its foreground job."""
        process = self._process
        if process is None or process.returncode is not None:
            return
        groups = {process.pid}
        if self._master is not None:
            with contextlib.suppress(OSError):
                groups.add(os.tcgetpgrp(self._master))
        groups.discard(os.getpgrp())
        for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGKILL):
            for group in groups:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(group, sig)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(process.wait(), _GRACE)
                return

    async def __cleanup__(self, exc: Exception | None) -> None:
        await self._stop_shell()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._master is not None:
            with contextlib.suppress(OSError):
                os.close(self._master)
            self._master = None


@contextlib.contextmanager
def _raw(fd: int) -> Iterator[None]:
    """This terminal in raw mode (keys go through as typed), if it is one."""
    if not os.isatty(fd):
        yield
        return
    saved = termios.tcgetattr(fd)
    tty.setraw(fd)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


async def _forward(
    input_port: Port[Any], output: PortReceiver[Any], stdin: int, stdout: int
) -> int:
    """Copy this terminal to the shell and back until the shell exits; its status."""
    loop = asyncio.get_running_loop()
    ended = asyncio.Event()

    def readable() -> None:
        try:
            data = os.read(stdin, _CHUNK)
        except OSError:
            data = b""
        if data:
            input_port.send(_Input(data))
            return
        loop.remove_reader(stdin)
        input_port.send(_Close())  # our input ended: so does the shell
        ended.set()

    def resized() -> None:
        input_port.send(_Resize(*_size_of(stdin)))

    loop.add_reader(stdin, readable)
    with contextlib.suppress(ValueError, RuntimeError):  # not the main thread: no resizes
        loop.add_signal_handler(signal.SIGWINCH, resized)
    try:
        while True:
            message = await output.recv()
            if isinstance(message, _Output):
                try:
                    os.write(stdout, message.data)
                except OSError:
                    input_port.send(_Close())
                    raise
            elif isinstance(message, _Exited):
                return message.status
            else:
                raise RuntimeError(f"the remote shell failed: {message.error}")
    finally:
        if not ended.is_set():
            loop.remove_reader(stdin)
        with contextlib.suppress(ValueError, RuntimeError):
            loop.remove_signal_handler(signal.SIGWINCH)


async def _session(host: HostMesh, env: dict[str, str] | None, workdir: str | None) -> int:
    stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()
    sys.stdout.flush()
    procs = host.spawn_procs()
    try:
        actor = procs.spawn("shell", _ShellActor)
        output_port, output = Channel[Any].open()
        input_port = await actor.start.call_one(
            output_port,
            env,
            workdir,
            os.getcwd(),
            os.environ.get("TERM", "xterm-256color"),
            _size_of(stdin),
        )
        with _raw(stdin):
            return await _forward(input_port, output, stdin, stdout)
    finally:
        await procs.stop()


def shell(
    host_mesh_singleton: HostMesh, *, env: dict[str, str] | None = None, workdir: str | None = None
) -> int:
    """Run an interactive shell on a one-host mesh, wired to this process' terminal
    (``sys.stdin``/``sys.stdout``); the shell's exit status.

    Args:
        host_mesh_singleton: a host mesh of exactly one host (slice one out).
        env: variables added to the shell's environment (``SHELL`` picks the shell).
        workdir: where it starts; default this process' working directory, if the host
            has it.

    Raises:
        ValueError: the mesh has more than one host.
        OSError: this side's output cannot be written (the shell is ended first).
    """
    if host_mesh_singleton.size() != 1:
        raise ValueError("shell requires a singleton HostMesh; slice the mesh to one host first")
    return asyncio.run(_session(host_mesh_singleton, env, workdir))
