"""The Ray actor that holds one actormesh process on a Ray node: a worker, or a host agent.

Ray places this actor in its placement-group bundle and gives it the bundle's resources
(``CUDA_VISIBLE_DEVICES`` for its GPUs); the actor starts the process as its child, which
inherits that environment and joins the controller over TCP. The process dies with the
actor: it asks the kernel for a signal when the actor process dies and also watches the
actor's pid (``ACTORMESH_PARENT_PID``), and it exits when the controller's connection
closes. It is told the cluster's address (``RAY_ADDRESS``), so code in it that uses Ray
joins the cluster that placed it rather than starting a private one. This module imports
nothing from Ray: it is wrapped with ``ray.remote`` when used.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import threading
from typing import Any

__all__ = ["ProcessHost"]


class ProcessHost:
    """Body of the Ray actor: starts, reports on, and stops one worker process."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None

    def start(
        self, env: dict[str, str], module: str = "actormesh._bootstrap"
    ) -> dict[str, str | int]:
        """Start ``python -m module`` with ``env`` added; where it runs."""
        ray: Any = importlib.import_module("ray")
        context = ray.get_runtime_context()
        environ = {
            **os.environ,
            "RAY_ADDRESS": context.gcs_address,
            **env,
            "ACTORMESH_PARENT_PID": str(os.getpid()),
        }
        process = subprocess.Popen(
            [sys.executable, "-m", module],
            env=environ,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        self._process = process
        # Reap it when it exits, so it never lingers as a zombie under a live actor.
        threading.Thread(target=process.wait, name="actormesh-worker-reaper", daemon=True).start()
        return {
            "pid": process.pid,
            "node": ray.util.get_node_ip_address(),
            "node_id": context.get_node_id(),
            "gpus": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        }

    def returncode(self) -> int | None:
        """The worker's exit status once it exited (``None`` while it runs)."""
        return None if self._process is None else self._process.poll()
