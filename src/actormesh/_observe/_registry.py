"""The per-user registry of running jobs, kept by the kernel: no file, no daemon.

Each controller listens on a Unix socket in Linux's abstract namespace named
``@actormesh-job-<uid>-<pid>-<random>``. The kernel lists every such socket in
``/proc/net/unix``, so the ``actormesh`` command finds the jobs of its user by reading that
list, and the name disappears with the last descriptor: a controller killed with SIGKILL
leaves nothing behind. The uid in the name only narrows the search; what is enforced is
the peer credentials, both ways (``actormesh._transport``): the controller accepts only
processes of its user (or root), and the command talks only to a controller of its user
(or root). The random part keeps anyone from taking a name before the job does.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass

__all__ = ["JobAddress", "find_jobs", "job_address"]

_NET_UNIX = "/proc/net/unix"


def _prefix(uid: int | None = None) -> str:
    return f"@actormesh-job-{os.getuid() if uid is None else uid}-"


@dataclass(frozen=True)
class JobAddress:
    """A running controller, as the registry lists it.

    Attributes:
        pid: the controller's process id.
        address: its job socket (``@...``).
    """

    pid: int
    address: str


def job_address(pid: int | None = None) -> str:
    """A fresh job socket name for this process (or ``pid``)."""
    return f"{_prefix()}{os.getpid() if pid is None else pid}-{secrets.token_hex(6)}"


def find_jobs(table: str | None = None, uid: int | None = None) -> list[JobAddress]:
    """The running controllers of this user (or ``uid``), oldest pid first.

    ``table``: the text of ``/proc/net/unix`` (read when ``None``).
    """
    if table is None:
        try:
            with open(_NET_UNIX, encoding="utf-8", errors="replace") as f:
                table = f.read()
        except OSError:
            return []
    prefix = _prefix(uid)
    found: dict[str, JobAddress] = {}
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8 or not fields[7].startswith(prefix):
            continue
        name = fields[7]
        pid_text = name[len(prefix) :].split("-", 1)[0]
        if pid_text.isdigit():
            # Accepted connections share the listener's name: one entry per job.
            found.setdefault(name, JobAddress(int(pid_text), name))
    return sorted(found.values(), key=lambda job: (job.pid, job.address))
