"""The Ray ActorMesh proposal's own example (the ``__main__`` of ``ray/actor_mesh.py``).

A mesh of 3 actors of a plain class: ``mesh.methods.f.all(1)`` (one ObjectRef per actor,
in rank order), ``choose`` (one ObjectRef), ``shard`` through a ``dispatch_fn`` that
splits a list with numpy and concatenates the answers, and one that splits a tensor
with torch; then a (2, 3) mesh has 6 actors. Each actor reads its
``RAY_ACTOR_MESH_RANK`` in ``__init__`` (printed, as in the example, and returned).
"""

from __future__ import annotations

import os

import ray
import torch
from ray.actor_mesh import ActorMesh, method


def python_dispatch_fn(actor_mesh, actor_method, *args, **kwargs):
    import numpy as np

    pieces = np.array_split(args[0], actor_mesh.num_actors)
    refs = [
        getattr(actor, actor_method).remote(pieces[i], *args[1:], **kwargs)
        for i, actor in enumerate(actor_mesh.actors)
    ]
    return [item for part in ray.get(refs) for item in part]


def torch_dispatch_fn(actor_mesh, actor_method, *args, **kwargs):
    pieces = torch.tensor_split(args[0], actor_mesh.num_actors)
    refs = [
        getattr(actor, actor_method).remote(pieces[i], *args[1:], **kwargs)
        for i, actor in enumerate(actor_mesh.actors)
    ]
    return torch.concat(ray.get(refs))


class Test:
    def __init__(self):
        self.rank = os.environ["RAY_ACTOR_MESH_RANK"]
        print("actor rank = ", self.rank)

    @method
    def f(self, x: int) -> int:
        return x

    @method
    def add(self, x: int, y: int) -> int:
        return x + y

    @method
    def my_rank(self) -> str:
        return self.rank

    @method(dispatch_fn=python_dispatch_fn)
    def process(self, values, y: int):
        return [x + y for x in values]

    @method(dispatch_fn=torch_dispatch_fn)
    def torch_process(self, batch: torch.Tensor, val: int) -> torch.Tensor:
        return batch + val


if __name__ == "__main__":
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        mesh = ActorMesh(Test, (), {}, shape=(3,))
        result = mesh.methods.f.all(1)
        assert isinstance(result, list) and len(result) == 3
        assert ray.get(result) == [1, 1, 1]
        result = mesh.methods.f.choose(1)
        assert ray.get(result) == 1
        assert ray.get(mesh.methods.add.all(1, 2)) == [3, 3, 3]
        assert ray.get(mesh.methods.my_rank.all()) == ["0", "1", "2"]
        result = mesh.methods.process.shard([1, 2, 3, 4, 5, 6], 5)
        assert result == [6, 7, 8, 9, 10, 11], result
        batch = torch.eye(6)
        result = mesh.methods.torch_process.shard(batch, 1)
        assert (result == torch.eye(6) + 1).all()
        assert mesh.num_actors == 3 and mesh.shape == (3,) and len(mesh.actors) == 3
        print("mesh of 3: all/choose/shard OK")

        mesh = ActorMesh(Test, (), {}, shape=(2, 3))
        assert mesh.num_actors == 6
        assert ray.get(mesh.methods.my_rank.all()) == [str(i) for i in range(6)]
        print("mesh of (2, 3): 6 actors, ranks 0..5")
    finally:
        ray.shutdown()
