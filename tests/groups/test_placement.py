"""Issue 6, point 1: placement of one-actor processes (pure planning, GPU discovery)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actormesh._api._host_resources import visible_gpus
from actormesh._pure import Placement, plan, resources_from


@given(
    count=st.integers(1, 8),
    per=st.integers(1, 4),
    cpus=st.lists(st.integers(0, 63), unique=True, min_size=1, max_size=40),
)
def test_cpu_sets_are_disjoint_equal_and_from_the_allowed_cpus(
    count: int, per: int, cpus: list[int]
) -> None:
    if count * per > len(cpus):
        with pytest.raises(ValueError, match="CPUs"):
            plan(count, cpus_per_actor=per, gpus_per_actor=None, cpus=cpus, gpus=[])
        return
    placements = plan(count, cpus_per_actor=per, gpus_per_actor=None, cpus=cpus, gpus=[])
    sets = [p.cpus for p in placements]
    assert all(len(s) == per for s in sets)
    flat = [cpu for s in sets for cpu in s]
    assert len(set(flat)) == len(flat)
    assert set(flat) <= set(cpus)
    assert all(p.gpus is None for p in placements)


def test_gpu_lists_go_out_in_order_and_zero_hides_every_gpu() -> None:
    gpus = ["0", "1", "2", "3"]
    two = plan(2, cpus_per_actor=None, gpus_per_actor=2, cpus=[0], gpus=gpus)
    assert [p.env() for p in two] == [
        {"CUDA_VISIBLE_DEVICES": "0,1"},
        {"CUDA_VISIBLE_DEVICES": "2,3"},
    ]
    none = plan(3, cpus_per_actor=None, gpus_per_actor=0, cpus=[0], gpus=[])
    assert [p.env() for p in none] == [{"CUDA_VISIBLE_DEVICES": ""}] * 3
    untouched = plan(2, cpus_per_actor=None, gpus_per_actor=None, cpus=[0], gpus=gpus)
    assert [p.env() for p in untouched] == [{}, {}]


def test_pinned_placements_size_thread_pools_to_their_cpus() -> None:
    assert Placement(cpus=(4, 5, 6)).env() == {"OMP_NUM_THREADS": "3"}


def test_negative_amounts_are_rejected() -> None:
    with pytest.raises(ValueError, match="cpus_per_actor must be at least 0"):
        plan(1, cpus_per_actor=-1, gpus_per_actor=None, cpus=[0], gpus=[])


def test_ray_resources_translate_to_cpus_and_gpus() -> None:
    assert resources_from({"CPU": 2, "GPU": 1}) == (2, 1)
    assert resources_from({"num_cpus": 1.0}) == (1, None)
    with pytest.raises(ValueError, match="whole number"):
        resources_from({"GPU": 0.5})


def test_visible_gpus_follow_cuda_visible_devices_then_the_driver(tmp_path: Path) -> None:
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-ab, GPU-cd"}, str(tmp_path)) == [
        "GPU-ab",
        "GPU-cd",
    ]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, str(tmp_path)) == []
    assert visible_gpus({}, str(tmp_path)) == []
    driver = tmp_path / "proc/driver/nvidia/gpus"
    for bus in ("0000:01:00.0", "0000:02:00.0"):
        (driver / bus).mkdir(parents=True)
    assert visible_gpus({}, str(tmp_path)) == ["0", "1"]


def test_visible_gpus_fall_back_to_device_nodes(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm"):
        (dev / name).touch()
    assert visible_gpus({}, str(tmp_path)) == ["0", "1", "2"]
