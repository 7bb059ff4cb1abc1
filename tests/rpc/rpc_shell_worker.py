"""A worker started from a shell: ``python rpc_shell_worker.py NAME RANK WORLD_SIZE [INIT]``.

Joins through ``MASTER_ADDR``/``MASTER_PORT`` (or the ``tcp://`` init method INIT), has
rank 0 call every other worker, and prints one line: what it observed.
"""

from __future__ import annotations

import sys

import torch

from actormesh import rpc


def describe(x: torch.Tensor) -> str:
    return f"{rpc.get_worker_info().name} saw {x.tolist()}"


def main() -> None:
    name, rank, world_size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    options = None
    if len(sys.argv) > 4:
        options = rpc.TensorPipeRpcBackendOptions(init_method=sys.argv[4])
    rpc.init_rpc(name, rank=rank, world_size=world_size, rpc_backend_options=options)
    if rank == 0:
        for peer in range(1, world_size):
            print(rpc.rpc_sync(peer, describe, args=(torch.ones(2) * peer,)), flush=True)
    rpc.shutdown()
    print(f"{name} done", flush=True)


if __name__ == "__main__":
    main()
