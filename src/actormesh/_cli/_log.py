"""``actormesh log``: a job's event log, read after (or while) it runs.

The log is the SQLite file its controller kept (``actormesh._hosts._event_log``); this
command reads it with plain SQL, so it needs nothing of the job. ``JOB`` is the job's
name, its controller's pid (the newest log of that pid), or a path to a ``.sqlite`` file;
without it, the newest job. ``--list`` lists the logs; ``--sql`` runs a query of one's own.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import sqlite3
from pathlib import Path
from typing import Any

from .._config import Config
from .._hosts import EVENT_KINDS, default_state_dir

__all__ = ["add_command", "log"]


class LogError(Exception):
    """No such log, or one that cannot be read."""


def add_command(commands: Any) -> None:
    """Add ``actormesh log`` to the command's subparsers."""
    command = commands.add_parser(
        "log",
        help="a job's event log (spawns, exits, restarts, failures), after the run",
        description=(
            "Print a job's event log, kept by its controller in a SQLite file under the "
            "state directory. JOB: its name, its controller's pid, or a .sqlite path "
            "(default: the newest job)."
        ),
    )
    command.add_argument("job", nargs="?", metavar="JOB", help="the job (default: the newest)")
    command.add_argument("--list", action="store_true", help="list the jobs that have logs")
    command.add_argument(
        "--kind", action="append", choices=EVENT_KINDS, help="only events of this kind (repeatable)"
    )
    command.add_argument("--mesh", metavar="NAME", help="only events of this mesh")
    command.add_argument("--rank", type=int, metavar="R", help="only events of rank R")
    command.add_argument(
        "--sql", metavar="QUERY", help="run QUERY on the log and print its rows (tab-separated)"
    )
    command.add_argument(
        "--state-dir", metavar="DIR", help="where logs are (default: Config.state_dir)"
    )


def _folder(args: argparse.Namespace) -> Path:
    if args.state_dir:
        return Path(args.state_dir) / "jobs"
    config = Config.from_env()
    return (Path(config.state_dir) if config.state_dir else default_state_dir()) / "jobs"


def _logs(folder: Path) -> list[Path]:
    """Controllers' logs (not agents'), newest first."""
    found = [p for p in folder.glob("*.sqlite") if ".agent-" not in p.name]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def find_log(spec: str | None, folder: Path) -> Path:
    """The log ``spec`` names (see the module docstring).

    Raises:
        LogError: none matches.
    """
    if spec and (spec.endswith(".sqlite") or "/" in spec):
        path = Path(spec)
        if not path.is_file():
            raise LogError(f"no event log at {path}")
        return path
    logs = _logs(folder)
    if not logs:
        raise LogError(f"no job event logs in {folder}")
    if spec is None:
        return logs[0]
    for path in logs:
        if path.stem == spec or (spec.isdigit() and path.stem.endswith(f"-{spec}")):
            return path
    raise LogError(f"no event log of job {spec!r} in {folder} (see actormesh log --list)")


def _open(path: Path) -> sqlite3.Connection:
    # Read-only: reading never changes a log its job may still be writing.
    try:
        return sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as error:
        raise LogError(f"cannot open {path}: {error}") from None


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return datetime.datetime.fromtimestamp(seconds).isoformat(sep=" ", timespec="milliseconds")


def log(args: argparse.Namespace) -> int:
    """Print the selected job's events (or the job list, or a query's rows)."""
    folder = _folder(args)
    try:
        if args.list:
            return _list(folder)
        path = find_log(args.job, folder)
        with contextlib.closing(_open(path)) as db:
            if args.sql:
                return _query(db, args.sql)
            return _events(db, path, args)
    except (LogError, sqlite3.Error) as error:
        print(f"actormesh log: {error}")
        return 1


def _list(folder: Path) -> int:
    logs = _logs(folder)
    if not logs:
        print(f"no job event logs in {folder}")
        return 0
    print(f"{'STARTED':<23}  {'ENDED':<23}  {'EVENTS':>6}  JOB")
    for path in logs:
        try:
            with contextlib.closing(_open(path)) as db:
                job = db.execute("SELECT name, started, ended FROM job").fetchone()
                count = db.execute("SELECT count(*) FROM events").fetchone()[0]
        except (LogError, sqlite3.Error) as error:
            print(f"{'?':<23}  {'?':<23}  {'?':>6}  {path.stem} ({error})")
            continue
        name, started, ended = job or (path.stem, None, None)
        print(f"{_when(started):<23}  {_when(ended):<23}  {count:>6}  {name}")
    return 0


def _query(db: sqlite3.Connection, sql: str) -> int:
    cursor = db.execute(sql)
    print("\t".join(column[0] for column in cursor.description or ()))
    for row in cursor:
        print("\t".join("" if value is None else str(value) for value in row))
    return 0


def _events(db: sqlite3.Connection, path: Path, args: argparse.Namespace) -> int:
    job = db.execute("SELECT name, program, pid, host, started, ended FROM job").fetchone()
    if job is not None:
        name, program, pid, host, started, ended = job
        end = f"ended {_when(ended)}" if ended else "running, or killed"
        print(f"job {name}: {program} (pid {pid} on {host}), started {_when(started)}, {end}")
    where, params = [], []
    if args.kind:
        where.append(f"kind IN ({', '.join('?' * len(args.kind))})")
        params.extend(args.kind)
    if args.mesh:
        where.append("mesh = ?")
        params.append(args.mesh)
    if args.rank is not None:
        where.append("rank = ?")
        params.append(args.rank)
    sql = "SELECT time, kind, mesh, rank, pid, exit_code, signal, message FROM events"
    if where:
        sql += " WHERE " + " AND ".join(where)
    for row in db.execute(sql + " ORDER BY time, id", params):
        print(_line(*row))
    return 0


def _line(
    when: float,
    kind: str,
    mesh: str | None,
    rank: int | None,
    pid: int | None,
    exit_code: int | None,
    signal: int | None,
    message: str | None,
) -> str:
    who = mesh or ""
    if rank is not None:
        who += f"[{rank}]" if who else f"rank {rank}"
    parts = [_when(when), f"{kind:<14}", who]
    if pid is not None:
        parts.append(f"pid {pid}")
    if exit_code is not None:
        parts.append(f"exit {exit_code}")
    if signal is not None:
        parts.append(f"signal {signal}")
    if message:
        parts.append(message.splitlines()[0])
    return "  ".join(part for part in parts if part)
