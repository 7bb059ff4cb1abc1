"""Helpers of the multi-host tests: hosts as network namespaces, closed sockets."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent

# One /24 per test session, so runs side by side do not share addresses.
SUBNET = f"10.77.{os.getpid() % 250 + 1}"
TAG = f"{os.getpid() % 100000:05d}"  # interface names are limited to 15 characters


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


@dataclass(frozen=True)
class Host:
    """A network namespace standing in for a host."""

    netns: str
    ip: str


@dataclass
class Network:
    """The controller's address on the bridge and the hosts behind it."""

    controller_ip: str
    hosts: list[Host]
    _workers: list[subprocess.Popen[str]] = field(default_factory=list)

    def start_worker(self, host: Host, join: str, secret: str, *args: str) -> subprocess.Popen[str]:
        """Run ``actormesh worker --join JOIN`` inside ``host`` with the given secret."""
        return self._start(host, "worker", join, secret, *args)

    def start_agent(self, host: Host, join: str, secret: str, *args: str) -> subprocess.Popen[str]:
        """Run ``actormesh host --join JOIN`` (the host's agent) inside ``host``."""
        return self._start(host, "host", join, secret, *args)

    def _start(
        self, host: Host, command: str, join: str, secret: str, *args: str
    ) -> subprocess.Popen[str]:
        argv = [
            "ip", "netns", "exec", host.netns,
            sys.executable, "-m", "actormesh._cli", command, "--join", join, *args,
        ]  # fmt: skip
        process = subprocess.Popen(
            argv,
            env={**os.environ, "ACTORMESH_SECRET": secret},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._workers.append(process)
        return process

    def processes_in(self, host: Host) -> list[int]:
        """Pids of the processes running inside ``host``'s namespace."""
        listed = subprocess.run(
            ["ip", "netns", "pids", host.netns], capture_output=True, text=True, timeout=30
        )
        return [int(pid) for pid in listed.stdout.split()]

    def kill_everything(self) -> None:
        for host in self.hosts:
            for pid in self.processes_in(host):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for worker in self._workers:
            with contextlib.suppress(ProcessLookupError):
                worker.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.wait(10)


def closed_on_us(sock: socket.socket) -> bool:
    """True once the peer closed ``sock`` (a reset, when our bytes were left unread)."""
    try:
        return sock.recv(100) == b""
    except ConnectionResetError:
        return True
