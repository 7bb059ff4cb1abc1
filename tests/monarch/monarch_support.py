"""Helpers shared by the Monarch behaviour tests (plain functions, no fixtures)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def tcp_listening(port: int) -> bool:
    """True while some process listens on TCP ``port`` (read from /proc, not by dialling,
    so a server that serves one connection is not used up by the check)."""
    wanted = f":{port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[1].endswith(wanted) and fields[3] == "0A":  # 0A: LISTEN
                return True
    return False


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants."""
    found, todo = [pid], [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                kids = Path(f"/proc/{parent}/task/{tid}/children").read_text().split()
            except OSError:
                continue
            for kid in map(int, kids):
                if kid not in found:
                    found.append(kid)
                    todo.append(kid)
    return found


def listening_ports(pid: int) -> list[int]:
    """TCP ports that ``pid`` or one of its descendants listens on (read from /proc: the
    inodes of their sockets, matched against the kernel's tables). A server started on
    port 0 picks a free port itself; this is how the test learns which."""
    inodes = set()
    for member in _tree(pid):
        try:
            fds = os.listdir(f"/proc/{member}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{member}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    ports = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.append(int(fields[1].rsplit(":", 1)[1], 16))
    return sorted(set(ports))
