"""Weight sync between two SPMD meshes: a data-parallel trainer and a generator.

The trainer mesh (2 ranks) is one ``torch.distributed`` group on gloo and trains a model
of about 100 MB with ``DistributedDataParallel``; the generator mesh (2 ranks) holds its
own copy. Each step the trainers train on their own batches (DDP keeps them identical),
``sync_weights`` sends the new weights straight from the trainer processes to the
generator processes (each trainer sends half the tensors, to both generators at once), and
the generators' output changes with the version they now hold.

Run it with ``python examples/weight_sync.py`` (``--mb 1000`` for a 1 GB model,
``--steps N`` for more steps).
"""

from __future__ import annotations

import argparse
import asyncio
import time

import torch

from actormesh import Actor, actor_mesh, current_rank, endpoint
from actormesh.torch import setup_process_group, sync_weights, weights_version

INPUT = 1024


def make_model(megabytes: float) -> torch.nn.Module:
    """Two linear layers of about ``megabytes`` MB of float32 weights in all."""
    hidden = max(1, int(megabytes * 1e6 / 4 / (2 * INPUT)))
    return torch.nn.Sequential(torch.nn.Linear(INPUT, hidden), torch.nn.Linear(hidden, INPUT))


class Trainer(Actor):
    """One data-parallel rank: DDP averages the gradients, so every replica stays equal."""

    def __init__(self, megabytes: float) -> None:
        torch.manual_seed(0)
        self.model = make_model(megabytes)
        self.optimizer: torch.optim.Optimizer | None = None

    @endpoint
    def train_step(self, step: int) -> float:
        if self.optimizer is None:  # the process group exists by the first step
            self.model = torch.nn.parallel.DistributedDataParallel(self.model)
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=1e-3)
        torch.manual_seed(1000 * step + current_rank().rank)  # this rank's own batch
        batch = torch.randn(16, INPUT)
        loss = (self.model(batch) - batch).pow(2).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()


class Generator(Actor):
    """Holds a copy of the model, updated by weight sync; answers with its output."""

    def __init__(self, megabytes: float) -> None:
        torch.manual_seed(1)  # starts with other weights than the trainers'
        self.model = make_model(megabytes)
        self.probe = torch.ones(1, INPUT)

    @endpoint
    def generate(self) -> tuple[float, int | None]:
        with torch.no_grad():
            return self.model(self.probe).sum().item(), weights_version(self)


async def main(megabytes: float, steps: int) -> None:
    env = {"OMP_NUM_THREADS": "1"}  # four processes on a small machine: no oversubscription
    trainers, generators = await asyncio.gather(
        actor_mesh(Trainer, (megabytes,), shape={"dp": 2}, name="trainer", env=env),
        actor_mesh(Generator, (megabytes,), shape={"replica": 2}, name="generator", env=env),
    )
    async with trainers, generators:
        await setup_process_group(trainers)  # gloo on CPU, nccl where GPUs are
        size = sum(p.numel() * p.element_size() for p in make_model(megabytes).parameters())
        print(f"model: {size / 1e6:.1f} MB; trainer dp=2 (DDP, gloo), generator replicas=2")
        for step in range(1, steps + 1):
            started = time.perf_counter()
            losses = await trainers.train_step.call(step)
            trained = time.perf_counter() - started
            before = [out for out, _ in (await generators.generate.call()).values()]
            report = await sync_weights(trainers, generators, version=step)
            after = list((await generators.generate.call()).values())
            changed = all(out != old for (out, _), old in zip(after, before))
            print(
                f"step {step}: loss {losses.item(dp=0):.4f} (train {trained:.2f} s); "
                f"sync {report.bytes / 1e6:.1f} MB in {report.seconds:.3f} s = "
                f"{report.mb_per_s:.0f} MB/s ({report.delivered / 1e6:.0f} MB delivered); "
                f"generators at version {sorted({v for _, v in after})}, "
                f"output {after[0][0]:+.4f} (changed: {changed})"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=100.0, help="model size in MB")
    parser.add_argument("--steps", type=int, default=3, help="train/sync steps")
    options = parser.parse_args()
    asyncio.run(main(options.mb, options.steps))
