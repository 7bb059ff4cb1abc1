"""Monarch's docs example ``debugging.py``: ``breakpoint()`` inside actor endpoints.

Every actor of a ``{"host": 2, "gpu": 2}`` mesh stops at a ``breakpoint()`` and then
computes a value from its rank; rank 2 raises. The call to the whole mesh fails with the
rank-2 error, and calls to the other ranks return their values. (The example uses
4 x 4 actors; 2 x 2 keeps it quick on a small machine.)

Nobody sits at a terminal here, so a background thread plays the user of the
``monarch debug`` CLI the example describes: it connects to the debug server
(``MONARCH_DEBUG_SERVER_HOST``/``_PORT``, a free port picked here) and keeps entering
``continue``, which resumes every pending breakpoint (and post-mortem stop). Monarch 0.7
installs its own ``breakpoint`` hook in every worker whatever ``PYTHONBREAKPOINT`` says,
so there the breakpoints really stop until continued. Where ``PYTHONBREAKPOINT=0`` is
honoured (the conformance runner sets it for every run), they are no-ops and no debug
server ever answers; the thread just keeps trying.
"""

from __future__ import annotations

import os
import socket
import threading
import time

from monarch.actor import Actor, ActorError, current_rank, endpoint, this_host


def _bad_rank():
    raise ValueError("bad rank")


def _debugee_actor_internal(rank):
    if rank % 4 == 0:
        rank += 1
        return rank
    elif rank % 4 == 1:
        rank += 2
        return rank
    elif rank % 4 == 2:
        rank += 3
        _bad_rank()
    elif rank % 4 == 3:
        rank += 4
        return rank


class DebugeeActor(Actor):
    @endpoint
    def to_debug(self):
        rank = current_rank().rank
        breakpoint()
        return _debugee_actor_internal(rank)


def _free_port():
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


def keep_continuing(host, port):
    """What a user at ``monarch debug`` would do here: ``continue``, again and again."""
    while True:
        try:
            with socket.create_connection((host, port), timeout=1) as cli:
                cli.settimeout(0.2)
                while True:
                    cli.sendall(b"continue\n")
                    try:
                        if not cli.recv(65536):
                            break
                    except TimeoutError:
                        pass
        except OSError:
            time.sleep(0.2)


if __name__ == "__main__":
    os.environ["MONARCH_DEBUG_SERVER_HOST"] = "localhost"
    os.environ["MONARCH_DEBUG_SERVER_PORT"] = str(_free_port())
    threading.Thread(
        target=keep_continuing,
        args=("localhost", int(os.environ["MONARCH_DEBUG_SERVER_PORT"])),
        daemon=True,
    ).start()

    process_mesh = this_host().spawn_procs(per_host={"host": 2, "gpu": 2})
    debugee_mesh = process_mesh.spawn("debugee", DebugeeActor)

    try:
        print(debugee_mesh.to_debug.call().get())
        raise AssertionError("rank 2 should have raised")
    except ActorError as e:
        print("the whole mesh:", type(e.exception).__name__, e.exception)
        assert isinstance(e.exception, ValueError) and str(e.exception) == "bad rank"

    row0 = debugee_mesh.slice(host=0).to_debug.call().get()
    print("host=0:", row0)
    assert row0.values() == [1, 3]  # ranks 0 and 1 of the slice
    one = debugee_mesh.slice(host=1, gpu=1).to_debug.call_one().get()
    print("host=1, gpu=1:", one)
    assert one == 1  # a slice of one actor: its message rank is 0
    print("debugging example OK")
