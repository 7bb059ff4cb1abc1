"""``RemoteModule``: an ``nn.Module`` that lives on another worker, as torch's.

``RemoteModule("worker1/cpu", nn.Linear, args=(4, 2))`` builds the module on ``worker1``;
``forward`` (and calling the module) runs it there, ``forward_async`` returns a future,
``remote_parameters()`` gives ``RRef``s of its parameters for ``DistributedOptimizer``,
and ``train()``/``eval()`` switch the remote module. Inside a distributed autograd
context, gradients flow back to the remote module like across any RPC.

As torch's, it travels inside RPCs as a handle to the same remote module (its picklable
attributes are ``_REMOTE_MODULE_PICKLED_ATTRIBUTES``), refuses Python's pickle, and
refuses the ``nn.Module`` methods that would only touch the local shell
(``parameters()``, ``to()``, hooks...) with ``ValueError``.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any, NoReturn

import torch

from ._api import remote, rpc_async, rpc_sync
from ._rref import RRef
from ._wire import register_reducer

__all__ = ["RemoteModule", "_REMOTE_MODULE_PICKLED_ATTRIBUTES"]

# What a RemoteModule carries when sent in an RPC, in this order (as torch).
_REMOTE_MODULE_PICKLED_ATTRIBUTES = (
    "on",
    "device",
    "is_device_map_set",
    "is_scriptable",
    "generated_methods",
    "module_rref",
)

# nn.Module methods that would act on the local shell instead of the remote module.
_NOT_SUPPORTED = (
    "register_buffer",
    "register_parameter",
    "add_module",
    "apply",
    "cuda",
    "ipu",
    "xpu",
    "cpu",
    "type",
    "float",
    "double",
    "half",
    "bfloat16",
    "to",
    "register_backward_hook",
    "register_forward_pre_hook",
    "register_forward_hook",
    "state_dict",
    "load_state_dict",
    "named_parameters",
    "buffers",
    "named_buffers",
    "children",
    "named_children",
    "modules",
    "named_modules",
    "requires_grad_",
    "zero_grad",
    "share_memory",
    "extra_repr",
)


class RemoteModule(torch.nn.Module):
    """A module created and run on a remote worker.

    Args:
        remote_device: ``"<worker name>/<device>"`` or ``"rank:<n>/<device>"``
            (``"worker1/cpu"``); the device defaults to ``cpu``.
        module_cls: the module class (or any callable returning a module).
        args: positional arguments of ``module_cls``.
        kwargs: keyword arguments of ``module_cls``.

    Raises:
        ValueError: ``module_cls(*args, **kwargs)`` did not return an ``nn.Module``.
        RuntimeError: RPC is not initialized.
    """

    on: str | int
    device: str
    is_device_map_set: bool
    is_scriptable: bool
    generated_methods: tuple[Callable[..., Any], ...]
    module_rref: RRef[torch.nn.Module]

    def __init__(
        self,
        remote_device: str,
        module_cls: type[torch.nn.Module],
        args: tuple[Any, ...] | None = None,
        kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self._prepare(remote_device)
        self.module_rref = remote(
            self.on,
            _create_module,
            args=(module_cls, tuple(args or ()), dict(kwargs or {}), self.device),
        )
        self.module_rref._wait_created()  # a failed construction raises here
        self._install_generated_methods()

    @staticmethod
    def init_from_module_rref(
        remote_device: str, module_rref: RRef[torch.nn.Module], _module_interface_cls: Any = None
    ) -> RemoteModule:
        """A ``RemoteModule`` over an existing remote module (``module_rref``), so several
        handles can share one module.

        Raises:
            NotImplementedError: ``_module_interface_cls`` (a TorchScript interface).
        """
        if _module_interface_cls is not None:
            raise NotImplementedError("TorchScript RemoteModules are not supported")
        remote_module = object.__new__(RemoteModule)
        remote_module._prepare(remote_device)
        remote_module.module_rref = module_rref
        remote_module._install_generated_methods()
        return remote_module

    def _prepare(self, remote_device: str) -> None:
        from torch.distributed.remote_device import _remote_device

        parsed = _remote_device(remote_device)
        worker = parsed.worker_name()
        on = worker if worker is not None else parsed.rank()
        if on is None:
            raise ValueError(
                f"remote_device {remote_device!r} names no worker: use '<worker name>/<device>' "
                "or 'rank:<rank>/<device>'"
            )
        self.on = on
        self.device = str(parsed.device())
        self.is_device_map_set = False  # tensors travel as CPU tensors
        self.is_scriptable = False
        self.generated_methods = _GENERATED_METHODS

    def _install_generated_methods(self) -> None:
        for method in self.generated_methods:
            setattr(self, method.__name__, types.MethodType(method, self))

    def forward(self, *args: Any, **kwargs: Any) -> Any:  # replaced per instance
        """Run the remote module's ``forward`` and return its output."""
        return _forward(self, *args, **kwargs)

    def forward_async(self, *args: Any, **kwargs: Any) -> Any:  # replaced per instance
        """Like ``forward``, returning a ``torch.futures.Future`` of the output."""
        return _forward_async(self, *args, **kwargs)

    def remote_parameters(self, recurse: bool = True) -> list[RRef[torch.nn.Parameter]]:
        """``RRef``s of the remote module's parameters (for ``DistributedOptimizer``)."""
        rrefs: list[RRef[torch.nn.Parameter]] = rpc_sync(
            self.module_rref.owner(), _parameter_rrefs, args=(self.module_rref, recurse)
        )
        return rrefs

    def get_module_rref(self) -> RRef[torch.nn.Module]:
        """The ``RRef`` of the remote module."""
        return self.module_rref

    def train(self, mode: bool = True) -> Any:
        """Set the remote module's training mode (``module.train(mode)`` on its owner)."""
        return self.module_rref.rpc_sync().train(mode)

    def eval(self) -> Any:
        """Put the remote module in evaluation mode."""
        return self.module_rref.rpc_sync().eval()

    def parameters(self, recurse: bool = True) -> NoReturn:
        """Not supported: the parameters live remotely (see ``remote_parameters``)."""
        raise ValueError(
            "Method ``parameters`` not supported for RemoteModule. Please use "
            "``remote_parameters`` instead."
        )

    def __getstate__(self) -> NoReturn:
        raise RuntimeError(
            "Cannot pickle RemoteModule in python pickler. RemoteModule can only be "
            "pickled when using RPC"
        )

    def __setstate__(self, state: Any) -> NoReturn:
        raise RuntimeError(
            "Cannot unpickle RemoteModule in python pickler. RemoteModule can only be "
            "unpickled when using RPC"
        )


def _not_supported(name: str) -> Callable[..., NoReturn]:
    def method(self: RemoteModule, *args: Any, **kwargs: Any) -> NoReturn:
        raise ValueError(f"Method ``{name}`` not supported for RemoteModule")

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"Not supported: ``{name}`` would act on the local handle only."
    return method


for _name in _NOT_SUPPORTED:
    setattr(RemoteModule, _name, _not_supported(_name))

RemoteModule.__module__ = "actormesh.rpc"


# -- the methods each instance gets (picklable by reference, as torch's) -----------------


def _forward_async(self: RemoteModule, *args: Any, **kwargs: Any) -> Any:
    rref = self.module_rref
    return rpc_async(
        rref.owner(), _remote_forward, (rref, self.device, self.is_device_map_set, *args), kwargs
    )


def _forward(self: RemoteModule, *args: Any, **kwargs: Any) -> Any:
    return _forward_async(self, *args, **kwargs).wait()


_forward_async.__name__ = "forward_async"
_forward.__name__ = "forward"
_GENERATED_METHODS = (_forward_async, _forward)


# -- on the module's owner ----------------------------------------------------------------


def _create_module(
    module_cls: Any, args: tuple[Any, ...], kwargs: dict[str, Any], device: str
) -> torch.nn.Module:
    module = module_cls(*args, **kwargs)
    if not isinstance(module, torch.nn.Module):
        raise ValueError(
            "Expect `module_cls(*args, **kwargs)` returns an instance of <class nn.Module>, "
            f"but it returns an instance of {type(module)}."
        )
    moved: torch.nn.Module = module.to(device)
    return moved


def _remote_forward(
    module: RRef[torch.nn.Module], device: str, is_device_map_set: bool, *args: Any, **kwargs: Any
) -> Any:
    return module.local_value().forward(*args, **kwargs)


def _parameter_rrefs(
    module: RRef[torch.nn.Module], recurse: bool
) -> list[RRef[torch.nn.Parameter]]:
    return [RRef(param) for param in module.local_value().parameters(recurse)]


# -- inside RPCs ----------------------------------------------------------------------------


def _reduce(remote_module: RemoteModule, session: Any) -> Any:
    state = vars(remote_module)
    return _rebuild, tuple(state[name] for name in _REMOTE_MODULE_PICKLED_ATTRIBUTES)


def _rebuild(*attrs: Any) -> RemoteModule:
    remote_module = object.__new__(RemoteModule)
    vars(remote_module).update(zip(_REMOTE_MODULE_PICKLED_ATTRIBUTES, attrs))
    remote_module._install_generated_methods()
    return remote_module


register_reducer(RemoteModule, _reduce)
