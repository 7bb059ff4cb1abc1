"""Worker processes on this host: launching them, watching them die, killing them.

A worker is ``python -m actormesh._bootstrap`` with its identity in the environment,
started fresh or forked from the owner's fork server (``_forkserver``: the same process
as far as anyone can tell, without the imports). Its
exit is seen at once through a pidfd on the owner's event loop (no polling), which gives
the exit code or signal for error messages.

No orphans: each worker starts in its own session (so its whole process group can be
killed), asks the kernel for SIGTERM when its parent dies (``PR_SET_PDEATHSIG``, set by the
bootstrap), and exits when its connection to the owner closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from ._forkserver import ForkedPopen, ForkServer, ForkServerError

__all__ = ["ChildProcess", "LaunchCommand", "describe_exit", "kill_process_group", "launch"]

# How a worker starts when nobody says otherwise.
WORKER_ARGS = ("-m", "actormesh._bootstrap")


@dataclass(frozen=True)
class LaunchCommand:
    """How to start a worker other than the usual way (Monarch's ``BootstrapCommand``).

    The process runs ``program`` with ``argv`` (``argv[0]`` included) in an environment
    made of the launching process' own (unless ``inherit_env`` is False), then ``env``
    (a ``None`` value removes the variable), then the worker's own variables
    (``ACTORMESH_*``, which no command can remove: the worker needs them).

    Attributes:
        program: the executable (a path, or a name looked up on ``PATH``).
        argv: its arguments, ``argv[0]`` first.
        env: ``(name, value)`` pairs applied in order to the inherited environment.
        inherit_env: start from the launching process' environment (else from nothing).
    """

    program: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str | None], ...] = ()
    inherit_env: bool = True

    @classmethod
    def of(
        cls,
        program: str,
        arg0: str | None,
        args: Sequence[str],
        env: Mapping[str, str | None],
        inherit_env: bool = True,
    ) -> LaunchCommand:
        """The command that runs ``program`` as ``arg0`` (default: ``program``)."""
        return cls(program, (arg0 or program, *args), tuple(env.items()), inherit_env)

    def environment(self, inherited: Mapping[str, str]) -> dict[str, str]:
        """The environment the process starts with, before the worker's own variables."""
        result = dict(inherited) if self.inherit_env else {}
        for name, value in self.env:
            if value is None:
                result.pop(name, None)
            else:
                result[name] = value
        return result

    def starts_a_worker(self) -> bool:
        """True when this is how this process starts a worker anyway (this interpreter,
        ``-m actormesh._bootstrap``): then it may be forked from the fork server, whose
        workers are the same processes (when the environment allows, see ``_forkserver``).
        """
        return self.program == sys.executable and self.argv == (sys.executable, *WORKER_ARGS)


def describe_exit(returncode: int | None) -> str:
    """Words for an exit status, e.g. "killed by SIGKILL (possibly out of memory)"."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        text = f"killed by {name}"
        if -returncode == signal.SIGKILL:
            text += " (possibly out of memory, or killed by a user)"
        return text
    return f"exited with code {returncode}"


class ChildProcess:
    """A worker process started by this one.

    Attributes:
        key: unique name of the process within the job.
        rank: its rank in its process mesh.
        listen_path: where it accepts connections.
        popen: the ``subprocess.Popen`` object (or its fork-server twin).
    """

    local = True  # on this host: its pid means something in /proc here

    def __init__(
        self,
        key: str,
        rank: int,
        listen_path: str,
        popen: subprocess.Popen[bytes] | ForkedPopen,
    ) -> None:
        self.key = key
        self.rank = rank
        self.listen_path = listen_path
        self.popen = popen
        self.pid = popen.pid
        self.stopping = False  # set when the owner asks it to exit: its death is expected
        # Why the owner killed it (missed heartbeats), said instead of "killed by SIGKILL".
        self.death_note: str | None = None
        # What the restart policy made of its death ("restarting it", "budget exhausted").
        self.restart_note: str | None = None
        self.restarts = 0  # how many processes held this rank before this one
        self.env: dict[str, str] = {}  # what it was started with beyond our environment
        self.command: LaunchCommand | None = None  # how it was started, if not as usual
        # Its TCP listening socket, made here and inherited (see Children.start_processes):
        # kept while the rank may be restarted, so a successor takes the same port.
        self.tcp_socket: socket.socket | None = None
        self._pidfd: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def returncode(self) -> int | None:
        """Exit status once reaped (negative: killed by that signal)."""
        return self.popen.returncode

    def watch(
        self, loop: asyncio.AbstractEventLoop, on_exit: Callable[[ChildProcess], None]
    ) -> None:
        """Call ``on_exit`` on ``loop`` once the process has exited and been reaped."""
        self._loop = loop
        try:
            self._pidfd = os.pidfd_open(self.pid)
        except (OSError, AttributeError):
            self._pidfd = None
        if self._pidfd is None:  # very old kernels: the child watcher of last resort
            loop.run_in_executor(None, self._wait_then, on_exit)
            return

        def readable() -> None:
            assert self._pidfd is not None
            loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
            self.popen.wait()
            on_exit(self)

        loop.add_reader(self._pidfd, readable)

    def _wait_then(self, on_exit: Callable[[ChildProcess], None]) -> None:
        self.popen.wait()
        assert self._loop is not None
        self._loop.call_soon_threadsafe(on_exit, self)

    def alive(self) -> bool:
        """True until the process has been reaped."""
        return self.popen.poll() is None

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to the worker and everything it started."""
        kill_process_group(self.pid, sig)

    def release_address(self) -> None:
        """Nobody will listen at this rank's address again: close its kept TCP socket."""
        sock, self.tcp_socket = self.tcp_socket, None
        if sock is not None:
            sock.close()


def kill_process_group(pid: int, sig: int) -> None:
    """Signal the process group led by ``pid`` (workers lead their own), ignoring the gone."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def launch(
    *,
    key: str,
    rank: int,
    listen_path: str,
    env: Mapping[str, str],
    output: str,
    tcp_socket: socket.socket | None = None,
    forks: ForkServer | None = None,
    command: LaunchCommand | None = None,
) -> ChildProcess:
    """Start one worker; its stdout/stderr are pipes when ``output`` is "prefix".

    ``tcp_socket``: a listening socket the worker inherits (its number in
    ``ACTORMESH_TCP_FD``) and accepts TCP peers on. ``forks``: fork it from this fork
    server (see ``_forkserver``) when it can, else start a fresh interpreter.
    ``command``: start it this way (a program, its arguments, its environment) instead
    of ``python -m actormesh._bootstrap`` in ours; ``env`` is added to it all the same.
    """
    base = os.environ if command is None else command.environment(os.environ)
    if forks is not None and (command is None or command.starts_a_worker()):
        try:
            child = _fork(forks, key, rank, listen_path, base, env, output, tcp_socket)
        except ForkServerError:
            pass  # the server said why (if it is broken); start it afresh
        else:
            child.command = command
            return child
    if tcp_socket is not None:
        env = {**env, "ACTORMESH_TCP_FD": str(tcp_socket.fileno())}
    if output == "prefix":
        stdout: int | None = subprocess.PIPE
    elif output == "off":
        stdout = subprocess.DEVNULL
    else:
        stdout = None
    argv: tuple[str, ...]
    if command is None:
        program, argv = sys.executable, (sys.executable, *WORKER_ARGS)
    else:
        program, argv = command.program, command.argv
    popen = subprocess.Popen(
        argv,
        executable=program,
        env={**base, **env},
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stdout,
        start_new_session=True,
        close_fds=True,
        pass_fds=() if tcp_socket is None else (tcp_socket.fileno(),),
    )
    child = ChildProcess(key, rank, listen_path, popen)
    child.env = dict(env)
    child.command = command
    child.tcp_socket = tcp_socket
    return child


def _fork(
    forks: ForkServer,
    key: str,
    rank: int,
    listen_path: str,
    base: Mapping[str, str],
    env: Mapping[str, str],
    output: str,
    tcp_socket: socket.socket | None,
) -> ChildProcess:
    """``launch`` through the fork server: the same worker, forked (see ``_forkserver``)."""
    opened: list[int] = []  # our ends to close once sent (the child has its copies)
    readers: list[IO[bytes] | None] = [None, None]
    try:
        stdin = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        opened.append(stdin)
        if output == "prefix":
            streams = []
            for index in range(2):
                read, write = os.pipe2(os.O_CLOEXEC)
                readers[index] = open(read, "rb", buffering=0)  # noqa: SIM115 (the forwarder closes it)
                opened.append(write)
                streams.append(write)
            stdout, stderr = streams
        elif output == "off":
            stdout = stderr = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
            opened.append(stdout)
        else:
            stdout, stderr = 1, 2  # the owner's own, as subprocess lets a child inherit them
        full_env = {**base, **env}
        tcp = tcp_socket.fileno() if tcp_socket is not None else None
        pid = forks.spawn(full_env, os.getcwd(), stdin, stdout, stderr, tcp)
    except BaseException:
        for reader in readers:
            if reader is not None:
                reader.close()
        raise
    finally:
        for fd in opened:
            os.close(fd)
    popen = ForkedPopen(pid, readers[0], readers[1])
    child = ChildProcess(key, rank, listen_path, popen)
    child.env = dict(env)
    child.tcp_socket = tcp_socket
    return child


def launch_agent(key: str, owner: str, secret: str) -> subprocess.Popen[bytes]:
    """Start a host agent on this host that joins ``owner`` (``tcp://``) as ``key``.

    It dies with this process (``ACTORMESH_PARENT_PID``: a signal from the kernel when
    this process dies, and its owner's connection closing); a thread reaps it, so it
    never lingers as a zombie.
    """
    env = {
        **os.environ,
        "ACTORMESH_KEY": key,
        "ACTORMESH_PARENT": owner,
        "ACTORMESH_PARENT_PID": str(os.getpid()),
        "ACTORMESH_SECRET": secret,
    }
    popen = subprocess.Popen(
        [sys.executable, "-m", "actormesh._hosts._agent_main"],
        env=env,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )
    threading.Thread(target=popen.wait, name="actormesh-agent-reaper", daemon=True).start()
    return popen
