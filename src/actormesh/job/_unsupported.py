"""Names of ``monarch.job`` that need what actormesh does not have; each raises
``NotImplementedError`` saying what (docs/from-monarch.md lists them)."""

from __future__ import annotations

from typing import Any, NoReturn

from .._api._host_mesh import HostMesh

__all__ = ["shell"]


class _Unsupported:
    """A Monarch configuration or actor class actormesh has no counterpart of."""

    why = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__}: {self.why}")


def shell(
    host_mesh_singleton: HostMesh, *, env: dict[str, str] | None = None, workdir: str | None = None
) -> NoReturn:
    """Monarch's interactive shell on one host of a job.

    Raises:
        ValueError: the mesh has more than one host (as Monarch's).
        NotImplementedError: otherwise; not in actormesh yet.
    """
    if host_mesh_singleton.size() != 1:
        raise ValueError("shell requires a singleton HostMesh; slice the mesh to one host first")
    raise NotImplementedError(
        "an interactive shell on a job's host is not in actormesh yet; "
        "exec_command(host, ['cmd', ...]) runs a command there"
    )
