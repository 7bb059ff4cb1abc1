"""Call spans of this process, for timelines (``actormesh timeline``).

Each message an actor runs leaves one span in a bounded ring of the process: which actor
(mesh id and rank), which endpoint, when the message reached the mailbox, when it
started and ended, whether it raised, and the bytes of its arguments and its answer.
Each call the process makes (the controller's, an actor's to another mesh) leaves one
entry in a second ring: when it was sent and when every rank had answered. Each ring
keeps the last ``Config.timeline_spans`` entries (0: none are kept, and nothing is
recorded). The controller takes a copy with an OBSERVE for ``"timeline"``
(``actormesh._observe._timeline`` turns the copies into a Chrome trace); nothing is sent
until it asks.

Cost per message when on: a clock read when it arrives and a tuple appended to a deque
when it ends (the run's start and end times are the ones the endpoint counts read
anyway: the mailbox reads the clock once for both); about 60 bytecodes on each side
(``python -m bench.callcount`` with and without ``ACTORMESH_TIMELINE_SPANS=0``). Times
are ``time.monotonic()``; an answer carries the offset to the wall clock, so spans of
several processes (and hosts) line up.
"""

from __future__ import annotations

import os
import time
from collections import deque
from typing import Any

__all__ = ["RECORDER", "Recorder", "Span"]

# (mesh id, rank, endpoint, arrived, started, ended, ok, bytes in, bytes out, req id, kind)
Span = tuple[str, int, str, float, float, float, bool, int, int, int, str]
# A call this process made: (mesh id, mesh name, endpoint, req id, sent, done, ranks, ok)
Call = tuple[str, str, str, int, float, float, int, bool]


class Recorder:
    """The process' ring of spans (one instance: ``RECORDER``).

    ``on`` is read on every message; ``configure`` sets it once, when the process' runtime
    starts hosting actors.
    """

    __slots__ = ("calls", "on", "spans")

    def __init__(self) -> None:
        self.on = False
        self.spans: deque[Span] = deque(maxlen=1)
        self.calls: deque[Call] = deque(maxlen=1)

    def configure(self, size: int) -> None:
        """Keep the last ``size`` spans, and as many calls made (0: keep none, record
        nothing)."""
        if size != self.spans.maxlen:
            self.spans = deque(self.spans, maxlen=max(1, size))
            self.calls = deque(self.calls, maxlen=max(1, size))
        self.on = size > 0

    def called(
        self, mesh_id: str, mesh: str, endpoint: str, req_id: int, sent: float, ranks: int,
        ok: bool,
    ) -> None:  # fmt: skip
        """This process' call to ``ranks`` actors, sent at ``sent``, is over (any thread;
        only when ``on``)."""
        self.calls.append((mesh_id, mesh, endpoint, req_id, sent, time.monotonic(), ranks, ok))

    def ran(self, message: Any, started: float, ended: float, ok: bool, kind: str) -> None:
        """``message`` ran from ``started`` until ``ended`` (any thread; only when ``on``)."""
        try:
            buffers = message.buffers
            size = len(message.payload)
            if buffers:  # most calls have none: no generator made for them
                size += sum(b.nbytes for b in buffers)
            span = (
                message.mesh_id,
                message.rank,
                message.endpoint,
                message.arrived or started,
                started,
                ended,
                ok,
                size,
                message.reply_bytes,
                message.req_id,
                kind,
            )
        except AttributeError:
            return  # not a call (a supervision event): no span
        self.spans.append(span)

    def take(self, since: float | None = None) -> dict[str, Any]:
        """The spans kept (those that ended at or after wall time ``since``, when
        given), with what is needed to place them: pid and the wall clock's offset."""
        offset = time.time() - time.monotonic()
        spans = list(self.spans)  # one step under the GIL: appends wait
        calls = list(self.calls)
        if since is not None:
            spans = [span for span in spans if span[5] + offset >= since]
            calls = [call for call in calls if call[5] + offset >= since]
        return {"pid": os.getpid(), "offset": offset, "spans": spans, "calls": calls, "on": self.on}


RECORDER = Recorder()
