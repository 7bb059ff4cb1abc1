"""The torch names the suites use beside the public RPC API, as the alias provides them.

Each function returns the names of one of torch's modules (``rpc.api``,
``rpc.constants``...). Where actormesh.rpc has the name (public or torch's private
spelling), it is actormesh's object. The rest is test plumbing with no RPC behaviour of
its own: torch's pure-Python enums and string helpers are passed through unchanged, and
a few torch internals are stubs that raise ``NotImplementedError`` saying why (the tests
that need them are in the harness' skip table).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import actormesh.rpc as am
from actormesh.rpc import _options

__all__ = [
    "api_names",
    "autograd_names",
    "constants_names",
    "internal_names",
    "registry_names",
    "rpc_names",
    "scripted_remote_module",
]


def _missing(what: str) -> Any:
    def stub(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{what} has no actormesh counterpart")

    stub.__name__ = what.rpartition(".")[2]
    return stub


@contextlib.contextmanager
def _use_rpc_pickler(pickler: Any) -> Iterator[None]:
    raise NotImplementedError("actormesh.rpc has no pluggable RPC pickler")
    yield  # pragma: no cover


def _names(source: Any, *names: str) -> dict[str, Any]:
    return {name: getattr(source, name) for name in names if hasattr(source, name)}


def api_names() -> Any:
    """``torch.distributed.rpc.api``."""

    class Names:
        pass

    found = Names()
    vars(found).update(
        _ignore_rref_leak=True,
        _use_rpc_pickler=_use_rpc_pickler,
        _default_pickler=None,
    )
    return found


def rpc_names() -> Any:
    """Names of ``torch.distributed.rpc`` beside actormesh.rpc's own."""

    class Names:
        pass

    found = Names()
    return found


def autograd_names() -> Any:
    """Names of ``torch.distributed.autograd`` beside actormesh.rpc.autograd's own."""

    class Names:
        pass

    return Names()


def constants_names() -> Any:
    """``torch.distributed.rpc.constants``."""

    class Names:
        pass

    found = Names()
    vars(found).update(
        DEFAULT_RPC_TIMEOUT_SEC=_options.DEFAULT_RPC_TIMEOUT_SEC,
        DEFAULT_INIT_METHOD=_options.DEFAULT_INIT_METHOD,
        DEFAULT_SHUTDOWN_TIMEOUT=_options.DEFAULT_SHUTDOWN_TIMEOUT,
        DEFAULT_NUM_WORKER_THREADS=_options.DEFAULT_NUM_WORKER_THREADS,
        UNSET_RPC_TIMEOUT=_options.UNSET_RPC_TIMEOUT,
    )
    return found


def registry_names() -> Any:
    """``torch.distributed.rpc.backend_registry``."""

    class Names:
        pass

    def construct_rpc_backend_options(
        backend: Any,
        rpc_timeout: float = _options.DEFAULT_RPC_TIMEOUT_SEC,
        init_method: str = _options.DEFAULT_INIT_METHOD,
        **kwargs: Any,
    ) -> Any:
        return am.TensorPipeRpcBackendOptions(
            rpc_timeout=rpc_timeout, init_method=init_method, **kwargs
        )

    found = Names()
    vars(found).update(
        BackendType=am.BackendType,
        construct_rpc_backend_options=construct_rpc_backend_options,
        register_backend=_missing("rpc.backend_registry.register_backend"),
    )
    return found


def internal_names() -> Any:
    """``torch.distributed.rpc.internal``: torch's pure-Python helpers, unchanged."""
    from torch.distributed.rpc import internal

    class Names:
        pass

    found = Names()
    vars(found).update(
        _names(
            internal,
            "RPCExecMode",
            "_build_rpc_profiling_key",
            "_internal_rpc_pickler",
            "PythonUDF",
        )
    )
    return found


def scripted_remote_module(*args: Any, **kwargs: Any) -> Any:
    """``torch.distributed.nn.api.remote_module._RemoteModule`` (TorchScript modules)."""
    raise NotImplementedError("RemoteModule with a TorchScript module interface")
