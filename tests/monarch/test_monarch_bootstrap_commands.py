"""``BootstrapCommand``, ``default_bootstrap_cmd``, ``spawn_procs(bootstrap_command=...)``,
``HostMesh.with_python_executable`` and ``is_fake_in_process``, as in Monarch 0.7: the
command says how each new process starts (program, arguments, environment)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import pytest

from actormesh import ActorDiedError
from actormesh.actor import (
    BootstrapCommand,
    Point,
    ProcMesh,
    default_bootstrap_cmd,
    this_host,
)

if TYPE_CHECKING:  # mypy sees this directory as the package tests.monarch
    from tests.monarch.monarch_host_actors import WRAPPER_VARIABLE, EnvProbe
else:
    from monarch_host_actors import WRAPPER_VARIABLE, EnvProbe


def _probe(procs: ProcMesh) -> EnvProbe:
    return procs.spawn("probe", EnvProbe)


def _wrapper(tmp_path: Path) -> str:
    """A shell script that stamps its pid into the environment and runs Python."""
    path = tmp_path / "python-wrapper"
    path.write_text(f'#!/bin/sh\nexport {WRAPPER_VARIABLE}=$$\nexec {sys.executable} "$@"\n')
    path.chmod(stat.S_IRWXU)
    return str(path)


# -- the command itself ---------------------------------------------------------------------


def test_default_bootstrap_cmd_runs_this_python_in_the_hosts_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MONARCH_TEST_CALLER", "present")
    command = default_bootstrap_cmd()
    assert command.program == sys.executable
    assert command.arg0 is None
    assert command.args == ["-m", "actormesh._bootstrap"]
    assert command.inherit_env
    # The caller's environment is not copied in: it would override the spawning host's.
    assert command.env == {}


def test_with_env_returns_a_copy_where_none_removes_and_a_later_value_restores() -> None:
    command = BootstrapCommand("/bin/true", None, [], {"A": "1", "B": "2"}, inherit_env=False)
    derived = command.with_env({"A": None, "C": None})
    assert derived.env == {"A": None, "B": "2", "C": None}
    assert command.env == {"A": "1", "B": "2"}  # unchanged
    assert not derived.inherit_env
    assert derived.with_env({"A": "3"}).env == {"A": "3", "B": "2", "C": None}
    assert BootstrapCommand("/bin/true", None, [], {}).inherit_env
    # env is a copy: changing it changes nothing.
    derived.env["B"] = "changed"
    assert derived.env["B"] == "2"


def test_env_accepts_any_mapping_and_refuses_values_that_are_not_strings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MONARCH_TEST_MAPPING", "present")
    command = BootstrapCommand("/bin/true", None, [], MappingProxyType({"A": None}))
    assert command.env == {"A": None}
    assert command.with_env(os.environ).env["MONARCH_TEST_MAPPING"] == "present"
    command.env = MappingProxyType({"B": "1"})
    assert command.env == {"B": "1"}
    bad: list[Any] = [{"A": 1}, {1: "a"}, ["A"]]
    for env in bad:
        with pytest.raises(TypeError):
            BootstrapCommand("/bin/true", None, [], env)
        with pytest.raises(TypeError):
            command.with_env(env)
    with pytest.raises(TypeError):
        command.env = {"A": b"bytes"}  # type: ignore[dict-item]
    with pytest.raises(TypeError):
        BootstrapCommand("/bin/true", None, ["ok", 3], {})  # type: ignore[list-item]
    with pytest.raises(TypeError):
        BootstrapCommand(None, None, [], {})  # type: ignore[arg-type]


# -- processes started by it ----------------------------------------------------------------


@pytest.mark.timeout(120)
def test_spawn_procs_sets_and_removes_variables_for_that_spawn_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MONARCH_TEST_INHERITED", "inherited")
    monkeypatch.setenv("MONARCH_TEST_REMOVED", "inherited")
    command = default_bootstrap_cmd().with_env(
        {"MONARCH_TEST_REMOVED": None, "MONARCH_TEST_SET": "3"}
    )
    host = this_host()
    with host.spawn_procs(per_host={"gpus": 2}, bootstrap_command=command) as procs:
        probe = _probe(procs)
        for name, expected in [
            ("MONARCH_TEST_INHERITED", "inherited"),
            ("MONARCH_TEST_REMOVED", None),
            ("MONARCH_TEST_SET", "3"),
        ]:
            assert probe.get_env.call(name).get(timeout=60).values() == [expected] * 2
    # A later spawn without it starts as usual: the host mesh was not changed.
    with host.spawn_procs(per_host={"gpus": 1}) as plain:
        probe = _probe(plain)
        assert probe.get_env.call_one("MONARCH_TEST_SET").get(timeout=60) is None
        assert probe.get_env.call_one("MONARCH_TEST_REMOVED").get(timeout=60) == "inherited"


@pytest.mark.timeout(120)
def test_a_function_gives_each_process_its_own_command() -> None:
    seen: list[dict[str, int]] = []

    def per_rank(point: Point) -> BootstrapCommand:
        seen.append(dict(point))
        return default_bootstrap_cmd().with_env({"CUDA_VISIBLE_DEVICES": str(point["gpus"])})

    with this_host().spawn_procs(per_host={"nodes": 2, "gpus": 2}, bootstrap_command=per_rank) as p:
        values = _probe(p).get_env.call("CUDA_VISIBLE_DEVICES").get(timeout=60).values()
    assert values == ["0", "1", "0", "1"]
    assert seen == [{"nodes": n, "gpus": g} for n in range(2) for g in range(2)]


@pytest.mark.timeout(120)
def test_without_inherit_env_a_process_sees_only_the_command_and_its_own_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MONARCH_TEST_CALLER", "present")
    command = default_bootstrap_cmd().with_env(
        {"PYTHONPATH": os.environ["PYTHONPATH"], "MONARCH_TEST_ONLY": "1"}
    )
    command.inherit_env = False
    with this_host().spawn_procs(bootstrap_command=command) as procs:
        env = _probe(procs).environ.call_one().get(timeout=60)
    assert env["MONARCH_TEST_ONLY"] == "1"
    assert "MONARCH_TEST_CALLER" not in env and "HOME" not in env
    # Besides the command's: the worker's own, and what Python sets for its locale.
    others = {k for k in env if not k.startswith("ACTORMESH_")} - {"PYTHONPATH", "LC_CTYPE"}
    assert others == {"MONARCH_TEST_ONLY"}


@pytest.mark.timeout(120)
def test_a_command_runs_its_own_program_with_its_own_arg0() -> None:
    # sh, found on PATH and started as "am-launcher", notes its argv[0] and runs Python.
    script = (
        'export MONARCH_TEST_ARG0="$(head -z -n 1 /proc/$$/cmdline | tr -d "\\000")"; '
        'exec "$0" "$@"'
    )
    args = ["-c", script, sys.executable, *default_bootstrap_cmd().args]
    command = BootstrapCommand("sh", "am-launcher", args, {"MONARCH_TEST_VIA": "sh"})
    with this_host().spawn_procs(bootstrap_command=command) as procs:
        probe = _probe(procs)
        assert probe.get_env.call_one("MONARCH_TEST_ARG0").get(timeout=60) == "am-launcher"
        assert probe.get_env.call_one("MONARCH_TEST_VIA").get(timeout=60) == "sh"
        assert probe.cmdline.call_one().get(timeout=60)[1:] == list(default_bootstrap_cmd().args)


@pytest.mark.timeout(120)
def test_a_command_that_cannot_start_a_worker_fails_the_spawn() -> None:
    missing = BootstrapCommand("/nonexistent/python", None, [], {})
    with pytest.raises(FileNotFoundError, match="/nonexistent/python"):
        this_host().spawn_procs(bootstrap_command=missing)
    with pytest.raises(ActorDiedError, match="exited with code 1"):
        this_host().spawn_procs(bootstrap_command=BootstrapCommand("false", None, [], {}))


def test_a_bootstrap_command_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(TypeError, match="BootstrapCommand"):
        this_host().spawn_procs(bootstrap_command="python")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not a command"):
        this_host().spawn_procs(bootstrap_command=lambda point: {"A": "1"})  # type: ignore[arg-type,return-value]


@pytest.mark.timeout(120)
def test_a_restarted_process_starts_with_the_same_command() -> None:
    command = default_bootstrap_cmd().with_env({"MONARCH_TEST_SET": "kept"})
    procs = this_host().spawn_procs(bootstrap_command=command, restart="rank")
    try:
        probe = _probe(procs)
        first = probe.pid.call_one().get(timeout=60)
        died = probe.crash.call_one()
        with pytest.raises(ActorDiedError):
            died.get(timeout=30)
        assert probe.pid.call_one().get(timeout=60) != first  # waits for the restart
        assert probe.get_env.call_one("MONARCH_TEST_SET").get(timeout=60) == "kept"
    finally:
        procs.stop().get(timeout=30)


# -- host meshes ----------------------------------------------------------------------------


def test_this_host_is_real_processes_not_a_fake_in_process_one() -> None:
    assert this_host().is_fake_in_process is False
    assert this_host().with_python_executable(sys.executable).is_fake_in_process is False


@pytest.mark.timeout(180)
def test_with_python_executable_starts_the_procs_and_those_they_spawn_through_it(
    tmp_path: Path,
) -> None:
    wrapped = this_host().with_python_executable(_wrapper(tmp_path))
    with wrapped.spawn_procs(per_host={"procs": 1}) as procs:
        probe = _probe(procs)
        direct = probe.get_env.call_one(WRAPPER_VARIABLE).get(timeout=60)
        assert direct  # the wrapper ran
        # this_host() in those processes carries the wrapper: it runs again (a new pid).
        inner = probe.spawn_inner.call_one().get(timeout=120)
        assert inner.get_env.call_one(WRAPPER_VARIABLE).get(timeout=60) not in (None, direct)
    # The host mesh it came from is unchanged.
    with this_host().spawn_procs() as plain:
        assert _probe(plain).get_env.call_one(WRAPPER_VARIABLE).get(timeout=60) is None
