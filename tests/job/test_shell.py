"""``shell``: an interactive shell on one host, wired to this process' stdin/stdout (pipes
here); its exit status comes back, and the end of our input ends it and its foreground
job. Monarch's own ``test_shell.py`` also passes (scripts/monarch-suite)."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from actormesh.actor import HostMesh, this_host
from actormesh.job import ProcessJob, shell


class _Keys:
    """The write end of the shell's stdin, closed once (its number may be reused after)."""

    def __init__(self, fd: int) -> None:
        self.fd: int | None = fd
        self._lock = threading.Lock()

    def type(self, text: str) -> None:
        assert self.fd is not None
        os.write(self.fd, text.encode())

    def close(self) -> None:
        with self._lock:
            fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)


@contextmanager
def _terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[_Keys, int]]:
    """sys.stdin and sys.stdout on pipes; yields (stdin's writer, the read end of stdout)."""
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    keys = _Keys(stdin_w)
    with os.fdopen(stdin_r, "r") as stdin, os.fdopen(stdout_w, "w") as stdout:
        monkeypatch.setattr(sys, "stdin", stdin)
        monkeypatch.setattr(sys, "stdout", stdout)
        try:
            yield keys, stdout_r
        finally:
            monkeypatch.undo()
            keys.close()
    # (the caller closes stdout_r once its reader saw the end of stream: now)


def _drain(fd: int, into: list[bytes]) -> threading.Thread:
    def read() -> None:
        try:
            while chunk := os.read(fd, 65536):
                into.append(chunk)
        except OSError:
            pass

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_shell_on_a_jobs_host_runs_commands_and_returns_the_exit_status(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = ProcessJob({"hosts": 2})
    try:
        hosts: HostMesh = job.state(cached_path=None).hosts
        with pytest.raises(ValueError, match="singleton"):
            shell(hosts)
        out: list[bytes] = []
        with _terminal(monkeypatch) as (keys, screen):
            keys.type('echo "host $MONARCH_RANK_hosts says $GREETING"; exit 7\n')
            reader = _drain(screen, out)
            status = shell(hosts.slice(hosts=1), env={"GREETING": "hi"})
            sys.stdout.flush()
        reader.join(timeout=10)
        os.close(screen)
        assert status == 7
        assert b"says hi" in b"".join(out)
    finally:
        job.kill()


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_end_of_input_ends_the_shell_and_its_foreground_job(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    # 'STA''RTED': the terminal echoes what we type, so only the printf prints STARTED.
    command = f"sh -c 'echo $$ > {pid_file}; printf STA\"\"RTED; exec sleep 300'\n"
    with _terminal(monkeypatch) as (keys, screen):
        keys.type(command)

        def close_input_once_started() -> None:
            seen = b""
            while b"STARTED" not in seen:
                chunk = os.read(screen, 65536)
                if not chunk:
                    break
                seen += chunk
            keys.close()  # the end of our input, with the sleep in the foreground
            while os.read(screen, 65536):  # the rest, until the shell's side closes
                pass

        watcher = threading.Thread(target=close_input_once_started, daemon=True)
        watcher.start()
        status = shell(this_host(), env={"SHELL": "/bin/bash"})
    watcher.join(timeout=10)
    os.close(screen)
    assert status != 0  # ended by a signal, not by exit 0
    assert _gone(int(pid_file.read_text()))
