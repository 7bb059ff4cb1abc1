"""Steps: a short exchange on a new socket, written once and driven either way.

The first bytes on a new connection (the secret challenge, a rendezvous record) are
written as a generator of steps: it yields an ``int`` to read exactly that many bytes
(they come back as the value of the ``yield``) or ``bytes`` to write them, and returns
what the exchange established. A read that cannot complete is thrown into the generator
as ``ConnectionError``, so the exchange may say what that means.

``run_blocking`` drives one exchange on a blocking socket (a connector, with a timeout);
the gatekeeper drives many at once without blocking, so a peer that stalls costs nobody
else anything.
"""

from __future__ import annotations

import socket
from collections.abc import Generator
from typing import TypeVar

from ._blocking import receive_exactly

__all__ = ["Steps", "run_blocking"]

T = TypeVar("T")

Steps = Generator[int | bytes, bytes, T]


def run_blocking(sock: socket.socket, steps: Steps[T]) -> T:
    """Run ``steps`` on a blocking ``sock``; the exchange's result.

    Raises:
        whatever the steps raise; ``OSError`` when the socket fails or times out.
    """
    try:
        step = next(steps)
        while True:
            if isinstance(step, bytes):
                sock.sendall(step)
                step = steps.send(b"")
                continue
            try:
                data = receive_exactly(sock, step)
            except ConnectionError as lost:  # not a timeout: that is no answer to give
                step = steps.throw(lost)
                continue
            step = steps.send(data)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    finally:
        steps.close()
