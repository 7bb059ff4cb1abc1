"""A small post-training loop on CPU: generators, a data-parallel trainer, weights back.

The policy is a distribution over 8 tokens; a rollout samples a number of tokens that
varies a lot from prompt to prompt (as LLM rollouts do, each token costing time), and its
reward is the share of token 0. Each step:

1. generators produce rollouts through ``choose`` with the pull-based work queue: each
   generator takes the next prompt as soon as it finishes one, so long rollouts do not
   leave the others idle;
2. the trainer (2 data-parallel ranks, DDP on gloo) consumes the batch with ``shard``,
   half the rollouts on each rank, and takes a REINFORCE step;
3. ``sync_weights`` sends the new policy to the generators, tagged with the step, and the
   next rollouts say which version produced them.

The reward goes up as the policy learns to say token 0.

Run it with ``python examples/rl_loop.py`` (``--steps N``, ``--rollouts N``).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from typing import Any

import torch

from actormesh import Actor, actor_mesh, current_rank, endpoint, split_along
from actormesh.torch import setup_process_group, sync_weights, weights_version

VOCAB = 8
SECONDS_PER_TOKEN = 0.002  # what "generating" one token costs


class Policy(torch.nn.Module):
    """Learned logits over the vocabulary (no context: the simplest policy there is)."""

    def __init__(self) -> None:
        super().__init__()
        self.logits = torch.nn.Parameter(torch.zeros(VOCAB))

    def forward(self) -> torch.Tensor:
        return torch.log_softmax(self.logits, dim=0)


class Generator(Actor):
    """Samples rollouts from its copy of the policy."""

    def __init__(self) -> None:
        self.model = Policy()

    @endpoint
    def rollout(self, prompt: int) -> dict[str, Any]:
        generator = torch.Generator().manual_seed(prompt)
        length = int(torch.randint(2, 48, (1,), generator=generator))  # very uneven
        with torch.no_grad():
            probs = self.model().exp()
        tokens = torch.multinomial(probs, length, replacement=True, generator=generator)
        time.sleep(SECONDS_PER_TOKEN * length)
        return {
            "tokens": tokens,
            "reward": float((tokens == 0).float().mean()),
            "version": weights_version(self),
            "generator": current_rank().rank,
        }


class Trainer(Actor):
    """One data-parallel rank of the learner."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = Policy()
        self.optimizer: torch.optim.Optimizer | None = None

    @endpoint(dispatch=split_along("dp", collect="value_mesh"))
    def learn(self, rollouts: list[dict[str, Any]], mean: float, std: float) -> float:
        if self.optimizer is None:  # the process group exists by the first step
            self.model = torch.nn.parallel.DistributedDataParallel(self.model)
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=4.0)
        log_probs = self.model()
        loss = torch.zeros(())
        for rollout in rollouts:  # REINFORCE: push up tokens of better-than-average rollouts
            advantage = (rollout["reward"] - mean) / (std + 1e-6)
            loss = loss - advantage * log_probs[rollout["tokens"]].mean()
        loss = loss / len(rollouts)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()


def main(steps: int, rollouts: int) -> None:
    env = {"OMP_NUM_THREADS": "1"}
    generators = actor_mesh(Generator, shape=3, name="gen", choose="work_queue", env=env).get()
    trainers = actor_mesh(Trainer, shape={"dp": 2}, name="learner", env=env).get()
    with generators, trainers:
        setup_process_group(trainers).get()
        sync_weights(trainers, generators, version=0).get()
        for step in range(steps):
            started = time.perf_counter()
            # Pull-based: every generator holds one rollout at a time, the rest wait here.
            futures = [generators.rollout.choose(step * rollouts + i) for i in range(rollouts)]
            batch = [future.get() for future in futures]
            generated = time.perf_counter() - started
            tokens = Counter[int]()
            for rollout in batch:
                tokens[rollout["generator"]] += len(rollout["tokens"])
            rewards = torch.tensor([r["reward"] for r in batch])
            mean_reward, spread = rewards.mean().item(), rewards.std().item()
            # The batch is split along dp (half the rollouts each); the statistics go whole.
            losses = trainers.learn.shard(batch, mean_reward, spread).get()
            report = sync_weights(trainers, generators, version=step + 1).get()
            versions = sorted({r["version"] for r in batch})
            print(
                f"step {step}: reward {mean_reward:.3f}; {len(batch)} rollouts in "
                f"{generated:.2f} s, tokens per generator {[tokens[g] for g in range(3)]}, "
                f"made by version {versions}; loss {losses.item(dp=0):+.4f}; "
                f"weights v{report.version} sent in {report.seconds * 1e3:.1f} ms"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rollouts", type=int, default=24, help="per step (even)")
    options = parser.parse_args()
    main(options.steps, options.rollouts)
