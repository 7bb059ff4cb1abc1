"""The controller's end of remote breakpoints: stopped ranks, and who types at them.

A worker stopped at ``breakpoint()`` opens a session (see ``actormesh._core._debugger``);
its frames reach the controller directly or through a host agent. The hub keeps every
open session: who stopped (mesh, rank, coordinates, pid, host), where, what pdb printed
that nobody read yet, and who is attached. One person at a time types at a session:

- the controller's own terminal (its stdin is a terminal): the *console* thread attaches
  to a stopped rank by itself when it is the only one, or lists them and asks which;
  after ``continue`` it offers the next. It reads the terminal only while a session
  waits for a line, so the program's own ``input()`` is not disturbed otherwise;
- ``actormesh debug`` from another terminal (the job socket, see ``_service``), which is
  the way when the controller has no terminal (a batch job, a notebook): the
  controller then prints where to attach.

Everything but the console thread runs on the controller's loop thread.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .._core import headers
from .._hosts import SessionWatch
from .._transport import Connection, TransportClosed

__all__ = ["DebugHub", "Session"]

Sink = Callable[[str, dict[str, Any]], None]  # (event, details), loop thread


@dataclass
class Session:
    """One stopped rank (see the module docstring)."""

    sid: str
    info: dict[str, Any]
    conn: Connection
    stopped: bool = True  # False: continued, running on to a breakpoint set in pdb
    wants_line: bool = False
    backlog: list[str] = field(default_factory=list)
    sink: Sink | None = None  # who is attached
    attached_by: str = ""

    def label(self) -> str:
        """``trainer {gpus=3} (rank 3, pid 1234 on host)``."""
        info = self.info
        coords = ", ".join(f"{k}={v}" for k, v in dict(info.get("point") or {}).items())
        return (
            f"{info.get('mesh')} {{{coords}}} (rank {info.get('rank')}, pid {info.get('pid')} "
            f"on {info.get('host')})"
        )

    def to_json(self) -> dict[str, Any]:
        """What ``actormesh debug`` lists."""
        return {
            "session": self.sid,
            "label": self.label(),
            "mesh": self.info.get("mesh"),
            "rank": self.info.get("rank"),
            "point": self.info.get("point"),
            "endpoint": self.info.get("endpoint"),
            "where": self.info.get("where"),
            "stopped": self.stopped,
            "attached": self.attached_by,
        }


class DebugHub:
    """The controller's debugger sessions (see the module docstring).

    Args:
        runtime: the controller's runtime (``Runtime``).
        job: how ``actormesh debug`` finds this job (for the note printed when the
            controller has no terminal), or ``None`` when the job is not registered.
    """

    def __init__(self, runtime: Any, job: str | None) -> None:
        self.runtime = runtime
        self.job = job
        self.sessions: dict[str, Session] = {}
        self.watchers: list[Sink] = []  # told of sessions opening and closing
        self._console: _Console | None = None
        self._console_wanted = _has_terminal()

    # -- frames from workers (loop thread) -------------------------------------------------

    def on_frame(self, conn: Connection, header: tuple[Any, ...], parts: list[memoryview]) -> None:
        """A DEBUG frame from a worker (directly or through its host agent)."""
        sid, op = headers.read(headers.Debug, header)
        details = pickle.loads(parts[1]) if len(parts) > 1 else {}
        session = self.sessions.get(sid)
        if op == "open":
            if session is None:
                self._open(Session(sid, details, conn))
            return
        if session is None:
            return
        if op == "out":
            self._emit(session, "out", {"text": details.get("text", "")})
        elif op == "read":
            session.wants_line = True
            self._emit(session, "read", {})
        elif op == "state":
            session.stopped = not details.get("running", False)
            if session.stopped:
                session.info["where"] = details.get("where", session.info.get("where"))
            self._emit(session, "state", session.to_json())
        elif op == "close":
            self._close(session, str(details.get("why", "")))

    def _open(self, session: Session) -> None:
        self.sessions[session.sid] = session
        address = str(session.info.get("address", ""))
        self.runtime.children.debugging(address, True)
        self.runtime.register(SessionWatch(session.conn, lambda: self._lost(session.sid)))
        for watcher in list(self.watchers):
            watcher("opened", session.to_json())
        if self._console_wanted:
            if self._console is None:
                self._console = _Console(self)
            self._console.wake()
        elif not self.watchers:
            where = f"actormesh debug --job {self.job}" if self.job else "nowhere (observe off)"
            _note(
                f"actormesh: {session.label()} stopped at a breakpoint "
                f"({session.info.get('where')}); attach with: {where}"
            )

    def _lost(self, sid: str) -> None:
        session = self.sessions.get(sid)
        if session is not None:
            self._close(session, "its connection closed (the process ended?)")

    def _close(self, session: Session, why: str) -> None:
        if self.sessions.pop(session.sid, None) is None:
            return
        self.runtime.children.debugging(str(session.info.get("address", "")), False)
        self._emit(session, "closed", {"why": why})
        session.sink = None
        for watcher in list(self.watchers):
            watcher("closed", {"session": session.sid, "why": why})
        if self._console is not None:
            self._console.wake()

    def _emit(self, session: Session, event: str, details: dict[str, Any]) -> None:
        if session.sink is not None:
            session.sink(event, {"session": session.sid, **details})
        elif event == "out":
            session.backlog.append(details["text"])

    # -- attaching (loop thread) -----------------------------------------------------------

    def attach(self, sid: str, sink: Sink, who: str) -> str | None:
        """Have ``sink`` receive ``sid``'s output from now on; an error text if it cannot."""
        session = self.sessions.get(sid)
        if session is None:
            return f"no session {sid!r} (it may have continued)"
        if session.sink is not None and session.sink != sink:  # bound methods: ==
            return f"{session.label()} is attached in {session.attached_by} already"
        session.sink, session.attached_by = sink, who
        backlog, session.backlog = session.backlog, []
        if backlog:
            sink("out", {"session": sid, "text": "".join(backlog)})
        if session.wants_line:
            sink("read", {"session": sid})
        return None

    def detach(self, sid: str, sink: Sink) -> None:
        """Stop sending ``sid``'s output to ``sink`` (the session stays stopped)."""
        session = self.sessions.get(sid)
        if session is not None and session.sink == sink:
            session.sink, session.attached_by = None, ""

    def send_line(self, sid: str, text: str) -> bool:
        """Type ``text`` at session ``sid``'s prompt; False when it is gone."""
        session = self.sessions.get(sid)
        if session is None:
            return False
        session.wants_line = False
        header = headers.encode(headers.Debug(sid, "in"))
        try:
            session.conn.send([header, pickle.dumps({"text": text}, 5)])
        except TransportClosed:
            return False
        return True

    def listing(self) -> list[dict[str, Any]]:
        """The open sessions, oldest first."""
        return [session.to_json() for session in self.sessions.values()]


def _has_terminal() -> bool:
    try:
        return os.isatty(0) and os.isatty(1)
    except (OSError, ValueError):
        return False


def _note(text: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(text + "\n")
        sys.stderr.flush()


class _Console:
    """The controller terminal's debugger prompt, on a thread of its own (see the
    module docstring). It talks to the hub through the loop (``call_soon``)."""

    def __init__(self, hub: DebugHub) -> None:
        self.hub = hub
        self.loop = hub.runtime.loop
        self._changed = threading.Condition()
        self._events: list[tuple[str, dict[str, Any]]] = []
        self._thread = threading.Thread(target=self._main, name="actormesh-debug", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Sessions changed (any thread)."""
        with self._changed:
            self._events.append(("sessions", {}))
            self._changed.notify_all()

    def _sink(self, event: str, details: dict[str, Any]) -> None:
        # Loop thread: output is written at once; the console thread waits for the rest.
        if event == "out":
            _write(details["text"])
        with self._changed:
            self._events.append((event, details))
            self._changed.notify_all()

    def _next(self, timeout: float | None = None) -> tuple[str, dict[str, Any]] | None:
        with self._changed:
            if not self._events:
                self._changed.wait(timeout)
            return self._events.pop(0) if self._events else None

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        done: list[Any] = []
        ready = threading.Event()

        def run() -> None:
            try:
                done.append(fn(*args))
            finally:
                ready.set()

        self.loop.call_soon_threadsafe(run)
        ready.wait(10)
        return done[0] if done else None

    def _main(self) -> None:
        while True:
            sessions = self._call(self.hub.listing) or []
            waiting = [s for s in sessions if not s["attached"]]
            if not waiting:
                self._next()
                continue
            chosen = waiting[0] if len(waiting) == 1 else self._choose(waiting)
            if chosen is None:
                continue
            self._attach(chosen)

    def _choose(self, waiting: list[dict[str, Any]]) -> dict[str, Any] | None:
        lines = [f"\nactormesh: {len(waiting)} ranks are stopped at breakpoints:"]
        for number, session in enumerate(waiting, 1):
            lines.append(f"  [{number}] {session['label']} at {session['where']}")
        _write("\n".join(lines) + f"\nattach to which? [1-{len(waiting)}, Enter: 1] ")
        answer = sys.stdin.readline()
        if not answer:
            return waiting[0]
        text = answer.strip() or "1"
        if text.isdigit() and 1 <= int(text) <= len(waiting):
            return waiting[int(text) - 1]
        _write(f"not a number from 1 to {len(waiting)}\n")
        return None

    def _attach(self, session: dict[str, Any]) -> None:
        sid = session["session"]
        with self._changed:
            self._events.clear()
        # Said before attaching: attaching prints what pdb has printed so far.
        _write(f"\nactormesh: {session['label']} stopped at {session['where']}\n")
        error = self._call(self.hub.attach, sid, self._sink, "the controller's terminal")
        if error:
            _write(f"actormesh: {error}\n")
            return
        while True:
            event = self._next(timeout=1.0)
            if event is None:
                if sid not in self.hub.sessions:
                    return
                continue
            kind, details = event
            if kind == "closed" and details.get("session") == sid:
                # A status line, as the "stopped at" one: on stderr, so it never lands
                # inside a line the program is printing on stdout from another thread.
                _note(f"actormesh: {session['label']} {details.get('why') or 'resumed'}")
                return
            if kind == "read" and details.get("session") == sid:
                line = sys.stdin.readline()
                self._call(self.hub.send_line, sid, line or "continue\n")


def _write(text: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.write(text)
        sys.stdout.flush()
