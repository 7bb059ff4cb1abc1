"""Plain classes (no base class), as the Ray ActorMesh proposal's users write them."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from actormesh.ray import ActorMesh, method


def split_first_argument(mesh: ActorMesh[Any], name: str, *args: Any, **kwargs: Any) -> Any:
    """The proposal's python dispatch: split argument 0 over the actors, concatenate."""
    import ray

    parts = np.array_split(args[0], mesh.num_actors)
    refs = [
        getattr(actor, name).remote(parts[i], *args[1:], **kwargs)
        for i, actor in enumerate(mesh.actors)
    ]
    return [value for part in ray.get(refs) for value in part]


def split_tensor(mesh: ActorMesh[Any], name: str, *args: Any, **kwargs: Any) -> Any:
    """The proposal's torch dispatch: ``tensor_split`` over the actors, ``concat`` back."""
    import ray

    parts = torch.tensor_split(args[0], mesh.num_actors)
    refs = [
        getattr(actor, name).remote(parts[i], *args[1:], **kwargs)
        for i, actor in enumerate(mesh.actors)
    ]
    return torch.concat(ray.get(refs))


class Member:
    """Knows its rank from ``RAY_ACTOR_MESH_RANK``."""

    def __init__(self, offset: int = 0) -> None:
        self.rank = int(os.environ["RAY_ACTOR_MESH_RANK"])
        self.offset = offset

    @method
    def f(self, x: int) -> int:
        return x + self.offset

    def undecorated(self, x: int) -> int:
        return x * 10

    @method
    def env(self, name: str) -> str | None:
        return os.environ.get(name)

    @method
    def whoami(self) -> int:
        return self.rank

    @method(dispatch_fn=split_first_argument)
    def process(self, values: Any, y: int) -> list[int]:
        return [int(x) + y for x in values]

    @method(dispatch_fn=split_tensor)
    def torch_process(self, batch: torch.Tensor, value: int) -> torch.Tensor:
        return batch + value

    @method(num_returns=2)
    def pair(self, x: int) -> tuple[int, int]:
        return x, self.rank

    @method
    def hold_until(self, path: str, deadline_s: float) -> int:
        """Stay busy until ``path`` exists (or the deadline passes); the rank."""
        end = time.monotonic() + deadline_s
        while not Path(path).exists() and time.monotonic() < end:
            time.sleep(0.01)
        return self.rank


class Trainer:
    """Holds weights that change with each step."""

    def __init__(self) -> None:
        self.weights = torch.zeros(16)

    @method
    def step(self) -> None:
        self.weights += 1

    @method
    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"w": self.weights.clone()}


class Generator:
    """Takes the trainer's weights (an ObjectRef resolved by Ray on the way in)."""

    def __init__(self) -> None:
        self.weights = torch.full((16,), -1.0)

    @method
    def load(self, state: dict[str, torch.Tensor]) -> float:
        self.weights = state["w"].clone()
        return float(self.weights.sum())


class Pusher:
    """Holds a mesh of generators (handed to its constructor) and calls it itself."""

    def __init__(self, generators: ActorMesh[Any]) -> None:
        self.generators = generators

    @method
    def push(self, state: dict[str, torch.Tensor]) -> list[float]:
        import ray

        return ray.get(self.generators.methods.load.all(state))  # type: ignore[no-any-return]

    @method
    def push_to(self, generators: ActorMesh[Any], state: dict[str, torch.Tensor]) -> float:
        """Through a mesh passed as an argument: its own ``choose``."""
        import ray

        return ray.get(generators.methods.load.choose(state))  # type: ignore[no-any-return]


class Entering:
    """Marks each call's start in a directory, then holds until a gate opens."""

    @method
    def enter_and_hold(self, directory: str, name: str, gate: str) -> str:
        Path(directory, name).touch()
        end = time.monotonic() + 60
        while not Path(gate).exists() and time.monotonic() < end:
            time.sleep(0.01)
        return name


class Grouped:
    """A method in a concurrency group of two (the class is decorated with the groups)."""

    @method(concurrency_group="io")
    def enter_and_hold(self, directory: str, name: str, gate: str) -> str:
        return Entering().enter_and_hold(directory, name, gate)


class Counting:
    """A streaming method (``num_returns="streaming"``)."""

    @method(num_returns="streaming")
    def count_up(self, n: int) -> Any:
        for i in range(n):  # noqa: UP028 (Ray sends into it; a range iterator has no send)
            yield i

    @method
    def f(self, x: int) -> int:
        return x
