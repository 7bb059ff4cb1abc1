"""Worker loops as Monarch 0.7 starts them: ``ca="trust_all_connections"`` without a
secret, the address forms (``ipc://``, ``tcp://host:fdN``, ``DIAL@BIND``, a proc id in
front), the environment of the processes a worker's host starts, and a worker loop whose
end ends its process. Controllers run as processes of their own
(``monarch_host_programs.py``)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from actormesh.actor import (
    run_worker_loop_forever,
    run_worker_loop_until_shutdown,
    start_worker_loop_forever,
)
from actormesh.testing import namespace_hosts, wait_until

if TYPE_CHECKING:  # mypy sees this directory as the package tests.monarch
    from tests.monarch.monarch_support import listening_ports
else:
    from monarch_support import listening_ports

HERE = Path(__file__).resolve().parent
TRUST_ALL = "trust_all_connections"


def _open_env(**extra: str) -> dict[str, str]:
    """An environment without the job's secret (Monarch's: it has none)."""
    env = {k: v for k, v in os.environ.items() if k != "ACTORMESH_SECRET"}
    return {**env, **extra}


class Workers:
    """Worker-loop processes a test started; each is killed at the end if still there."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[str]] = []

    def start(
        self, address: str, env: dict[str, str], *, ca: str | None = TRUST_ALL, **popen: Any
    ) -> subprocess.Popen[str]:
        code = (
            "from actormesh.actor import run_worker_loop_forever; "
            f"run_worker_loop_forever(address={address!r}, ca={ca!r})"
        )
        process = subprocess.Popen(
            [sys.executable, "-c", code],
            env=env,
            cwd=HERE,
            stdout=subprocess.DEVNULL,  # (stderr: pytest's, shown when a test fails)
            text=True,
            **popen,
        )
        self.started.append(process)
        return process

    def port_of(self, worker: subprocess.Popen[str]) -> int:
        found: list[int] = []

        def listening() -> bool:
            assert worker.poll() is None, f"the worker exited with {worker.returncode}"
            found[:] = listening_ports(worker.pid)
            return bool(found)

        wait_until(listening, 60, f"worker {worker.pid} to listen")
        assert len(found) == 1, found
        return found[0]


@pytest.fixture
def workers() -> Iterator[Workers]:
    started = Workers()
    try:
        yield started
    finally:
        for process in started.started:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)


def _program(name: str, args: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "monarch_host_programs", name, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=100,
        env=env,
        cwd=HERE,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.timeout(120)
def test_trust_all_worker_loops_serve_unix_sockets_without_a_secret(
    workers: Workers, tmp_path: Path
) -> None:
    env = _open_env()
    # A socket file, and a name in the abstract namespace (no file at all).
    addresses = [f"ipc://{tmp_path}/w0", f"ipc://@amtest-{secrets.token_hex(6)}"]
    started = [workers.start(address, env) for address in addresses]
    result = _program("attach", {"ca": TRUST_ALL, "workers": addresses}, env)
    assert result["ranks"] == [{"hosts": 0, "gpus": 0}, {"hosts": 1, "gpus": 0}]
    assert len(set(result["pids"])) == 2
    # Shut down, each worker loop ends its process, and leaves no socket file behind.
    assert [worker.wait(timeout=30) for worker in started] == [0, 0]
    assert not (tmp_path / "w0").exists()


@pytest.mark.timeout(180)
def test_a_worker_loop_serves_controllers_one_after_another_until_shut_down(
    workers: Workers, tmp_path: Path
) -> None:
    """Monarch's worker loop runs "until host shutdown terminates this process": a
    controller that only exits leaves it to the next, at the same address."""
    env = _open_env()
    addresses = [f"ipc://{tmp_path}/w0", f"service<amtest>@ipc://{tmp_path}/w1"]
    started = [workers.start(address, env) for address in addresses]
    args: dict[str, Any] = {"ca": TRUST_ALL, "workers": addresses, "leave": True}
    first = _program("attach", args, env)
    assert [worker.poll() for worker in started] == [None, None]  # still serving
    second = _program("attach", args, env)
    assert second["ranks"] == first["ranks"]
    assert not set(first["pids"]) & set(second["pids"])  # new processes for each owner
    assert [worker.poll() for worker in started] == [None, None]
    _program("attach", {"ca": TRUST_ALL, "workers": addresses}, env)  # shuts down
    assert [worker.wait(timeout=30) for worker in started] == [0, 0]
    assert not (tmp_path / "w0").exists()


@pytest.mark.timeout(120)
def test_a_worker_loop_serves_on_an_inherited_socket(workers: Workers) -> None:
    env = _open_env()
    bound = socket.socket()  # bound only: the worker puts it in listening state
    listening = socket.socket()  # already listening
    try:
        bound.bind(("127.0.0.1", 0))
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        started = [
            workers.start(f"tcp://127.0.0.1:fd{sock.fileno()}", env, pass_fds=(sock.fileno(),))
            for sock in (bound, listening)
        ]
        ports = [sock.getsockname()[1] for sock in (bound, listening)]
    finally:
        bound.close()  # the workers have their own copies
        listening.close()
    workers_at = [f"tcp://127.0.0.1:{port}" for port in ports]
    result = _program("attach", {"ca": TRUST_ALL, "workers": workers_at}, env)
    assert len(set(result["pids"])) == 2
    assert [worker.wait(timeout=30) for worker in started] == [0, 0]


def _listening_on_any_interface(port: int) -> bool:
    wanted = f"00000000:{port:04X}"
    lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return any(line.split()[1] == wanted and line.split()[3] == "0A" for line in lines)


@pytest.mark.timeout(120)
def test_an_alias_address_binds_one_address_and_is_dialled_at_the_other(
    workers: Workers,
) -> None:
    env = _open_env()
    # Bind every interface on a port of the kernel's choosing, advertised at loopback;
    # a proc id in front, as Monarch's ProcAddr form has it.
    worker = workers.start("service<amtest>@tcp://127.0.0.1:0@tcp://0.0.0.0:0", env)
    port = workers.port_of(worker)
    assert _listening_on_any_interface(port)
    alias = f"service<amtest>@tcp://127.0.0.1:{port}@tcp://0.0.0.0:{port}"
    result = _program("attach", {"ca": TRUST_ALL, "workers": [alias]}, env)
    assert result["ranks"] == [{"hosts": 0, "gpus": 0}]
    assert worker.wait(timeout=30) == 0


@pytest.mark.timeout(120)
def test_procs_inherit_their_hosts_environment_not_the_controllers(workers: Workers) -> None:
    worker_env = _open_env(
        MONARCH_TEST_SHARED="host", MONARCH_TEST_HOST_ONLY="host", MONARCH_TEST_REMOVED="host"
    )
    worker = workers.start("tcp://127.0.0.1:0", worker_env)
    port = workers.port_of(worker)
    controller_env = _open_env(MONARCH_TEST_SHARED="controller", MONARCH_TEST_CONTROLLER="c")
    read = [
        "MONARCH_TEST_SHARED",
        "MONARCH_TEST_HOST_ONLY",
        "MONARCH_TEST_REMOVED",
        "MONARCH_TEST_CONTROLLER",
        "MONARCH_TEST_SET",
    ]
    args = {
        "ca": TRUST_ALL,
        "workers": [f"tcp://127.0.0.1:{port}"],
        "command_env": {"MONARCH_TEST_REMOVED": None, "MONARCH_TEST_SET": "command"},
        "read": read,
        "plain_spawn": True,
    }
    result = _program("attach", args, controller_env)
    assert result["env"] == {
        "MONARCH_TEST_SHARED": ["host"],
        "MONARCH_TEST_HOST_ONLY": ["host"],
        "MONARCH_TEST_REMOVED": [None],
        "MONARCH_TEST_CONTROLLER": [None],
        "MONARCH_TEST_SET": ["command"],
    }
    # Without a command, the host's environment as it is.
    assert result["plain_env"] == {
        "MONARCH_TEST_SHARED": ["host"],
        "MONARCH_TEST_HOST_ONLY": ["host"],
        "MONARCH_TEST_REMOVED": ["host"],
        "MONARCH_TEST_CONTROLLER": [None],
        "MONARCH_TEST_SET": [None],
    }
    assert worker.wait(timeout=30) == 0


@pytest.mark.timeout(120)
def test_a_worker_with_a_secret_refuses_an_unauthenticated_controller(workers: Workers) -> None:
    # The worker has the job's secret: it checks it even with trust_all_connections.
    worker = workers.start("tcp://127.0.0.1:0", _open_env(ACTORMESH_SECRET="s" * 32))
    port = workers.port_of(worker)
    result = _program(
        "attach_error", {"ca": TRUST_ALL, "workers": [f"tcp://127.0.0.1:{port}"]}, _open_env()
    )
    assert result["type"] == "AuthenticationError"
    assert "ACTORMESH_SECRET" in result["message"]
    assert worker.poll() is None  # it waits on for its owner


@pytest.mark.timeout(120)
def test_an_open_worker_refuses_a_controller_that_proves_a_secret(workers: Workers) -> None:
    worker = workers.start("tcp://127.0.0.1:0", _open_env())
    port = workers.port_of(worker)
    # Without ca="trust_all_connections", the controller proves its (made-up) secret.
    result = _program("attach_error", {"workers": [f"tcp://127.0.0.1:{port}"]}, _open_env())
    assert result["type"] == "AuthenticationError"
    assert "trust" in result["message"]
    assert worker.poll() is None


@pytest.mark.timeout(60)
def test_a_worker_loop_without_a_secret_or_trust_all_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ACTORMESH_SECRET", raising=False)
    for serve in (run_worker_loop_forever, run_worker_loop_until_shutdown):
        with pytest.raises(RuntimeError, match=r"ACTORMESH_SECRET.*trust_all_connections"):
            serve(address="tcp://127.0.0.1:0")
    with pytest.raises(RuntimeError, match="ACTORMESH_SECRET"):
        start_worker_loop_forever(address="tcp://127.0.0.1:0", ca=None)


@pytest.mark.timeout(60)
def test_a_worker_loop_refuses_an_address_it_cannot_serve() -> None:
    for address, complaint in [
        ("metatls://127.0.0.1:4444", "tcp:// and ipc://"),
        ("tcp://127.0.0.1", "HOST:PORT"),
        ("tcp://127.0.0.1:port", "no port"),
        ("not an id@tcp://127.0.0.1:1", "no proc id"),
    ]:
        with pytest.raises(ValueError, match=complaint):
            start_worker_loop_forever(address=address, ca=TRUST_ALL)
        with pytest.raises(ValueError, match=complaint):
            run_worker_loop_forever(address=address, ca=TRUST_ALL)


@pytest.mark.timeout(120)
def test_start_worker_loop_forever_ends_its_process_with_the_host_mesh(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "monarch_host_programs",
            "serve_and_attach_self",
            json.dumps({"address": f"service<amtest>@ipc://{tmp_path}/self"}),
        ],
        capture_output=True,
        text=True,
        timeout=100,
        env=_open_env(),
        cwd=HERE,
    )
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stderr[-3000:]
    assert "SERVED True" in lines  # the worker loop runs in a process of its own
    assert "RuntimeWarning" not in done.stderr, done.stderr  # (runpy's, on every session)
    assert "HANDLER_KEPT True" in lines  # and leaves this one's signal handlers alone
    assert "SIGTERM_HANDLED" in lines
    assert "DID_NOT_EXIT" not in lines


@pytest.mark.timeout(180)
def test_a_worker_loop_on_another_host_binds_everywhere_and_resolves_no_name() -> None:
    """Another host (a network namespace: no DNS there, nothing of ours to resolve) serves
    at an alias; the controller dials its left side and spawns there."""
    if shutil.which("ip") is None:
        pytest.skip("needs the ip command (iproute2) for network namespaces")
    try:
        hosts = namespace_hosts(1)
        network = hosts.__enter__()
    except PermissionError as error:
        pytest.skip(f"needs 'ip netns' (root): {error}")
    try:
        (host,) = network.hosts
        # The namespace is this test's alone: any port is free there.
        address = f"tcp://{host.ip}:29400@tcp://0.0.0.0:29400"
        code = (
            "from actormesh.actor import run_worker_loop_forever; "
            f"run_worker_loop_forever(address={address!r}, ca={TRUST_ALL!r})"
        )
        env = _open_env(MONARCH_TEST_WHERE="namespace")
        worker = subprocess.Popen(
            ["ip", "netns", "exec", host.netns, sys.executable, "-c", code],
            env=env,
            cwd=HERE,
            stdout=subprocess.DEVNULL,
        )
        try:
            args = {"ca": TRUST_ALL, "workers": [address], "read": ["MONARCH_TEST_WHERE"]}
            result = _program("attach", args, _open_env())
            assert result["env"] == {"MONARCH_TEST_WHERE": ["namespace"]}
            assert worker.wait(timeout=30) == 0
        finally:
            if worker.poll() is None:
                worker.kill()
            worker.wait(timeout=10)
    finally:
        hosts.__exit__(None, None, None)
