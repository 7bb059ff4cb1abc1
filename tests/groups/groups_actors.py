"""Actor classes spawned by the actor-group tests.

Workers import this module by name (``conftest.py`` puts this directory on
``PYTHONPATH``), so it stays cheap to import: torch is imported by the actors that use it,
inside their methods, never here.
"""

from __future__ import annotations

import os
import time
from typing import Any

from actormesh import Actor, context, current_rank, endpoint, split_along


class Probe(Actor):
    """Reports what its process looks like: rank, environment, CPU affinity."""

    def __init__(self, tag: str = "", *, extra: int = 0, name: str = "") -> None:
        self.tag = tag
        self.extra = extra
        self.name = name

    @endpoint
    def describe(self) -> dict[str, Any]:
        return {
            "rank": current_rank().rank,
            "coords": dict(current_rank()),
            "pid": os.getpid(),
            "tag": self.tag,
            "extra": self.extra,
            "name": self.name,
            "cpus": sorted(os.sched_getaffinity(0)),
            "env": {k: v for k, v in os.environ.items() if k.startswith(("GROUP_", "OMP_"))},
            "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "actormesh_rank": os.environ.get("ACTORMESH_RANK"),
        }


class Worker(Actor):
    """Sleeps for the time it is given (scaled up on slow ranks) and says who it was.

    Args:
        slow_ranks: ranks that take ``slowdown`` times longer for the same work.
        slowdown: how much longer.
    """

    def __init__(self, slow_ranks: tuple[int, ...] = (), slowdown: float = 10.0) -> None:
        self.rank = current_rank().rank
        self.factor = slowdown if self.rank in slow_ranks else 1.0
        self.handled = 0
        self.spans: list[tuple[float, float]] = []

    @endpoint
    def work(self, seconds: float) -> int:
        start = time.monotonic()
        time.sleep(seconds * self.factor)
        self.spans.append((start, time.monotonic()))
        self.handled += 1
        return self.rank

    @endpoint
    def hold(self, gate: str) -> int:
        """Stay busy until the file ``gate`` exists: a call that ends when the test says."""
        while not os.path.exists(gate):
            time.sleep(0.005)
        return self.rank

    @endpoint
    def count(self) -> int:
        return self.handled

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def timeline(self) -> list[tuple[float, float]]:
        return self.spans

    @endpoint(choose="round_robin")
    def rotate(self) -> int:
        return self.rank


class Sharded(Actor):
    """Returns what it was given, tagged with its coordinates."""

    @endpoint(dispatch=split_along("dp"))
    def take(self, batch: Any, scale: int = 1) -> list[Any]:
        point = current_rank()
        return [(point["dp"], point.get("tp", 0), item, scale) for item in batch]

    @endpoint
    def double(self, batch: Any) -> Any:
        return batch * 2

    @endpoint
    def rank_of(self, batch: Any) -> list[int]:
        return [context().actor_instance.rank.rank] * len(batch)


class TorchWorker(Actor):
    """A small linear model for process-group and weight-sync tests.

    Args:
        width: the model's width (its size grows with its square).
        seed: seed of the initial weights (different seeds: different models).
    """

    def __init__(self, width: int = 64, seed: int = 0) -> None:
        import torch

        torch.manual_seed(seed)
        self.model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Linear(width, 1))
        self.width = width

    @endpoint
    def environment(self) -> dict[str, str]:
        names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR")
        return {name: os.environ.get(name, "") for name in (*names, "MASTER_PORT")}

    @endpoint
    def all_reduce(self, value: float) -> float:
        import torch
        import torch.distributed as dist

        tensor = torch.tensor([value])
        dist.all_reduce(tensor)
        return float(tensor.item())

    @endpoint
    def group_ready(self) -> bool:
        import torch.distributed as dist

        return bool(dist.is_initialized())

    @endpoint
    def train_step(self, seed: int) -> list[float]:
        """One DDP step on this rank's own batch; the updated weights of the first layer."""
        import torch
        from torch.nn.parallel import DistributedDataParallel

        if not isinstance(self.model, DistributedDataParallel):
            self.model = DistributedDataParallel(self.model)
        torch.manual_seed(seed + current_rank().rank)  # each rank its own batch
        batch = torch.randn(8, self.width)
        self.model(batch).pow(2).mean().backward()
        with torch.no_grad():
            for param in self.model.parameters():
                param -= 0.1 * param.grad
                param.grad = None
        return [float(v) for v in self.model.module[0].weight.flatten()[:4]]

    @endpoint
    def output(self) -> float:
        import torch

        with torch.no_grad():
            return float(self.model(torch.ones(1, self.width)).sum())

    @endpoint
    def version(self) -> int | None:
        from actormesh.torch import weights_version

        return weights_version(self)

    @endpoint
    def names(self) -> list[str]:
        return sorted(self.model.state_dict())

    @endpoint
    def weight_sum(self, name: str) -> float:
        return float(self.model.state_dict()[name].sum())

    @endpoint
    def pid(self) -> int:
        return os.getpid()


class ElasticPeer(Actor):
    """Joins the process group torch elastic's variables describe (``env://``)."""

    @endpoint
    def environment(self) -> dict[str, str]:
        names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")
        return {name: os.environ[name] for name in (*names, "MASTER_ADDR", "MASTER_PORT")}

    @endpoint
    def all_reduce(self, value: float) -> float:
        import torch
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group("gloo", init_method="env://")
        tensor = torch.tensor([value])
        dist.all_reduce(tensor)
        return float(tensor.item())
