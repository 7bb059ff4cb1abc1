"""Meshes (issue 2, point 3): shapes, spawn, several actor meshes, stop and ``async with``."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest
from integration_actors import Broken, Echo, Recorder

from actormesh import (
    ActorInitError,
    ActorMesh,
    MeshStoppedError,
    ProcMesh,
    Shape,
    proc_mesh,
)
from actormesh.testing import live, run


def worker_pids(mesh: ActorMesh[Echo]) -> list[int]:
    return list(mesh.pid.call().get(timeout=30).values())


@pytest.mark.parametrize(
    ("make", "shape"),
    [
        (lambda: proc_mesh(gpus=4), Shape.from_dims(("gpus",), (4,))),
        (lambda: proc_mesh(hosts=1, gpus=4), Shape.from_dims(("hosts", "gpus"), (1, 4))),
        (lambda: proc_mesh({"dp": 2, "tp": 2}), Shape.from_dims(("dp", "tp"), (2, 2))),
    ],
    ids=["gpus=4", "hosts=1,gpus=4", "dp=2,tp=2"],
)
def test_proc_mesh_starts_one_process_per_point(make, shape: Shape) -> None:  # type: ignore[no-untyped-def]
    async def main() -> list[int]:
        procs = await make()
        try:
            assert procs.shape == shape
            assert procs.size() == len(procs) == 4
            echo = await procs.spawn("echo", Echo)
            assert echo.shape == shape
            pids = await echo.pid.call()
            assert pids.shape == shape
            return list(pids.values())
        finally:
            await procs.stop()

    pids = run(main())
    assert len(set(pids)) == 4
    assert os.getpid() not in pids
    assert live(pids) == []


def test_proc_mesh_refuses_a_shape_given_twice() -> None:
    with pytest.raises(TypeError, match="not both"):
        proc_mesh({"dp": 2}, gpus=2)


def test_several_actor_meshes_share_the_processes_and_keep_their_own_state(
    procs: ProcMesh,
) -> None:
    async def main() -> None:
        first = await procs.spawn("first", Echo)
        second = await procs.spawn("second", Echo)
        third = await procs.spawn("third", Recorder)
        assert list((await first.pid.call()).values()) == list((await second.pid.call()).values())
        await first.set_value.call("one")
        await second.set_value.call("two")
        await third.record.call("three")
        assert list((await first.get_value.call()).values()) == ["one"] * 4
        assert list((await second.get_value.call()).values()) == ["two"] * 4
        assert list((await third.recorded.call()).values()) == [["three"]] * 4

    run(main())


def test_stopping_an_actor_mesh_leaves_the_processes_and_other_meshes(procs: ProcMesh) -> None:
    async def main() -> None:
        doomed = await procs.spawn("doomed", Echo)
        kept = await procs.spawn("kept", Echo)
        await doomed.stop()
        with pytest.raises(MeshStoppedError, match="'doomed' was stopped"):
            doomed.async_echo.call(1)
        assert list((await kept.async_echo.call(1)).values()) == [("async", 1, "echo")] * 4

    run(main())


def test_stop_ends_every_process_and_refuses_new_work() -> None:
    procs = proc_mesh(gpus=2).get(timeout=30)
    echo = procs.spawn("echo", Echo)
    pids = worker_pids(echo)
    procs.stop().get(timeout=30)
    assert live(pids) == []
    with pytest.raises(MeshStoppedError):
        echo.pid.call()
    with pytest.raises(MeshStoppedError):
        procs.spawn("again", Echo)
    procs.stop().get(timeout=5)  # stopping twice is harmless


def test_async_with_stops_the_processes() -> None:
    async def main() -> list[int]:
        async with await proc_mesh(gpus=2) as procs:
            echo = await procs.spawn("echo", Echo)
            pids = list((await echo.pid.call()).values())
            assert live(pids) == pids
        return pids

    assert live(run(main())) == []


def test_with_block_stops_the_processes_even_when_the_body_raises() -> None:
    pids: list[int] = []
    with pytest.raises(RuntimeError, match="body failed"), proc_mesh(gpus=2).get() as procs:
        pids.extend(worker_pids(procs.spawn("echo", Echo)))
        raise RuntimeError("body failed")
    assert len(pids) == 2
    assert live(pids) == []


def test_failing_init_fails_the_spawn_with_actor_init_error(procs: ProcMesh) -> None:
    broken = procs.spawn("broken", Broken)  # returns at once; __init__ runs in the workers
    with pytest.raises(ActorInitError) as caught:
        broken.initialized.get(timeout=30)
    error = caught.value
    assert isinstance(error, KeyError)
    assert error.mesh == "broken"
    assert "no config" in str(error)
    assert "__init__" in str(error)
    # The processes survive a failed spawn.
    echo = procs.spawn("after_broken", Echo)
    assert len(worker_pids(echo)) == 4


def test_a_call_made_before_a_failing_init_finished_gets_actor_init_error(
    procs: ProcMesh,
) -> None:
    # The call reaches each worker while __init__ runs (queued behind it) or after it
    # failed: either way the caller learns of the __init__ failure, never of the endpoint.
    for attempt in range(5):
        broken = procs.spawn(f"broken_then_called{attempt}", Broken)
        with pytest.raises(ActorInitError, match="raised by __init__") as caught:
            broken.never.call().get(timeout=30)
        assert isinstance(caught.value, KeyError)


def test_a_call_right_after_spawning_a_class_workers_cannot_import_gets_its_init_error(
    procs: ProcMesh, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A module only the controller can import (its sys.path, not the workers').
    (tmp_path / "controller_only.py").write_text(
        "from actormesh import Actor, endpoint\n"
        "class Hidden(Actor):\n"
        "    @endpoint\n"
        "    def f(self):\n"
        "        return 1\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    hidden = importlib.import_module("controller_only").Hidden
    mesh = procs.spawn("hidden", hidden)
    with pytest.raises(ActorInitError, match="cannot load what the spawn of mesh"):
        mesh.f.call().get(timeout=30)  # not "no live actor of rank 0 here"


def test_a_worker_answers_while_a_spawn_imports_its_actor_class(tmp_path: Path) -> None:
    # Loading a spawn's actor class imports its module, which can take minutes (a model
    # library). Meanwhile the process answers other actors' calls (and heartbeats, which
    # would otherwise get it killed as unresponsive): the import runs on the new actor's
    # thread, not on the process' loop.
    import errno

    from actormesh.testing import wait_until

    gate = tmp_path / "gate"
    os.mkfifo(gate)
    procs = proc_mesh(gpus=1, env={"ACTORMESH_TEST_IMPORT_GATE": str(gate)}).get(timeout=60)
    try:
        echo = procs.spawn("echo", Echo)
        assert echo.sync_echo.call_one(1).get(timeout=30)[1] == 1
        from gated_import_actors import Gated  # (no gate in this process)

        gated = procs.spawn("gated", Gated)
        answer = gated.imported.call_one()
        writer: list[int] = []

        def importing() -> bool:  # the worker has opened the gate to read: it is importing
            try:
                writer.append(os.open(gate, os.O_WRONLY | os.O_NONBLOCK))
            except OSError as error:
                if error.errno != errno.ENXIO:
                    raise
                return False
            return True

        wait_until(importing, 30, "the worker to start importing the gated module")
        for i in range(3):
            assert echo.sync_echo.call_one(i).get(timeout=10)[1] == i
        assert not answer.done()
        os.write(writer[0], b"go\n")
        os.close(writer[0])
        assert answer.get(timeout=30) is True
    finally:
        procs.stop().get(timeout=30)


def test_a_module_that_installs_a_signal_handler_at_import_fails_its_spawn_clearly(
    procs: ProcMesh,
) -> None:
    # The actor's module is imported on the actor's thread, where Python refuses
    # signal.signal: the spawn fails with the reason, nothing hangs.
    from signal_at_import_actors import SignalAtImport

    mesh = procs.spawn("signals", SignalAtImport)
    with pytest.raises(ActorInitError, match="signal only works in main thread"):
        mesh.ping.call().get(timeout=30)


def test_spawn_checks_its_arguments(procs: ProcMesh) -> None:
    with pytest.raises(TypeError, match=r"subclass of actormesh\.Actor"):
        procs.spawn("x", dict)
    with pytest.raises(TypeError, match="mesh name"):
        procs.spawn(Echo, Echo)  # type: ignore[arg-type]


def test_spawn_on_a_slice_of_the_processes(procs: ProcMesh) -> None:
    row = procs.slice(dp=1)
    echo = row.spawn("row", Echo)
    assert echo.shape == Shape.from_dims(("tp",), (2,))
    identities = echo.whoami.call().get(timeout=30)
    assert [i["env_coords"] for i in identities.values()] == [
        {"dp": 1, "tp": 0},
        {"dp": 1, "tp": 1},
    ]
