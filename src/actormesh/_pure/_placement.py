"""Placement of one-actor processes on a host, planned: CPU sets and GPUs per rank.

Given the CPUs and GPUs a process may hand out and what each actor asks for, `plan`
gives every rank its own disjoint CPU set and GPU list, or says clearly why they do not
fit. Pure: the facts come in as arguments (``_api._host_resources`` reads them from the
system and applies the plan).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Placement", "plan", "resources_from"]

_RESOURCE_KEYS = {"CPU": "cpus", "GPU": "gpus", "num_cpus": "cpus", "num_gpus": "gpus"}


@dataclass(frozen=True)
class Placement:
    """Where one actor's process runs.

    Attributes:
        cpus: the CPUs it may run on (empty: wherever the system puts it).
        gpus: the GPU ids for its ``CUDA_VISIBLE_DEVICES`` (``None``: leave it unset).
    """

    cpus: tuple[int, ...] = ()
    gpus: tuple[str, ...] | None = None

    def env(self) -> dict[str, str]:
        """Environment variables that carry this placement into the process."""
        env = {}
        if self.gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpus)
        if self.cpus:
            # Thread pools (OpenMP, MKL, torch) size themselves from these, not from the
            # affinity mask alone; one thread per CPU of the set avoids oversubscription.
            env["OMP_NUM_THREADS"] = str(len(self.cpus))
        return env


def resources_from(resources: Mapping[str, float]) -> tuple[int | None, int | None]:
    """``(cpus, gpus)`` per actor from a Ray-style ``{"CPU": 2, "GPU": 1}`` mapping.

    Raises:
        ValueError: an unknown resource, or an amount that is not a whole number >= 0.
    """
    amounts: dict[str, int | None] = {"cpus": None, "gpus": None}
    for key, value in resources.items():
        field = _RESOURCE_KEYS.get(key)
        if field is None:
            known = ", ".join(sorted(_RESOURCE_KEYS))
            raise ValueError(f"unknown resource {key!r} (known on this host: {known})")
        if isinstance(value, bool) or not float(value).is_integer() or value < 0:
            raise ValueError(
                f"resource {key!r} must be a whole number of at least 0 here, not {value!r} "
                "(fractions of a CPU or GPU are not shared out on one host)"
            )
        amounts[field] = int(value)
    return amounts["cpus"], amounts["gpus"]


def plan(
    count: int,
    *,
    cpus_per_actor: int | None,
    gpus_per_actor: int | None,
    cpus: Sequence[int],
    gpus: Sequence[str],
) -> list[Placement]:
    """Disjoint CPU sets and GPU lists for ``count`` actors, rank order.

    Args:
        count: number of actors (one process each).
        cpus_per_actor: CPUs each gets for itself (``None`` or 0: no pinning).
        gpus_per_actor: GPUs each gets (``None``: ``CUDA_VISIBLE_DEVICES`` untouched;
            0: no GPU visible).
        cpus: the CPUs available (this process' affinity), in order.
        gpus: the GPU ids available, in order.

    Raises:
        ValueError: a negative amount, or not enough CPUs or GPUs for every actor.
    """
    for what, amount in (("cpus_per_actor", cpus_per_actor), ("gpus_per_actor", gpus_per_actor)):
        if amount is not None and (isinstance(amount, bool) or amount < 0):
            raise ValueError(f"{what} must be at least 0, not {amount!r}")
    cpu_sets: list[tuple[int, ...]] = [()] * count
    if cpus_per_actor:
        ordered = sorted(cpus)
        if cpus_per_actor * count > len(ordered):
            raise ValueError(
                f"{count} actors × {cpus_per_actor} CPU(s) need {cpus_per_actor * count} "
                f"CPUs, but this process may use {len(ordered)} ({_ranges(ordered)})"
            )
        cpu_sets = [
            tuple(ordered[i * cpus_per_actor : (i + 1) * cpus_per_actor]) for i in range(count)
        ]
    gpu_sets: list[tuple[str, ...] | None] = [None] * count
    if gpus_per_actor is not None:
        if gpus_per_actor * count > len(gpus):
            found = ", ".join(gpus) or "none"
            raise ValueError(
                f"{count} actors × {gpus_per_actor} GPU(s) need {gpus_per_actor * count} "
                f"GPUs, but {len(gpus)} are visible here ({found})"
            )
        gpu_sets = [
            tuple(gpus[i * gpus_per_actor : (i + 1) * gpus_per_actor]) for i in range(count)
        ]
    return [Placement(c, g) for c, g in zip(cpu_sets, gpu_sets)]


def _ranges(cpus: Sequence[int]) -> str:
    return ",".join(str(c) for c in cpus) or "none"
