"""A post-training loop whose generators are a service: 3 replicas x 2 tensor-parallel ranks.

The policy is a distribution over 8 tokens, its logits split between the two ranks of a
replica (each holds 4; a rollout gathers them over the replica's own gloo group). Each
step:

1. every prompt of the step goes to the generator service (least-loaded routing, one
   rollout at a time per replica); every rank of the chosen replica runs it, rank 0's
   answer comes back with the weight version that made it;
2. the trainer takes a REINFORCE step on the batch;
3. ``update_weights`` refits every replica from the trainer (``sync_weights``, each rank
   keeping its half); new rollouts wait for it ("pause").

With ``--kill-at STEP`` a rank of one replica is SIGKILLed while that step's rollouts are
in flight: the replica leaves rotation at once, its rollout in flight is sent again to a
healthy replica (``rollout`` is idempotent: seeded by its prompt), its queued ones move,
and the replica is rebuilt from new processes with a new gloo group and the current
weights. The loop checks that every step got each of its prompts exactly once, each made
by the current weights, and prints a summary.

Run it with ``python examples/rl_service.py`` (``--steps N``, ``--rollouts N``,
``--kill-at STEP``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from collections import Counter
from typing import Any

import torch

from actormesh import Actor, Answer, actor_mesh, endpoint, spawn_service
from actormesh.torch import setup_process_group, sync_weights, weights_version

VOCAB = 8
SECONDS_PER_TOKEN = 0.002  # what "generating" one token costs


class Policy(torch.nn.Module):
    """Learned logits over the vocabulary."""

    def __init__(self) -> None:
        super().__init__()
        self.logits = torch.nn.Parameter(torch.zeros(VOCAB))


class Generator(Actor):
    """One tensor-parallel rank of a generator replica: it holds a slice of the logits."""

    def __init__(self) -> None:
        self.shard = torch.zeros(VOCAB)  # until the first load gives it its slice

    @endpoint(idempotent=True)  # the same prompt and weights give the same rollout
    def rollout(self, prompt: int) -> dict[str, Any]:
        import torch.distributed as dist

        parts = [torch.empty_like(self.shard) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, self.shard)  # every rank of the replica takes part
        probs = torch.softmax(torch.cat(parts), dim=0)
        generator = torch.Generator().manual_seed(prompt)
        length = int(torch.randint(2, 48, (1,), generator=generator))
        tokens = torch.multinomial(probs, length, replacement=True, generator=generator)
        time.sleep(SECONDS_PER_TOKEN * length)
        return {
            "prompt": prompt,
            "tokens": tokens,
            "reward": float((tokens == 0).float().mean()),
            "version": weights_version(self),
            "pid": os.getpid(),
        }


def take_shard(actor: Generator, state: dict[str, torch.Tensor], version: int) -> None:
    """``sync_weights``' setter in each generator rank: keep this rank's slice."""
    import torch.distributed as dist

    slices = state["logits"].chunk(dist.get_world_size())
    actor.shard = slices[dist.get_rank()].clone()


class Trainer(Actor):
    """The learner (one process)."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = Policy()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=4.0)

    @endpoint
    def learn(self, rollouts: list[dict[str, Any]]) -> float:
        rewards = torch.tensor([r["reward"] for r in rollouts])
        mean, std = rewards.mean(), rewards.std()
        log_probs = torch.log_softmax(self.model.logits, dim=0)
        loss = torch.zeros(())
        for rollout in rollouts:
            advantage = (rollout["reward"] - mean) / (std + 1e-6)
            loss = loss - advantage * log_probs[rollout["tokens"]].mean()
        loss = loss / len(rollouts)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return float(loss.item())


def kill_a_rank(generators: Any) -> dict[str, Any]:
    """SIGKILL rank 1 of the replica with the most calls queued and in flight."""
    busiest = max(generators.stats(), key=lambda s: (s.queued + s.in_flight, -s.replica))
    pid = busiest.pids[1]
    os.kill(pid, signal.SIGKILL)
    return {"replica": busiest.replica, "pid": pid, "in_flight": busiest.in_flight,
            "queued": busiest.queued}  # fmt: skip


def main(steps: int, rollouts: int, kill_at: int | None) -> dict[str, Any]:
    env = {"OMP_NUM_THREADS": "1"}
    trainers = actor_mesh(Trainer, shape=1, name="learner", env=env).get()

    def load(actors: Any, version: int) -> Any:
        # Straight from the trainer's process to every rank of the replica.
        return sync_weights(trainers, actors, version=version, set_state=take_shard)

    generators = spawn_service(
        "gen", Generator, replicas=3, per_replica={"tp": 2}, env=env,
        setup=[setup_process_group], load_weights=load, refit="pause",
    ).get()  # fmt: skip
    summary: dict[str, Any] = {"steps": 0, "rollouts": 0, "retried": 0, "killed": None}
    with trainers, generators:
        for step in range(steps):
            started = time.perf_counter()
            prompts = range(step * rollouts, (step + 1) * rollouts)
            futures = [generators.rollout.answer(p) for p in prompts]
            if step == kill_at:
                summary["killed"] = kill_a_rank(generators)
            answers: list[Answer[dict[str, Any]]] = [f.get() for f in futures]
            # Each prompt exactly once, each made by this step's weights.
            counted = Counter(a.value["prompt"] for a in answers)
            assert counted == Counter(prompts), f"lost or duplicated rollouts: {counted}"
            versions = {(a.version, a.value["version"]) for a in answers}
            assert versions == {(step, step)}, f"step {step} got versions {versions}"
            summary["retried"] += sum(a.attempts > 1 for a in answers)
            by_replica = Counter(a.replica for a in answers)
            loss = trainers.learn.call_one([a.value for a in answers]).get()
            generators.update_weights(step + 1).get()
            mean = sum(a.value["reward"] for a in answers) / len(answers)
            print(
                f"step {step}: reward {mean:.3f}; {len(answers)} rollouts in "
                f"{time.perf_counter() - started:.2f} s by replica "
                f"{dict(sorted(by_replica.items()))}, version {step}; loss {loss:+.4f}"
            )
            summary["steps"] += 1
            summary["rollouts"] += len(answers)
        generators.wait_serving().get()
        stats = generators.stats()
        summary["restarts"] = [s.restarts for s in stats]
        summary["versions"] = [s.version for s in stats]
        summary["states"] = [s.state for s in stats]
        # A rebuilt replica answers with the current weights.
        check = [generators.rollout.answer(10_000 + i).get() for i in range(6)]
        summary["final_versions"] = sorted({(a.version, a.value["version"]) for a in check})
        summary["final_replicas"] = sorted({a.replica for a in check})
    print("summary " + json.dumps(summary))
    return summary


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rollouts", type=int, default=24, help="per step")
    parser.add_argument("--kill-at", type=int, default=None, help="SIGKILL a rank at this step")
    options = parser.parse_args()
    main(options.steps, options.rollouts, options.kill_at)
