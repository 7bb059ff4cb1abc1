"""Resolve ``torch.distributed.rpc`` and friends to actormesh's, in this process only.

``install()`` runs in each rank of an actormesh run (see ``torch_suite_harness``) before
any suite is imported. Afterwards ``import torch.distributed.rpc as rpc`` (and every
``from torch.distributed.rpc... import``) gives a module whose functions and classes are
``actormesh.rpc``'s own objects; ``torch.distributed.autograd`` is
``actormesh.rpc.autograd``'s; ``torch.distributed.optim.DistributedOptimizer`` and
``torch.distributed.nn.RemoteModule`` are actormesh's. Nothing in the wheel is edited.

The suites also reach into a few of torch's modules beside the public API
(``rpc.api``, ``rpc.constants``, ``rpc.backend_registry``, ``rpc.internal``). Those
modules are built here from actormesh's names too; a name actormesh does not have raises
``AttributeError`` naming it, so a test that needs it fails and says so.
"""

from __future__ import annotations

import sys
import types
from typing import Any

__all__ = ["install"]

_installed = False


class _Shim(types.ModuleType):
    """A module standing in for one of torch's: unknown names fail loudly."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"{self.__name__}.{name} is a torch name with no actormesh.rpc counterpart"
        )


def _shim(name: str, *sources: Any, **names: Any) -> _Shim:
    module = _Shim(name)
    for source in sources:
        public = getattr(source, "__all__", None)
        for key, value in vars(source).items():
            if key.startswith("__"):
                continue
            if public is not None and not key.startswith("_") and key not in public:
                continue  # a module actormesh imported for itself, say
            setattr(module, key, value)
    for key, value in names.items():
        setattr(module, key, value)
    return module


def _set_module(name: str, module: types.ModuleType) -> None:
    """Put ``module`` in ``sys.modules`` and on its parent package, as an import would."""
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    setattr(sys.modules[parent], child, module)


def install() -> None:
    """Make torch's RPC modules resolve to actormesh's in this process (idempotent)."""
    global _installed
    if _installed:
        return
    import torch
    import torch.distributed

    # torch's own modules that import torch.distributed.rpc at import time, imported now
    # against torch's real modules: their other names stay available, untouched.
    import torch.distributed.nn
    import torch.distributed.nn.api.remote_module as torch_remote_module
    import torch.distributed.optim
    import torch_suite_compat as compat

    import actormesh.rpc as am
    from actormesh.rpc import _remote_module as am_remote_module
    from actormesh.rpc import autograd as am_autograd
    from actormesh.rpc import functions as am_functions
    from actormesh.rpc import optim as am_optim

    api = _shim("torch.distributed.rpc.api", am, compat.api_names())
    constants = _shim("torch.distributed.rpc.constants", compat.constants_names())
    backend_registry = _shim("torch.distributed.rpc.backend_registry", compat.registry_names())
    internal = _shim("torch.distributed.rpc.internal", compat.internal_names())
    rpc = _shim(
        "torch.distributed.rpc",
        am,
        compat.rpc_names(),
        api=api,
        constants=constants,
        backend_registry=backend_registry,
        internal=internal,
        functions=am_functions,
    )
    rpc.__path__ = []  # a package, so that submodule imports look in sys.modules
    autograd = _shim("torch.distributed.autograd", am_autograd, compat.autograd_names())
    optim = _shim("torch.distributed.optim", torch.distributed.optim, am_optim)
    nn = _shim("torch.distributed.nn", torch.distributed.nn, RemoteModule=am.RemoteModule)
    remote_module = _shim(
        "torch.distributed.nn.api.remote_module",
        torch_remote_module,
        am_remote_module,
        RemoteModule=am.RemoteModule,
        _RemoteModule=compat.scripted_remote_module,
    )

    _set_module("torch.distributed.rpc", rpc)
    for name, module in {
        "api": api,
        "constants": constants,
        "backend_registry": backend_registry,
        "internal": internal,
        "functions": am_functions,
    }.items():
        sys.modules[f"torch.distributed.rpc.{name}"] = module
    _set_module("torch.distributed.autograd", autograd)
    _set_module("torch.distributed.optim", optim)
    _set_module("torch.distributed.nn", nn)
    _set_module("torch.distributed.nn.api.remote_module", remote_module)
    del torch
    _installed = True
