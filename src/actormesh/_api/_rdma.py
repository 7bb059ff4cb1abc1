"""One-sided reads and writes of another process' registered memory (``RDMABuffer``).

The owner registers a tensor (its memory stays alive and in place until ``drop()``); the
buffer pickles as *where* that memory is: the owner's process id, host and address, and
the owner's small service actor for when direct access is impossible. A reader holding
the buffer copies the bytes itself, without the owner doing anything, as RDMA does:

- in the owner's own process: a ``memmove``;
- on the owner's host: ``process_vm_readv`` / ``process_vm_writev``, one copy straight
  between the two address spaces (the owner lets processes of its user do this, the
  way a debugger attaches: ``PR_SET_PTRACER``);
- anywhere else (another host, or a kernel that refuses): a call to the owner's
  service actor, the bytes travelling out of band as any tensor does.

No RDMA hardware is used or needed; a real RDMA path would add one more way here, chosen
by the same test of where the owner is.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import threading
from typing import Any

from .._transport import host_id
from ._actor import Actor
from ._endpoint import endpoint

__all__ = ["DroppedError", "Region", "Registry", "ServiceActor", "copy_local", "vm_copy"]

_PR_SET_PTRACER = 0x59616D61
_PR_SET_PTRACER_ANY = -1


class _IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.process_vm_readv.restype = ctypes.c_ssize_t
_libc.process_vm_writev.restype = ctypes.c_ssize_t


class Region:
    """Where a registered buffer's bytes are: process, host, address, size, id, and the
    address of the word that holds ``id`` while the buffer is registered."""

    __slots__ = ("address", "host", "id", "pid", "size", "tag")

    def __init__(
        self, pid: int, host: str, address: int, size: int, buffer_id: int, tag: int
    ) -> None:
        self.pid = pid
        self.host = host
        self.address = address
        self.size = size
        self.id = buffer_id
        self.tag = tag

    def here(self) -> bool:
        """In this very process."""
        return self.pid == os.getpid() and self.host == host_id()

    def on_this_host(self) -> bool:
        """On this host (this boot and network namespace)."""
        return self.host == host_id()

    def __reduce__(self) -> tuple[Any, ...]:
        return (Region, (self.pid, self.host, self.address, self.size, self.id, self.tag))


class DroppedError(KeyError):
    """The buffer was dropped by its owner (or its owner is not the process named)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "RDMA buffer dropped"


class Registry:
    """The buffers this process registered, kept alive (and in place) until dropped.

    Each buffer has a tag: a word of this process' memory that holds the buffer's id
    while it is registered and 0 after. A reader on this host checks it before and after
    copying, so a read of a dropped buffer fails instead of returning whatever the
    memory holds now. Ids are never reused, so a tag word reused by a later buffer
    cannot pass for an earlier one.
    """

    _ids = itertools.count(1)
    _buffers: dict[int, tuple[Any, int]] = {}
    _tags: list[Any] = []  # blocks of tag words, never freed (8 bytes per live buffer)
    _free_tags: list[int] = []
    _lock = threading.Lock()
    _shared = False

    @classmethod
    def add(cls, tensor: Any) -> Region:
        cls._share_once()
        buffer_id = next(cls._ids)
        with cls._lock:
            tag = cls._take_tag()
            ctypes.c_uint64.from_address(tag).value = buffer_id
            cls._buffers[buffer_id] = (tensor, tag)
        size = tensor.numel() * tensor.element_size()
        return Region(os.getpid(), host_id(), tensor.data_ptr(), size, buffer_id, tag)

    @classmethod
    def get(cls, buffer_id: int) -> Any:
        with cls._lock:
            entry = cls._buffers.get(buffer_id)
        if entry is None:
            raise DroppedError(f"RDMA buffer {buffer_id} was dropped (or never registered here)")
        return entry[0]

    @classmethod
    def drop(cls, buffer_id: int) -> None:
        with cls._lock:
            entry = cls._buffers.pop(buffer_id, None)
            if entry is not None:
                ctypes.c_uint64.from_address(entry[1]).value = 0
                cls._free_tags.append(entry[1])

    @classmethod
    def _take_tag(cls) -> int:
        if not cls._free_tags:
            block = (ctypes.c_uint64 * 512)()
            cls._tags.append(block)
            base = ctypes.addressof(block)
            cls._free_tags.extend(base + 8 * i for i in range(512))
        return cls._free_tags.pop()

    @classmethod
    def _share_once(cls) -> None:
        # Where Yama restricts ptrace to descendants, let processes of this user read the
        # registered memory (they could read our /proc/<pid>/mem with ptrace rights too).
        if not cls._shared:
            cls._shared = True
            _libc.prctl(_PR_SET_PTRACER, _PR_SET_PTRACER_ANY, 0, 0, 0)


def copy_local(dst: int, src: int, size: int) -> None:
    """Copy ``size`` bytes between two addresses of this process."""
    ctypes.memmove(dst, src, size)


def vm_copy(region: Region, local: int, size: int, write: bool) -> None:
    """Copy ``size`` bytes between this process (``local``) and ``region`` of another
    process of this host: from it when reading, to it when ``write``.

    Raises:
        DroppedError: the owner dropped the buffer (checked before and after the copy).
        OSError: the kernel refused (another user, a gone process, a bad address).
    """
    _check_tag(region)
    _vm_move(region.pid, local, region.address, size, write)
    _check_tag(region)


def _check_tag(region: Region) -> None:
    word = ctypes.c_uint64()
    _vm_move(region.pid, ctypes.addressof(word), region.tag, 8, write=False)
    if word.value != region.id:
        raise DroppedError(f"RDMA buffer {region.id} of pid {region.pid} was dropped")


def _vm_move(pid: int, local: int, remote: int, size: int, write: bool) -> None:
    call = _libc.process_vm_writev if write else _libc.process_vm_readv
    done = 0
    while done < size:
        mine = _IoVec(local + done, size - done)
        theirs = _IoVec(remote + done, size - done)
        moved = call(pid, ctypes.byref(mine), 1, ctypes.byref(theirs), 1, 0)
        if moved <= 0:
            errno = ctypes.get_errno()
            name = "process_vm_writev" if write else "process_vm_readv"
            raise OSError(errno, f"{name}: {os.strerror(errno)}")
        done += moved


class ServiceActor(Actor):
    """The owner's side, for readers that cannot reach its memory directly."""

    @endpoint
    def read(self, buffer_id: int, size: int) -> Any:
        return Registry.get(buffer_id)[:size].clone()

    @endpoint
    def write(self, buffer_id: int, data: Any) -> None:
        target = Registry.get(buffer_id)
        target[: data.numel()].copy_(data)

    @endpoint
    def drop(self, buffer_id: int) -> None:
        Registry.drop(buffer_id)
