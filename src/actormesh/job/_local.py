"""``LocalJob``: every host mesh of the job is this host."""

from __future__ import annotations

from collections.abc import Sequence

from .._api import this_host
from ._trait import JobState, JobTrait

__all__ = ["LocalJob"]


class LocalJob(JobTrait):
    """A job whose host meshes are all ``this_host()``: a stand-in so a program can switch
    between a cluster and this machine by changing its job.

    Args:
        hosts: the names of the host meshes ``state()`` returns.
    """

    def __init__(self, hosts: Sequence[str] = ("hosts",)) -> None:
        if isinstance(hosts, str) or not all(isinstance(h, str) for h in hosts):
            raise TypeError(f"hosts is a sequence of mesh names, not {hosts!r}")
        super().__init__()
        self._host_names = tuple(hosts)

    def _create(self, client_script: str | None) -> None:
        pass  # this host always exists

    def _state(self) -> JobState:
        return JobState({name: this_host() for name in self._host_names})

    def can_run(self, spec: JobTrait) -> bool:
        # Nothing is allocated: the specification itself (its names) always wins.
        return False

    def _is_running(self) -> bool:
        return True  # nothing to poll: this host is always there

    def _kill(self) -> None:
        pass
