"""Fixtures for the multi-host tests: several "hosts" made of Linux network namespaces.

``network`` builds, for one test module, a bridge in this (root) namespace holding the
controller's address ``10.77.K.1`` and three namespaces ``10.77.K.11`` .. ``.13`` plugged
into it with veth pairs, so processes inside them reach the controller and each other
only over IP, exactly as separate hosts would (they share the file system, which the
tests never rely on). Everything is removed afterwards, whatever happened, and every
process still running in a namespace is killed first. Creating namespaces needs root;
without ``ip netns`` the tests that need it are skipped, saying why.

Actor classes live in ``multihost_actors.py``; this directory goes on ``PYTHONPATH`` so
that workers, wherever they run, import them by name.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence

import pytest
from multihost_support import HERE, SUBNET, TAG, Host, Network, ip

os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p
)


def _teardown(bridge: str, namespaces: Sequence[str]) -> None:
    for netns in namespaces:
        with contextlib.suppress(subprocess.CalledProcessError):
            ip("netns", "del", netns)  # takes its end of the veth pair with it
    with contextlib.suppress(subprocess.CalledProcessError):
        ip("link", "del", bridge)


@pytest.fixture(scope="module")
def network() -> Iterator[Network]:
    """Three namespaces on a bridge with this namespace (see the module docstring)."""
    if shutil.which("ip") is None:
        pytest.skip("multi-host tests need the ip command (iproute2) for network namespaces")
    bridge = f"amb{TAG}"
    made: list[str] = []
    try:
        try:
            ip("netns", "add", f"amh{TAG}-1")
        except subprocess.CalledProcessError as error:
            pytest.skip(f"multi-host tests need 'ip netns' (root): {error.stderr.strip()}")
        made.append(f"amh{TAG}-1")
        ip("link", "add", bridge, "type", "bridge")
        ip("addr", "add", f"{SUBNET}.1/24", "dev", bridge)
        ip("link", "set", bridge, "up")
        hosts = []
        for index in (1, 2, 3):
            netns, outside, inside = f"amh{TAG}-{index}", f"amv{TAG}{index}", f"amp{TAG}{index}"
            if netns not in made:
                ip("netns", "add", netns)
                made.append(netns)
            ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            ip("link", "set", inside, "netns", netns)
            ip("link", "set", outside, "master", bridge)
            ip("link", "set", outside, "up")
            ip("-n", netns, "link", "set", inside, "name", "eth0")
            ip("-n", netns, "addr", "add", f"{SUBNET}.{10 + index}/24", "dev", "eth0")
            ip("-n", netns, "link", "set", "eth0", "up")
            ip("-n", netns, "link", "set", "lo", "up")
            hosts.append(Host(netns, f"{SUBNET}.{10 + index}"))
        network = Network(f"{SUBNET}.1", hosts)
        try:
            yield network
        finally:
            network.kill_everything()
    finally:
        _teardown(bridge, made)
