"""Call spans of this process, for timelines (``actormesh timeline``).

Each message an actor runs leaves one span in a bounded ring of the process: which actor
(mesh id and rank), which endpoint, when the message reached the mailbox, when it
started and ended, whether it raised, and the bytes of its arguments and its answer. The
ring keeps the last ``Config.timeline_spans`` spans (0: none are kept, and nothing is
recorded). The controller takes a copy with an OBSERVE for ``"timeline"``
(``actormesh._observe._timeline`` turns the copies into a Chrome trace); nothing is sent
until it asks.

Cost per message when on: a clock read when it arrives and a tuple appended to a deque
when it ends (the run's start and end times are the ones the endpoint counts read
anyway). Times are ``time.monotonic()``; an answer carries the offset to the wall clock,
so spans of several processes (and hosts) line up.
"""

from __future__ import annotations

import os
import time
from collections import deque
from typing import Any

__all__ = ["RECORDER", "Recorder", "Span"]

# (mesh id, rank, endpoint, arrived, started, ended, ok, bytes in, bytes out, req id, kind)
Span = tuple[str, int, str, float, float, float, bool, int, int, int, str]


class Recorder:
    """The process' ring of spans (one instance: ``RECORDER``).

    ``on`` is read on every message; ``configure`` sets it once, when the process' runtime
    starts hosting actors.
    """

    __slots__ = ("on", "spans")

    def __init__(self) -> None:
        self.on = False
        self.spans: deque[Span] = deque(maxlen=1)

    def configure(self, size: int) -> None:
        """Keep the last ``size`` spans (0: keep none, record nothing)."""
        if size != self.spans.maxlen:
            self.spans = deque(self.spans, maxlen=max(1, size))
        self.on = size > 0

    def ran(self, message: Any, started: float, ok: bool, kind: str) -> None:
        """``message`` ran from ``started`` until now (any thread; only when ``on``)."""
        ended = time.monotonic()
        try:
            arrived, reply_bytes = message.arrived, message.reply_bytes
            size = len(message.payload) + sum(b.nbytes for b in message.buffers)
        except AttributeError:
            return  # not a call (a supervision event): no span
        self.spans.append(
            (
                message.mesh_id,
                message.rank,
                message.endpoint,
                arrived or started,
                started,
                ended,
                ok,
                size,
                reply_bytes,
                message.req_id,
                kind,
            )
        )

    def take(self, since: float | None = None) -> dict[str, Any]:
        """The spans kept (those that ended at or after wall time ``since``, when
        given), with what is needed to place them: pid and the wall clock's offset."""
        offset = time.time() - time.monotonic()
        spans = list(self.spans)  # one step under the GIL: appends wait
        if since is not None:
            spans = [span for span in spans if span[5] + offset >= since]
        return {"pid": os.getpid(), "offset": offset, "spans": spans, "on": self.on}


RECORDER = Recorder()
