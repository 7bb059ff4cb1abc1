"""Conformance program modelled on the example in the Ray ActorMesh proposal's module
(the ``__main__`` block of ``python/ray/actor_mesh.py`` in ray-project/ray#54760).

What it checks, on a one-dimensional mesh of three ``Ledger`` actors:

- ``ActorMesh(cls, (), {}, shape=(3,))`` starts one actor per slot, and each finds its
  slot in the ``RAY_ACTOR_MESH_RANK`` environment variable (a decimal string);
- ``mesh.methods.<name>.all(...)`` returns a list of ObjectRefs, one per actor in rank
  order; ``choose(...)`` returns one ObjectRef from one of the actors;
- ``@method(dispatch_fn=...)`` and ``shard(...)``: one dispatch function cuts a numpy
  array with ``np.array_split``, another a tensor with ``torch.tensor_split``; each
  sends piece ``i`` to actor ``i`` and joins the answers, so the results show which
  actor handled which piece;

and then, on a (2, 3) mesh built with constructor arguments, that ``num_actors`` is 6
and the ranks run from 0 to 5.
"""

from __future__ import annotations

import os

import numpy as np
import ray
import torch
from ray.actor_mesh import ActorMesh, method


def split_array(mesh, name, values, *rest, **options):
    """Cut ``values`` into ``mesh.num_actors`` nearly equal runs; actor i gets run i."""
    runs = np.array_split(np.asarray(values), mesh.num_actors)
    handles = mesh.actors
    pending = [
        getattr(handles[i], name).remote(run, *rest, **options) for i, run in enumerate(runs)
    ]
    joined = []
    for part in ray.get(pending):
        joined.extend(part)
    return joined


def split_rows(mesh, name, rows, *rest, **options):
    """Split a tensor along dim 0 into ``mesh.num_actors`` blocks and stack the answers."""
    blocks = torch.tensor_split(rows, mesh.num_actors, dim=0)
    pending = [
        getattr(handle, name).remote(block, *rest, **options)
        for handle, block in zip(mesh.actors, blocks, strict=True)
    ]
    return torch.cat(ray.get(pending), dim=0)


class Ledger:
    def __init__(self, opening: int = 0, label: str = "ledger"):
        self.slot = int(os.environ["RAY_ACTOR_MESH_RANK"])
        self.opening = opening
        self.label = label
        print(f"{label} slot {self.slot} opened with {opening}")

    @method
    def identify(self) -> tuple[str, int, int]:
        return self.label, self.slot, self.opening

    @method
    def weigh(self, grams: int, *, tare: int = 0) -> int:
        return grams - tare + 1000 * self.slot

    @method(dispatch_fn=split_array)
    def stamp(self, run, bump: int) -> list[tuple[int, int]]:
        return [(self.slot, int(v) + bump) for v in run]

    @method(dispatch_fn=split_rows)
    def offset_rows(self, block: torch.Tensor, factor: float) -> torch.Tensor:
        return block * factor + self.slot


if __name__ == "__main__":
    ray.init(num_cpus=4, include_dashboard=False)
    try:
        row = ActorMesh(Ledger, (), {}, shape=(3,))
        assert row.num_actors == 3 and len(row.actors) == 3

        refs = row.methods.identify.all()
        assert isinstance(refs, list) and len(refs) == 3
        assert all(isinstance(r, ray.ObjectRef) for r in refs)
        assert ray.get(refs) == [("ledger", s, 0) for s in range(3)], ray.get(refs)
        assert ray.get(row.methods.weigh.all(50, tare=8)) == [42, 1042, 2042]

        one = row.methods.weigh.choose(7)
        assert isinstance(one, ray.ObjectRef)
        assert ray.get(one) in {7, 1007, 2007}
        print("all/choose OK")

        stamped = row.methods.stamp.shard(np.arange(7), 100)
        # array_split of 7 items over 3 actors: runs of 3, 2 and 2.
        expected = [(0, 100), (0, 101), (0, 102), (1, 103), (1, 104), (2, 105), (2, 106)]
        assert stamped == expected, stamped

        grid = torch.arange(8, dtype=torch.float32).reshape(4, 2)
        out = row.methods.offset_rows.shard(grid, 0.5)
        # tensor_split of 4 rows over 3 actors: rows [0, 1], [2], [3].
        slots = torch.tensor([0.0, 0.0, 1.0, 2.0]).unsqueeze(1)
        assert out.shape == (4, 2) and torch.equal(out, grid * 0.5 + slots), out
        print("shard with numpy and torch dispatch functions OK")

        plane = ActorMesh(Ledger, (5,), {"label": "plane"}, shape=(2, 3))
        assert plane.num_actors == 6
        assert ray.get(plane.methods.identify.all()) == [("plane", s, 5) for s in range(6)]
        print("(2, 3) mesh: 6 actors, slots 0..5")
    finally:
        ray.shutdown()
