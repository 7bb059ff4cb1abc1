"""Transport (issue 2, point 14): private Unix sockets, one pickle and one frame per process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from integration_actors import CountsPickles, Echo
from integration_support import run_script

from actormesh import ProcMesh
from actormesh._transport import connect_unix

needs_root = pytest.mark.skipif(
    os.getuid() != 0, reason="running a process as another user needs root"
)


def _abstract_names() -> set[str]:
    # /proc/net/unix lists every bound socket; abstract names start with "@".
    lines = Path("/proc/net/unix").read_text().splitlines()[1:]
    return {fields[-1] for fields in (line.split() for line in lines) if len(fields) == 8}


def test_sockets_are_abstract_names_with_nothing_on_disk(procs: ProcMesh) -> None:
    echo = procs.spawn("sockets", Echo)
    prefixes = set(echo.socket_dir.call().get(timeout=30).values())
    assert len(prefixes) == 1
    prefix = prefixes.pop()
    assert prefix.startswith(f"@actormesh-{os.getuid()}-")
    assert not Path(prefix).exists() and not Path(prefix[1:]).exists()
    bound = {name for name in _abstract_names() if name.startswith(prefix + "/")}
    # The controller and the four workers of the mesh each listen there.
    assert len(bound) >= 5


@needs_root
def test_a_process_of_another_user_is_refused_by_the_listener(procs: ProcMesh) -> None:
    echo = procs.spawn("strangers", Echo)
    prefix = next(iter(echo.socket_dir.call().get(timeout=30).values()))
    name = next(n for n in _abstract_names() if n.startswith(prefix + "/"))
    script = (
        "import os, socket\n"
        "os.setuid(65534)\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        f"s.connect({chr(0) + name[1:]!r})\n"
        "s.settimeout(10)\n"
        "print(repr(s.recv(1)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=False
    )
    # Connected, then closed before a byte was exchanged: the listener checked the uid.
    assert result.stdout.strip() == "b''", result.stderr


@needs_root
def test_a_client_refuses_a_listener_of_another_user() -> None:
    name = f"@actormesh-test-{os.getpid()}-squatter"
    script = (
        "import os, socket, sys\n"
        "os.setuid(65534)\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        f"s.bind({chr(0) + name[1:]!r})\n"
        "s.listen()\n"
        "print('ready', flush=True)\n"
        "conn, _ = s.accept()\n"
        "sys.stdin.read()\n"
    )
    squatter = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert squatter.stdout is not None
        assert squatter.stdout.readline().strip() == "ready"
        with pytest.raises(PermissionError, match="another user"):
            connect_unix(name)
    finally:
        squatter.kill()
        squatter.wait(10)


def test_arguments_are_pickled_once_whatever_the_fan_out(procs: ProcMesh) -> None:
    echo = procs.spawn("fan_out", Echo)
    before = CountsPickles.pickled
    values = echo.async_echo.call(CountsPickles()).get(timeout=30)
    assert len(values) == 4
    assert all(isinstance(v[1], CountsPickles) for v in values.values())
    assert CountsPickles.pickled == before + 1


_SOCKET_FILES = """
    import os, stat, sys
    from actormesh import Actor, endpoint, proc_mesh

    class Where(Actor):
        @endpoint
        def where(self):
            return os.environ["ACTORMESH_OWNER_SOCKET_DIR"]

    with proc_mesh(gpus=2).get(timeout=60) as procs:
        dirs = set(procs.spawn("w", Where).where.call().get(timeout=30).values())
        (private,) = dirs
        mode = stat.S_IMODE(os.stat(private).st_mode)
        print(os.path.dirname(private) == sys.argv[1], oct(mode), len(os.listdir(private)) >= 3)
"""


def test_a_socket_dir_setting_gets_a_private_directory_under_it_removed_at_exit(
    tmp_path: Path,
) -> None:
    given = Path(tempfile.mkdtemp(prefix="am-", dir="/tmp"))  # short: AF_UNIX's limit
    try:
        os.chmod(given, 0o755)
        result = run_script(
            _SOCKET_FILES, tmp_path, args=(str(given),), env={"ACTORMESH_SOCKET_DIR": str(given)}
        )
        assert result.returncode == 0, result.stderr
        # Under the given directory (not in it), only this user's, and gone afterwards.
        assert result.stdout.split() == ["True", "0o700", "True"]
        assert list(given.iterdir()) == []
    finally:
        shutil.rmtree(given, ignore_errors=True)


def test_a_socket_dir_too_long_for_unix_socket_names_is_refused_clearly(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 80)
    deep.mkdir()
    result = run_script(
        "from actormesh import proc_mesh\nproc_mesh(gpus=1).get(timeout=60)\n",
        tmp_path,
        env={"ACTORMESH_SOCKET_DIR": str(deep)},
    )
    assert result.returncode != 0
    assert "is too long: Unix socket paths are limited to 107 bytes" in result.stderr
    assert list(deep.iterdir()) == []
