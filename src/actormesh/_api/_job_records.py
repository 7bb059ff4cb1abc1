"""Where a leased job's controller finds it by name: one small record per job.

A job started with ``keep_alive`` writes ``<jobs_dir>/<name>.json``: where its host
agents' leases listen, the job's secret, the lease and who wrote it. The directory is
this user's (mode 0700) and each record is readable by its owner only (0600), since
the secret is what lets a controller attach. The record only says where the agents are:
what runs there (the meshes, the lease left) is the agents' to tell (``_hosts._lease``).
Copy the record to another machine (or pass its addresses and secret to ``attach``) to
attach from there.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .._config import Config

__all__ = [
    "JobRecord",
    "check_name",
    "jobs_dir",
    "leased_at",
    "load",
    "records",
    "remove",
    "save",
]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


@dataclass(frozen=True)
class JobRecord:
    """One leased job, as its record says.

    Attributes:
        name: the job's name.
        agents: where each host agent's lease listens (``tcp://``), in host order.
        secret: the job's secret.
        keep_alive: the lease, in seconds.
        created: when the job started (seconds since the epoch).
        host: the host of the controller that wrote the record last.
        pid: that controller's pid.
        workers: the worker loops the hosts came from (``attach_to_workers``), if any:
            a controller that dials those loops again is sent to this job instead.
    """

    name: str
    agents: tuple[str, ...]
    secret: str
    keep_alive: float
    created: float
    host: str
    pid: int
    workers: tuple[str, ...] = ()


def check_name(name: object) -> str:
    """``name`` if it can name a job (letters, digits, ``.``, ``_``, ``-``).

    Raises:
        TypeError: it is not a str.
        ValueError: it has other characters (a job's name is a file name).
    """
    if not isinstance(name, str):
        raise TypeError(f"a job's name must be a str, not {name!r}")
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"a job's name must be letters, digits, '.', '_' or '-' (up to 100, not "
            f"starting with a punctuation mark), not {name!r}"
        )
    return name


def jobs_dir(config: Config | None = None) -> Path:
    """This user's directory of job records (see ``Config.jobs_dir``)."""
    config = config or Config.from_env()
    if config.jobs_dir:
        return Path(config.jobs_dir)
    state = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(state, "actormesh", "jobs")


def save(
    name: str,
    agents: list[str],
    secret: str,
    keep_alive: float,
    created: float | None = None,
    workers: tuple[str, ...] = (),
) -> JobRecord:
    """Write the record of job ``name`` (replacing any), readable by this user only."""
    record = JobRecord(
        check_name(name),
        tuple(agents),
        secret,
        float(keep_alive),
        time.time() if created is None else created,
        socket.gethostname(),
        os.getpid(),
        tuple(workers),
    )
    folder = jobs_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    target = folder / f"{name}.json"
    temporary = folder / f".{name}.{os.getpid()}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(asdict(record), out)
    os.replace(temporary, target)  # whole or not at all, for a reader at the same time
    return record


def load(name: str) -> JobRecord:
    """The record of job ``name``.

    Raises:
        LookupError: there is none (the job was never started here, or was killed).
        ValueError: the record is not one.
    """
    path = jobs_dir() / f"{check_name(name)}.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise LookupError(
            f"no job named {name!r} in {path.parent} (`actormesh jobs` lists them)"
        ) from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not a job record: {error}") from None
    data["agents"] = tuple(data["agents"])
    data["workers"] = tuple(data.get("workers", ()))
    return JobRecord(**data)


def remove(name: str) -> None:
    """Forget job ``name`` (nothing happens if there is no record)."""
    with contextlib.suppress(FileNotFoundError):
        (jobs_dir() / f"{check_name(name)}.json").unlink()


def leased_at(workers: list[str]) -> JobRecord | None:
    """The record of the leased job whose hosts came from exactly these worker loops."""
    wanted = tuple(workers)
    return next((record for record in records() if record.workers == wanted), None)


def records() -> list[JobRecord]:
    """Every job record of this user, by name."""
    folder = jobs_dir()
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.glob("*.json")):
        with contextlib.suppress(LookupError, ValueError, TypeError, KeyError):
            found.append(load(path.stem))
    return found
