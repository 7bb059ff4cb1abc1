"""Monarch's module paths (``monarch.proc_mesh``, ``monarch.actor_mesh``, ``monarch.actor``)
have actormesh twins holding the very same objects, so its programs need only their
imports changed; importing them leaves ``actormesh.proc_mesh`` and
``actormesh.actor_mesh`` the functions they are."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import actormesh

# Every public name of monarch.actor in torchmonarch 0.7.0 (its __all__).
MONARCH_ACTOR = [
    "Accumulator",
    "Actor",
    "ActorError",
    "current_actor_name",
    "as_endpoint",
    "current_rank",
    "current_size",
    "concurrent_endpoint",
    "endpoint",
    "Future",
    "returns_future",
    "Point",
    "ProcMesh",
    "ProcId",
    "Channel",
    "send",
    "shutdown_context",
    "ValueMesh",
    "debug_controller",
    "get_or_spawn_controller",
    "this_host",
    "this_proc",
    "default_bootstrap_cmd",
    "HostMesh",
    "context",
    "Port",
    "PortReceiver",
    "Endpoint",
    "Extent",
    "run_worker_loop_forever",
    "run_worker_loop_until_shutdown",
    "start_worker_loop_forever",
    "attach_to_workers",
    "attach",
    "enable_transport",
    "Context",
    "ChannelTransport",
    "unhandled_fault_hook",
    "MeshFailure",
    "config",
    "get_meter",
    "span",
    "traced",
    "Uid",
]


# Names Monarch gives another meaning than actormesh's own: `monarch.actor.attach` is
# Monarch's gateway client, `actormesh.attach` attaches to a leased job (docs/leases.md).
MEANS_OTHER_THINGS = {"attach"}


@pytest.mark.parametrize("name", ["actormesh.proc_mesh", "actormesh.actor_mesh", "actormesh.actor"])
def test_every_name_is_the_object_actormesh_exports(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__all__
    for exported in module.__all__:
        if exported in actormesh.__all__ and exported not in MEANS_OTHER_THINGS:
            assert getattr(module, exported) is getattr(actormesh, exported), exported


def test_every_public_name_of_monarch_actor_is_there() -> None:
    import actormesh.actor

    assert len(MONARCH_ACTOR) == 44
    missing = [name for name in MONARCH_ACTOR if name not in actormesh.actor.__all__]
    assert missing == []


def test_importing_the_twins_keeps_the_package_functions() -> None:
    # A fresh interpreter: the order of imports is the one a Monarch program has.
    code = (
        "from actormesh.proc_mesh import proc_mesh, ProcMesh\n"
        "from actormesh.actor_mesh import Actor, endpoint, current_rank\n"
        "import actormesh, inspect\n"
        "assert inspect.isfunction(actormesh.proc_mesh), actormesh.proc_mesh\n"
        "assert inspect.isfunction(actormesh.actor_mesh), actormesh.actor_mesh\n"
        "assert actormesh.proc_mesh is proc_mesh\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "ok", done.stderr
