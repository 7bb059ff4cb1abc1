"""The worker process: ``python -m actormesh._bootstrap`` (started by an owner).

A worker lives as every process an owner starts does (``actormesh._hosts._lifetime``:
never outliving its owner, killing what it started on the way out) and hosts actors:
failures of the meshes it spawns in turn are supervised from here, and ``breakpoint()``
in an actor opens a debugger session with the controller.
"""

from __future__ import annotations

import os
from typing import Any

from ._api import _actor_logs as actor_logs
from ._api._supervision import install
from ._core import _debugger
from ._hosts import Runtime
from ._hosts._lifetime import serve as serve_process

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
    install(runtime)
    _debugger.install()  # breakpoint() in an actor: a pdb session in the controller
    actor_logs.install()  # log records made in actors name them (Monarch's prefix)


if __name__ == "__main__":
    main()
