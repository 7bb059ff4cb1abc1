"""Finding actormesh's shared-memory segments held by a process, for leak checks.

Large frame parts travel in anonymous memory files (``memfd_create("actormesh")``, see
``actormesh._transport._shm``), which never appear in ``/dev/shm``: a segment lives as long
as some process holds a descriptor of it or maps it. Both show in ``/proc``: a descriptor
as the link ``/proc/<pid>/fd/<n> -> /memfd:actormesh (deleted)``, a mapping as a line of
``/proc/<pid>/maps`` naming that file. The inode tells segments apart (every descriptor
and mapping of one segment has the same), so the same segment held by two processes is
one segment.
"""

from __future__ import annotations

import contextlib
import os

__all__ = ["shm_segments"]

_MEMFD = "/memfd:actormesh"


def shm_segments(pid: int | None = None) -> dict[int, list[str]]:
    """The segments process ``pid`` (default: this one) holds, by inode, each with how:
    ``"fd 12"`` for a descriptor, ``"mapped 7f12...-7f13..."`` for a mapping. Empty once
    the process is gone (or when its ``/proc`` entries cannot be read)."""
    where = f"/proc/{pid if pid is not None else 'self'}"
    found: dict[int, list[str]] = {}
    with contextlib.suppress(OSError):
        for entry in os.listdir(f"{where}/fd"):
            with contextlib.suppress(OSError):  # closed meanwhile
                if os.readlink(f"{where}/fd/{entry}").startswith(_MEMFD):
                    inode = os.stat(f"{where}/fd/{entry}").st_ino
                    found.setdefault(inode, []).append(f"fd {entry}")
    with contextlib.suppress(OSError), open(f"{where}/maps") as maps:
        for line in maps:
            # address perms offset dev inode pathname
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith(_MEMFD):
                found.setdefault(int(fields[4]), []).append(f"mapped {fields[0]}")
    return found
