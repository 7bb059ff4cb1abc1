"""Conformance program for the messaging sections of Monarch's docs example
``getting_started.py`` (channels, and answering a call later through its port).

- ``Channel.open()`` returns a port and its receiver: values sent on the port come out
  of ``recv()`` in order;
- ``@endpoint(explicit_response_port=True)``: the ``Forecaster``'s ``forecast``
  endpoint does not answer; it hands the ``Port`` to a worker thread and returns. The
  thread answers each queued port afterwards, using whatever model revision is newest
  by then, so two requests made before ``publish(2)`` both report revision 2. (The
  thread pauses before reading the revision, so the outcome does not depend on timing;
  a ``shutdown`` endpoint ends the thread so the program can exit.)
"""

from __future__ import annotations

import threading
import time
from queue import SimpleQueue

from monarch.actor import Actor, Channel, Port, endpoint, this_proc

tx, rx = Channel.open()
for word in ("alpha", "beta"):
    tx.send(word)
received = [rx.recv().get(), rx.recv().get()]
print("over the channel:", received)
assert received == ["alpha", "beta"], received


class Forecaster(Actor):
    def __init__(self):
        self.revision = -1
        self.backlog: SimpleQueue = SimpleQueue()
        self.thread = threading.Thread(target=self._answer_backlog, daemon=True)
        self.thread.start()

    @endpoint
    def publish(self, revision: int) -> None:
        self.revision = revision

    @endpoint(explicit_response_port=True)
    def forecast(self, reply_to: Port[str], city: str) -> None:
        self.backlog.put((reply_to, city))

    @endpoint
    def shutdown(self) -> bool:
        self.backlog.put(None)
        self.thread.join(timeout=10)
        return not self.thread.is_alive()

    def _answer_backlog(self) -> None:
        while (job := self.backlog.get()) is not None:
            reply_to, city = job
            time.sleep(0.3)  # the slow part; the revision is read only after it
            reply_to.send(f"{city}: sunny (model r{self.revision})")


forecaster = this_proc().spawn("forecaster", Forecaster)
forecaster.publish.broadcast(1)
oslo = forecaster.forecast.call_one("Oslo")
lima = forecaster.forecast.call_one("Lima")
forecaster.publish.broadcast(2)
answers = [oslo.get(), lima.get()]
print(*answers, sep="\n")
assert answers == ["Oslo: sunny (model r2)", "Lima: sunny (model r2)"], answers
assert forecaster.shutdown.call_one().get() is True
print("getting started: channels and explicit ports OK")
