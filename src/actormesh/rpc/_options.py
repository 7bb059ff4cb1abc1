"""Backend options: the same names and defaults as torch's TensorPipe options.

There is one backend (the actormesh runtime), so ``BackendType`` has the one member torch
code names, and ``TensorPipeRpcBackendOptions`` is accepted for source compatibility;
device maps are recorded but, on this CPU transport, have no effect.
"""

from __future__ import annotations

import enum
from typing import Any

__all__ = [
    "BackendType",
    "DEFAULT_INIT_METHOD",
    "DEFAULT_NUM_WORKER_THREADS",
    "DEFAULT_RPC_TIMEOUT_SEC",
    "DEFAULT_SHUTDOWN_TIMEOUT",
    "RpcBackendOptions",
    "TensorPipeRpcBackendOptions",
    "UNSET_RPC_TIMEOUT",
    "check_options",
    "resolve_timeout",
]

DEFAULT_RPC_TIMEOUT_SEC = 60.0
DEFAULT_INIT_METHOD = "env://"
DEFAULT_NUM_WORKER_THREADS = 16
DEFAULT_SHUTDOWN_TIMEOUT = 0.0
# A per-call timeout of this value means "use the default" (as in torch).
UNSET_RPC_TIMEOUT = -1.0


class BackendType(enum.Enum):
    """RPC backends; every member runs on the actormesh runtime."""

    TENSORPIPE = "TENSORPIPE"


class RpcBackendOptions:
    """Options common to every backend.

    Args:
        rpc_timeout: default seconds an RPC may take (0: no limit); also the limit of
            the rendezvous in ``init_rpc``.
        init_method: ``"env://"`` (``MASTER_ADDR``/``MASTER_PORT``) or
            ``"tcp://host:port"``: where rank 0 runs the rendezvous.
    """

    def __init__(
        self,
        rpc_timeout: float = DEFAULT_RPC_TIMEOUT_SEC,
        init_method: str = DEFAULT_INIT_METHOD,
    ) -> None:
        if not isinstance(rpc_timeout, int | float):
            raise TypeError(
                f"{type(self).__name__}(): incompatible constructor arguments: rpc_timeout "
                f"is a number of seconds, not {type(rpc_timeout).__name__}"
            )
        if rpc_timeout < 0:
            raise ValueError(f"rpc_timeout must be >= 0 seconds, not {rpc_timeout!r}")
        self.rpc_timeout = float(rpc_timeout)
        self.init_method = init_method
        self.num_worker_threads = DEFAULT_NUM_WORKER_THREADS

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


class TensorPipeRpcBackendOptions(RpcBackendOptions):
    """torch's TensorPipe options, with the same keyword arguments and defaults.

    Args:
        num_worker_threads: threads that run incoming RPCs concurrently on each worker.
        rpc_timeout: default seconds an RPC may take (0: no limit).
        init_method: where the rendezvous runs (see ``RpcBackendOptions``).
        device_maps: accepted and kept; tensors stay on the CPU.
        devices: accepted and kept.
    """

    def __init__(
        self,
        *,
        num_worker_threads: int = DEFAULT_NUM_WORKER_THREADS,
        rpc_timeout: float = DEFAULT_RPC_TIMEOUT_SEC,
        init_method: str = DEFAULT_INIT_METHOD,
        device_maps: dict[str, dict[Any, Any]] | None = None,
        devices: list[Any] | None = None,
        _transports: list[str] | None = None,
        _channels: list[str] | None = None,
    ) -> None:
        super().__init__(rpc_timeout, init_method)
        if num_worker_threads < 1:
            raise ValueError(f"num_worker_threads must be >= 1, not {num_worker_threads!r}")
        self.num_worker_threads = int(num_worker_threads)
        self.device_maps = dict(device_maps or {})
        self.devices = list(devices or [])

    def set_device_map(self, to: str, device_map: dict[Any, Any]) -> None:
        """Record a device map for worker ``to`` (no effect on CPU tensors)."""
        self.device_maps.setdefault(to, {}).update(device_map)

    def set_devices(self, devices: list[Any]) -> None:
        """Record the devices this worker uses (no effect on CPU tensors)."""
        self.devices = list(devices)


def _is(options: object, class_name: str) -> bool:
    """``options`` is an instance of a class of that name: actormesh's or torch's own."""
    return any(cls.__name__ == class_name for cls in type(options).__mro__)


def check_options(options: object, backend: object) -> None:
    """Refuse ``init_rpc`` options as torch does.

    Raises:
        TypeError: ``options`` is not backend options at all, is not TensorPipe options
            while the backend is TensorPipe, or (without a backend) names no backend.
    """
    if options is None:
        return
    if not _is(options, "RpcBackendOptions"):
        raise TypeError("Argument rpc_backend_options must be an instance of RpcBackendOptions")
    if _is(options, "TensorPipeRpcBackendOptions"):
        return
    if backend is None:
        raise TypeError(f"Could not infer backend for options {options}")
    raise TypeError(
        f"`rpc_backend_options` must be a `TensorPipeRpcBackendOptions`. Got {type(options)}."
    )


def resolve_timeout(timeout: float | None, default: float) -> float | None:
    """Seconds to wait for a call: ``None`` means no limit.

    ``UNSET_RPC_TIMEOUT`` (or ``None``) picks ``default``; 0 (torch's "infinite") and a
    default of 0 mean no limit.
    """
    if timeout is None or timeout == UNSET_RPC_TIMEOUT:
        timeout = default
    if timeout < 0:
        raise ValueError(f"timeout must be >= 0 seconds or UNSET_RPC_TIMEOUT, not {timeout!r}")
    return None if timeout == 0 else float(timeout)
