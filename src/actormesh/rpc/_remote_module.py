"""``RemoteModule``: an ``nn.Module`` that lives on another worker, as torch's.

``RemoteModule("worker1/cpu", nn.Linear, args=(4, 2))`` builds the module on ``worker1``;
``forward`` (and calling the module) runs it there, ``forward_async`` returns a future,
and ``remote_parameters()`` gives ``RRef``s of its parameters for
``DistributedOptimizer``. Inside a distributed autograd context, gradients flow back to
the remote module like across any RPC.
"""

from __future__ import annotations

from typing import Any

import torch

from ._api import remote, rpc_async, rpc_sync
from ._rref import RRef

__all__ = ["RemoteModule"]


class RemoteModule(torch.nn.Module):
    """A module created and run on a remote worker.

    Args:
        remote_device: ``"<worker name>/<device>"`` or ``"rank:<n>/<device>"``
            (``"worker1/cpu"``); the device defaults to ``cpu``.
        module_cls: the module class (or any callable returning a module).
        args: positional arguments of ``module_cls``.
        kwargs: keyword arguments of ``module_cls``.
    """

    def __init__(
        self,
        remote_device: str,
        module_cls: type[torch.nn.Module],
        args: tuple[Any, ...] | None = None,
        kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        worker, device = _parse_remote_device(remote_device)
        self.on = worker
        self.device = device
        self.module_rref: RRef[torch.nn.Module] = remote(
            worker, _create_module, args=(module_cls, tuple(args or ()), dict(kwargs or {}), device)
        )
        self.module_rref._wait_created()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the remote module's ``forward`` and return its output."""
        return rpc_sync(self.module_rref.owner(), _forward, args=(self.module_rref, args, kwargs))

    def forward_async(self, *args: Any, **kwargs: Any) -> Any:
        """Like ``forward``, returning a ``torch.futures.Future`` of the output."""
        return rpc_async(self.module_rref.owner(), _forward, args=(self.module_rref, args, kwargs))

    def remote_parameters(self, recurse: bool = True) -> list[RRef[torch.nn.Parameter]]:
        """``RRef``s of the remote module's parameters."""
        rrefs: list[RRef[torch.nn.Parameter]] = rpc_sync(
            self.module_rref.owner(), _parameter_rrefs, args=(self.module_rref, recurse)
        )
        return rrefs

    def get_module_rref(self) -> RRef[torch.nn.Module]:
        """The ``RRef`` of the remote module."""
        return self.module_rref

    def extra_repr(self) -> str:
        return f"on={self.on}, device={self.device}"


def _parse_remote_device(remote_device: str) -> tuple[str | int, str]:
    worker, _, device = remote_device.partition("/")
    if not worker:
        raise ValueError(
            f"remote_device {remote_device!r} must look like 'worker1/cpu' or 'rank:1/cpu'"
        )
    if worker.startswith("rank:"):
        try:
            return int(worker[5:]), device or "cpu"
        except ValueError:
            raise ValueError(f"bad rank in remote_device {remote_device!r}") from None
    return worker, device or "cpu"


def _create_module(
    module_cls: Any, args: tuple[Any, ...], kwargs: dict[str, Any], device: str
) -> torch.nn.Module:
    module: torch.nn.Module = module_cls(*args, **kwargs)
    return module.to(device)


def _forward(module: RRef[torch.nn.Module], args: tuple[Any, ...], kwargs: Any) -> Any:
    return module.local_value().forward(*args, **kwargs)


def _parameter_rrefs(
    module: RRef[torch.nn.Module], recurse: bool
) -> list[RRef[torch.nn.Parameter]]:
    return [RRef(param) for param in module.local_value().parameters(recurse)]
