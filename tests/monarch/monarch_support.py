"""Helpers shared by the Monarch behaviour tests (plain functions, no fixtures)."""

from __future__ import annotations

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
