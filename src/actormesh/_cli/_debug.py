"""``actormesh debug``: the ranks of a job stopped at ``breakpoint()``, one prompt at a time.

It lists the stopped ranks (mesh, coordinates, pid, host, where), attaches to the only
one or asks which, and then passes lines typed here to that rank's pdb and prints what
pdb prints. ``continue`` resumes the rank, and the next stopped one is offered; with none
stopped it waits for the next breakpoint. End of input (Ctrl-D) ends the command (the
rank it was attached to stays stopped, for another ``actormesh debug`` to pick up).
"""

from __future__ import annotations

import argparse
import select
import sys
from typing import Any

from ._client import JobClient, find_job

__all__ = ["debug"]


def debug(args: argparse.Namespace) -> int:
    """Run ``actormesh debug``; returns the exit status."""
    job = find_job(args.job)
    with JobClient(job, timeout=10.0) as client:
        return _Debugger(client, args.mesh, args.rank).run()


def _say(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


class _Debugger:
    def __init__(self, client: JobClient, mesh: str | None, rank: int | None) -> None:
        self.client = client
        self.mesh = mesh
        self.rank = rank
        self.sessions: dict[str, dict[str, Any]] = {}

    def _wanted(self, session: dict[str, Any]) -> bool:
        return (self.mesh is None or session["mesh"] == self.mesh) and (
            self.rank is None or session["rank"] == self.rank
        )

    def _take(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "opened":
            self.sessions[event["session"]] = event
        elif kind == "closed":
            self.sessions.pop(event["session"], None)

    def run(self) -> int:
        listed = self.client.request("debug.list")["sessions"]
        self.sessions = {s["session"]: s for s in listed}
        told_waiting = False
        while True:
            waiting = [s for s in self.sessions.values() if not s["attached"] and self._wanted(s)]
            if not waiting:
                if not told_waiting:
                    _say(
                        f"no rank of job {self.client.job.pid} is stopped at a breakpoint; "
                        "waiting for one (Ctrl-D quits)\n"
                    )
                    told_waiting = True
                if not self._wait():
                    return 0
                continue
            told_waiting = False
            chosen = waiting[0] if len(waiting) == 1 else self._choose(waiting)
            if chosen is None:
                return 0
            if chosen and not self._attach(chosen):
                return 0

    def _wait(self) -> bool:
        """Wait for a session to open; False at end of input."""
        readable, _, _ = select.select([self.client, sys.stdin], [], [])
        if sys.stdin in readable and not sys.stdin.readline():
            return False
        if self.client in readable:
            event = self.client.next_event(0)
            if event is not None:
                self._take(event)
        return True

    def _choose(self, waiting: list[dict[str, Any]]) -> dict[str, Any] | None:
        lines = [f"{len(waiting)} ranks are stopped at breakpoints:"]
        for number, session in enumerate(waiting, 1):
            lines.append(f"  [{number}] {session['label']} at {session['where']}")
        _say("\n".join(lines) + f"\nattach to which? [1-{len(waiting)}, Enter: 1] ")
        answer = sys.stdin.readline()
        if not answer:
            return None
        text = answer.strip() or "1"
        if text.isdigit() and 1 <= int(text) <= len(waiting):
            return waiting[int(text) - 1]
        _say(f"not a number from 1 to {len(waiting)}\n")
        return {}

    def _attach(self, session: dict[str, Any]) -> bool:
        """Drive one session until it resumes; False at end of input."""
        sid = session["session"]
        self.client.request("debug.attach", session=sid)
        _say(f"attached to {session['label']}, stopped at {session['where']}\n")
        while True:
            event = self.client.next_event(None)
            if event is None:
                continue
            self._take(event)
            kind = event.get("event")
            if event.get("session") != sid:
                continue
            if kind == "out":
                _say(event["text"])
            elif kind == "closed":
                _say(f"\n{session['label']}: {event.get('why') or 'resumed'}\n")
                return True
            elif kind == "read":
                line = sys.stdin.readline()
                if not line:
                    self.client.request("debug.detach", session=sid)
                    _say("\ndetached; the rank stays stopped\n")
                    return False
                self.client.request("debug.input", session=sid, text=line)
