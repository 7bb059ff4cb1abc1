"""Monarch's ``monarch.rdma``: one-sided reads and writes of another actor's memory.

An actor registers a tensor, ``buffer = RDMABuffer(weights.view(torch.uint8).flatten())``,
and hands the buffer out (returned from an endpoint, passed as an argument: it pickles
as where the memory is, never the bytes). Whoever holds it copies the owner's current
bytes into a tensor of its own with ``buffer.read_into(dst)``, or its bytes there with
``write_from(src)``, without the owner doing anything. Both give a ``Future``.

On the owner's host the copy goes straight between the two address spaces
(``process_vm_readv``), at memory speed; across hosts it is a call to the owner, the
bytes travelling out of band over TCP. There is no RDMA hardware here:
``get_rdma_backend()`` says ``"tcp"``, as Monarch does without ibverbs.
"""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

from ._api import (
    DroppedError,
    Future,
    Region,
    Registry,
    ServiceActor,
    copy_local,
    from_concurrent,
    resolved,
    this_proc,
    vm_copy,
)
from ._hosts import Runtime

__all__ = [
    "RDMAAction",
    "RDMABuffer",
    "RDMAReadTransferWarning",
    "RDMATcpFallbackWarning",
    "RDMAWriteTransferWarning",
    "get_rdma_backend",
    "is_ibverbs_available",
    "is_rdma_available",
]


class RDMATcpFallbackWarning(UserWarning):
    """Monarch warns that RDMA falls back to TCP; actormesh never emits it."""


class RDMAReadTransferWarning(UserWarning):
    """Monarch's warning about slow reads; actormesh never emits it."""


class RDMAWriteTransferWarning(UserWarning):
    """Monarch's warning about slow writes; actormesh never emits it."""


def get_rdma_backend() -> str:
    """``"tcp"``: no RDMA hardware; one host copies directly, hosts talk over TCP."""
    return "tcp"


def is_ibverbs_available() -> bool:
    """False: actormesh does not use ibverbs."""
    return False


def is_rdma_available() -> bool:
    """True: ``RDMABuffer`` works (without RDMA hardware). Deprecated in Monarch."""
    warnings.warn("is_rdma_available() is deprecated", DeprecationWarning, stacklevel=2)
    return True


_SERVICES: dict[int, Any] = {}


def _service() -> Any:
    # This process' service actor, for readers that cannot reach our memory directly.
    runtime = Runtime.get()
    service = _SERVICES.get(id(runtime))
    if service is None or service._state.stopped:
        service = _SERVICES[id(runtime)] = this_proc().spawn("rdma", ServiceActor)
    return service


def _bytes_of(data: Any) -> Any:
    import torch

    if isinstance(data, memoryview):
        data = torch.frombuffer(data, dtype=torch.uint8)
    if not isinstance(data, torch.Tensor):
        raise TypeError(f"RDMABuffer takes a torch.Tensor or a memoryview, not {type(data)}")
    if data.device.type != "cpu":
        raise ValueError("RDMABuffer holds CPU memory here (no GPU RDMA on this machine)")
    if data.dim() != 1 or not data.is_contiguous() or data.numel() == 0:
        raise ValueError(
            "RDMABuffer needs a non-empty 1-D contiguous tensor (.view(torch.uint8).flatten())"
        )
    return data.view(torch.uint8)


class RDMABuffer:
    """A registered buffer of this process, readable and writable from elsewhere.

    Args:
        data: a non-empty 1-D contiguous CPU tensor (or a memoryview); its memory is
            registered as it is, not copied, and stays registered until ``drop()``.
    """

    def __init__(self, data: Any) -> None:
        view = _bytes_of(data)
        self._region = Registry.add(view)
        self._service = _service()

    @classmethod
    def _held(cls, region: Region, service: Any) -> RDMABuffer:
        buffer = cls.__new__(cls)
        buffer._region, buffer._service = region, service
        return buffer

    def __reduce__(self) -> tuple[Any, ...]:
        return (RDMABuffer._held, (self._region, self._service))

    def size(self) -> int:
        """The buffer's size in bytes."""
        return self._region.size

    @property
    def owner(self) -> str:
        """The process that registered it."""
        return f"pid {self._region.pid} on {self._region.host}"

    @property
    def backend(self) -> str:
        return get_rdma_backend()

    def read_into(self, dst: Any, *, timeout: float = 60) -> Future[None]:
        """Copy the buffer's current bytes into ``dst`` (a 1-D contiguous CPU tensor of at
        least ``size()`` bytes; into its first bytes when larger, as Monarch's).

        Raises:
            ValueError: ``dst`` is smaller than the buffer.
        """
        target = _bytes_of(dst)
        return self._transfer(target, write=False, timeout=timeout)

    def write_from(self, src: Any, *, timeout: float = 60) -> Future[None]:
        """Copy ``src``'s bytes (at most ``size()``) into the buffer's first bytes.

        Raises:
            ValueError: ``src`` is larger than the buffer.
        """
        source = _bytes_of(src)
        return self._transfer(source, write=True, timeout=timeout)

    def drop(self) -> Future[None]:
        """Unregister the buffer: its owner lets its memory go."""
        region = self._region
        if region.here():
            Registry.drop(region.id)
            return resolved(None)
        return self._service.drop.call_one(region.id)  # type: ignore[no-any-return]

    def _transfer(self, local: Any, *, write: bool, timeout: float) -> Future[None]:
        region = self._region
        _check_fits(local, region.size, write)
        size = local.numel() if write else region.size
        local = local[:size]
        if region.here():
            Registry.get(region.id)  # raises when dropped
            dst, src = (
                (region.address, local.data_ptr()) if write else (local.data_ptr(), region.address)
            )
            copy_local(dst, src, size)
            return resolved(None)

        async def move() -> None:
            if region.on_this_host():
                try:
                    await asyncio.to_thread(vm_copy, region, local.data_ptr(), size, write)
                    return
                except DroppedError:
                    raise
                except OSError:
                    pass  # refused (another user, a hardened kernel): ask the owner
            service = self._service
            if write:
                await asyncio.wait_for(service.write.call_one(region.id, local), timeout)
            else:
                data = await asyncio.wait_for(service.read.call_one(region.id, size), timeout)
                local.copy_(data)

        runtime = Runtime.get()
        return from_concurrent(runtime, runtime.submit(move()))

    def __repr__(self) -> str:
        return f"<RDMABuffer {self._region.size} bytes of {self.owner}>"


def _check_fits(local: Any, remote: int, write: bool) -> None:
    size = local.numel()
    if write and size > remote:
        raise ValueError(f"{size} bytes do not fit a buffer of {remote}")
    if not write and size < remote:
        raise ValueError(f"a buffer of {remote} bytes does not fit {size} bytes")


class RDMAAction:
    """A batch of transfers, run in order by ``submit()``."""

    def __init__(self) -> None:
        self._steps: list[tuple[str, Any, Any]] = []

    def read_remote(self, dst: Any, src: RDMABuffer) -> RDMAAction:
        """Read ``src`` into the local tensor ``dst``.

        Raises:
            ValueError: ``dst`` is smaller than ``src`` (checked here, as Monarch's).
        """
        _check_fits(_bytes_of(dst), src.size(), write=False)
        self._steps.append(("read", dst, src))
        return self

    def write_remote(self, dst: RDMABuffer, src: Any) -> RDMAAction:
        """Write the local tensor ``src`` into ``dst``.

        Raises:
            ValueError: ``src`` is larger than ``dst`` (checked here, as Monarch's).
        """
        _check_fits(_bytes_of(src), dst.size(), write=True)
        self._steps.append(("write", dst, src))
        return self

    def fetch_add(self, *args: Any) -> RDMAAction:
        """Atomic operations need RDMA hardware, which actormesh does not use.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError("RDMA atomics need RDMA hardware")

    compare_and_swap = fetch_add

    def submit(self, *, timeout: float = 60) -> Future[None]:
        """Run the transfers, one after another."""
        runtime = Runtime.get()

        async def run() -> None:
            for kind, first, second in self._steps:
                if kind == "read":
                    await second.read_into(first, timeout=timeout)
                else:
                    await first.write_from(second, timeout=timeout)

        return from_concurrent(runtime, runtime.submit(run()))
