"""The Ray "ActorMesh API" proposal's example, on actormesh.

A group of actors built as ``ActorMesh(Cls, args, kwargs, shape=...)`` (a process per
actor; ``shape={"dp": 2, "tp": 2}`` makes 2 × 2 = 4 of them), then the proposal's three
ways to call it: ``all`` (every actor, same arguments), ``choose`` (one actor, picked by
load), and ``shard`` (a batch split across the actors by a dispatch function: here the
proposal's ``dispatch_fn(mesh, method_name, *args)`` for a tensor, and the built-in
``split_along("dp")`` that splits along ``dp`` and replicates along ``tp``).

Plain synchronous code, as in the proposal; in asyncio code use
``await actor_mesh(Cls, args, kwargs, shape=...)`` and ``await`` each call.

Run it with ``python examples/actor_group.py``.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import torch

from actormesh import Actor, ActorMesh, current_rank, endpoint, split_along


def torch_dispatch_fn(mesh: Any, method_name: str, tensor: torch.Tensor) -> torch.Tensor:
    """The proposal's tensor dispatch: one chunk per actor, results concatenated in order."""
    actors = mesh.flatten("rank")
    chunks = torch.chunk(tensor, actors.size())
    futures = [
        getattr(actors.slice(rank=i), method_name).call_one(chunk) for i, chunk in enumerate(chunks)
    ]
    return torch.cat([future.get() for future in futures])


class Model(Actor):
    """A stand-in for a model replica; each actor knows its place in the mesh."""

    def __init__(self, scale: float, *, name: str) -> None:
        self.scale = scale
        self.name = name
        # Third-party SPMD code finds its rank without importing actormesh.
        self.rank = int(os.environ["ACTORMESH_RANK"])

    @endpoint
    def info(self) -> str:
        return f"{self.name} rank {self.rank} at {dict(current_rank())}"

    @endpoint
    def generate(self, prompt: str) -> int:
        return self.rank

    @endpoint(dispatch=torch_dispatch_fn)
    def forward(self, batch: torch.Tensor) -> torch.Tensor:
        return batch * self.scale + self.rank

    @endpoint
    def score(self, rows: list[str]) -> list[str]:
        point = current_rank()
        return [f"{row}@dp{point['dp']}" for row in rows]


def main() -> None:
    with ActorMesh(Model, (10.0,), {"name": "model"}, shape={"dp": 2, "tp": 2}) as mesh:
        print(f"{mesh.size()} actors, shape {mesh.shape}")

        # all: every actor, the same arguments.
        for line in mesh.info.all().get().values():
            print(line)

        # choose: one actor per call, the less loaded of two sampled (power of two).
        picks = Counter(mesh.generate.choose(f"prompt {i}").get() for i in range(40))
        print("choose spread 40 calls over ranks:", sorted(picks))

        # shard with the endpoint's dispatch function: a tensor split over the 4 actors.
        out = mesh.forward.shard(torch.arange(8.0)).get()
        print("shard(tensor) with torch_dispatch_fn:", out.tolist())

        # shard with a built-in dispatch, per call: split along dp, replicate along tp.
        rows = mesh.score.shard_with(split_along("dp"))(["a", "b", "c", "d"]).get()
        print("shard(list) along dp:", rows)


if __name__ == "__main__":
    main()
