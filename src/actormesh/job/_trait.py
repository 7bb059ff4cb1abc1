"""A job: a specification of host meshes, the allocation that satisfies it, and the file
that remembers that allocation so a re-run of the controller finds it again.

Monarch's model (``monarch.job`` 0.7): ``apply()`` brings the allocation into being (a
no-op when it exists), ``state()`` attaches to it and returns its host meshes by name,
``kill()`` ends it. ``state(cached_path=...)`` first looks in the cache file for a job
that is still running and ``can_run`` this specification, and attaches to that instead of
allocating again; after a fresh ``apply()`` it saves the job there. A job pickles as its
plain attributes (``dump``/``dumps``), never with its live connections.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, Literal, NamedTuple

from .._api import HostMesh
from ._telemetry import MeshAdminConfig, TelemetryConfig

__all__ = ["DEFAULT_JOB_PATH", "JobState", "JobTrait", "job_load", "job_loads"]

log = logging.getLogger("actormesh.job")

DEFAULT_JOB_PATH: str = ".monarch/job_state.pkl"
"""Where ``state()`` caches a job unless told otherwise (Monarch's path, so a program and
its cache move between the two unchanged)."""


class JobState:
    """The host meshes of a running job, by name: ``state.trainers`` is the host mesh the
    job's specification called ``"trainers"``.

    Raises (on a name the job does not have):
        AttributeError: listing the names it has.
    """

    def __init__(self, hosts: Mapping[str, HostMesh]) -> None:
        self._hosts = dict(hosts)
        # Monarch's telemetry and admin endpoints: actormesh runs neither service.
        self.query_engine: Any = None
        self.query_engine_client: Any = None
        self.telemetry_url: str | None = None
        self.dashboard_url: str | None = None
        self.admin_url: str | None = None

    def __getattr__(self, attr: str) -> HostMesh:
        if attr.startswith("__"):  # copy and pickle probe these: not mesh names
            raise AttributeError(attr)
        try:
            return self._hosts[attr]
        except KeyError:
            available = ", ".join(sorted(self._hosts))
            raise AttributeError(
                f"'{attr}' is not a valid host mesh name. Available names: {available}"
            ) from None

    def __repr__(self) -> str:
        return f"JobState(hosts={self._hosts})"


class CachedRunning(NamedTuple):
    """A job's status when it attached to a running job found in the cache."""

    job: JobTrait


class JobTrait(ABC):
    """A declarative job: what host meshes it wants, and, once applied, the allocation.

    Subclasses implement ``_create`` (allocate), ``_state`` (attach to the allocation and
    return its host meshes), ``can_run`` (may this allocation serve that specification)
    and ``_kill`` (end the allocation). Everything a subclass keeps in its attributes is
    what ``dump`` saves; live handles go in ``_live`` (not saved).
    """

    def __init__(self) -> None:
        self._status: Literal["running", "not_running"] | CachedRunning = "not_running"
        self._apply_id: str | None = None
        # What this process attached to (not pickled): shut down by kill().
        self._live: JobState | None = None

    # -- pickling: the specification and the allocation, never live connections ----------

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_live"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def _running(self) -> JobTrait | None:
        status = self._status
        if status == "running":
            return self
        if isinstance(status, CachedRunning):
            return status.job
        return None

    @property
    def active(self) -> bool:
        """Whether this job (or the cached job it attached to) is applied."""
        return self._running is not None

    @property
    def apply_id(self) -> str | None:
        """A UUID of the current allocation, made by the ``apply()`` that created it and
        kept in the cache; ``None`` before ``apply()``."""
        running = self._running
        return running._apply_id if running is not None else None

    def apply(self, client_script: str | None = None) -> None:
        """Bring the job's allocation into being; a no-op when it exists.

        Args:
            client_script: Monarch's batch mode (the job runs this script as its own
                controller): not supported here.

        Raises:
            NotImplementedError: ``client_script`` given.
        """
        if client_script is not None:
            raise NotImplementedError(
                "apply(client_script=...) (Monarch's batch mode) is not supported by "
                "actormesh.job: run the controller yourself and call job.state() "
                "(docs/jobs.md)"
            )
        if self._running is None:
            self._create(None)
            self._apply_id = str(uuid.uuid4())
            self._status = "running"

    def state(self, cached_path: str | None = DEFAULT_JOB_PATH) -> JobState:
        """Attach to the job and return its host meshes by name.

        A job already applied attaches to its allocation (once per process: later calls
        return the same host meshes). Otherwise, with a
        ``cached_path``, a job saved there that is still running and ``can_run`` this one
        is attached to instead of allocating anew (a saved job that cannot is killed and
        its file removed); failing that, ``apply()`` allocates and the job is saved at
        ``cached_path``.
        """
        running = self._running
        if running is not None and self._live is not None:
            return self._live  # attached already: a worker loop serves one owner at a time
        if running is None:
            cached = self._load_cached(cached_path)
            if cached is not None:
                log.info("attaching to the cached job at %s", cached_path)
                self._status = CachedRunning(cached)
                running = cached
        if running is None:
            self.apply()
            running = self
            if cached_path is not None:
                self.dump(cached_path)
        state = running._state()
        self._live = state
        return state

    def _load_cached(self, cached_path: str | None) -> JobTrait | None:
        if cached_path is None:
            return None
        try:
            cached = job_load(cached_path)
        except FileNotFoundError:
            return None
        running = cached._running
        if running is None:
            return None
        if not running.can_run(self):
            log.info("the cached job at %s cannot run this one: ending it", cached_path)
            try:
                running._kill()
            except Exception:
                # A stale cache must not block every later state(): remove it anyway.
                log.warning("could not end the stale cached job", exc_info=True)
            path = os.path.realpath(cached_path)
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
            return None
        return cached

    def kill(self) -> None:
        """End the job: the host meshes this process attached to are shut down, then the
        allocation is released (processes ended, the scheduler's job cancelled)."""
        live, self._live = self._live, None
        if live is not None:
            for mesh in live._hosts.values():
                try:
                    mesh.shutdown().get(timeout=60)
                except Exception:
                    log.warning("shutting down %r failed", mesh, exc_info=True)
        running = self._running
        if running is not None:
            running._kill()
        self._status = "not_running"

    # -- saving ---------------------------------------------------------------------------

    def dump(self, filename: str) -> None:
        """Save the job to ``filename`` (following a symlink there), making its directory.

        The file is readable by this user only: it says where the job's hosts listen.
        """
        path = os.path.realpath(filename)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as file:
            pickle.dump(self, file)

    def dumps(self) -> bytes:
        """The job as bytes, for ``job_loads``."""
        return pickle.dumps(self)

    # -- what Monarch has and actormesh does not ----------------------------------------

    def enable_telemetry(
        self, config: TelemetryConfig | None = None, *, mesh_admin_config: Any = None, **kwargs: Any
    ) -> JobTrait:
        """Monarch's distributed telemetry, accepted so such programs run: the settings
        are kept, nothing is recorded, and ``state()``'s telemetry URLs stay ``None``."""
        self._telemetry = config if config is not None else TelemetryConfig(**kwargs)
        if mesh_admin_config is not None:
            self._admin = mesh_admin_config
        return self

    def enable_admin(self, config: MeshAdminConfig | None = None, **kwargs: Any) -> JobTrait:
        """Monarch's mesh admin agent, accepted: actormesh has none (``actormesh top``
        and ``stacks`` look at a running job); ``state().admin_url`` stays ``None``."""
        self._admin = config if config is not None else MeshAdminConfig(**kwargs)
        return self

    def telemetry_query_client(self) -> Any:
        """Monarch's query client of a running job's telemetry service.

        Raises:
            RuntimeError: the job is not active, no longer running, has no telemetry
                configured, or (always, in the end) there is no service to query.
        """
        running = self._running
        if running is None:
            raise RuntimeError("the saved job is not active")
        if not running._is_running():
            raise RuntimeError("the active job is no longer running or healthy")
        if getattr(self, "_telemetry", None) is None:
            raise RuntimeError(
                "the active job has no distributed telemetry configured; call "
                "job.enable_telemetry() and apply it again"
            )
        if self.apply_id is None:
            raise RuntimeError("the active job has no apply id: apply it again")
        raise RuntimeError(
            "could not connect to distributed telemetry: actormesh runs no telemetry "
            "service (docs/from-monarch.md)"
        )

    def profile(self, *, on_trace_ready: Any = None) -> Any:
        """Monarch's profiler over the job's telemetry.

        Raises:
            NotImplementedError: always; actormesh records no telemetry.
        """
        raise NotImplementedError("actormesh records no telemetry: job.profile() has no data")

    def _is_running(self) -> bool:
        """Whether the allocation still runs, without attaching to it."""
        return self.can_run(self)

    def remote_mount(self, source: str, *args: Any, **kwargs: Any) -> None:
        """Monarch's FUSE mount of a local directory on the workers.

        Raises:
            NotImplementedError: always; needs FUSE on every host.
        """
        raise NotImplementedError(
            "remote_mount needs FUSE mounts on the job's hosts, which actormesh does not "
            "do; share the directory through the cluster's file system"
        )

    def gather_mount(self, remote_mount_point: str, *args: Any, **kwargs: Any) -> None:
        """Monarch's FUSE mount of the workers' directories here.

        Raises:
            NotImplementedError: always; needs FUSE here.
        """
        raise NotImplementedError(
            "gather_mount needs a FUSE mount on this host, which actormesh does not do"
        )

    # -- for subclasses -------------------------------------------------------------------

    @abstractmethod
    def _create(self, client_script: str | None) -> None:
        """Allocate (called by ``apply()``; must not set ``_status``)."""

    @abstractmethod
    def _state(self) -> JobState:
        """Attach to the allocation: its host meshes by name."""

    @abstractmethod
    def can_run(self, spec: JobTrait) -> bool:
        """Whether this running job can serve ``spec`` (a cached job is reused only
        then)."""

    @abstractmethod
    def _kill(self) -> None:
        """End the allocation."""


def job_loads(data: bytes) -> JobTrait:
    """A job from ``JobTrait.dumps`` bytes (a pickle: load only what you trust)."""
    job = pickle.loads(data)
    if not isinstance(job, JobTrait):
        raise TypeError(f"the data holds a {type(job).__name__}, not a job")
    return job


def job_load(filename: str = DEFAULT_JOB_PATH) -> JobTrait:
    """A job saved by ``JobTrait.dump`` (a pickle: load only what you trust).

    Raises:
        FileNotFoundError: no file there.
    """
    with open(filename, "rb") as file:
        return job_loads(file.read())
