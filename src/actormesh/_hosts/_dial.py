"""Dialling a worker loop: the controller's side of ``attach_to_workers``.

A worker loop (``run_worker_loop_forever``, ``_worker_loop``) waits for an owner at an
address in any of Monarch's forms; ``dial_agent`` connects to it, proves (or, trusting
all connections, hands over) the job's secret, and returns the socket the loop's host
agent then serves the owner on.
"""

from __future__ import annotations

import socket
import time

from .._transport import (
    HANDSHAKE_TIMEOUT,
    AuthenticationError,
    Endpoint,
    connect_steps,
    connect_tcp,
    connect_unix,
    open_connect_steps,
    parse_worker_address,
    run_blocking,
)

__all__ = ["dial_agent"]

# Seconds between tries to reach a worker loop that is not listening yet (doubling).
_DIAL_FIRST_PAUSE = 0.01
_DIAL_MAX_PAUSE = 0.25


def dial_agent(address: str, secret: str, *, trust_all: bool, timeout: float) -> socket.socket:
    """A connection to the worker loop waiting at ``address`` (any worker address form:
    its dial side), ready to carry frames (blocking; run it on a thread).

    A worker loop that is not listening yet (its process still starting) is tried again
    until ``timeout`` seconds have passed. ``trust_all`` (Monarch's
    ``ca="trust_all_connections"`` with no secret given to this controller): the worker
    takes us unauthenticated and is handed ``secret``; otherwise both prove ``secret``.

    Raises:
        ValueError: ``address`` is not a worker address, or names nothing to dial.
        AuthenticationError: the worker and this controller disagree on the secret, or
            on whether there is one.
        TimeoutError: nothing listened at ``address`` within ``timeout`` seconds.
        OSError: it cannot be reached otherwise.
    """
    target = parse_worker_address(address).dial
    dial = target.address  # (raises for an inherited socket or a wildcard)
    deadline = time.monotonic() + timeout
    pause = _DIAL_FIRST_PAUSE
    while True:
        try:
            return _dial_once(target, secret, trust_all, deadline)
        except (ConnectionRefusedError, FileNotFoundError) as error:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"no worker loop listened at {dial} within {timeout:g} s ({error})"
                ) from None
            time.sleep(min(pause, left))
            pause = min(pause * 2, _DIAL_MAX_PAUSE)


def _dial_once(target: Endpoint, secret: str, trust_all: bool, deadline: float) -> socket.socket:
    handshake = max(0.1, min(HANDSHAKE_TIMEOUT, deadline - time.monotonic()))
    try:
        if target.transport == "tcp":
            assert target.port is not None
            return connect_tcp(
                target.host, target.port, secret=secret, timeout=handshake, trust_all=trust_all
            )
        sock = connect_unix(target.path)
        try:
            sock.settimeout(handshake)
            run_blocking(sock, open_connect_steps(secret) if trust_all else connect_steps(secret))
            sock.settimeout(None)
        except BaseException:
            sock.close()
            raise
        return sock
    except (ConnectionResetError, BrokenPipeError, ConnectionAbortedError) as error:
        if trust_all:
            raise
        raise AuthenticationError(
            f"the worker loop at {target.address} hung up on the job's secret ({error}): "
            "one that trusts all connections has no secret to check it against; attach "
            "with ca='trust_all_connections' and no ACTORMESH_SECRET, or give the worker "
            "the same ACTORMESH_SECRET"
        ) from None
    except ConnectionError as error:
        if isinstance(error, ConnectionRefusedError) or trust_all:
            raise
        raise AuthenticationError(
            f"the worker loop at {target.address} closed the connection during the "
            f"handshake ({error}): is it one that trusts all connections (no secret)?"
        ) from None
