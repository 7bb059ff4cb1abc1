"""The worker process: ``python -m actormesh._bootstrap`` (started by an owner).

A worker lives as every process an owner starts does (``actormesh._hosts._lifetime``:
never outliving its owner, killing what it started on the way out) and hosts actors:
failures of the meshes it spawns in turn are supervised from here, and ``breakpoint()``
in an actor opens a debugger session with the controller.
"""

from __future__ import annotations

import os
from typing import Any

from ._api import install_actor_logs, install_supervision
from ._core import install_breakpoints
from ._hosts import Runtime
from ._hosts import serve as serve_process

__all__ = ["main", "serve"]


def main() -> None:
    """Run one worker until shutdown."""
    serve(os.environ["ACTORMESH_KEY"], os.environ["ACTORMESH_PARENT"])


def serve(
    key: str,
    owner: str,
    info: dict[str, Any] | None = None,
    *,
    own_group: bool = True,
) -> None:
    """Join the owner at ``owner`` as worker ``key`` and host actors until shutdown."""
    serve_process(key, owner, info, own_group=own_group, setup=_setup)


def _setup(runtime: Runtime) -> None:
    install_supervision(runtime)  # failures of the meshes this process spawns
    install_breakpoints()  # breakpoint() in an actor: a pdb session in the controller
    install_actor_logs()  # log records made in actors name them (Monarch's prefix)


if __name__ == "__main__":
    main()
