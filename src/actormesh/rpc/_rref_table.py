"""Distributed reference counting of RRefs: what owners and users keep, and why.

Owner side: one ``OwnerEntry`` per RRef with outstanding forks. It holds the value and
the set of forks (user references on other workers, each with its holder); when the last
fork is deleted the entry goes, and with it the value unless the owner's own program
still holds an ``RRef`` to it.

User side: one ``ForkState`` per user ``RRef`` object. Passing a user RRef to another
worker creates a *child* fork; until the receiver confirms that the owner knows the
child, the parent's own fork is kept (even if the program drops it), so the owner can
never see the parent's delete before the child's registration. Messages::

    remote      creator -> owner   registers the creator's fork, runs the function
    rref_fork   receiver -> owner  registers a child fork (the reply confirms it)
    rref_accept receiver -> parent the child is registered: the parent may let go
    rref_delete user -> owner      a fork is gone
    rref_get    user -> owner      ``to_here``: the value, once it exists

When a worker dies, owners forget the forks it held and users forget children sent to
it, so a dead worker never pins a value.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._agent import endpoint
from ._dist_autograd import engine
from ._errors import RpcTimeoutError, WorkerDiedError
from ._replies import encode_reply, failure_reply

if TYPE_CHECKING:
    from ._state import RpcState

__all__ = ["ForkTable", "OwnerEntry", "OwnerTable", "forks", "owners"]

Id = tuple[int, int]
_PENDING, _DONE, _FAILED = 0, 1, 2


class OwnerEntry:
    """The owner's record of one RRef: its value (once computed) and its forks."""

    __slots__ = ("_callbacks", "_cond", "_outcome", "created", "forks", "rref_id", "value")

    def __init__(self, rref_id: Id) -> None:
        self.rref_id = rref_id
        self.forks: dict[Id, int] = {}
        self.created = False  # the creating message arrived (or the value is local)
        self.value: Any = None
        self._outcome = _PENDING
        self._cond = threading.Condition()
        self._callbacks: list[Callable[[OwnerEntry], None]] = []

    def set_value(self, value: Any) -> None:
        """The value exists now."""
        self._finish(_DONE, value)

    def set_error(self, error: BaseException) -> None:
        """Creating the value failed with ``error``."""
        self._finish(_FAILED, error)

    def _finish(self, outcome: int, value: Any) -> None:
        with self._cond:
            if self._outcome != _PENDING:
                return
            self._outcome, self.value = outcome, value
            callbacks, self._callbacks = self._callbacks, []
            self._cond.notify_all()
        for callback in callbacks:
            callback(self)

    @property
    def failed(self) -> bool:
        """True if creating the value failed (``value`` is then the exception)."""
        return self._outcome == _FAILED

    def on_ready(self, callback: Callable[[OwnerEntry], None]) -> None:
        """Call ``callback(self)`` once the value or its error exists (maybe at once)."""
        with self._cond:
            if self._outcome == _PENDING:
                self._callbacks.append(callback)
                return
        callback(self)

    def wait(self, timeout: float | None) -> Any:
        """The value, waiting up to ``timeout`` seconds for it; raises its error."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._outcome != _PENDING, timeout):
                raise RpcTimeoutError(
                    f"the value of RRef {self.rref_id} was not created within {timeout:g} s"
                )
        if self._outcome == _FAILED:
            raise self.value
        return self.value


class OwnerTable:
    """The owner side: entries with forks, by RRef id."""

    def __init__(self, state: RpcState) -> None:
        self._state = state
        self._lock = threading.Lock()
        self.entries: dict[Id, OwnerEntry] = {}
        state.peer_listeners.append(self._peer_gone)

    def get_or_create(self, rref_id: Id) -> OwnerEntry:
        """The entry of ``rref_id``; a fork may be announced before its creating message."""
        with self._lock:
            entry = self.entries.get(rref_id)
            if entry is None:
                entry = self.entries[rref_id] = OwnerEntry(rref_id)
            return entry

    def add_fork(self, entry: OwnerEntry, fork_id: Id, holder: int) -> None:
        """Record a fork held by worker ``holder`` (re-listing the entry if needed)."""
        with self._lock:
            entry.forks[fork_id] = holder
            self.entries[entry.rref_id] = entry

    def remove_fork(self, rref_id: Id, fork_id: Id) -> None:
        """A fork is gone; the entry goes with its last fork, once created (an entry seen
        before its creating message stays for that message to find)."""
        with self._lock:
            entry = self.entries.get(rref_id)
            if entry is None:
                return
            entry.forks.pop(fork_id, None)
            if not entry.forks and entry.created:
                del self.entries[rref_id]

    def _peer_gone(self, rank: int, reason: str, died: bool) -> None:
        orphans = []
        with self._lock:
            for rref_id, entry in list(self.entries.items()):
                for fork_id in [f for f, holder in entry.forks.items() if holder == rank]:
                    del entry.forks[fork_id]
                if rref_id[0] == rank and not entry.created:
                    orphans.append(entry)
                if not entry.forks:
                    del self.entries[rref_id]
        for entry in orphans:
            entry.set_error(
                WorkerDiedError(
                    f"the creator of RRef {entry.rref_id} left before creating it: {reason}",
                    reason=reason,
                )
            )


class ForkState:
    """A user fork's bookkeeping, which outlives the ``RRef`` object when needed."""

    __slots__ = ("confirmed", "dropped", "owner", "pending", "rref_id")

    def __init__(self, rref_id: Id, owner: int, confirmed: bool) -> None:
        self.rref_id = rref_id
        self.owner = owner
        self.pending: dict[Id, int] = {}  # child fork -> worker it was sent to
        self.dropped = False
        self.confirmed = confirmed  # the owner knows of this fork


class ForkTable:
    """The user side: live forks of this process and their unconfirmed children."""

    def __init__(self, state: RpcState) -> None:
        self._state = state
        self._lock = threading.Lock()
        self.forks: dict[Id, ForkState] = {}
        self._children: dict[Id, Id] = {}  # child fork -> parent fork
        self._dropped: deque[Id] = deque()
        state.peer_listeners.append(self._peer_gone)

    def register(self, fork_id: Id, rref_id: Id, owner: int, confirmed: bool = False) -> None:
        """A user ``RRef`` object now exists for ``fork_id`` (``confirmed``: the owner
        already knows of it)."""
        with self._lock:
            self.forks[fork_id] = ForkState(rref_id, owner, confirmed)

    def confirm(self, fork_id: Id | None) -> None:
        """The owner has registered ``fork_id``."""
        with self._lock:
            fork = self.forks.get(fork_id) if fork_id is not None else None
            if fork is not None:
                fork.confirmed = True

    def forget(self, fork_id: Id) -> None:
        """Drop a fork the owner never heard of (its creating message was not sent)."""
        with self._lock:
            self.forks.pop(fork_id, None)

    def add_child(self, fork_id: Id, child_id: Id, dest: int) -> None:
        """Fork ``fork_id`` is being sent to ``dest`` as ``child_id``."""
        with self._lock:
            fork = self.forks.get(fork_id)
            if fork is None:
                raise RuntimeError(f"RRef fork {fork_id} was already deleted")
            fork.pending[child_id] = dest
            self._children[child_id] = fork_id

    def remove_child(self, child_id: Id) -> None:
        """The child is registered with the owner (or was never sent)."""
        with self._lock:
            parent = self._children.pop(child_id, None)
            fork = self.forks.get(parent) if parent is not None else None
            if fork is None:
                return
            fork.pending.pop(child_id, None)
            delete = self._release_if_done(parent, fork)  # type: ignore[arg-type]
        if delete is not None:
            self._send_delete(*delete)

    def drop_later(self, fork_id: Id) -> None:
        """``drop`` from a finalizer: takes no lock, the loop thread does the work.

        A garbage collection can run a finalizer on a thread that holds this table's
        lock (any allocation may collect); taking the lock there would deadlock.
        """
        self._dropped.append(fork_id)
        self._state.loop.call_soon_threadsafe(self._drain_dropped)

    def _drain_dropped(self) -> None:
        while self._dropped:
            self.drop(self._dropped.popleft())

    def drop(self, fork_id: Id) -> None:
        """The program no longer holds the ``RRef`` object of ``fork_id``."""
        with self._lock:
            fork = self.forks.get(fork_id)
            if fork is None:
                return
            fork.dropped = True
            delete = self._release_if_done(fork_id, fork)
        if delete is not None:
            self._send_delete(*delete)

    def _release_if_done(self, fork_id: Id, fork: ForkState) -> tuple[int, Id, Id] | None:
        if not fork.dropped or fork.pending:
            return None
        del self.forks[fork_id]
        return fork.owner, fork.rref_id, fork_id

    def _send_delete(self, owner: int, rref_id: Id, fork_id: Id) -> None:
        state = self._state
        state.post(owner, "rref_delete", (state.me.id, rref_id, fork_id))

    def _peer_gone(self, rank: int, reason: str, died: bool) -> None:
        deletes = []
        with self._lock:
            for fork_id, fork in list(self.forks.items()):
                if fork.owner == rank:
                    del self.forks[fork_id]
                    continue
                for child in [c for c, dest in fork.pending.items() if dest == rank]:
                    del fork.pending[child]
                    self._children.pop(child, None)
                delete = self._release_if_done(fork_id, fork)
                if delete is not None:
                    deletes.append(delete)
        for delete in deletes:
            self._send_delete(*delete)


def owners(state: RpcState) -> OwnerTable:
    """The owner table of ``state``."""
    table: OwnerTable = state.tables["owners"]
    return table


def forks(state: RpcState) -> ForkTable:
    """The fork table of ``state``."""
    table: ForkTable = state.tables["forks"]
    return table


# -- agent endpoints ------------------------------------------------------------------------


@endpoint("rref_fork")
def _handle_fork(state: RpcState, src: int, rref_id: Id, fork_id: Id) -> Any:
    table = owners(state)
    table.add_fork(table.get_or_create(rref_id), fork_id, src)
    reply = state.loop.create_future()
    reply.set_result(None)
    return reply


@endpoint("rref_delete")
def _handle_delete(state: RpcState, src: int, rref_id: Id, fork_id: Id) -> None:
    owners(state).remove_fork(rref_id, fork_id)


@endpoint("rref_accept")
def _handle_accept(state: RpcState, src: int, child_id: Id) -> None:
    forks(state).remove_child(child_id)


@endpoint("rref_get")
def _handle_get(state: RpcState, src: int, context_id: int, rref_id: Id) -> Any:
    entry = owners(state).entries.get(rref_id)
    if entry is None:
        raise RuntimeError(
            f"RRef {rref_id} does not exist on its owner {state.me} (it was deleted)"
        )
    ctx = engine(state).incoming(context_id, src)
    reply = state.loop.create_future()

    def encode(entry: OwnerEntry) -> tuple[Any, ...]:
        if entry.failed:
            return failure_reply(state, entry.value, "RRef.to_here")
        return encode_reply(state, entry.value, src, ctx)

    def job(entry: OwnerEntry) -> None:
        try:
            out = encode(entry)
        except BaseException as error:  # its value cannot be sent: the caller's error
            out = failure_reply(state, error, "RRef.to_here")
        state.resolve(reply, out)

    def ready(entry: OwnerEntry) -> None:
        state.pool.submit(job, entry)

    entry.on_ready(ready)
    return reply
