"""The command's side of the job socket: finding a job and asking it things.

``find_job`` picks the running controller the user meant (``--job`` names its pid, or
the only one running); ``JobClient`` sends requests and reads answers and events, with
blocking calls and a timeout, so a job that stopped answering ends the command with an
error rather than a hang. See ``actormesh._observe._service`` for the requests.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import select
import socket
from typing import Any

from .._observe import JobAddress, find_jobs, read_message, write_message
from .._transport import connect_unix

__all__ = ["JobClient", "JobError", "find_job"]


class JobError(Exception):
    """No such job, several when one was wanted, or the job refused a request."""


def find_job(spec: str | None) -> JobAddress:
    """The job ``spec`` names (its pid, or its socket name), or the only one running.

    Raises:
        JobError: none matches, or several run and ``spec`` is ``None``.
    """
    jobs = find_jobs()
    if spec:
        matching = [job for job in jobs if spec in (str(job.pid), job.address)]
        if not matching:
            raise JobError(f"no running actormesh job {spec!r} of this user ({_listing(jobs)})")
        return matching[0]
    if not jobs:
        raise JobError(
            "no running actormesh job of this user (a controller registers itself when it "
            "spawns its first mesh, unless ACTORMESH_OBSERVE=0)"
        )
    if len(jobs) > 1:
        raise JobError(f"several jobs are running; pick one with --job PID ({_listing(jobs)})")
    return jobs[0]


def _listing(jobs: list[JobAddress]) -> str:
    return "running: " + (", ".join(str(job.pid) for job in jobs) or "none")


class JobClient:
    """A connection to one job's socket (blocking, one thread at a time).

    Args:
        job: the job to reach.
        timeout: seconds an answer may take.
    """

    def __init__(self, job: JobAddress, timeout: float = 10.0) -> None:
        self.job = job
        self.timeout = timeout
        try:
            self.sock = connect_unix(job.address)
        except OSError as error:
            raise JobError(f"cannot reach job {job.pid}: {error}") from None
        self.sock.settimeout(timeout)
        self._ids = itertools.count(1)
        self.events: collections.deque[dict[str, Any]] = collections.deque()

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send a request and wait for its answer (events read meanwhile are kept).

        Raises:
            JobError: the job answered with an error, went away, or took too long.
        """
        req_id = next(self._ids)
        try:
            write_message(self.sock, {"id": req_id, "op": op, **fields})
            while True:
                message = read_message(self.sock)
                if message.get("id") == req_id:
                    break
                if "event" in message:
                    self.events.append(message)
        except TimeoutError:
            raise JobError(f"job {self.job.pid} did not answer within {self.timeout:g} s") from None
        except (OSError, ConnectionError, ValueError) as error:
            raise JobError(f"job {self.job.pid} went away ({error})") from None
        if "error" in message:
            raise JobError(str(message["error"]))
        return message

    def next_event(self, timeout: float | None) -> dict[str, Any] | None:
        """The next event the job sent, waiting up to ``timeout`` seconds (``None``:
        none came).

        Raises:
            JobError: the job went away.
        """
        if self.events:
            return self.events.popleft()
        # Wait for the first byte only: a frame is then read whole (a timeout in the
        # middle of one would lose the rest of the stream).
        readable, _, _ = select.select([self.sock], [], [], timeout)
        if not readable:
            return None
        try:
            message = read_message(self.sock)
        except (OSError, ConnectionError, ValueError) as error:
            raise JobError(f"job {self.job.pid} went away ({error})") from None
        return message if "event" in message else None

    def fileno(self) -> int:
        """For ``select``: readable when the job sent something."""
        return self.sock.fileno()

    def close(self) -> None:
        """Close the connection."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()

    def __enter__(self) -> JobClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
