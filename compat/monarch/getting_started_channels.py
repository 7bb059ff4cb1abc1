"""The messaging parts of Monarch's docs example ``getting_started.py``.

- ``Channel.open()`` gives a port and its receiver; a value sent on the port comes out
  of ``recv()``;
- responding out of order: an inference engine's ``infer`` endpoint takes an explicit
  response port (``@endpoint(explicit_response_port=True)``) and queues it; a background
  thread answers the queued requests later, always with the newest weights, so both
  requests made before ``update_weights(1)`` see weights 1. (The example reads the
  weights before its pretend work, which makes the first answer a race; here the thread
  works first, so both answers are deterministic. Its thread loops forever; here a
  ``close`` endpoint lets it end so the program can exit.)
"""

from __future__ import annotations

import threading
import time
from queue import Queue

from monarch.actor import Actor, Channel, Port, endpoint, this_proc

port, recv = Channel.open()
port.send(3)
got = recv.recv().get()
print(got)
assert got == 3


class InferenceEngine(Actor):
    def __init__(self):
        self.q = Queue()
        self.new_weights = None
        self.worker = threading.Thread(target=self.run, daemon=True)
        self.worker.start()

    @endpoint
    def update_weights(self, new_weights):
        self.new_weights = new_weights

    @endpoint(explicit_response_port=True)
    def infer(self, port: Port[str]):
        self.q.put(port)

    @endpoint
    def close(self):
        self.q.put(None)
        self.worker.join(timeout=10)
        return not self.worker.is_alive()

    def run(self):
        while True:
            request = self.q.get()
            if request is None:
                return
            time.sleep(0.3)  # pretend to take time, then use the newest weights
            request.send(f"inferred with: {self.new_weights}")


engine = this_proc().spawn("engine", InferenceEngine)
engine.update_weights.broadcast(0)
first = engine.infer.call_one()
second = engine.infer.call_one()
engine.update_weights.broadcast(1)
answers = [first.get(), second.get()]
print(*answers, sep="\n")
assert answers == ["inferred with: 1", "inferred with: 1"], answers
assert engine.close.call_one().get() is True
print("getting started: channels and explicit ports OK")
