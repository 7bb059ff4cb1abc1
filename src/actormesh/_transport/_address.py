"""Addresses: where a process listens, as one string that names the transport too.

``"tcp://host:port"`` is a TCP listener (across hosts, authenticated); ``"unix:/path"``,
``"@name"`` or a plain path is a Unix socket (same host, shared memory allowed). A process
reachable both ways has a *dual* address, ``"<unix>|tcp://host:port|<host id>"``: a
caller on the same host (same boot and network namespace: the host id) takes the Unix
socket, any other the TCP one (``route``). Mesh references carry these strings, so a
reference names how to reach each process from anywhere that can.

Worker loops (Monarch's ``run_worker_loop_forever``) are given addresses in Monarch's
spelling (``tcp://``, ``ipc://``, an inherited socket ``tcp://host:fdN``, an alias
``DIAL@BIND``, a proc id in front): ``parse_worker_address`` reads them all, in this one
place, and resolves no name (a network namespace may have no DNS at all).
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import ipaddress
import os
import re
import socket
import stat
from typing import Literal

from ._tcp import HANDSHAKE_TIMEOUT, connect_tcp, format_tcp, listening_socket, parse_tcp
from ._unix import _kernel_name, connect_unix, is_abstract

__all__ = [
    "Endpoint",
    "WorkerAddress",
    "bind_socket",
    "connect_address",
    "dual_address",
    "host_id",
    "is_ip_literal",
    "is_tcp",
    "parse_worker_address",
    "route",
    "tcp_part",
    "unix_part",
    "unix_path",
]


@functools.cache
def host_id() -> str:
    """What tells this host from others: its boot and its network namespace.

    Processes with the same id reach each other's Unix sockets (abstract names live in
    the network namespace); others, only TCP.
    """
    try:
        with open("/proc/sys/kernel/random/boot_id") as boot:
            boot_id = boot.read().strip()
    except OSError:
        boot_id = socket.gethostname()
    try:
        netns = os.stat("/proc/self/ns/net").st_ino
    except OSError:
        netns = 0
    return f"{boot_id}.{netns}"


def dual_address(unix: str, tcp: str) -> str:
    """The address of a process of this host that listens at ``unix`` and ``tcp``."""
    return f"{unix}|{tcp}|{host_id()}"


def route(address: str) -> str:
    """The one address to dial from here: of a dual address, the Unix socket on its own
    host and the TCP listener elsewhere; any other address as it is."""
    if "|" not in address:
        return address
    unix, tcp, host = address.split("|", 2)
    return unix if host == host_id() else tcp


def tcp_part(address: str) -> str | None:
    """The TCP address of a TCP or dual address (``None`` for a Unix-only one)."""
    if is_tcp(address):
        return address
    parts = address.split("|")
    return parts[1] if len(parts) == 3 else None


def unix_part(address: str) -> str:
    """The Unix socket path of a Unix or dual address."""
    return unix_path(address.split("|", 1)[0])


def is_tcp(address: str) -> bool:
    """True for a ``tcp://`` address."""
    return address.startswith("tcp://")


def unix_path(address: str) -> str:
    """The socket path of a Unix address (``"unix:/p"`` or ``"/p"``)."""
    return address.removeprefix("unix:")


def connect_address(
    address: str, *, secret: str | None = None, timeout: float = HANDSHAKE_TIMEOUT
) -> socket.socket:
    """A connected (blocking) socket to the listener at ``address`` (routed, if dual).

    TCP connections are authenticated with ``secret`` before this returns.

    Raises:
        AuthenticationError: a TCP peer that is not part of this job, or no secret.
        OSError: the listener cannot be reached.
    """
    address = route(address)
    if is_tcp(address):
        host, port = parse_tcp(address)
        return connect_tcp(host, port, secret=secret or "", timeout=timeout)
    return connect_unix(unix_path(address))


# -- worker-loop addresses (Monarch's spelling) -------------------------------------------------

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
# "@" that starts another address: followed by a scheme ("tcp://", "ipc://", "unix:") or by
# "host:port" (the proc id of a ProcAddr is never followed by a colon).
_PART = re.compile(r"@(?=[A-Za-z][A-Za-z0-9+.-]*:|\[|[0-9])")
_PROC_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*(<[A-Za-z0-9_.-]*>)?$")
_FD_PORT = re.compile(r"^fd([0-9]+)$")
_WILDCARDS = ("*", "0.0.0.0", "::")


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """One side of a worker address: a TCP ``host:port``, an inherited TCP socket
    (``host:fdN``) or a Unix socket ``path``.

    Attributes:
        transport: ``"tcp"`` or ``"unix"``.
        host: the TCP host as written (an IP, a name, or ``*``); ``""`` for Unix.
        port: the TCP port; ``None`` for an inherited socket or Unix.
        fd: the descriptor of an inherited, already bound TCP socket (``tcp://host:fdN``).
        path: the Unix socket's path (``@name``: abstract).
    """

    transport: Literal["tcp", "unix"]
    host: str = ""
    port: int | None = None
    fd: int | None = None
    path: str = ""

    @property
    def address(self) -> str:
        """The address as actormesh dials it: ``tcp://host:port`` or ``unix:path``.

        Raises:
            ValueError: an inherited socket (``fdN``) or a wildcard host, which name no
                place to dial.
        """
        if self.transport == "unix":
            return f"unix:{self.path}"
        if self.port is None:
            raise ValueError(
                f"tcp://{self.host}:fd{self.fd} is a socket the worker inherits; dial the "
                "port it is bound to (tcp://HOST:PORT)"
            )
        if self.host in _WILDCARDS:
            raise ValueError(
                f"{self.host!r} is no address to dial: give the worker's own address "
                f"(tcp://HOST:{self.port}), or serve at tcp://HOST:{self.port}@tcp://"
                f"0.0.0.0:{self.port}"
            )
        return format_tcp(self.host, self.port)


@dataclasses.dataclass(frozen=True)
class WorkerAddress:
    """Where a worker loop serves, parsed (``parse_worker_address``).

    Attributes:
        text: the address as written.
        dial: where an owner reaches the worker.
        bind: where the worker listens (the same as ``dial`` unless an alias
            ``DIAL@BIND`` was given).
        proc_id: the proc id of a ``<proc-id>@<address>`` form (Monarch's ProcAddr); it
            names the worker and is otherwise not used.
    """

    text: str
    dial: Endpoint
    bind: Endpoint
    proc_id: str | None = None


def parse_worker_address(text: str) -> WorkerAddress:
    """Parse a worker loop's address, in any form Monarch's worker loops accept.

    - ``tcp://HOST:PORT`` (``HOST`` an IPv4 address, ``[IPv6]``, or a name; ``*`` or
      ``0.0.0.0``: every interface, to serve only), or ``HOST:PORT`` without the scheme;
    - ``tcp://HOST:fdN``: serve on descriptor ``N``, a TCP socket the worker inherited
      already bound (and maybe listening), so its port was known before it started;
    - ``ipc://PATH`` (also ``unix:PATH``): a Unix socket (``@NAME``: an abstract one);
    - ``DIAL@BIND``, two of the above: listen at ``BIND`` (a wildcard, say) and be
      reached at ``DIAL``; an owner that attaches dials ``DIAL``;
    - ``PROC_ID@ADDRESS`` (Monarch's ``service<uid>@tcp://...``), with either form.

    Nothing is resolved: host names stay as written (see ``bind_socket``).

    Raises:
        ValueError: not one of these forms, with what was wrong.
    """
    if not isinstance(text, str):
        raise TypeError(f"a worker address is a string, not {type(text).__name__}")
    parts = _PART.split(text.strip())
    proc_id = None
    if len(parts) > 1 and not _SCHEME.match(parts[0]) and ":" not in parts[0]:
        proc_id, *parts = parts
        if not _PROC_ID.match(proc_id):
            raise ValueError(
                f"{proc_id!r} in worker address {text!r} is no proc id (NAME or NAME<UID>)"
            )
    if not parts or not parts[0] or len(parts) > 2:
        raise ValueError(
            f"worker address {text!r} is not ADDRESS, DIAL@BIND or PROC_ID@ADDRESS "
            "(ADDRESS: tcp://HOST:PORT, tcp://HOST:fdN or ipc://PATH)"
        )
    dial = _endpoint(parts[0], text)
    bind = _endpoint(parts[-1], text)
    if dial.transport != bind.transport:
        raise ValueError(f"worker address {text!r} binds one transport and dials another")
    if len(parts) == 2 and dial.fd is not None:
        raise ValueError(f"the dial side of {text!r} cannot be an inherited socket (fdN)")
    return WorkerAddress(text, dial, bind, proc_id)


def _endpoint(part: str, text: str) -> Endpoint:
    scheme = _SCHEME.match(part)
    name = scheme.group(1).lower() if scheme else ""
    after = part[scheme.end() :] if scheme else part
    if name in ("ipc", "unix"):
        path = after.removeprefix("//")
        if not path:
            raise ValueError(f"worker address {text!r} names no socket path after {name}:")
        return Endpoint("unix", path=path)
    if after.startswith("//"):
        if name != "tcp":
            raise ValueError(
                f"worker address {text!r}: actormesh's worker loops serve tcp:// and ipc:// "
                f"addresses, not {name}://"
            )
        rest = after[2:]
    else:
        rest = part  # HOST:PORT, without a scheme
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port:
        raise ValueError(f"worker address {text!r} needs HOST:PORT, not {part!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"worker address {text!r}: write an IPv6 host in brackets ([{host}])")
    fd = _FD_PORT.match(port)
    if fd is not None:
        return Endpoint("tcp", host=host, fd=int(fd.group(1)))
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"worker address {text!r}: {port!r} is no port (0-65535) nor fdN")
    return Endpoint("tcp", host=host, port=int(port))


def is_ip_literal(host: str) -> bool:
    """True for an IPv4 or IPv6 address (no name to resolve)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _bind_unix(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            sock.bind(_kernel_name(path))
        except OSError as error:
            # A socket file nobody listens at any more (its process was killed): reuse it.
            if error.errno != errno.EADDRINUSE or is_abstract(path) or not _stale(path):
                raise
            os.unlink(path)
            sock.bind(path)
        sock.listen(1024)
    except BaseException:
        sock.close()
        raise
    return sock


def _stale(path: str) -> bool:
    if not stat.S_ISSOCK(os.lstat(path).st_mode):
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(path)
        except ConnectionRefusedError:
            return True
        except OSError:
            return False
    return False


def bind_socket(endpoint: Endpoint) -> socket.socket:
    """A listening socket for ``endpoint``: bound afresh, or the inherited one (``fdN``),
    put in listening state if it was only bound.

    A wildcard host (``*``, ``0.0.0.0``, ``::``) binds every interface, ``localhost`` binds
    loopback; only another host name is looked up (the caller asked for it by name).

    Raises:
        ValueError: descriptor ``N`` is not a TCP socket.
        OSError: the address cannot be bound (in use, not this host's).
    """
    if endpoint.transport == "unix":
        return _bind_unix(endpoint.path)
    if endpoint.fd is not None:
        try:
            sock = socket.socket(fileno=endpoint.fd)
        except OSError as error:
            raise ValueError(f"fd{endpoint.fd} is no open socket: {error}") from None
        if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM:
            sock.detach()
            raise ValueError(f"fd{endpoint.fd} is not a TCP socket")
        sock.set_inheritable(False)
        if not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            sock.listen(1024)
        return sock
    assert endpoint.port is not None
    host = endpoint.host
    if host == "*":
        host = "0.0.0.0"
    elif host == "localhost":
        host = "127.0.0.1"
    elif not is_ip_literal(host):
        host = str(socket.getaddrinfo(host, endpoint.port, type=socket.SOCK_STREAM)[0][4][0])
    return listening_socket(host, endpoint.port)
