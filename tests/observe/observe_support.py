"""Helpers of the observability tests: jobs, pseudo-terminals and tmux, with deadlines."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ACTORMESH = [sys.executable, "-m", "actormesh._cli"]


class Terminal:
    """A process on a pseudo-terminal of ``cols`` x ``rows``: type at it, read it."""

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str] | None = None,
        cols: int = 80,
        rows: int = 24,
    ) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.proc = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=HERE,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        os.close(slave)
        self.fd = master
        self.text = ""
        self._seen = 0

    def expect(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        """Wait until ``pattern`` (a regex) appears after the last match; fail at the deadline."""
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        while True:
            found = regex.search(self.text, self._seen)
            if found:
                self._seen = found.end()
                return found
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"{pattern!r} did not appear within {timeout} s; the terminal showed:\n"
                    + self.text[-3000:]
                )
            readable, _, _ = select.select([self.fd], [], [], min(left, 0.5))
            if readable:
                try:
                    data = os.read(self.fd, 65536)
                except OSError:  # the process ended and closed the terminal
                    data = b""
                if not data and self.proc.poll() is not None:
                    raise AssertionError(
                        f"{pattern!r}: the process exited ({self.proc.returncode}); "
                        f"it showed:\n{self.text[-3000:]}"
                    )
                self.text += data.decode(errors="replace").replace("\r\n", "\n")

    def type(self, text: str) -> None:
        """Type ``text`` (``\\n`` is Enter)."""
        os.write(self.fd, text.encode())

    def wait(self, timeout: float = 30.0) -> int:
        """Wait for the process to exit, reading what it prints meanwhile."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"still running after {timeout} s:\n{self.text[-3000:]}")
            readable, _, _ = select.select([self.fd], [], [], 0.2)
            if readable:
                with contextlib.suppress(OSError):
                    self.text += os.read(self.fd, 65536).decode(errors="replace")
        return self.proc.returncode

    def close(self) -> None:
        """End the process (and its group) and close the terminal."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        with contextlib.suppress(OSError):
            os.close(self.fd)


class Job:
    """A running ``observe_job.py`` controller (see its docstring)."""

    def __init__(self, proc: subprocess.Popen[str] | None, terminal: Terminal | None) -> None:
        self.proc = proc
        self.terminal = terminal
        self.pid = 0
        self.output = ""

    def ready(self, timeout: float = 60.0) -> None:
        if self.terminal is not None:
            self.pid = int(self.terminal.expect(r"READY (\d+)", timeout).group(1))
            return
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            readable, _, _ = select.select([self.proc.stdout], [], [], 0.5)
            if readable:
                line = self.proc.stdout.readline()
                self.output += line
                if line.startswith("READY"):
                    self.pid = int(line.split()[1])
                    return
                if not line and self.proc.poll() is not None:
                    break
        raise AssertionError(f"the job did not start: {self.output}")

    def finish(self, timeout: float = 60.0) -> str:
        """Close its stdin and wait for it to end; everything it printed."""
        assert self.proc is not None
        out, _ = self.proc.communicate("", timeout=timeout)
        self.output += out
        return self.output

    def end(self) -> None:
        if self.terminal is not None:
            self.terminal.close()
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(Exception):
                self.proc.communicate("", timeout=20)
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def start_job(
    mode: str,
    size: int = 4,
    *args: str,
    env: dict[str, str] | None = None,
    terminal: bool = False,
    script: str = "observe_job.py",
) -> Job:
    """Start ``SCRIPT MODE SIZE ARGS...`` (``observe_job.py`` by default; another job
    program of this folder that prints ``READY <pid>`` too) and wait until its mesh is
    up."""
    argv = [sys.executable, str(HERE / script), mode, str(size), *args]
    if terminal:
        job = Job(None, Terminal(argv, env))
    else:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=HERE,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        job = Job(proc, None)
    job.ready()
    return job


class Tmux:
    """A tmux session of its own (``-L`` socket) running one command in an 80x24 pane."""

    def __init__(self, command: str, cols: int = 80, rows: int = 24) -> None:
        self.socket = f"actormesh-test-{os.getpid()}-{time.monotonic_ns()}"
        self._tmux(
            "new-session", "-d", "-s", "main", "-x", str(cols), "-y", str(rows),
            f"{command}; echo EXITED $?; sleep 60",
        )  # fmt: skip

    def _tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=20
        )
        if done.returncode != 0:
            raise AssertionError(f"tmux {args[0]} failed: {done.stderr}")
        return done.stdout

    def keys(self, *keys: str) -> None:
        """Press keys (tmux names: ``Enter``, ``Escape``, ``Down``; or text)."""
        self._tmux("send-keys", "-t", "main", *keys)

    def screen(self) -> str:
        """The pane's text now."""
        return self._tmux("capture-pane", "-p", "-t", "main")

    def wait_for(self, predicate_text: str, timeout: float = 30.0) -> str:
        """The screen once it shows ``predicate_text`` (a regex); fail at the deadline."""
        deadline = time.monotonic() + timeout
        regex = re.compile(predicate_text)
        while True:
            screen = self.screen()
            if regex.search(screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{predicate_text!r} not on screen after {timeout} s:\n{screen}"
                )
            time.sleep(0.1)  # polling the screen, with a deadline

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._tmux("kill-server")


def actormesh(*args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    """Run the ``actormesh`` command and capture its output."""
    return subprocess.run([*ACTORMESH, *args], capture_output=True, text=True, timeout=timeout)
