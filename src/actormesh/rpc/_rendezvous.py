"""The rendezvous of ``init_rpc``: rank 0 collects every worker's address, then shares them.

Rank 0 listens on ``MASTER_ADDR:MASTER_PORT`` (or the ``tcp://`` init method; with
``file://``, on a loopback port it writes in that file, through torch's ``FileStore`` as
torch's own rendezvous does, so a process group may share the file); every other
rank connects (retrying until rank 0 is up or the time runs out) and sends one record:
its name, rank, world size, host, process id, the Unix socket of its actormesh runtime
and the id of its RPC agent. Once all ``world_size`` records are in and consistent, rank
0 sends everyone the directory; on a conflict (a name or rank taken twice, world sizes
that differ) everyone gets the same error. Messages are length-prefixed JSON: nothing
from the network is unpickled.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import socket
import struct
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from .._transport import Gatekeeper, Limits, Steps, run_blocking
from ._errors import RpcTimeoutError

__all__ = [
    "Member",
    "RendezvousError",
    "file_init_path",
    "file_rendezvous",
    "parse_init_method",
    "rendezvous",
]

_LENGTH = struct.Struct("!I")
_MAX_MESSAGE = 1 << 24
_RETRY_S = 0.05


class RendezvousError(RuntimeError):
    """The workers could not agree on the group (conflicting names, ranks or sizes)."""


RendezvousError.__module__ = "actormesh.rpc"


@dataclass(frozen=True)
class Member:
    """One worker's entry in the directory."""

    name: str
    rank: int
    world_size: int
    host: str
    pid: int
    path: str
    agent: str


def parse_init_method(
    init_method: str, environ: Mapping[str, str] | None = None
) -> tuple[str, int]:
    """``(host, port)`` of the rendezvous named by ``init_method``.

    Raises:
        ValueError: an unsupported scheme, or ``env://`` without ``MASTER_ADDR`` /
            ``MASTER_PORT``.
    """
    env = os.environ if environ is None else environ
    url = urllib.parse.urlparse(init_method)
    if url.scheme == "env":
        missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if not env.get(k)]
        if missing:
            raise ValueError(
                f"init_method {init_method!r} reads the rendezvous address from the "
                f"environment, but {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} "
                "not set"
            )
        host, port_text = env["MASTER_ADDR"], env["MASTER_PORT"]
    elif url.scheme == "tcp":
        if not url.hostname or url.port is None:
            raise ValueError(f"init_method {init_method!r} must look like tcp://host:port")
        host, port_text = url.hostname, str(url.port)
    else:
        raise ValueError(
            f"unsupported init_method {init_method!r}: use 'env://', 'tcp://host:port' or "
            "'file:///path'"
        )
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"the rendezvous port {port_text!r} is not a number") from None
    return host, port


def file_init_path(init_method: str) -> str | None:
    """The file of a ``file://`` init method (query arguments dropped), else ``None``."""
    url = urllib.parse.urlparse(init_method)
    if url.scheme != "file":
        return None
    path = urllib.parse.unquote(url.path)
    if not path:
        raise ValueError(f"init_method {init_method!r} names no file")
    return path


def file_rendezvous(
    path: str, rank: int, world_size: int, generation: int, timeout: float | None
) -> tuple[tuple[str, int], socket.socket | None, Any]:
    """Where the rendezvous of a ``file://`` init method runs, found through the file.

    Rank 0 listens on a free loopback port and writes it in the file under a key of this
    ``init_rpc`` (the process' ``generation``-th, as torch prefixes its keys); the others
    wait for it. The file is torch's ``FileStore``, so a process group may use the same
    file; the store is returned for the caller to keep until it leaves the group, which
    removes the file once every worker has let go of it, as with torch.

    Returns:
        The address, rank 0's listening socket (``None`` elsewhere) and the store.

    Raises:
        RpcTimeoutError: rank 0 did not write its address within ``timeout`` seconds.
    """
    import datetime

    import torch.distributed as dist

    store = dist.FileStore(path, world_size)  # type: ignore[attr-defined]
    store.set_timeout(datetime.timedelta(seconds=timeout or 10**9))
    key = f"actormesh_rpc/{generation}/rendezvous"
    if rank == 0:
        server = _listen(("127.0.0.1", 0), world_size)
        host, port = server.getsockname()[:2]
        store.set(key, f"{host}:{port}")
        return (host, port), server, store
    try:
        value = store.get(key).decode()
    except RuntimeError:
        raise RpcTimeoutError(
            f"init_rpc: rank 0 did not publish its rendezvous address in {path} within "
            f"{timeout:g} s; is rank 0 running?"
        ) from None
    host, _, port = value.rpartition(":")
    return (host, int(port)), None, store


def _listen(address: tuple[str, int], world_size: int) -> socket.socket:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(address)
        server.listen(max(world_size, 128))
    except OSError as error:
        server.close()
        raise RendezvousError(
            f"rank 0 cannot listen for the rendezvous on {address[0]}:{address[1]} "
            f"({error.strerror or error}); is another rank 0 running, or the port taken?"
        ) from None
    return server


def rendezvous(
    me: Member,
    address: tuple[str, int],
    timeout: float | None,
    limits: Limits | None = None,
    secret: str | None = None,
    server: socket.socket | None = None,
) -> tuple[list[Member], str | None]:
    """Meet the other ``me.world_size - 1`` workers; every member, by rank, and the secret
    rank 0 handed out (``secret``, given by rank 0 when its workers have none of their
    own: it travels unencrypted, as everything does in torch's own rendezvous).

    ``limits`` bound what peers that connect to rank 0 may hold before they have sent
    their record (see ``Gatekeeper``). Rank 0 listens on ``server`` when given (already
    bound to ``address`` and listening; closed here), else binds ``address`` itself.

    Raises:
        RendezvousError: the group is inconsistent (the message says how).
        RpcTimeoutError: not everyone arrived within ``timeout`` seconds.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    if me.world_size == 1:
        if server is not None:
            server.close()
        return [me], secret
    if me.rank == 0:
        if server is None:
            server = _listen(address, me.world_size)
        return _serve(me, server, address, deadline, timeout, limits, secret), secret
    return _join(me, address, deadline, timeout)


# -- rank 0 -------------------------------------------------------------------------------


def _serve(
    me: Member,
    server: socket.socket,
    address: tuple[str, int],
    deadline: float | None,
    timeout: float | None,
    limits: Limits | None,
    secret: str | None,
) -> list[Member]:
    # Each peer sends its record through the gatekeeper: one that connects and says
    # nothing (a port scan, a stalled client, a flood) never holds up the others.
    arrivals: queue.SimpleQueue[tuple[socket.socket, dict[str, Any]]] = queue.SimpleQueue()
    gate = Gatekeeper(
        server,
        _record_steps,
        lambda sock, peer, record: arrivals.put((sock, record)),
        limits=limits,
        name=f"rpc rendezvous {address[0]}:{address[1]}",
    )
    gate.start()
    members: dict[int, Member] = {0: me}
    peers: list[socket.socket] = []
    try:
        problem = ""
        # Every other worker is waited for even after a conflict, so that all of them
        # get the same error (one that arrives later would wait for rank 0 in vain).
        while len(peers) < me.world_size - 1:
            try:
                sock, record = arrivals.get(timeout=_left(deadline))
            except queue.Empty:
                if problem:
                    break
                missing = sorted(set(range(me.world_size)) - set(members))
                why = (
                    f"rank(s) {missing} did not join the rendezvous at "
                    f"{address[0]}:{address[1]} within {timeout:g} s"
                )
                # Those who came hear the same (not just a closed connection).
                for sock in peers:
                    _send_quietly(sock, {"error": why, "timeout": True})
                raise RpcTimeoutError(f"init_rpc: {why}") from None
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                member = Member(**record)
            except TypeError:
                sock.close()  # JSON, but not a record of ours
                continue
            peers.append(sock)
            conflict = _conflict(members, member, me.world_size)
            if conflict:
                problem = problem or conflict
                continue
            members[member.rank] = member
        gate.close()
        if problem:
            for sock in peers:
                _send_quietly(sock, {"error": problem})
            raise RendezvousError(problem)
        directory = [asdict(members[rank]) for rank in range(me.world_size)]
        answer: dict[str, object] = {"members": directory}
        if secret is not None:
            answer["secret"] = secret
        for sock in peers:
            _send_quietly(sock, answer)
        # Wait for each peer to close its end, so none misses the directory when this
        # process exits early.
        for sock in peers:
            with contextlib.suppress(OSError, ValueError):
                _recv(sock, deadline)
    finally:
        gate.close()
        for sock in peers:
            sock.close()
    return [members[rank] for rank in range(me.world_size)]


def _conflict(members: dict[int, Member], new: Member, world_size: int) -> str:
    if new.world_size != world_size:
        return (
            f"worker {new.name!r} (rank {new.rank}) was started with world_size="
            f"{new.world_size}, but rank 0 has world_size={world_size}"
        )
    if not 0 <= new.rank < world_size:
        return f"worker {new.name!r} has rank {new.rank}, outside 0..{world_size - 1}"
    if new.rank in members:
        return (
            f"rank {new.rank} is used twice: by {members[new.rank].name!r} "
            f"(pid {members[new.rank].pid}) and by {new.name!r} (pid {new.pid})"
        )
    for other in members.values():
        if other.name == new.name:
            return (
                f"worker name {new.name!r} is not unique: it is used by rank {other.rank} "
                f"(pid {other.pid}) and by rank {new.rank} (pid {new.pid})"
            )
    return ""


# -- other ranks --------------------------------------------------------------------------


def _join(
    me: Member, address: tuple[str, int], deadline: float | None, timeout: float | None
) -> tuple[list[Member], str | None]:
    sock = _connect(address, deadline)
    if sock is None:
        raise RpcTimeoutError(
            f"init_rpc: rank {me.rank} could not reach the rendezvous of rank 0 at "
            f"{address[0]}:{address[1]} within {timeout:g} s; is rank 0 running?"
        )
    with sock:
        try:
            _send(sock, asdict(me))
            # A little past our own deadline: rank 0, whose wait may have started later,
            # says who did not come when its own ends.
            reply = _recv(sock, None if deadline is None else deadline + _REASON_GRACE)
        except TimeoutError:
            raise RpcTimeoutError(
                f"init_rpc: rank {me.rank} joined the rendezvous at {address[0]}:{address[1]}"
                f" but the group was not complete within {timeout:g} s"
            ) from None
        except (OSError, ValueError) as error:
            raise RendezvousError(
                f"init_rpc: the rendezvous at {address[0]}:{address[1]} failed: {error}"
            ) from None
    if "error" in reply:
        kind = RpcTimeoutError if reply.get("timeout") else RendezvousError
        raise kind(f"init_rpc: {reply['error']}")
    records: list[dict[str, Any]] = reply["members"]
    secret = reply.get("secret")
    return [Member(**record) for record in records], str(secret) if secret else None


# Seconds a joined rank waits past its own deadline for rank 0's verdict.
_REASON_GRACE = 2.0


def _connect(address: tuple[str, int], deadline: float | None) -> socket.socket | None:
    while True:
        try:
            sock = socket.create_connection(address, timeout=_left(deadline) or None)
        except OSError:
            if deadline is not None and time.monotonic() + _RETRY_S >= deadline:
                return None
            time.sleep(_RETRY_S)  # rank 0 is not listening yet: retry until the deadline
            continue
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock


# -- framing ------------------------------------------------------------------------------


def _left(deadline: float | None) -> float | None:
    if deadline is None:
        return None
    return max(deadline - time.monotonic(), 0.001)


def _send(sock: socket.socket, message: dict[str, object]) -> None:
    data = json.dumps(message).encode()
    sock.sendall(_LENGTH.pack(len(data)) + data)


def _send_quietly(sock: socket.socket, message: dict[str, object]) -> None:
    with contextlib.suppress(OSError):
        _send(sock, message)


def _record_steps() -> Steps[dict[str, Any]]:
    """Read one length-prefixed JSON object (never anything that could run code)."""
    prefix = yield _LENGTH.size
    (length,) = _LENGTH.unpack(prefix)
    if length > _MAX_MESSAGE:
        # Most often not a rendezvous at all: another server on that port ("HTTP"...).
        raise ValueError(
            f"the peer does not speak actormesh's RPC rendezvous (it sent {bytes(prefix)!r} "
            f"where a message length belongs): is another server listening on that port?"
        )
    message = json.loads((yield length))
    if not isinstance(message, dict):
        raise ValueError("malformed rendezvous message")
    return message


def _recv(sock: socket.socket, deadline: float | None) -> dict[str, Any]:
    sock.settimeout(_left(deadline))
    return run_blocking(sock, _record_steps())
