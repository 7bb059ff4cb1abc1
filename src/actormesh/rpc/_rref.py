"""``RRef``: a reference to a value that lives on one worker (its owner).

A user RRef (on any other worker) is one fork of the owner's value; the owner keeps the
value while any fork exists (see ``_rref_table``). RRefs travel only inside RPCs, where
pickling one creates a fork for the receiver.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from concurrent.futures import Future as ConcurrentFuture
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import torch

from ._dist_autograd import current_context
from ._errors import RpcNotInitialized, RpcTimeoutError
from ._execute import Deferred, is_async_execution
from ._future_errors import fail
from ._options import UNSET_RPC_TIMEOUT, resolve_timeout
from ._replies import decode_reply, remote_error
from ._rref_table import OwnerEntry, forks, owners
from ._state import current_or_none
from ._wire import EncodeSession, current_decode, register_reducer

if TYPE_CHECKING:
    from ._state import RpcState
    from ._worker_info import WorkerInfo

__all__ = ["RRef"]

T = TypeVar("T")
Id = tuple[int, int]


class RRef(Generic[T]):
    """A reference to a value on a (possibly) remote worker.

    ``RRef(value)`` makes a local RRef owned by this worker; ``remote()`` makes one owned
    by the worker that runs the function. Pass RRefs as RPC arguments or return values:
    the receiver gets a reference to the same value.

    Args:
        value: the value to reference (owned here).
        type_hint: accepted for compatibility with torch; unused.
    """

    __slots__ = (
        "__weakref__",
        "_confirmed",
        "_creation",
        "_entry",
        "_fork",
        "_id",
        "_owner",
        "_state",
        "_type",
    )

    def __init__(self, value: T, type_hint: Any = None) -> None:
        state = current_or_none()
        if state is None:
            raise RpcNotInitialized(
                "Current RPC agent is not set! Did you initialize the RPC framework (e.g. "
                "calling `actormesh.rpc.init_rpc`)?"
            )
        entry = OwnerEntry(state.new_id())
        entry.created = True
        entry.set_value(value)
        self._init(state, entry.rref_id, state.me, None, entry, confirmed=True)

    def _init(
        self,
        state: RpcState,
        rref_id: Id,
        owner: WorkerInfo,
        fork: Id | None,
        entry: OwnerEntry | None,
        *,
        confirmed: bool,
    ) -> None:
        self._state = state
        self._id = rref_id
        self._owner = owner
        self._fork = fork
        self._entry = entry
        self._confirmed = confirmed
        # For a user RRef made by remote(): the creation call's outcome, once known.
        self._creation: ConcurrentFuture[None] | None = None
        # The type of the value, once asked for (``_get_type``).
        self._type: torch.futures.Future[type] | None = None

    @classmethod
    def _make(
        cls,
        state: RpcState,
        rref_id: Id,
        owner: WorkerInfo,
        fork: Id | None,
        entry: OwnerEntry | None,
        *,
        confirmed: bool,
    ) -> RRef[Any]:
        rref: RRef[Any] = cls.__new__(cls)
        rref._init(state, rref_id, owner, fork, entry, confirmed=confirmed)
        return rref

    # -- identity -------------------------------------------------------------------------

    def is_owner(self) -> bool:
        """True on the worker that owns the value."""
        return self._entry is not None

    def owner(self) -> WorkerInfo:
        """The ``WorkerInfo`` of the owner."""
        return self._owner

    def owner_name(self) -> str:
        """The name of the owner."""
        return self._owner.name

    def confirmed_by_owner(self) -> bool:
        """True once the owner knows of this reference (always True on the owner)."""
        return self._entry is not None or self._confirmed

    # -- values ---------------------------------------------------------------------------

    def local_value(self) -> T:
        """The value itself; only on the owner.

        Raises:
            RuntimeError: called on a user (not the owner).
        """
        if self._entry is None:
            raise RuntimeError(
                f"For UserRRef(rref_id={_guid(self._id)}, fork_id={_guid(self._fork)}), "
                f"can't call localValue() on user {self._state.me}. Call it on owner "
                f"{self._owner}"
            )
        self._check_not_loop("local_value")
        value: T = self._entry.wait(None)
        return value

    def to_here(self, timeout: float = UNSET_RPC_TIMEOUT) -> T:
        """A copy of the value fetched from the owner (the value itself on the owner).

        Args:
            timeout: seconds to wait (default: the RPC timeout; 0: no limit).

        Raises:
            RpcTimeoutError: the value did not arrive in time.
            WorkerDiedError: the owner died.
            Exception: what the function that created the value raised.
        """
        state = self._state
        seconds = resolve_timeout(timeout, state.rpc_timeout)
        self._check_not_loop("to_here")
        if self._entry is not None:
            value: T = self._entry.wait(seconds)
            return value
        if state.closed:
            raise RpcNotInitialized(
                f"User RRef with RRefId={_guid(self._id)} and ForkId={_guid(self._fork)} has "
                "been deleted. Cannot call to_here() on it after deletion."
            )
        creation = self._creation
        if creation is not None and creation.done():
            error = creation.exception()
            if isinstance(error, RpcTimeoutError):
                raise RpcTimeoutError(
                    f"RRef creation via rpc.remote() to {self._owner} timed out, and the value "
                    f"may not exist on the owner: {error}"
                ) from error
            if error is not None:
                raise error
        fetched: T = self._fetch(seconds).result()
        return fetched

    def _get_type(self, timeout: float = UNSET_RPC_TIMEOUT, blocking: bool = True) -> Any:
        """The type of the value (asked of the owner once, then remembered).

        Args:
            timeout: seconds to wait for the owner (default: the RPC timeout).
            blocking: False returns a ``torch.futures.Future`` of the type instead.

        Raises:
            Exception: what creating the value raised, or a timeout (with ``blocking``).
        """
        future = self._type
        if future is None:
            if self._entry is not None:
                future = torch.futures.Future()
                try:
                    future.set_result(type(self.local_value()))
                except BaseException as error:
                    fail(future, error)
            else:
                from . import _api

                future = _api.rpc_async(self._owner, _type_on_owner, args=(self,), timeout=timeout)
            self._type = future
        return future.wait() if blocking else future

    def _get_future(self) -> torch.futures.Future[None]:
        """A future that completes when the owner has created the value (for an RRef
        made by ``remote()``; already complete otherwise)."""
        future: torch.futures.Future[None] = torch.futures.Future()
        creation = self._creation
        if creation is None:
            future.set_result(None)
            return future

        def done(outcome: ConcurrentFuture[None]) -> None:
            error = outcome.exception()
            if error is not None:
                fail(future, error)
            else:
                future.set_result(None)

        creation.add_done_callback(done)
        return future

    def _wait_created(self, timeout: float | None = None) -> None:
        """Wait until the owner has created the value (or raise why it could not)."""
        self._check_not_loop("_wait_created")
        if self._entry is not None:
            self._entry.wait(timeout)
        elif self._creation is not None:
            self._creation.result(timeout)

    def _fetch(self, seconds: float | None) -> ConcurrentFuture[Any]:
        state = self._state
        ctx = current_context()
        if ctx is not None:
            ctx.known.add(self._owner.id)
        future: ConcurrentFuture[Any] = ConcurrentFuture()
        owner = self._owner.id

        def done(ok: bool, reply: Any) -> None:
            if not ok:
                future.set_exception(reply)
                return
            try:
                value = decode_reply(state, reply, owner, ctx)
            except BaseException as error:
                future.set_exception(error)
            else:
                future.set_result(value)

        state.request(
            owner,
            "rref_get",
            (state.me.id, ctx.id if ctx is not None else 0, self._id),
            done,
            what=f"RRef.to_here() from {self._owner}",
            timeout=seconds,
        )
        return future

    def _check_not_loop(self, what: str) -> None:
        if self._state.runtime.in_loop_thread():
            raise RuntimeError(
                f"RRef.{what}() would block actormesh's event-loop thread (in a Future "
                "callback, say), where it would deadlock; wait for it outside the callback"
            )

    def backward(self, dist_autograd_ctx_id: int = -1, retain_graph: bool = False) -> None:
        """Run a backward pass from the value (a scalar tensor) on its owner.

        Args:
            dist_autograd_ctx_id: the distributed autograd context to run it in; -1 (the
                default) runs a plain local ``backward`` on the owner.
            retain_graph: as in ``torch.Tensor.backward``.
        """
        from . import _api

        if self._entry is None and dist_autograd_ctx_id == -1:
            raise RuntimeError("User RRefs require 'dist_autograd_ctx_id' to be specified")
        if self._entry is not None:
            _backward_on_owner(self, dist_autograd_ctx_id, retain_graph)
            return
        _api.rpc_sync(
            self._owner, _backward_on_owner, args=(self, dist_autograd_ctx_id, retain_graph)
        )

    # -- proxies --------------------------------------------------------------------------

    def rpc_sync(self, timeout: float = UNSET_RPC_TIMEOUT) -> Any:
        """A proxy: ``rref.rpc_sync().method(*args)`` runs ``value.method`` on the owner."""
        return _Proxy(self, "rpc_sync", timeout)

    def rpc_async(self, timeout: float = UNSET_RPC_TIMEOUT) -> Any:
        """A proxy whose method calls return a ``torch.futures.Future``."""
        return _Proxy(self, "rpc_async", timeout)

    def remote(self, timeout: float = UNSET_RPC_TIMEOUT) -> Any:
        """A proxy whose method calls return an ``RRef`` to the result, on the owner."""
        return _Proxy(self, "remote", timeout)

    # -- lifetime -------------------------------------------------------------------------

    def _created(self, ok: bool, value: Any) -> None:
        """The outcome of the ``remote()`` call that made this RRef (loop thread)."""
        creation = self._creation
        # Settled either way: the fork no longer counts as pending.
        forks(self._state).confirm(self._fork)
        if ok:
            self._confirmed = True
            if not value[0]:
                ok, value = False, remote_error(value[1])
        if creation is not None:
            if ok:
                creation.set_result(None)
            else:
                creation.set_exception(value)

    def __del__(self) -> None:
        fork = getattr(self, "_fork", None)
        if fork is None or getattr(self, "_entry", None) is not None:
            return
        state = self._state
        if state is current_or_none() and not state.closed:
            with contextlib.suppress(Exception):  # interpreter shutdown: nobody to tell
                forks(state).drop_later(fork)

    def __reduce__(self) -> Any:
        raise RuntimeError(
            "Can not pickle rref in python pickler, rref can only be pickled when using "
            "RPC (as an argument or a return value)"
        )

    def __repr__(self) -> str:
        if self._entry is not None:
            return f"OwnerRRef({_guid(self._id)})"
        return f"UserRRef(RRefId = {_guid(self._id)}, ForkId = {_guid(self._fork)})"

    __str__ = __repr__


RRef.__module__ = "actormesh.rpc"


class _Proxy:
    """``rref.rpc_sync()`` and friends: attribute access builds the remote method call."""

    __slots__ = ("_mode", "_rref", "_timeout")

    def __init__(self, rref: RRef[Any], mode: str, timeout: float) -> None:
        self._rref = rref
        self._mode = mode
        self._timeout = timeout

    def __getattr__(self, name: str) -> Callable[..., Any]:
        from . import _api

        api = getattr(_api, self._mode)
        rref, timeout = self._rref, self._timeout
        if self._mode == "remote":
            # As torch: the attribute is looked up on the value's type before the call,
            # so a missing one fails here rather than in a later to_here().
            getattr(rref._get_type(timeout), name)

        @functools.wraps(_invoke_on_rref)
        def method(*args: Any, **kwargs: Any) -> Any:
            return api(
                rref.owner(), _invoke_on_rref, args=(rref, name, args, kwargs), timeout=timeout
            )

        return method


def _guid(id_: Id | None) -> str:
    """torch's spelling of an RRef or fork id."""
    if id_ is None:
        return "GloballyUniqueId(None)"
    return f"GloballyUniqueId(created_on={id_[0]}, local_id={id_[1]})"


def _type_on_owner(rref: RRef[Any]) -> type:
    return type(rref.local_value())


def _backward_on_owner(rref: RRef[Any], context_id: int, retain_graph: bool) -> None:
    value = rref.local_value()
    if not isinstance(value, torch.Tensor):
        raise RuntimeError("RRef should contain a tensor for .backward()")
    if context_id == -1:
        torch.autograd.backward([value], retain_graph=retain_graph)
    else:
        from .autograd import backward

        backward(context_id, [value], retain_graph=retain_graph)


def _invoke_on_rref(rref: RRef[Any], name: str, args: tuple[Any, ...], kwargs: Any) -> Any:
    """Run ``rref.local_value().<name>(*args, **kwargs)`` on the owner."""
    method = getattr(rref.local_value(), name)
    result = method(*args, **kwargs)
    if is_async_execution(method):
        return Deferred(result)
    return result


# -- pickling inside RPCs -----------------------------------------------------------------


def _reduce(rref: RRef[Any], session: EncodeSession) -> Any:
    state: RpcState = session.state
    dest = session.dest
    if rref._entry is not None:
        # The fork keeps the entry listed until the receiver has it, even when the
        # receiver is this very process (which then drops the fork on arrival).
        child = state.new_id()
        table = owners(state)
        table.add_fork(rref._entry, child, dest)
        session.rollbacks.append(functools.partial(table.remove_fork, rref._id, child))
        return _rebuild, (rref._id, rref._owner.id, child)
    assert rref._fork is not None
    child = state.new_id()
    users = forks(state)
    users.add_child(rref._fork, child, dest)
    session.rollbacks.append(functools.partial(users.remove_child, child))
    return _rebuild, (rref._id, rref._owner.id, child)


def _rebuild(rref_id: Id, owner: int, fork: Id) -> RRef[Any]:
    session = current_decode()
    if session is None:
        raise RuntimeError("an RRef can only be unpickled inside an RPC")
    state: RpcState = session.state
    src = session.src
    assert fork is not None
    if owner == state.me.id:
        table = owners(state)
        entry = table.entries.get(rref_id)
        if entry is None:
            # Not created here yet: the message that creates it (a ``remote`` from its
            # creator) and this one came by different connections, and this one won (a
            # reply to this process' ``to_here`` holding an RRef the creator just made
            # here). Torch's owner makes the entry on first sight too; the value comes
            # with the creating message. No fork of this owner carried it: nothing to drop.
            entry = table.get_or_create(rref_id)
        else:
            # The object built here holds the entry itself: the fork that carried it (made
            # by this owner) can go. A user sender keeps its hold until it hears from us.
            table.remove_fork(rref_id, fork)
        if src != owner:
            state.post(src, "rref_accept", (state.me.id, fork))
        return RRef._make(state, rref_id, state.me, None, entry, confirmed=True)
    rref = RRef._make(state, rref_id, state.workers[owner], fork, None, confirmed=src == owner)
    forks(state).register(fork, rref_id, owner, confirmed=src == owner)
    if src != owner:
        session.confirmations.append(_confirm(state, rref, src))
    return rref


def _confirm(state: RpcState, rref: RRef[Any], parent: int) -> ConcurrentFuture[None]:
    """Register ``rref``'s fork with the owner, then let the parent release its hold.

    Returns a future that completes once the owner has answered (either way): a callee
    runs the function only after the forks in its arguments are confirmed, as torch's.
    """
    import weakref

    ref = weakref.ref(rref)
    fork = rref._fork
    confirmed: ConcurrentFuture[None] = ConcurrentFuture()

    def done(ok: bool, value: Any) -> None:
        alive = ref()
        if ok:
            forks(state).confirm(fork)
            if alive is not None:
                alive._confirmed = True
        state.post(parent, "rref_accept", (state.me.id, fork))
        confirmed.set_result(None)

    state.request(
        rref._owner.id,
        "rref_fork",
        (state.me.id, rref._id, fork),
        done,
        what=f"registering an RRef fork with {rref._owner}",
        timeout=None,
    )
    return confirmed


register_reducer(RRef, _reduce)
