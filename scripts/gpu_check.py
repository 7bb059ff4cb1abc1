"""The checks that need a GPU, in one run (not part of CI, which has none).

    PYTHONPATH=src python3 scripts/gpu_check.py      # prints one JSON report; exit 0 = all ok

1. CUDA tensors through endpoints: an argument on the GPU arrives on the GPU with its
   values, and a GPU result comes back on the GPU.
2. ``actormesh.torch.setup_process_group`` with nccl on a mesh of one process per GPU,
   and an all-reduce of a CUDA tensor inside it.
3. A service whose replicas each get an nccl group and the trainer's weights on the GPU;
   a refit; a rank SIGKILLed; the replica rebuilt with a new nccl group and the current
   weights (issue 26's GPU check).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

import torch

from actormesh import Actor, actor_mesh, endpoint, proc_mesh, spawn_service
from actormesh.torch import setup_process_group, sync_weights


class Doubler(Actor):
    @endpoint
    def double(self, x: torch.Tensor) -> dict[str, Any]:
        return {"device": str(x.device), "out": x * 2}


class Reducer(Actor):
    @endpoint
    def all_reduce(self, value: float) -> dict[str, Any]:
        import torch.distributed as dist

        t = torch.tensor([value], device="cuda")
        dist.all_reduce(t)
        return {"backend": str(dist.get_backend()), "sum": float(t.item())}


class Holder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.arange(4.0))


class Trainer(Actor):
    def __init__(self) -> None:
        self.model = Holder()

    @endpoint
    def bump(self) -> None:
        with torch.no_grad():
            self.model.w += 1


def _to_gpu(actor: Any, state: dict[str, torch.Tensor], version: int) -> None:
    actor.w = state["w"].cuda()


class GpuGen(Actor):
    def __init__(self) -> None:
        self.w: torch.Tensor | None = None

    @endpoint(idempotent=True)
    def step(self, x: float) -> dict[str, Any]:
        import torch.distributed as dist

        t = torch.tensor([x], device="cuda")
        dist.all_reduce(t)
        return {
            "backend": str(dist.get_backend()),
            "w": None if self.w is None else self.w.tolist(),
            "w_device": None if self.w is None else str(self.w.device),
        }


def check_tensors(out: dict[str, Any]) -> bool:
    with proc_mesh(gpus=1).get(timeout=120) as procs:
        doubler = procs.spawn("doubler", Doubler)
        x = torch.arange(6.0, device="cuda")
        got = doubler.double.call_one(x).get(timeout=60)
    out["tensors"] = {"arrived_on": got["device"], "result_on": str(got["out"].device)}
    return (
        got["device"].startswith("cuda")
        and got["out"].device.type == "cuda"
        and torch.equal(got["out"].cpu(), (x * 2).cpu())
    )


def check_process_group(out: dict[str, Any]) -> bool:
    with proc_mesh(gpus=torch.cuda.device_count()).get(timeout=120) as procs:
        reducers = procs.spawn("reducers", Reducer)
        setup_process_group(reducers, backend="nccl").get(timeout=120)
        answers = list(reducers.all_reduce.call(1.5).get(timeout=120).values())
    out["process_group"] = answers
    expected = 1.5 * len(answers)
    return all(a["backend"] == "nccl" and a["sum"] == expected for a in answers)


def check_service(out: dict[str, Any]) -> bool:
    started = time.perf_counter()
    trainer = actor_mesh(Trainer, shape=1, name="trainer").get(timeout=120)

    def load(actors: Any, version: int) -> Any:
        return sync_weights(trainer, actors, version=version, set_state=_to_gpu)

    service = spawn_service(
        "gpu",
        GpuGen,
        replicas=2,
        per_replica=1,
        setup=[setup_process_group],
        load_weights=load,
        router="round_robin",
    ).get(timeout=300)
    with trainer, service as svc:
        report: dict[str, Any] = {"started_s": round(time.perf_counter() - started, 2)}
        trainer.bump.call().get(timeout=60)
        svc.update_weights(1).get(timeout=120)
        victim = svc.stats()[0].pids[0]
        os.kill(victim, signal.SIGKILL)
        killed = time.perf_counter()
        during = [svc.step.answer(3.0) for _ in range(4)]
        report["during"] = [a.get(timeout=120).version for a in during]
        svc.wait_serving().get(timeout=300)
        report["rebuilt_s"] = round(time.perf_counter() - killed, 2)
        stats = svc.stats()
        report["restarts"] = [s.restarts for s in stats]
        after = [svc.step.answer(4.0).get(timeout=120) for _ in range(2)]
        report["after"] = [{"replica": a.replica, "version": a.version, **a.value} for a in after]
    out["service"] = report
    return (
        all(a["backend"] == "nccl" for a in report["after"])
        and all(
            a["w"] == [1.0, 2.0, 3.0, 4.0]
            and a["version"] == 1
            and str(a["w_device"]).startswith("cuda")
            for a in report["after"]
        )
        and {a["replica"] for a in report["after"]} == {0, 1}
        and report["restarts"][0] == 1
        and victim not in stats[0].pids
    )


def main() -> int:
    if not torch.cuda.is_available():
        print(json.dumps({"skipped": "no CUDA device here"}))
        return 2
    out: dict[str, Any] = {"gpus": torch.cuda.device_count(), "torch": torch.__version__}
    results = {}
    for name, check in (
        ("tensors", check_tensors),
        ("process_group", check_process_group),
        ("service", check_service),
    ):
        try:
            results[name] = check(out)
        except Exception as error:  # report every check, not just the first failure
            results[name] = False
            out[f"{name}_error"] = f"{type(error).__name__}: {error}"
    out["ok"] = results
    print(json.dumps(out, indent=1, default=str), flush=True)
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
