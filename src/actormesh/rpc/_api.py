"""The functions of ``actormesh.rpc``: joining, calling, and leaving the group."""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future as ConcurrentFuture
from pickle import PickleBuffer
from typing import Any

import torch

from .._core import headers
from .._exceptions import SerializationError
from .._hosts import Runtime
from .._transport import dual_address, format_tcp, listening_socket, route_source
from ._agent import Agent
from ._dist_autograd import Context, Engine, current_context, engine
from ._errors import RpcTimeoutError
from ._execute import function_name, run_function, store_outcome
from ._future_errors import fail
from ._options import (
    DEFAULT_INIT_METHOD,
    DEFAULT_NUM_WORKER_THREADS,
    DEFAULT_RPC_TIMEOUT_SEC,
    DEFAULT_SHUTDOWN_TIMEOUT,
    UNSET_RPC_TIMEOUT,
    BackendType,
    check_options,
    resolve_timeout,
)
from ._rendezvous import (
    Member,
    RendezvousError,
    file_init_path,
    file_rendezvous,
    parse_init_method,
    rendezvous,
)
from ._replies import decode_reply
from ._rref import RRef
from ._rref_table import ForkTable, OwnerEntry, OwnerTable, forks
from ._shutdown import Board, graceful_shutdown, start_watches, teardown
from ._state import RpcState, current, current_or_none, set_current
from ._wire import EncodeSession, encode
from ._worker_info import WorkerInfo, check_worker_name

__all__ = [
    "get_rpc_timeout",
    "get_worker_info",
    "init_rpc",
    "is_available",
    "remote",
    "rpc_async",
    "rpc_sync",
    "shutdown",
]

_init_lock = threading.Lock()
_HOST_TIMEOUT_S = 30.0
# How many times this process has called init_rpc: the keys of a file:// rendezvous are
# per call, as torch prefixes its store keys, so a group that re-initializes on the
# same file never reads the last round's address.
_init_count = 0


def is_available() -> bool:
    """True: the RPC layer needs nothing beyond actormesh and torch."""
    return True


# -- joining --------------------------------------------------------------------------------


def init_rpc(
    name: str,
    backend: Any = None,
    rank: int = -1,
    world_size: int | None = None,
    rpc_backend_options: Any = None,
) -> None:
    """Join the RPC group as worker ``name`` with id ``rank``.

    Every one of the ``world_size`` processes calls this; it returns once all have met
    at the rendezvous (run by rank 0 at ``MASTER_ADDR:MASTER_PORT`` or the options'
    ``tcp://`` init method). Processes may be started any way, on any hosts that reach
    rank 0: workers of one host talk over Unix sockets, others over TCP on the interface
    that reaches rank 0, authenticated with the job's secret (``ACTORMESH_SECRET`` when
    every worker has it; else rank 0's, handed out at the rendezvous).

    Args:
        name: unique name of this worker (letters, digits, ``_``, ``:``, ``-``).
        backend: ``None`` or ``BackendType.TENSORPIPE`` (torch's); both use actormesh.
        rank: unique id in ``0..world_size-1`` (default: the ``RANK`` variable).
        world_size: number of workers (default: the ``WORLD_SIZE`` variable).
        rpc_backend_options: ``TensorPipeRpcBackendOptions`` (actormesh's or torch's):
            ``rpc_timeout`` (also the rendezvous limit), ``init_method``,
            ``num_worker_threads``.

    Raises:
        RendezvousError: a name or rank is used twice, or world sizes differ.
        RpcTimeoutError: not every worker arrived within ``rpc_timeout``.
        RuntimeError: RPC is already initialized in this process.
    """
    if current_or_none() is not None:
        raise RuntimeError("RPC is already initialized in this process")
    name = check_worker_name(name)
    if backend is not None and not isinstance(getattr(backend, "name", None), str):
        raise TypeError(f"Argument backend must be a member of BackendType, not {backend!r}")
    if backend is not None and backend.name != BackendType.TENSORPIPE.name:
        raise TypeError(f"unsupported RPC backend {backend!r}; use BackendType.TENSORPIPE")
    options = rpc_backend_options
    check_options(options, backend)
    rpc_timeout = float(getattr(options, "rpc_timeout", DEFAULT_RPC_TIMEOUT_SEC))
    init_method = str(getattr(options, "init_method", DEFAULT_INIT_METHOD))
    threads = int(getattr(options, "num_worker_threads", DEFAULT_NUM_WORKER_THREADS))
    rank, world_size = _rank_and_size(rank, world_size)
    path = file_init_path(init_method)
    address = parse_init_method(init_method) if path is None else ("127.0.0.1", 0)
    global _init_count
    with _init_lock:
        if current_or_none() is not None:
            raise RuntimeError("RPC is already initialized in this process")
        generation, _init_count = _init_count, _init_count + 1
        server, store = None, None
        if path is not None and world_size > 1:
            address, server, store = file_rendezvous(
                path, rank, world_size, generation, rpc_timeout or None
            )
        try:
            runtime = Runtime.get()
            _stop_runtime_at_exit(runtime)
            agent = Agent()
            mesh_id = f"rpc-{uuid.uuid4().hex[:16]}"
            _host(runtime, agent, mesh_id, name, rank)
            # Peers on other hosts reach this one over TCP where it reaches rank 0; the
            # socket is bound now (its port goes in our record) and listens once the
            # secret is known.
            listening = listening_socket(route_source(format_tcp(*address)))
        except BaseException:
            if server is not None:
                server.close()
            raise
        host, port = listening.getsockname()[:2]
        me = Member(
            name=name,
            rank=rank,
            world_size=world_size,
            host=socket.gethostname(),
            pid=os.getpid(),
            path=dual_address(runtime.listen_path, format_tcp(host, port)),
            agent=mesh_id,
        )
        try:
            # The job's secret: everyone's own when set, else rank 0's (handed out).
            mine = runtime.secret if runtime.config.secret else None
            handed = runtime.secret if rank == 0 and mine is None else None
            members, shared = rendezvous(
                me, address, rpc_timeout or None, runtime.limits, handed, server
            )
            if mine is None and rank != 0:
                if shared is None:
                    raise RendezvousError(
                        "init_rpc: rank 0 has ACTORMESH_SECRET set and this worker has not; "
                        "give every worker the same ACTORMESH_SECRET"
                    )
                runtime.use_secret(shared)
            runtime.listen_tcp(sock=listening)
        except BaseException:
            listening.close()
            if server is not None:
                server.close()
            _unhost(runtime, mesh_id)
            raise
        state = RpcState(runtime, rank, members, rpc_timeout, threads)
        state.store = store
        state.tables.update(
            autograd=Engine(state),
            owners=OwnerTable(state),
            forks=ForkTable(state),
            barrier=Board(state),
        )
        set_current(state)
        runtime.call_soon(agent.activate, state)
        start_watches(state)


_exit_hooks: set[int] = set()


def _stop_runtime_at_exit(runtime: Runtime) -> None:
    """Stop the runtime's event loop before the interpreter finalizes.

    Peers of an RPC group exit at about the same time; a connection closing while this
    interpreter finalizes would wake the I/O thread's loop, which then crashes taking the
    GIL of a finalized interpreter. Registered after the runtime's own exit hook, this
    runs first: it shuts the runtime down, which stops and joins that loop's thread.
    """
    if id(runtime) in _exit_hooks:
        return
    _exit_hooks.add(id(runtime))

    def stop() -> None:
        runtime.shutdown()  # stops the runtime's loop thread too

    atexit.register(stop)


def _rank_and_size(rank: int, world_size: int | None) -> tuple[int, int]:
    if rank is None or rank < 0:
        text = os.environ.get("RANK")
        if text is None:
            raise ValueError("init_rpc needs a rank (or the RANK environment variable)")
        rank = int(text)
    if world_size is None:
        text = os.environ.get("WORLD_SIZE")
        if text is None:
            raise ValueError(
                "init_rpc needs a world_size (or WORLD_SIZE); groups whose members come "
                "and go (torch's dynamic groups) are not supported"
            )
        world_size = int(text)
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside 0..{world_size - 1} (world_size {world_size})")
    return rank, world_size


def _host(runtime: Runtime, agent: Agent, mesh_id: str, name: str, rank: int) -> None:
    built = threading.Event()
    errors: list[BaseException] = []

    def done(error: BaseException | None) -> None:
        if error is not None:
            errors.append(error)
        built.set()

    runtime.hosting.host(mesh_id, rank, lambda: agent, name, {"rank": rank}, done)
    if not built.wait(_HOST_TIMEOUT_S):
        raise RpcTimeoutError("init_rpc: the RPC agent did not start")
    if errors:
        raise errors[0]


def _unhost(runtime: Runtime, mesh_id: str) -> None:
    with contextlib.suppress(Exception):
        own = runtime.connection(runtime.listen_path)
        runtime.send(own, headers.StopMesh(0, mesh_id), [])


# -- leaving --------------------------------------------------------------------------------


def shutdown(graceful: bool = True, timeout: float = DEFAULT_SHUTDOWN_TIMEOUT) -> None:
    """Leave the RPC group.

    With ``graceful`` (the default), wait until every worker has called ``shutdown`` and
    all outstanding work everywhere is done. A worker that died, or left with
    ``graceful=False``, fails the wait at once with ``WorkerDiedError`` (torch would
    hang); ``timeout`` seconds (0: no limit, as in torch) bound it otherwise. The local
    RPC state is torn down in every case, so ``init_rpc`` may be called again.
    """
    state = current()
    try:
        if graceful:
            graceful_shutdown(state, timeout or None)
    finally:
        teardown(state)


# -- information ----------------------------------------------------------------------------


def get_worker_info(worker_name: str | int | None = None) -> WorkerInfo:
    """The ``WorkerInfo`` of the named worker (a name or a rank), or of this worker."""
    state = current()
    if worker_name is None:
        return state.me
    return _worker(state, worker_name)


def get_rpc_timeout() -> float:
    """The default RPC timeout in seconds (0: no limit)."""
    return current().rpc_timeout


def _set_rpc_timeout(rpc_timeout: float) -> None:
    """Change the default RPC timeout of this worker."""
    current().rpc_timeout = float(rpc_timeout)


def _worker(state: RpcState, to: object) -> WorkerInfo:
    try:
        return state.worker(to)
    except TypeError as error:
        raise ValueError(str(error)) from None
    except ValueError as error:
        # torch reports an unknown destination as a RuntimeError.
        raise RuntimeError(str(error)) from None


# -- calling --------------------------------------------------------------------------------


def rpc_sync(
    to: str | int | WorkerInfo,
    func: Callable[..., Any],
    args: tuple[Any, ...] | list[Any] | None = None,
    kwargs: dict[str, Any] | None = None,
    timeout: float = UNSET_RPC_TIMEOUT,
) -> Any:
    """Run ``func(*args, **kwargs)`` on worker ``to`` and return its value.

    ``func`` may be a builtin (``torch.add``), a function, a class (constructed remotely)
    or anything defined in the main script. Inside a distributed autograd context the
    call is recorded for the backward pass.

    Raises:
        RpcTimeoutError: no answer within ``timeout`` seconds (default: the RPC timeout).
        WorkerDiedError: the worker died before answering.
        Exception: what ``func`` raised, as its original type with the remote traceback.
    """
    state = current()
    if state.runtime.in_loop_thread():
        raise RuntimeError(
            "rpc_sync() would block actormesh's event-loop thread (in a Future callback, "
            "say), where it would deadlock; use rpc_async() there"
        )
    dest = _worker(state, to)
    waiter = _Waiter()
    ctx = current_context()
    _send_call(state, dest, func, args, kwargs, timeout, "rpc_sync", ctx, waiter.done)
    reply = waiter.wait()
    return decode_reply(state, reply, dest.id, ctx)


_thread_local_var = threading.local()


@contextlib.contextmanager
def _wait_all() -> Iterator[None]:
    """torch's private ``rpc._wait_all()``: on leaving the block, wait for every
    ``rpc_async`` future this thread started in it (and raise the first error)."""
    _thread_local_var.future_list = []
    try:
        yield
    finally:
        try:
            torch.futures.wait_all(_thread_local_var.future_list)
        finally:
            del _thread_local_var.future_list


def rpc_async(
    to: str | int | WorkerInfo,
    func: Callable[..., Any],
    args: tuple[Any, ...] | list[Any] | None = None,
    kwargs: dict[str, Any] | None = None,
    timeout: float = UNSET_RPC_TIMEOUT,
) -> torch.futures.Future[Any]:
    """Like ``rpc_sync`` but returns at once with a ``torch.futures.Future``.

    As with torch, the future completes on one of the worker's RPC callback threads, so
    its callbacks (``then``, ``add_done_callback``) run there and may themselves wait for
    other RPCs.
    """
    state = current()
    dest = _worker(state, to)
    future: torch.futures.Future[Any] = torch.futures.Future()
    ctx = current_context()

    def settle(ok: bool, reply: Any) -> None:
        try:
            if not ok:
                raise reply
            value = decode_reply(state, reply, dest.id, ctx)
        except BaseException as error:
            fail(future, error)  # (wait_all stops here, as at torch's failed futures)
        else:
            future.set_result(value)

    def done(ok: bool, reply: Any) -> None:
        state.complete_later(lambda: settle(ok, reply))

    _send_call(state, dest, func, args, kwargs, timeout, "rpc_async", ctx, done)
    collected = getattr(_thread_local_var, "future_list", None)
    if collected is not None:
        collected.append(future)
    return future


def remote(
    to: str | int | WorkerInfo,
    func: Callable[..., Any],
    args: tuple[Any, ...] | list[Any] | None = None,
    kwargs: dict[str, Any] | None = None,
    timeout: float = UNSET_RPC_TIMEOUT,
) -> RRef[Any]:
    """Run ``func(*args, **kwargs)`` on worker ``to``, which keeps the result; returns an
    ``RRef`` to it at once.

    A failure of ``func`` or a timeout of the creation surfaces on ``to_here()``.
    """
    state = current()
    dest = _worker(state, to)
    args, kwargs = _normalize(func, args, kwargs, timeout)
    ctx = current_context()
    if dest.id == state.me.id:
        entry = OwnerEntry(state.new_id())
        entry.created = True
        state.pool.submit(run_function, func, args, kwargs, ctx, store_outcome(entry))
        return RRef._make(state, entry.rref_id, state.me, None, entry, confirmed=True)
    rref_id, fork_id = state.new_id(), state.new_id()
    table = forks(state)
    table.register(fork_id, rref_id, dest.id)
    try:
        key, payload, buffers = _encode_call(state, dest, func, args, kwargs, ctx)
    except BaseException:
        table.forget(fork_id)
        raise
    rref: RRef[Any] = RRef._make(state, rref_id, dest, fork_id, None, confirmed=False)
    rref._creation = ConcurrentFuture()
    state.request(
        dest.id,
        "remote",
        (state.me.id, ctx.id if ctx else 0, key, rref_id, fork_id, PickleBuffer(payload), *buffers),
        rref._created,
        what=f"remote({function_name(func)}) on {dest}",
        timeout=resolve_timeout(timeout, state.rpc_timeout),
    )
    return rref


def _send_call(
    state: RpcState,
    dest: WorkerInfo,
    func: Callable[..., Any],
    args: Any,
    kwargs: Any,
    timeout: float,
    mode: str,
    ctx: Context | None,
    on_done: Callable[[bool, Any], None],
) -> None:
    args, kwargs = _normalize(func, args, kwargs, timeout)
    seconds = resolve_timeout(timeout, state.rpc_timeout)
    key, payload, buffers = _encode_call(state, dest, func, args, kwargs, ctx)
    state.request(
        dest.id,
        "run",
        (state.me.id, ctx.id if ctx else 0, key, PickleBuffer(payload), *buffers),
        on_done,
        what=f"{mode}({function_name(func)}) to {dest}",
        timeout=seconds,
        direct_reply=True,
    )


def _normalize(
    func: Any, args: Any, kwargs: Any, timeout: Any
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call's ``args`` and ``kwargs`` as sent, after checking what the caller gave
    (here, at the call site, rather than as an error from the callee)."""
    if not callable(func):
        raise TypeError("function should be callable.")  # torch's words
    if args is not None and not isinstance(args, tuple | list):
        raise TypeError(f"args must be a tuple or a list, not {type(args).__name__}")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise TypeError(f"kwargs must be a dict, not {type(kwargs).__name__}")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)):
        raise TypeError(f"timeout must be a number of seconds, not {type(timeout).__name__}")
    return (tuple(args) if args is not None else ()), (dict(kwargs) if kwargs else {})


def _encode_call(
    state: RpcState,
    dest: WorkerInfo,
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    ctx: Context | None,
) -> tuple[Any, bytes, list[PickleBuffer]]:
    session = EncodeSession(state, dest.id, ctx)
    try:
        payload, buffers = encode((func, args, kwargs), session)
    except SerializationError as error:
        where = _unpicklable_part(state, dest, func, args, kwargs)
        # The same class: a FuturePickleError stays a RuntimeError, as torch's.
        raise type(error)(f"cannot send {where} to {dest}: {error}") from error
    key = None
    if ctx is not None:
        key = engine(state).record_send(ctx, dest.id, session.grad_tensors)
    return key, payload, buffers


def _unpicklable_part(
    state: RpcState, dest: WorkerInfo, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> str:
    parts = [
        (f"the function {function_name(func)}", func),
        *((f"args[{i}]", value) for i, value in enumerate(args)),
        *((f"kwargs[{key!r}]", value) for key, value in kwargs.items()),
    ]
    for label, value in parts:
        probe = EncodeSession(state, dest.id)
        try:
            encode(value, probe)
        except Exception:
            return label
        finally:
            probe.rollback()
    return "the call"


class _Waiter:
    """One blocked ``rpc_sync`` caller; released on the loop thread with the outcome."""

    __slots__ = ("_lock", "_ok", "_value")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._ok = False
        self._value: Any = None

    def done(self, ok: bool, value: Any) -> None:
        self._ok, self._value = ok, value
        self._lock.release()

    def wait(self) -> Any:
        self._lock.acquire()
        if not self._ok:
            raise self._value
        return self._value
