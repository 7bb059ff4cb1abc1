"""Conformance program modelled on Monarch's docs example ``debugging.py``.

Synchronous endpoints that call ``breakpoint()``, on a mesh with a ``host`` and a
``gpu`` dimension (2 x 2 here). After its breakpoint an actor computes a value from the
rank its message carries; the last rank raises ``LookupError`` (the post-mortem case).
The program checks that

- a call to the whole mesh fails with that error, carried by ``ActorError``;
- calls to slices that leave the failing rank out return the computed values (ranks in
  a slice are counted within the slice), through ``call`` and ``call_one``;
- a second endpoint with its own ``breakpoint()`` answers on every actor.

Nobody sits at a terminal, so a daemon thread stands in for the person at ``monarch
debug``: it dials the debug server at ``MONARCH_DEBUG_SERVER_HOST``/``_PORT`` (set here
to a free local port) and sends ``continue`` whenever it is connected, which releases
every pending breakpoint and post-mortem stop. Monarch 0.7 puts its own breakpoint hook
into each worker regardless of ``PYTHONBREAKPOINT``, so on Monarch the stops are real.
Where ``PYTHONBREAKPOINT=0`` is honoured (the conformance runner sets it) the calls are
no-ops; nothing listens on the port and the thread keeps redialling harmlessly.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time

from monarch.actor import Actor, ActorError, current_rank, endpoint, this_host

MESH = {"host": 2, "gpu": 2}
MISSING = 3  # the flat rank with no entry in the weight table
WEIGHTS = {0: 11, 1: 13, 2: 17}


def lookup_weight(flat_rank: int) -> int:
    if flat_rank not in WEIGHTS:
        raise LookupError(f"no weight for rank {flat_rank}")
    return WEIGHTS[flat_rank]


class Inspectee(Actor):
    @endpoint
    def weigh(self, factor: int) -> int:
        flat = current_rank().rank
        breakpoint()  # stops here on Monarch until continued
        return factor * lookup_weight(flat)

    @endpoint
    def where(self) -> int:
        flat = current_rank().rank
        breakpoint()
        return flat


def unused_local_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stand_in_user(host: str, port: int) -> None:
    """Send ``continue`` to the debug server for as long as the program runs."""
    while True:
        try:
            conn = socket.create_connection((host, port), timeout=1)
        except OSError:
            time.sleep(0.2)
            continue
        with conn:
            conn.settimeout(0.2)
            alive = True
            while alive:
                conn.sendall(b"continue\n")
                with contextlib.suppress(TimeoutError):
                    alive = bool(conn.recv(1 << 16))


def main() -> None:
    port = unused_local_port()
    os.environ["MONARCH_DEBUG_SERVER_HOST"] = "localhost"
    os.environ["MONARCH_DEBUG_SERVER_PORT"] = str(port)
    threading.Thread(target=stand_in_user, args=("localhost", port), daemon=True).start()

    inspectees = this_host().spawn_procs(per_host=MESH).spawn("inspectee", Inspectee)

    try:
        inspectees.weigh.call(2).get()
    except ActorError as err:
        cause = err.exception
        print("whole mesh failed as expected:", type(cause).__name__, cause)
        assert isinstance(cause, LookupError), repr(cause)
        assert str(cause) == f"no weight for rank {MISSING}", str(cause)
    else:
        raise AssertionError(f"rank {MISSING} should have made the call fail")

    first_host = inspectees.slice(host=0).weigh.call(2).get()
    print("host 0:", first_host)
    assert first_host.values() == [22, 26], first_host

    second_host = inspectees.slice(host=1).weigh.call(3).get()
    print("host 1 (ranks within the slice):", second_host)
    assert second_host.values() == [33, 39], second_host

    corner = inspectees.slice(host=1, gpu=1).weigh.call_one(5).get()
    print("host 1, gpu 1 alone:", corner)
    assert corner == 55, corner

    places = inspectees.where.call().get()
    assert places.values() == [0, 1, 2, 3], places
    print("debugging conformance OK")


if __name__ == "__main__":
    main()
