"""Tools for testing actormesh programs: several hosts on one machine.

``namespace_hosts(n)`` makes ``n`` network namespaces on a bridge, each a stand-in for a
host (root needed); ``Network.start_agent`` runs a host agent in one, as a cluster
launcher would on a node.
"""

from __future__ import annotations

from ._hosts import Host, Network, ip, namespace_hosts

__all__ = ["Host", "Network", "ip", "namespace_hosts"]
