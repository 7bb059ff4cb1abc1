"""Monarch's names that have no other home in actormesh (``actormesh.actor`` exports them).

Each behaves as in ``monarch.actor`` 0.7 where actormesh has the machinery, and says what
it does not do where it has none (telemetry, TLS transports, Monarch's gateway). See
docs/from-monarch.md for every name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import os
import subprocess
import sys
import threading
import types
import uuid
from concurrent.futures import Future as ConcurrentFuture
from typing import Any, NoReturn, ParamSpec, TypeVar

from .._hosts import Runtime, describe_exit
from .._transport import parse_worker_address
from ._bootstrap_command import BootstrapCommand, default_bootstrap_cmd
from ._future import Future, from_concurrent
from ._host_mesh import this_proc
from ._returns_future import returns_future
from ._telemetry import get_meter, span, traced

__all__ = [
    "BootstrapCommand",
    "ChannelTransport",
    "ProcId",
    "Uid",
    "attach",
    "config",
    "debug_controller",
    "default_bootstrap_cmd",
    "enable_transport",
    "get_meter",
    "get_or_spawn_controller",
    "returns_future",
    "run_worker_loop_forever",
    "run_worker_loop_until_shutdown",
    "shutdown_context",
    "span",
    "start_worker_loop_forever",
    "traced",
]

P = ParamSpec("P")
T = TypeVar("T")

# -- singleton controllers ---------------------------------------------------------------------

_CONTROLLERS: dict[str, Any] = {}
_CONTROLLERS_LOCK = threading.Lock()


def get_or_spawn_controller(name: str, actor_class: type, *args: Any, **kwargs: Any) -> Future[Any]:
    """The one actor called ``name`` of this process, spawned on ``this_proc()`` by the
    first call (with these arguments); later calls get the same actor mesh."""
    with _CONTROLLERS_LOCK:
        mesh = _CONTROLLERS.get(name)
        if mesh is None or mesh._state.stopped:
            mesh = _CONTROLLERS[name] = this_proc().spawn(name, actor_class, *args, **kwargs)
    runtime = Runtime.get()

    async def ready() -> Any:
        await mesh.initialized
        return mesh

    return from_concurrent(runtime, runtime.submit(ready()))


# -- futures from coroutines --------------------------------------------------------------------


# ``returns_future`` (imported above) runs its body where the Future is first observed.


def shutdown_context(host_timeout: float | None = None) -> Future[None]:
    """Stop every process this one started (its runtime ends; a later mesh starts anew).

    The shutdown starts at the call, as Monarch's does (dropping the Future does not
    stop it); ``.get()`` or ``await`` the Future to wait for its end.
    """
    del host_timeout
    runtime = Runtime.get()

    async def stop() -> None:
        children = runtime.children.owned()
        if children:
            await runtime.stop_processes(children, runtime.config.stop_grace)

    return from_concurrent(runtime, runtime.submit(stop()))


# -- transports, workers and gateways ---------------------------------------------------------


class ChannelTransport(enum.Enum):
    """Monarch's transports. actormesh picks its own: Unix sockets (abstract names) on one
    host, authenticated TCP across hosts; ``enable_transport`` accepts these names."""

    Local = "local"
    MetaQuicWithHostname = "metaquic-hostname"
    MetaQuicWithIpV6 = "metaquic-ipv6"
    MetaTlsWithHostname = "metatls-hostname"
    MetaTlsWithIpV6 = "metatls-ipv6"
    Quic = "quic"
    TcpWithHostname = "tcp-hostname"
    TcpWithLocalhost = "tcp-localhost"
    Tls = "tls"
    Unix = "unix"


def enable_transport(transport: ChannelTransport | str) -> None:
    """Accepted for Monarch's programs: actormesh chooses Unix sockets on one host and
    authenticated TCP across hosts by itself, whatever is asked here."""
    if not isinstance(transport, ChannelTransport | str):
        raise TypeError(f"a transport is a ChannelTransport or a string, not {transport!r}")


TRUST_ALL_CONNECTIONS = "trust_all_connections"


def run_worker_loop_forever(*, address: str, ca: Any = None, private_key: Any = None) -> NoReturn:
    """Serve as this host's agent for owners that attach at ``address``
    (``attach_to_workers``), one after another: when an owner goes away (exits, dies),
    what it started here ends and the next owner is served at the same address. This
    process exits when an owner shuts its host mesh down.

    ``address``: ``tcp://HOST:PORT``, ``tcp://HOST:fdN`` (a TCP socket this process
    inherited, bound already), ``ipc://PATH`` (a Unix socket), ``DIAL@BIND`` (listen at
    ``BIND``, say ``tcp://0.0.0.0:PORT``), each maybe after a proc id
    (``service<uid>@...``), as in Monarch.

    With the job's secret in ``ACTORMESH_SECRET``, the owner must prove it. Without,
    ``ca="trust_all_connections"`` (Monarch's setting) serves the first owner that
    connects, unauthenticated: anyone who reaches ``address`` first can run code here
    (docs/from-monarch.md). ``private_key`` and other ``ca`` values (Monarch's TLS files)
    are not used.

    Raises:
        RuntimeError: no ``ACTORMESH_SECRET``, and ``ca`` is not "trust_all_connections".
        ValueError: ``address`` is not a worker address.
        OSError: it cannot be listened at (``listen: ...``).
    """
    del private_key
    from .._hosts import serve_worker_loop

    parse_worker_address(address)
    serve_worker_loop(address, _secret(ca))


def run_worker_loop_until_shutdown(
    *, address: str, ca: Any = None, private_key: Any = None
) -> None:
    """``run_worker_loop_forever``, returning once the owner lets the agent go.

    The agent runs in a child process (an agent's process ends with its owner, taking
    its workers with it); this waits for it, and the child dies with this process.

    Raises:
        RuntimeError: as ``run_worker_loop_forever``; or the worker loop failed (it could
            not listen at ``address``, say: its error is on stderr).
    """
    del private_key
    process = _agent_process(address, ca)
    code = process.wait()
    if code != 0:
        raise RuntimeError(f"the worker loop at {address} failed: {describe_exit(code)}")


def start_worker_loop_forever(
    *, address: str, ca: Any = None, private_key: Any = None
) -> Future[None]:
    """``run_worker_loop_forever`` in a process of its own, started before this returns;
    the future observes it (dropping the future leaves it serving).

    As in Monarch, the worker's end is this process' end: once its owner lets it go (or
    goes away), this process exits with status 0, wherever its threads are. If the
    worker fails instead (it cannot listen at ``address``, say), the future raises.

    Raises:
        RuntimeError: as ``run_worker_loop_forever``.
    """
    del private_key
    process = _agent_process(address, ca)
    ended: ConcurrentFuture[None] = ConcurrentFuture()

    def wait() -> None:
        code = process.wait()
        if code == 0:
            _exit_with_worker()
        ended.set_exception(
            RuntimeError(f"the worker loop at {address} failed: {describe_exit(code)}")
        )

    threading.Thread(target=wait, name="actormesh-worker-loop", daemon=True).start()
    return from_concurrent(Runtime.get(), ended)


def _exit_with_worker() -> NoReturn:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(0)


def _agent_process(address: str, ca: Any) -> subprocess.Popen[bytes]:
    parse_worker_address(address)  # refuse here, not in the child
    _secret(ca)
    trust = TRUST_ALL_CONNECTIONS if ca == TRUST_ALL_CONNECTIONS else None
    code = (
        "from actormesh.actor import run_worker_loop_forever; "
        f"run_worker_loop_forever(address={address!r}, ca={trust!r})"
    )
    env = {**os.environ, "ACTORMESH_PARENT_PID": str(os.getpid())}  # it dies with us
    return subprocess.Popen([sys.executable, "-c", code], env=env)


def _secret(ca: Any) -> str | None:
    """The job's secret a worker loop checks, or None when it trusts all connections."""
    secret = os.environ.get("ACTORMESH_SECRET", "")
    if secret:
        return secret
    if ca == TRUST_ALL_CONNECTIONS:
        return None
    raise RuntimeError(
        "a worker loop needs the job's secret in ACTORMESH_SECRET (the controller that "
        "attaches must have the same), or ca='trust_all_connections' to serve whoever "
        "connects first, unauthenticated"
    )


def attach(addr: str) -> None:
    """Monarch's gateway client, which actormesh has no counterpart of.

    Raises:
        NotImplementedError: always; run the controller where it can reach its hosts.
    """
    raise NotImplementedError(
        f"actormesh has no gateway to attach through ({addr!r}); run the controller on a "
        "host that reaches the cluster, or attach_to_workers() directly"
    )


# -- identities ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Uid:
    """A unique id with an optional label."""

    label: str | None
    value: str

    @classmethod
    def anonymous(cls) -> Uid:
        return cls(None, uuid.uuid4().hex[:12])

    @classmethod
    def instance(cls, label: str | None = None) -> Uid:
        return cls(label, uuid.uuid4().hex[:12])

    @classmethod
    def instance_from_value(cls, value: int, label: str | None = None) -> Uid:
        """The instance id of a chosen 64-bit ``value`` (a launcher's ids for its hosts)."""
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**64:
            raise ValueError(f"a uid value is an int in [0, 2**64), not {value!r}")
        return cls(label, f"{value:016x}")

    @property
    def is_instance(self) -> bool:
        """True: every actormesh uid names one instance (there are no singletons)."""
        return True

    def __str__(self) -> str:
        return f"{self.label}<{self.value}>" if self.label else self.value


@dataclasses.dataclass(frozen=True)
class ProcId:
    """The id of a process."""

    uid: Uid

    @property
    def label(self) -> str | None:
        return self.uid.label

    @classmethod
    def from_string(cls, text: str) -> ProcId:
        label, _, value = text.partition("<")
        return cls(Uid(label or None, value.rstrip(">")) if value else Uid(None, label))

    def __str__(self) -> str:
        return str(self.uid)


# -- debugging and telemetry ----------------------------------------------------------------


def debug_controller() -> Any:
    """Monarch's debugger controller, which actormesh does not have yet.

    Raises:
        NotImplementedError: always (a breakpoint in an actor needs ``PYTHONBREAKPOINT=0``
            or an attached terminal for now).
    """
    raise NotImplementedError("actormesh has no remote debugger yet (docs/from-monarch.md)")


# -- configuration -----------------------------------------------------------------------------

config = types.SimpleNamespace(
    # Log records made inside actors name them: "[actor=<root>.<mod.Cls name{...}>] ..."
    # (see _actor_logs). Read at each record, so it may be changed at any time.
    prefix_python_logs_with_actor=True,
)
"""Monarch's configuration module, for programs that read it (actormesh's settings are
``actormesh.Config``)."""
