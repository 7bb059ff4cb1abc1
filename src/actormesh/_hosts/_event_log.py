"""The job event log: what happened to a job's processes and meshes, kept on disk.

A controller (and a host agent, for its host) writes one SQLite file per job: process
starts, exits with their exit codes and signals, restarts, supervision events, call
timeouts, meshes spawned, weight versions. The file is in WAL mode, so a
reader (``actormesh log``, or ``sqlite3`` on the file) can query it while the job runs,
and every committed event survives the controller, a SIGKILL included.

Recording is off the hot path: ``record`` puts a tuple on a queue; a thread of its own
(``actormesh-events``) opens the database, inserts what it finds on the queue, commits
and closes it again, once per batch. The events recorded are rare (a process' birth or death), none
is recorded per call.

The schema (``SCHEMA``; documented in docs/observability.md):

- ``job``: one row, the job: ``name``, ``program``, ``pid``, ``host``, ``source``
  (``controller`` or ``agent``), ``started``, ``ended`` (NULL while it runs, or when it
  was killed);
- ``events``: one row per event: ``id``, ``time`` (Unix seconds), ``kind``, ``mesh``,
  ``rank``, ``pid``, ``address``, ``exit_code``, ``signal``, ``message`` and ``data``
  (a JSON object with the rest).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import queue
import re
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["EventLog", "KINDS", "SCHEMA", "default_state_dir", "job_name", "open_event_log"]

log = logging.getLogger("actormesh.events")

SCHEMA = """
CREATE TABLE IF NOT EXISTS job (
    name     TEXT PRIMARY KEY,
    program  TEXT NOT NULL,
    pid      INTEGER NOT NULL,
    host     TEXT NOT NULL,
    source   TEXT NOT NULL,
    started  REAL NOT NULL,
    ended    REAL
);
CREATE TABLE IF NOT EXISTS events (
    id        INTEGER PRIMARY KEY,
    time      REAL NOT NULL,
    kind      TEXT NOT NULL,
    mesh      TEXT,
    rank      INTEGER,
    pid       INTEGER,
    address   TEXT,
    exit_code INTEGER,
    signal    INTEGER,
    message   TEXT,
    data      TEXT
);
CREATE INDEX IF NOT EXISTS events_by_kind ON events (kind, time);
CREATE INDEX IF NOT EXISTS events_by_rank ON events (mesh, rank, time);
"""

# The event kinds the runtime records (others may be added by extensions).
KINDS = (
    "mesh_spawn",
    "process_exit",
    "process_start",
    "restart",
    "restart_failed",
    "supervision",
    "timeout",
    "weights",
)

_COLUMNS = ("mesh", "rank", "pid", "address", "exit_code", "signal", "message")
_STOP = None


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/actormesh``, else ``~/.local/state/actormesh``."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(base) / "actormesh"


def job_name(program: str, pid: int, started: float) -> str:
    """``train-20261127-013502-4947``: the program's stem, the start time (UTC) and pid
    (letters, digits, ``_`` and ``-`` only: it names a file)."""
    # No leading dash (``python -c`` has "-c"): the name is a command-line argument.
    stem = re.sub(r"[^A-Za-z0-9_-]+", "_", Path(program).stem).strip("-_")[:40] or "python"
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(started))
    return f"{stem}-{stamp}-{pid}"


def open_event_log(config: Any, source: str) -> EventLog | None:
    """The event log of this process as ``source`` (``"controller"`` or ``"agent"``), or
    ``None`` when ``Config.event_log`` is off.

    The file is ``<state dir>/jobs/<job name>.sqlite`` for a controller and
    ``<state dir>/jobs/<job name>.agent-<host>-<pid>.sqlite`` for an agent (its own
    file, on its own host), where the state dir is ``Config.state_dir`` (default:
    ``default_state_dir()``) and the job name ``Config.job_name`` (default: ``job_name``
    of the program).
    """
    if not config.event_log:
        return None
    started = time.time()
    name = config.job_name or job_name(sys.argv[0] if sys.argv else "", os.getpid(), started)
    folder = Path(config.state_dir) if config.state_dir else default_state_dir()
    if source != "controller":
        name_of_file = f"{name}.{source}-{socket.gethostname()}-{os.getpid()}"
    else:
        name_of_file = name
    events = EventLog(folder / "jobs" / f"{name_of_file}.sqlite", name, source)
    if source != "controller":
        # A controller's runtime closes its log after stopping its workers (so their
        # exits are in it); an agent's process ends by finalizing: close it then.
        atexit.register(events.close)
    return events


class EventLog:
    """One job's event file, written by a background thread (see the module docstring).

    Args:
        path: the SQLite file (its folder is made).
        name: the job's name.
        source: ``"controller"`` or ``"agent"``.
    """

    def __init__(self, path: Path, name: str, source: str) -> None:
        self.path = path
        self.name = name
        self.source = source
        self.started = time.time()
        self._queue: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._main, name="actormesh-events", daemon=True)
        self._thread.start()

    def record(self, kind: str, **fields: Any) -> None:
        """Queue one event (any thread; never blocks, never raises for a closed log).

        ``fields``: the columns (``mesh``, ``rank``, ``pid``, ``address``, ``exit_code``,
        ``signal``, ``message``); anything else goes into ``data`` as JSON.
        """
        if self._closed:
            return
        self._queue.put((time.time(), kind, fields))

    def close(self, timeout: float = 5.0) -> None:
        """Record the job's end, write what is queued and close the file (any thread)."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._thread.join(timeout)

    # -- the writer thread -------------------------------------------------------------

    def _main(self) -> None:
        import sqlite3  # here: `import actormesh` never pays for it

        fresh, running = True, True
        while running:
            batch = [self._queue.get()]
            with contextlib.suppress(queue.Empty):
                while len(batch) < 1000:
                    batch.append(self._queue.get_nowait())
            running = _STOP not in batch
            try:
                # Opened per batch (events are rare): the job holds no descriptor of the
                # file between them.
                with contextlib.closing(self._connect(sqlite3, fresh)) as db:
                    db.execute("BEGIN")
                    db.executemany(
                        f"INSERT INTO events (time, kind, {', '.join(_COLUMNS)}, data) "
                        f"VALUES ({', '.join('?' * (len(_COLUMNS) + 3))})",
                        [_row(item) for item in batch if item is not _STOP],
                    )
                    if not running:
                        db.execute(
                            "UPDATE job SET ended = ? WHERE name = ?", (time.time(), self.name)
                        )
                    db.execute("COMMIT")
                fresh = False
            except Exception:
                log.exception("the job event log %s failed; events are not kept", self.path)
                self._closed = True
                return

    def _connect(self, sqlite3: Any, fresh: bool) -> Any:
        """The file, made with its schema and job row on the first batch."""
        if fresh:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, isolation_level=None)
        if fresh:
            db.execute("PRAGMA journal_mode=WAL")  # kept in the file: readers never wait
            db.executescript(SCHEMA)
            db.execute(
                "INSERT OR REPLACE INTO job VALUES (?, ?, ?, ?, ?, ?, NULL)",
                (
                    self.name,
                    " ".join(sys.argv) or sys.executable,
                    os.getpid(),
                    socket.gethostname(),
                    self.source,
                    self.started,
                ),
            )
        db.execute("PRAGMA synchronous=NORMAL")
        return db


def _row(item: tuple[Any, ...]) -> tuple[Any, ...]:
    when, kind, fields = item
    extra = {key: value for key, value in fields.items() if key not in _COLUMNS}
    data = json.dumps(extra, default=str) if extra else None
    return (when, kind, *(fields.get(column) for column in _COLUMNS), data)
