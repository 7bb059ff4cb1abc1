"""Monarch's ``monarch.spmd``: torchrun-style SPMD programs over an actor mesh.

``SPMDActor`` sets in its process the variables ``torchrun`` would (``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``GROUP_WORLD_SIZE``,
``ROLE_RANK``, ``ROLE_WORLD_SIZE``, ``ROLE_NAME``, ``MASTER_ADDR``, ``MASTER_PORT``) from
its place in the mesh, the last dimension being the processes of one host, and can run a
training script there (``main``). ``setup_torch_elastic_env(procs)`` does the set-up on a
whole process mesh, for programs that then call ``torch.distributed`` themselves.
"""

from __future__ import annotations

import math
import os
import runpy
import socket
import sys
from typing import Any

from ._api import Actor, context, endpoint
from ._hosts import Runtime
from ._transport import parse_tcp, tcp_part

__all__ = ["SPMDActor", "setup_torch_elastic_env", "setup_torch_elastic_env_async"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


class SPMDActor(Actor):
    """Sets up torch elastic's environment in its process and runs SPMD scripts."""

    def __init__(self) -> None:
        point = context().actor_instance.rank
        sizes = dict(point.extent)
        local = point.labels[-1] if point.labels else None  # the processes of one host
        self.rank = point.rank
        self.world_size = math.prod(sizes.values())
        self.local_world_size = sizes[local] if local else 1
        self.local_rank = point[local] if local else 0
        self.group_rank = self.rank // self.local_world_size
        self.group_world_size = math.ceil(self.world_size / self.local_world_size)

    def _environment(self, master_addr: str, master_port: int) -> dict[str, str]:
        return {
            "MASTER_ADDR": master_addr,
            "MASTER_PORT": str(master_port),
            "RANK": str(self.rank),
            "LOCAL_RANK": str(self.local_rank),
            "LOCAL_WORLD_SIZE": str(self.local_world_size),
            "GROUP_RANK": str(self.group_rank),
            "GROUP_WORLD_SIZE": str(self.group_world_size),
            "ROLE_RANK": str(self.rank),
            "ROLE_WORLD_SIZE": str(self.world_size),
            "ROLE_NAME": "rank",
            "WORLD_SIZE": str(self.world_size),
        }

    @endpoint
    def get_host_port(self, use_ipaddr: Any = None) -> tuple[str, int]:
        """Where the group's rendezvous can listen: this process' address as other hosts
        reach it, or loopback when it is reached on its own host only (never a host name:
        resolving one needs DNS, which a network namespace may not have), and a free port."""
        runtime = Runtime.current()
        tcp = tcp_part(runtime.address) if runtime is not None else None
        host = parse_tcp(tcp)[0] if tcp else "127.0.0.1"
        return host, _free_port()

    @endpoint
    def setup_env(self, master_addr: str, master_port: int) -> None:
        """Set torch elastic's variables in this process."""
        os.environ.update(self._environment(master_addr, master_port))

    @endpoint
    def main(self, master_addr: str, master_port: int, script_args: list[str]) -> bool:
        """Set the variables, then run a script (``["train.py", ...]``) or a module
        (``["-m", "train", ...]``) as ``__main__`` in this process; True when it returns.

        Raises:
            ValueError: no script or module given.
        """
        os.environ.update(self._environment(master_addr, master_port))
        if not script_args:
            raise ValueError("no script or module to run (script_args is empty)")
        if script_args[0] == "-m":
            sys.argv = [script_args[1], *script_args[2:]]
            runpy.run_module(script_args[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(script_args)
            runpy.run_path(script_args[0], run_name="__main__")
        return True


def setup_torch_elastic_env(
    proc_mesh: Any,
    master_addr: str | None = None,
    master_port: int | None = None,
    use_ipaddr: Any = None,
) -> None:
    """Set torch elastic's variables in every process of ``proc_mesh`` (blocks).

    Without an address, the first process picks its own and a free port.
    """
    runtime = Runtime.get()
    setup = setup_torch_elastic_env_async(proc_mesh, master_addr, master_port, use_ipaddr)
    runtime.submit(setup).result()


async def setup_torch_elastic_env_async(
    proc_mesh: Any,
    master_addr: str | None = None,
    master_port: int | None = None,
    use_ipaddr: Any = None,
) -> None:
    """``setup_torch_elastic_env`` for asyncio code."""
    actors = proc_mesh.spawn("_SPMDActor", SPMDActor)
    if master_addr is None or master_port is None:
        first = actors.slice(**dict.fromkeys(actors.shape.labels, 0))
        addr, port = await first.get_host_port.call_one(use_ipaddr)
        master_addr = master_addr or addr
        master_port = master_port or port
    await actors.setup_env.call(master_addr, master_port)
