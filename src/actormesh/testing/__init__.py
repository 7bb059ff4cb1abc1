"""Tools for testing actormesh programs: several hosts on one machine, and waiting.

``namespace_hosts(n)`` makes ``n`` network namespaces on a bridge, each a stand-in for a
host (root needed); ``Network.start_agent`` runs a host agent in one, as a cluster
launcher would on a node. ``wait_until`` polls a condition under a deadline (tests never
sleep blind), ``run`` runs a coroutine with a time limit, ``process_gone`` and ``live``
say which processes have exited, ``shm_segments`` which shared-memory segments a process
holds (by descriptor or mapping; they are memory files, never named in ``/dev/shm``).
"""

from __future__ import annotations

from ._hosts import Host, Network, ip, namespace_hosts
from ._segments import shm_segments
from ._waiting import live, process_gone, run, wait_until

__all__ = [
    "Host",
    "Network",
    "ip",
    "live",
    "namespace_hosts",
    "process_gone",
    "run",
    "shm_segments",
    "wait_until",
]
