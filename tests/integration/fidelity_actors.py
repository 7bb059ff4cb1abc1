"""The actor and the tensors of ``test_tensor_fidelity.py``.

Workers import this module by name (``conftest.py`` puts this directory on
``PYTHONPATH``). ``cases()`` builds every kind of tensor the tests send from fixed seeds,
so the controller and the actors build the same ones; ``facts`` is what the tests compare
about a tensor, as plain data.
"""

from __future__ import annotations

from typing import Any

import torch

from actormesh import Actor, endpoint
from tensor_facts import cases, facts


class TensorProbe(Actor):
    """Says what it received, returns tensors it built, changes arguments in place."""

    def __init__(self) -> None:
        self.kept: list[torch.Tensor] = []

    @endpoint
    def describe(self, *tensors: Any) -> list[dict[str, Any]]:
        return [facts(t) for t in tensors]

    @endpoint
    def echo(self, value: Any) -> Any:
        return value

    @endpoint
    def make(self, name: str) -> torch.Tensor:
        return cases()[name]

    @endpoint
    def add_one(self, t: torch.Tensor) -> float:
        t.add_(1)
        return float(t.sum())
