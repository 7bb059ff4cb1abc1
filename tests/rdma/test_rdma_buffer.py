"""``actormesh.rdma.RDMABuffer``: one-sided reads and writes of another process' memory,
with Monarch's API (``read_into``, ``write_from``, ``drop``, ``size``), between real
processes of this host."""

from __future__ import annotations

import os
import pickle
import signal
from typing import Any

import pytest
import torch
from rdma_actors import Owner, Reader

from actormesh.actor import ProcMesh, this_proc
from actormesh.rdma import (
    RDMAAction,
    RDMABuffer,
    get_rdma_backend,
    is_ibverbs_available,
    is_rdma_available,
)
from actormesh.testing import wait_until

NUMEL = 1 << 16  # 256 KiB of float32


@pytest.fixture(scope="module")
def owner(procs: ProcMesh) -> Any:
    return procs.slice(procs=0).spawn("owner", Owner, NUMEL)


@pytest.fixture(scope="module")
def reader(procs: ProcMesh) -> Any:
    return procs.slice(procs=1).spawn("reader", Reader)


def _state(pid: int) -> str:
    """The one-letter state of ``pid`` (``T``: stopped by a signal)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def _floats(numel: int) -> torch.Tensor:
    return torch.zeros(numel, dtype=torch.float32)


def test_the_controller_reads_an_actors_buffer_without_the_actor_doing_anything(
    owner: Any,
) -> None:
    buffer = owner.handle.call_one().get(timeout=30)
    assert buffer.size() == NUMEL * 4
    local = _floats(NUMEL)
    # The owner's process is frozen during the read: nothing in it runs, neither the
    # owner actor nor its service actor (the fallback for readers that cannot reach the
    # memory). A read that went through them could not finish.
    pid = owner.pid.call_one().get(timeout=30)
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_until(lambda: _state(pid) == "T", 10, "the owner's process to stop")
        read = buffer.read_into(local.view(torch.uint8).flatten())
        assert read.get(timeout=10) is None
        assert _state(pid) == "T"
    finally:
        os.kill(pid, signal.SIGCONT)
    assert torch.equal(local, owner.weights_now.call_one().get(timeout=30))


def test_a_read_sees_the_owners_current_bytes(owner: Any) -> None:
    buffer = owner.handle.call_one().get(timeout=30)
    owner.bump.call_one(1.0).get(timeout=30)
    local = _floats(NUMEL)
    buffer.read_into(local.view(torch.uint8).flatten()).get(timeout=30)
    assert torch.equal(local, owner.weights_now.call_one().get(timeout=30))


def test_an_actor_reads_a_buffer_another_actor_owns(owner: Any, reader: Any) -> None:
    buffer = owner.handle.call_one().get(timeout=30)
    expected = owner.weights_now.call_one().get(timeout=30)
    assert torch.equal(reader.read.call_one(buffer, NUMEL).get(timeout=30), expected)
    assert torch.equal(reader.read_sync.call_one(buffer, NUMEL).get(timeout=30), expected)


def test_write_from_changes_the_owners_tensor(owner: Any, reader: Any) -> None:
    buffer = owner.handle.call_one().get(timeout=30)
    values = [float(-i) for i in range(NUMEL)]
    reader.write.call_one(buffer, values).get(timeout=30)
    assert torch.equal(owner.weights_now.call_one().get(timeout=30), torch.tensor(values))


def test_a_larger_destination_gets_the_buffer_in_its_first_bytes(owner: Any) -> None:
    # As Monarch's read_into: the whole buffer lands in the destination's first bytes,
    # the rest is left as it was.
    buffer = owner.handle.call_one().get(timeout=30)
    larger = torch.full((NUMEL + 4,), -1.0)
    buffer.read_into(larger.view(torch.uint8).flatten()).get(timeout=30)
    assert torch.equal(larger[:NUMEL], owner.weights_now.call_one().get(timeout=30))
    assert torch.equal(larger[NUMEL:], torch.full((4,), -1.0))


def test_a_smaller_destination_or_larger_source_is_refused_at_the_call_site(
    owner: Any,
) -> None:
    buffer = owner.handle.call_one().get(timeout=30)
    with pytest.raises(ValueError, match="a buffer of 262144 bytes does not fit 32 bytes"):
        buffer.read_into(_floats(8).view(torch.uint8).flatten())
    with pytest.raises(ValueError, match="do not fit a buffer of 262144"):
        buffer.write_from(_floats(NUMEL + 1).view(torch.uint8).flatten())
    # RDMAAction checks when a step is added, before anything is sent.
    with pytest.raises(ValueError, match="do not fit a buffer of 262144"):
        RDMAAction().write_remote(buffer, _floats(NUMEL + 1).view(torch.uint8).flatten())
    with pytest.raises(ValueError, match="does not fit 32 bytes"):
        RDMAAction().read_remote(_floats(8).view(torch.uint8).flatten(), buffer)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (torch.zeros(2, 3), "1-D contiguous"),
        (torch.zeros(8)[::2], "1-D contiguous"),
        (torch.zeros(0), "non-empty"),
        ([1, 2, 3], "torch.Tensor or a memoryview"),
    ],
)
def test_bad_memory_is_refused_with_a_clear_error(data: Any, message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        RDMABuffer(data)


def test_a_buffer_of_the_controller_is_read_by_an_actor(reader: Any) -> None:
    weights = torch.linspace(0, 1, NUMEL)
    buffer = RDMABuffer(weights.view(torch.uint8).flatten())
    assert torch.equal(reader.read.call_one(buffer, NUMEL).get(timeout=30), weights)
    local = _floats(NUMEL)
    buffer.read_into(local.view(torch.uint8).flatten()).get(timeout=30)  # in-process
    assert torch.equal(local, weights)
    buffer.drop().get(timeout=30)


def test_a_memoryview_registers_too(reader: Any) -> None:
    data = bytearray(torch.arange(16, dtype=torch.float32).numpy().tobytes())
    buffer = RDMABuffer(memoryview(data))
    assert buffer.size() == 64
    assert reader.read.call_one(buffer, 16).get(timeout=30).tolist() == list(range(16))
    buffer.drop().get(timeout=30)


def test_a_dropped_buffer_cannot_be_read(procs: ProcMesh, reader: Any) -> None:
    owner = procs.slice(procs=0).spawn("owner_to_drop", Owner, 64)
    buffer = owner.handle.call_one().get(timeout=30)
    buffer.drop().get(timeout=30)
    with pytest.raises(KeyError, match="dropped"):
        buffer.read_into(_floats(64).view(torch.uint8).flatten()).get(timeout=30)
    with pytest.raises(KeyError, match="dropped"):
        reader.read.call_one(buffer, 64).get(timeout=30)
    mine = RDMABuffer(torch.zeros(4))
    mine.drop().get(timeout=30)
    with pytest.raises(KeyError, match="dropped"):
        mine.read_into(_floats(4).view(torch.uint8).flatten())


def test_a_buffer_pickles_as_where_the_memory_is_not_the_bytes(owner: Any) -> None:
    buffer = owner.handle.call_one().get(timeout=30)
    assert len(pickle.dumps(buffer)) < 4096  # of 262,144 bytes
    assert "262144 bytes" in repr(buffer)
    assert buffer.backend == get_rdma_backend() == "tcp"


def test_an_action_runs_its_transfers_in_order(owner: Any) -> None:
    buffer = owner.handle.call_one().get(timeout=30)
    source = torch.full((NUMEL,), 7.0)
    copy = _floats(NUMEL)
    action = RDMAAction().write_remote(buffer, source.view(torch.uint8).flatten())
    action.read_remote(copy.view(torch.uint8).flatten(), buffer)
    action.submit().get(timeout=30)
    assert torch.equal(copy, source)
    with pytest.raises(NotImplementedError, match="RDMA hardware"):
        RDMAAction().fetch_add(buffer, copy, 1)


def test_the_backend_queries_say_what_this_machine_has() -> None:
    assert get_rdma_backend() == "tcp"
    assert is_ibverbs_available() is False
    with pytest.warns(DeprecationWarning):
        assert is_rdma_available() is True


def test_this_proc_serves_the_controllers_buffers() -> None:
    # The controller's own service actor is one per runtime, not one per buffer.
    first = RDMABuffer(torch.zeros(4))
    second = RDMABuffer(torch.zeros(4))
    assert first._service is second._service
    assert this_proc() is not None
    first.drop().get(timeout=30)
    second.drop().get(timeout=30)
