"""Several "hosts" on one Linux machine: network namespaces on a bridge.

``namespace_hosts(3)`` builds a bridge in this (root) namespace holding the controller's
address ``10.77.K.1`` and namespaces ``10.77.K.11``, ``.12``, ... plugged into it with veth
pairs, so processes inside them reach the controller and each other only over IP,
exactly as separate hosts would (they share the file system and the process table,
which actormesh never relies on across hosts). Everything is removed afterwards,
whatever happened, and every process still running in a namespace is killed first.
Creating namespaces needs root and ``ip`` (iproute2).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

__all__ = ["Host", "Network", "ip", "limit_rate", "namespace_hosts"]


def ip(*args: str) -> None:
    """Run ``ip ARGS`` (iproute2), raising ``CalledProcessError`` with its stderr."""
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
    _started: list[subprocess.Popen[str]] = field(default_factory=list)

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
        self._started.append(process)
        return process

    def processes_in(self, host: Host) -> list[int]:
        """Pids of the processes running inside ``host``'s namespace."""
        listed = subprocess.run(
            ["ip", "netns", "pids", host.netns], capture_output=True, text=True, timeout=30
        )
        return [int(pid) for pid in listed.stdout.split()]

    def kill_everything(self) -> None:
        """SIGKILL every process in the namespaces, and reap what this process started."""
        for host in self.hosts:
            for pid in self.processes_in(host):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for process in self._started:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(10)


def _teardown(bridge: str, namespaces: Sequence[str], links: Sequence[str]) -> None:
    for netns in namespaces:
        with contextlib.suppress(subprocess.CalledProcessError):
            ip("netns", "del", netns)
    # A namespace goes away once nothing holds it, which may be later: the root ends of
    # the veth pairs are removed here, not left to that.
    for link in (*links, bridge):
        with contextlib.suppress(subprocess.CalledProcessError):
            ip("link", "del", link)


_networks = itertools.count()


def limit_rate(device: str, rate: str, netns: str | None = None) -> None:
    """Make ``device`` send at most ``rate`` (``tc`` notation: ``"100mbit"``, ``"1gbit"``)
    with a token bucket, as a link of that speed would."""
    prefix = ["ip", "netns", "exec", netns] if netns else []
    # A burst of 256 KiB covers a segmentation-offloaded packet (64 KiB) several times
    # over at any rate here. 200 ms of queue: with 50 ms, 16 flows sharing one link (a
    # star) lost so many packets that one could go 25 s without a byte, and the other
    # end's TCP keepalive reset it.
    command = [*prefix, "tc", "qdisc", "replace", "dev", device, "root", "tbf"]
    command += ["rate", rate, "burst", "256kb", "latency", "200ms"]
    subprocess.run(command, check=True, capture_output=True, text=True, timeout=30)


@contextlib.contextmanager
def namespace_hosts(
    count: int, *, tag: str | None = None, rate: str | None = None
) -> Iterator[Network]:
    """``count`` namespaces on a bridge with this namespace (see the module docstring).

    ``tag`` (5 digits at most) keeps names and addresses of networks apart; by default
    it comes from this process' id and a count of the networks it made. ``rate``: every
    link sends at most this fast (``tc`` notation, ``"1gbit"``), in each direction: each
    host's uplink and downlink, and the controller's uplink (the bridge), so that what
    the controller sends to several hosts shares one link's speed, as on a real network.

    Raises:
        PermissionError: namespaces cannot be made here (not root, or no ``ip``).
    """
    tag = tag or f"{os.getpid() % 1000:03d}{next(_networks) % 100:02d}"
    subnet = f"10.77.{int(tag) % 250 + 1}" if tag.isdigit() else "10.77.251"
    bridge = f"amb{tag}"
    made: list[str] = []
    links = [f"amv{tag}{index}" for index in range(1, count + 1)]
    _teardown(bridge, [f"amh{tag}-{i}" for i in range(1, count + 1)], links)  # a stale run's
    try:
        try:
            ip("netns", "add", f"amh{tag}-1")
        except (subprocess.CalledProcessError, FileNotFoundError) as error:
            detail = getattr(error, "stderr", None) or str(error)
            raise PermissionError(f"cannot make network namespaces: {detail.strip()}") from None
        made.append(f"amh{tag}-1")
        ip("link", "add", bridge, "type", "bridge")
        ip("addr", "add", f"{subnet}.1/24", "dev", bridge)
        ip("link", "set", bridge, "up")
        hosts = []
        for index in range(1, count + 1):
            netns, outside, inside = f"amh{tag}-{index}", f"amv{tag}{index}", f"amp{tag}{index}"
            if netns not in made:
                ip("netns", "add", netns)
                made.append(netns)
            ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            ip("link", "set", inside, "netns", netns)
            ip("link", "set", outside, "master", bridge)
            ip("link", "set", outside, "up")
            ip("-n", netns, "link", "set", inside, "name", "eth0")
            ip("-n", netns, "addr", "add", f"{subnet}.{10 + index}/24", "dev", "eth0")
            ip("-n", netns, "link", "set", "eth0", "up")
            ip("-n", netns, "link", "set", "lo", "up")
            hosts.append(Host(netns, f"{subnet}.{10 + index}"))
            if rate is not None:
                limit_rate("eth0", rate, netns)  # the host's uplink
                limit_rate(outside, rate)  # its downlink
        if rate is not None:
            limit_rate(bridge, rate)  # the controller's uplink
        network = Network(f"{subnet}.1", hosts)
        try:
            yield network
        finally:
            network.kill_everything()
    finally:
        _teardown(bridge, made, links)
