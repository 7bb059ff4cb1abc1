"""Starting the fork server's template process, possibly before the runtime exists.

A controller's first local spawn waits for the template (``_hosts/_template.py``) to
import a worker's modules, about as long as the controller's own imports of actormesh
took. Both can run at once: when a program first reaches for the names that spawn local
actors (``from actormesh import Actor, proc_mesh``, ...), ``start_early`` launches the
template in the background, before those imports, and the runtime's fork server adopts
it at the first spawn (``take_early``). A template nobody adopts idles until the program
exits (it dies with it). This module imports nothing of the runtime, so it costs the
launch and no more.

No early start where it could not be used or could outlive its purpose: in a worker or a
template (they fork nothing of their own at once), off the main thread (the workers'
parent-death signal follows the thread that started the template), without the compiled
fork, in a ``multiprocessing`` child, or with ``ACTORMESH_FORK_SERVER=0`` or
``ACTORMESH_NO_EXTENSIONS=1``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping

from ._config import extensions_disabled

__all__ = ["TemplateProcess", "start_early", "take_early", "template_key"]

# Room the template keeps for a worker's environment, beyond twice the owner's own.
_ENV_ROOM = 64 * 1024
_PAD = 64 * 1024
# The variables that shape how an interpreter starts (and so what the template is).
_STARTUP_PREFIXES = ("PYTHON", "LD_", "LC_")
_STARTUP_NAMES = ("PATH", "HOME", "LANG", "LANGUAGE", "TZ", "ACTORMESH_NO_EXTENSIONS")
# Set in every worker (``ACTORMESH_KEY``) and template (the room variables).
_NOT_A_CONTROLLER = ("ACTORMESH_KEY", "ACTORMESH_FORK_SERVER_ROOM0")


def template_key(environ: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The part of an environment a template is made of (see ``_hosts._forkserver``)."""
    return tuple(
        sorted(
            (name, value)
            for name, value in environ.items()
            if name.startswith(_STARTUP_PREFIXES) or name in _STARTUP_NAMES
        )
    )


class TemplateProcess:
    """A started template: its process, our end of the socket to it, what it is made of."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.key = template_key(environ)
        self.owner = os.getpid()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = ours
        # Room for a worker's environment in the memory /proc/<pid>/environ reads: padding
        # variables (each under the kernel's limit for one string, 128 KiB).
        size = sum(len(k) + len(v) + 2 for k, v in environ.items())
        room = 2 * size + _ENV_ROOM
        env = {**dict(self.key), "ACTORMESH_PARENT_PID": str(os.getpid())}
        for index in range(0, room, _PAD):
            env[f"ACTORMESH_FORK_SERVER_ROOM{index // _PAD}"] = "x" * min(_PAD, room - index)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "actormesh._hosts._template", str(theirs.fileno())],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
                pass_fds=(theirs.fileno(),),
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        # Its exit status is collected here, so it never lingers as a zombie.
        reaper = threading.Thread(target=self.process.wait, name="actormesh-fork-reaper")
        reaper.daemon = True
        reaper.start()

    def close(self) -> None:
        """End the template (it exits when its socket closes); idempotent."""
        with contextlib.suppress(OSError):
            self.sock.close()


_early: TemplateProcess | None = None
_early_tried = False  # at most one early start per process
_early_lock = threading.Lock()


def _wanted(environ: Mapping[str, str]) -> bool:
    if any(name in environ for name in _NOT_A_CONTROLLER):
        return False
    if environ.get("ACTORMESH_FORK_SERVER", "").strip().lower() in ("0", "false", "no"):
        return False
    if extensions_disabled(environ) or threading.current_thread() is not threading.main_thread():
        return False
    # A multiprocessing child (spawn or forkserver: a DataLoader's workers, say) imports
    # the program's main module again; it is no controller to start a template for.
    multiprocessing = sys.modules.get("multiprocessing")
    if multiprocessing is not None and multiprocessing.parent_process() is not None:
        return False
    # The compiled fork, looked for as a file: importing it would import the runtime.
    here = os.path.dirname(__file__)
    return bool(glob.glob(os.path.join(here, "_hosts", "_cfork*.so")))


def start_early() -> None:
    """Launch the template now, if it may be used (see the module docstring); once."""
    global _early, _early_tried
    with _early_lock:
        if _early_tried:
            return
        _early_tried = True
        if not _wanted(os.environ):
            return
        try:
            _early = TemplateProcess(os.environ)
        except OSError:
            _early = None  # the fork server starts one when first needed, as before


def take_early(key: tuple[tuple[str, str], ...]) -> TemplateProcess | None:
    """The template ``start_early`` launched, for a fork server made of ``key`` (once).

    None when there is none, or it was made of another environment (it is ended) or in
    another process (a fork of the one that started it: the socket is that one's).
    """
    global _early
    with _early_lock:
        early, _early = _early, None
    if early is None or early.owner != os.getpid():
        return None
    if early.key != key or early.process.poll() is not None:
        early.close()
        return None
    return early


def _forget_in_child() -> None:
    # A forked child must not use (nor end) its parent's template: drop it quietly.
    global _early, _early_tried
    _early, _early_tried = None, True


os.register_at_fork(after_in_child=_forget_in_child)
