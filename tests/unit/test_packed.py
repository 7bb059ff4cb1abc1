"""A large mesh's table of processes travels compressed in a pickle (``_pure._packed``),
and comes back the same; a small one travels as it is."""

from __future__ import annotations

import pickle

import pytest

from actormesh._api._actor_mesh import MeshRef
from actormesh._api._proc_mesh import ProcMesh, _Processes, _ProcessRef
from actormesh._core import dumps, loads
from actormesh._pure import pack, unpack
from actormesh._pure._packed import PACK_ABOVE
from actormesh._shape import Shape

pytestmark = pytest.mark.timeout(60)


def _paths(count: int) -> tuple[str, ...]:
    # 16 processes a host, as a job of thousands of hosts has them.
    return tuple(f"tcp://10.{h // 256}.{h % 256}.7:{40000 + p}" for h in range(count // 16 + 1)
                 for p in range(16))[:count]  # fmt: skip


def test_a_short_table_is_pickled_as_it_is() -> None:
    table = _paths(PACK_ABOVE)
    assert pack(table) is table
    assert unpack(table) is table


def test_a_long_table_comes_back_the_same_and_smaller() -> None:
    table = tuple((f"mesh-{i}", i, path, 4_000_000 + i) for i, path in enumerate(_paths(20_000)))
    packed = pack(table)
    assert isinstance(packed, bytes)
    assert unpack(packed) == table
    assert len(packed) * 4 < len(pickle.dumps(table, protocol=pickle.HIGHEST_PROTOCOL))


@pytest.mark.parametrize("count", [16, PACK_ABOVE + 1, 20_000])
def test_a_mesh_reference_round_trips_whatever_its_size(count: int) -> None:
    ref = MeshRef("m-1", "workers", "W", {}, ("hosts", "gpus"), (count // 16, 16), _paths(count))
    back = loads(*_split(dumps(ref)))
    assert back == ref
    plain = len(pickle.dumps(ref.paths, protocol=pickle.HIGHEST_PROTOCOL))
    sent = len(dumps(ref)[0])
    if count > PACK_ABOVE:
        assert sent * 4 < plain  # the paths went compressed
    else:
        assert sent > plain  # as they are (with the other fields)


def test_a_large_process_mesh_sent_elsewhere_names_the_same_processes() -> None:
    paths = _paths(5_000)
    children = [_ProcessRef(f"w-{i}", i, path, 1000 + i) for i, path in enumerate(paths)]
    mesh = ProcMesh(
        _Processes("procs", children, owned=False), Shape.from_dims(("p",), (5_000,)), 1
    )
    back = loads(*_split(dumps(mesh)))
    got = [(c.key, c.rank, c.listen_path, c.pid) for c in back._processes.children]
    assert got == [(c.key, c.rank, c.listen_path, c.pid) for c in children]


def _split(dumped: tuple[bytes, list[object]]) -> tuple[bytes, list[object]]:
    payload, buffers = dumped
    return payload, buffers
