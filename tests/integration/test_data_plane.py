"""Large buffers between processes: shared memory, contents intact, nothing leaked."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import torch
from integration_actors import DataPlane

from actormesh import ActorDiedError, ActorMesh, ProcMesh, proc_mesh
from actormesh._transport._shm import mappings, pool
from actormesh.testing import live, shm_segments, wait_until


@dataclasses.dataclass
class Batch:
    tokens: Any
    extra: dict[str, Any]


@pytest.fixture(scope="module")
def plane() -> Iterator[tuple[ProcMesh, ActorMesh[DataPlane]]]:
    procs = proc_mesh(gpus=2).get(timeout=60)
    try:
        yield procs, procs.spawn("plane", DataPlane)
    finally:
        procs.stop().get(timeout=60)


def _within(seconds: float, condition: Callable[[], bool]) -> bool:
    """Whether ``condition`` holds within ``seconds`` (checked every 10 ms)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        threading.Event().wait(0.01)
    return True


def _kept_by_design() -> set[int]:
    """Segments this process holds on purpose, bounded: idle in its pool (for the next
    send) or mapped in its cache of received segments (for their next visit)."""
    with pool._lock:
        idle = {segment.inode for segment in pool._idle}
    with mappings._lock:
        cached = {inode for inode, entry in mappings._by_inode.items() if not entry.busy}
    return idle | cached


def _leaked_here(before: dict[int, list[str]]) -> dict[int, list[str]]:
    """Segments this process holds now (by descriptor or mapping), did not hold at
    ``before`` and does not keep by design: a segment left lent to a dead receiver, a
    received one whose mapping or descriptor was never let go."""
    kept = _kept_by_design()
    return {
        inode: how
        for inode, how in shm_segments().items()
        if inode not in before and inode not in kept
    }


@pytest.mark.parametrize("nbytes", [1 << 20, 64 << 20])
def test_large_tensors_arrive_intact_both_ways(plane: Any, nbytes: int) -> None:
    _, mesh = plane
    one = mesh.slice(gpus=0)
    tensor = torch.randint(0, 255, (nbytes,), dtype=torch.uint8)
    assert one.checksum.call_one(tensor).get(timeout=60) == zlib.crc32(tensor.numpy().tobytes())
    made = one.make.call_one(nbytes, seed=7).get(timeout=60)
    expected = torch.randint(
        0, 255, (nbytes,), dtype=torch.uint8, generator=torch.Generator().manual_seed(7)
    )
    assert torch.equal(made, expected)
    # The received tensor is writable memory of our own (a mapping of the segment).
    made[0] = 1
    assert int(made[0]) == 1


def test_a_one_gib_tensor_moves_correctly(plane: Any) -> None:
    _, mesh = plane
    tensor = torch.arange(1 << 28, dtype=torch.float32)  # 1 GiB
    back = mesh.slice(gpus=1).echo.call_one(tensor).get(timeout=120)
    assert torch.equal(back, tensor)
    del back


def test_numpy_bytes_and_views_nested_in_containers_take_the_same_path(plane: Any) -> None:
    _, mesh = plane
    one = mesh.slice(gpus=0)
    payload = {
        "array": np.arange(1 << 18, dtype=np.float64),
        "bytes": os.urandom(2 << 20),
        "bytearray": bytearray(os.urandom(2 << 20)),
        "tensor": torch.ones(1 << 18),
        "batch": Batch(torch.zeros(1 << 18, dtype=torch.int64), {"ids": [np.ones(1000)]}),
    }
    back = one.echo.call_one(payload).get(timeout=60)
    assert np.array_equal(back["array"], payload["array"])
    assert back["bytes"] == payload["bytes"] and type(back["bytes"]) is bytes
    assert back["bytearray"] == payload["bytearray"]
    assert torch.equal(back["tensor"], payload["tensor"])
    assert torch.equal(back["batch"].tokens, payload["batch"].tokens)
    assert one.kinds.call_one(payload).get(timeout=60) == {
        "array": "ndarray",
        "bytes": "bytes",
        "bytearray": "bytearray",
        "tensor": "Tensor",
        "batch": "Batch",
    }
    view = memoryview(bytearray(b"abc" * 1000))
    assert bytes(one.echo.call_one(view).get(timeout=60)) == bytes(view)


def test_segments_are_recycled_and_the_receiver_gives_them_back(plane: Any) -> None:
    _, mesh = plane
    one = mesh.slice(gpus=0)
    worker = one.pid.call_one().get(timeout=30)
    before = shm_segments()
    lent_before = set(pool._lent)
    tensor = torch.ones(8 << 20, dtype=torch.uint8)
    for _ in range(5):
        one.checksum.call_one(tensor).get(timeout=60)
        # The segment comes back after the reply, on its own: wait for it before the
        # next send, which must then reuse it.
        wait_until(lambda: set(pool._lent) <= lent_before, 10, "the segment to come back")
    # Each send took the segment the receiver had given back: one new segment for all
    # five, and it waits idle in our pool for the next send.
    new = set(shm_segments()) - set(before)
    assert len(new) == 1, f"5 sends of 8 MiB made {len(new)} new segments: {new}"
    [inode] = new
    with pool._lock:
        assert inode in {segment.inode for segment in pool._idle}, "the segment is still lent"
    # The receiver kept no descriptor of it (it may keep a mapping, in its cache).
    wait_until(
        lambda: not any(how.startswith("fd") for how in shm_segments(worker).get(inode, [])),
        10,
        "the receiver to give its descriptor back",
    )


def test_a_broadcast_is_copied_once_and_each_actor_keeps_its_own_copy(plane: Any) -> None:
    _, mesh = plane
    tensor = torch.randint(0, 255, (8 << 20,), dtype=torch.uint8)
    original = zlib.crc32(tensor.numpy().tobytes())
    lent_before = set(pool._lent)
    mesh.hold.call(tensor).get(timeout=60)
    new = [segment for inode, segment in pool._lent.items() if inode not in lent_before]
    # One segment for the two receivers, lent to both.
    assert [segment.holders for segment in new] == [2]
    # A write by one actor stays in its copy (copy-on-write), the sender's is untouched.
    bumped = mesh.slice(gpus=0).bump_kept.call_one().get(timeout=60)
    assert bumped == zlib.crc32((tensor + 1).numpy().tobytes())
    assert mesh.slice(gpus=1).kept_checksum.call_one().get(timeout=60) == original
    assert zlib.crc32(tensor.numpy().tobytes()) == original
    mesh.drop_kept.call().get(timeout=60)
    # Both gave it back (on the connections the runtime reads, not the one the replies of
    # this thread come on: no call's reply orders it): the segment is idle again.
    assert _within(10.0, lambda: new[0] in pool._idle)
    assert new[0].inode not in pool._lent
    # Refilled for the next broadcast, with new contents.
    other = torch.randint(0, 255, (8 << 20,), dtype=torch.uint8)
    sums = mesh.checksum.call(other).get(timeout=60)
    assert set(sums.values()) == {zlib.crc32(other.numpy().tobytes())}


def test_a_worker_killed_mid_transfer_leaks_nothing() -> None:
    before = shm_segments()
    procs = proc_mesh(gpus=1).get(timeout=60)
    try:
        mesh = procs.spawn("victim", DataPlane)
        pid = mesh.pid.call_one().get(timeout=30)
        tensor = torch.ones(128 << 20, dtype=torch.uint8)
        mesh.hold.call_one(tensor).get(timeout=60)  # the worker holds a mapping
        pending = mesh.stall.call_one(tensor)  # sent, mapped there, never answered
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(ActorDiedError):
            pending.get(timeout=30)
    finally:
        procs.stop().get(timeout=60)
    assert pid not in live([pid])
    # The two segments lent to the dead worker were dropped, not kept nor recycled (it may
    # still have mapped them when it died): this process holds neither.
    assert _leaked_here(before) == {}


@pytest.mark.parametrize(
    "tensor",
    [
        torch.ones(()).expand(1, 1),  # contiguous by torch's rule, strides (0, 0)
        torch.arange(6.0).reshape(2, 3).t(),  # transposed
        torch.arange(4.0).expand(3, 4),  # a broadcast view
        torch.arange(10.0)[::3],  # a strided slice
        torch.tensor([1 + 2j, 3 - 1j]).conj(),  # lazy: its bytes are not its values
        torch._neg_view(torch.arange(4.0)),  # lazy negation (autograd makes these)
    ],
    ids=["stride-0-contiguous", "transposed", "expanded", "strided", "conjugate", "negative"],
)
def test_tensors_of_any_strides_arrive_as_equal_tensors(plane: Any, tensor: Any) -> None:
    _, mesh = plane
    back = mesh.slice(gpus=0).echo.call_one(tensor).get(timeout=30)
    assert back.shape == tensor.shape and back.dtype == tensor.dtype
    assert torch.equal(back, tensor)


@pytest.mark.parametrize(
    "dtype",
    [torch.bool, torch.uint8, torch.int64, torch.float16, torch.bfloat16, torch.complex64],
)
@pytest.mark.parametrize("shape", [(5,), (2, 3), (1, 1, 4)])
def test_tensors_of_every_dtype_and_shape_arrive_equal(
    plane: Any, dtype: torch.dtype, shape: tuple[int, ...]
) -> None:
    _, mesh = plane
    tensor = (torch.arange(int(np.prod(shape))) % 3).reshape(shape).to(dtype)
    back = mesh.slice(gpus=0).echo.call_one(tensor).get(timeout=30)
    assert back.dtype == dtype and back.shape == tensor.shape
    assert torch.equal(back, tensor)
