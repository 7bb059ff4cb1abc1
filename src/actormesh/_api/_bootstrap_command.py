"""``BootstrapCommand``: how the processes of a process mesh start (Monarch's spelling).

``default_bootstrap_cmd()`` is the command a worker starts with anyway: this interpreter,
``-m actormesh._bootstrap``, in the environment of the host that starts it (the command
carries no copy of the caller's). ``with_env`` changes variables on top (a ``None`` value
removes one); ``inherit_env = False`` starts from an empty environment instead. Passed to
``HostMesh.spawn_procs(bootstrap_command=...)`` (one for all, or a function of each
process' ``Point``), or carried by a host mesh (``HostMesh.with_python_executable``), it
says how each new process is started; the worker's own variables (``ACTORMESH_*``) are
added whatever it says.

A host mesh's command reaches its processes as ``ACTORMESH_HOST_BOOTSTRAP`` (JSON), so
that ``this_host()`` there carries it too: the processes they spawn start the same way.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from .._hosts import WORKER_ARGS, LaunchCommand

__all__ = ["BootstrapCommand", "HOST_BOOTSTRAP_VARIABLE", "default_bootstrap_cmd", "host_bootstrap"]

# The command of the host mesh a process was spawned from (empty: none), for this_host().
HOST_BOOTSTRAP_VARIABLE = "ACTORMESH_HOST_BOOTSTRAP"


def _checked_env(env: Mapping[str, str | None] | Any) -> dict[str, str | None]:
    if not isinstance(env, Mapping):
        raise TypeError(f"env must be a mapping of names to strings or None, not {env!r}")
    result: dict[str, str | None] = {}
    for name, value in env.items():
        if not isinstance(name, str):
            raise TypeError(f"environment variable names are strings, not {name!r}")
        if value is not None and not isinstance(value, str):
            raise TypeError(
                f"the value of environment variable {name!r} must be a string or None "
                f"(None removes it), not {value!r}"
            )
        result[name] = value
    return result


def _checked_args(args: Iterable[str] | Any) -> list[str]:
    if isinstance(args, str | bytes) or not isinstance(args, Iterable):
        raise TypeError(f"args must be a list of strings, not {args!r}")
    result = list(args)
    for arg in result:
        if not isinstance(arg, str):
            raise TypeError(f"args must be strings, not {arg!r}")
    return result


class BootstrapCommand:
    """A command that starts a process of a process mesh.

    Args:
        program: the executable to run (a path, or a name looked up on ``PATH``).
        arg0: the process' ``argv[0]`` (``None``: ``program``).
        args: its other arguments.
        env: variables to set on top of the inherited environment; a ``None`` value
            removes one.
        inherit_env: start from the environment of the host that starts the process
            (its host agent's, or this process' on this host); False: from nothing.

    Raises:
        TypeError: a value of the wrong type (``env`` values are strings or None).
    """

    def __init__(
        self,
        program: str,
        arg0: str | None,
        args: Iterable[str],
        env: Mapping[str, str | None],
        inherit_env: bool = True,
    ) -> None:
        if not isinstance(program, str) or not program:
            raise TypeError(f"program must be a non-empty string, not {program!r}")
        if arg0 is not None and not isinstance(arg0, str):
            raise TypeError(f"arg0 must be a string or None, not {arg0!r}")
        self.program = program
        self.arg0 = arg0
        self.args = _checked_args(args)
        self._env = _checked_env(env)
        self.inherit_env = bool(inherit_env)

    @property
    def env(self) -> dict[str, str | None]:
        """The variables it sets (``None``: removes), as a new dict."""
        return dict(self._env)

    @env.setter
    def env(self, env: Mapping[str, str | None]) -> None:
        self._env = _checked_env(env)

    def with_env(self, env: Mapping[str, str | None]) -> BootstrapCommand:
        """A copy with ``env`` merged on top (a ``None`` value removes the variable; a
        later value puts it back). This command is not changed."""
        return BootstrapCommand(
            self.program,
            self.arg0,
            self.args,
            {**self._env, **_checked_env(env)},
            self.inherit_env,
        )

    def _launch(self) -> LaunchCommand:
        for arg in self.args:  # (the list is the caller's to change)
            if not isinstance(arg, str):
                raise TypeError(f"args must be strings, not {arg!r}")
        return LaunchCommand.of(self.program, self.arg0, self.args, self._env, self.inherit_env)

    def _to_json(self) -> str:
        return json.dumps(
            {
                "program": self.program,
                "arg0": self.arg0,
                "args": self.args,
                "env": self._env,
                "inherit_env": self.inherit_env,
            }
        )

    @classmethod
    def _from_json(cls, text: str) -> BootstrapCommand:
        data = json.loads(text)
        return cls(data["program"], data["arg0"], data["args"], data["env"], data["inherit_env"])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BootstrapCommand):
            return NotImplemented
        return (self.program, self.arg0, self.args, self._env, self.inherit_env) == (
            other.program,
            other.arg0,
            other.args,
            other._env,
            other.inherit_env,
        )

    __hash__ = None  # type: ignore[assignment]  # (mutable)

    def __repr__(self) -> str:
        return (
            f"BootstrapCommand(program={self.program!r}, arg0={self.arg0!r}, "
            f"args={self.args!r}, env={self._env!r}, inherit_env={self.inherit_env!r})"
        )


def default_bootstrap_cmd() -> BootstrapCommand:
    """The command actormesh starts its worker processes with: this interpreter,
    ``-m actormesh._bootstrap``, inheriting the environment of the host that starts
    them (``env`` is empty: the caller's environment is not copied into it)."""
    return BootstrapCommand(sys.executable, None, list(WORKER_ARGS), {})


def host_bootstrap() -> BootstrapCommand | None:
    """The command of the host mesh this process was spawned from (``this_host()``)."""
    text = os.environ.get(HOST_BOOTSTRAP_VARIABLE, "")
    return BootstrapCommand._from_json(text) if text else None
