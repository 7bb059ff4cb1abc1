"""Ports and channels: messages to a receiver, from anywhere, in order per sender.

``port, receiver = Channel.open()`` makes a receiver in this process (the controller or
an actor) and the port that reaches it. A ``Port`` pickles: pass it to actors (as an
argument, to a constructor, in a result) and each one ``port.send(value)`` from any
thread; the receiver's ``recv()`` gives a ``Future`` for the next message. Ports are part
of the runtime, not a layer over calls: a port is a request id registered with the
receiving runtime, and ``send`` is a reply frame to it, so it costs what an endpoint's
answer costs, and messages from one sender arrive in the order they were sent.

A receive claims its message when its future is first observed (``get``, ``await``...),
not when ``recv()`` is called, as in Monarch.

``send(endpoint, args, kwargs, port=...)`` (in ``_send``) sends each actor's answer to a
port, and an endpoint marked ``@endpoint(explicit_response_port=True)`` gets a port as
its first argument: what it sends there (now or later, from any thread) is its answer.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

from .._core import CURRENT_MESSAGE, dumps, error_from_payload, error_payload, headers, loads
from .._hosts import Runtime
from ._context import current_rank
from ._future import Future

__all__ = ["Channel", "Port", "PortReceiver", "RankedPortReceiver"]

R = TypeVar("R")


class _Queue:
    """What a receiver's runtime holds for it: a core ``ReplyHandler`` that never ends
    (unless ``once``), whose messages wait for observed receives and vice versa."""

    def __init__(self, once: bool) -> None:
        self.once = once
        self.lock = threading.Lock()
        self.messages: deque[tuple[int, bool, Any]] = deque()
        self.waiting: deque[tuple[Future[Any], bool]] = deque()
        self.closed = False
        # A receive's work, started when its future is first observed (stateless: shared).
        self.receive = _Receive(self, False)
        self.receive_ranked = _Receive(self, True)

    def on_reply(self, rank: int, ok: bool, parts: list[memoryview]) -> bool:
        if ok:
            value = loads(parts[0], parts[1:])
        else:
            error = error_from_payload(parts[0])
            # The receiver gets what the sender passed to port.exception(), as it is.
            value = error.cause if error.cause is not None else error
        with self.lock:
            if self.closed:
                return True
            if self.once:
                self.closed = True
            while self.waiting:
                future, ranked = self.waiting.popleft()
                if not future.done():  # a cancelled receive takes nothing
                    break
            else:
                self.messages.append((rank, ok, value))
                return self.once
        _settle(future, ranked, rank, ok, value)
        return self.once

    def on_lost(self, conn: Any, reason: str) -> bool:
        return False  # anyone may send to a port: no one connection is its life

    def claim(self, future: Future[Any], ranked: bool) -> None:
        """An observed receive: the next message (now, or when it comes) is ``future``'s."""
        with self.lock:
            if self.messages:
                rank, ok, value = self.messages.popleft()
            else:
                self.waiting.append((future, ranked))
                return
        _settle(future, ranked, rank, ok, value)

    def drop_cancelled(self) -> None:
        """A waiting receive was cancelled: the next message goes to the next receive."""
        with self.lock:
            self.waiting = deque(w for w in self.waiting if not w[0].done())

    def next(self, ranked: bool, loop_thread: Any) -> Future[Any]:
        """The future of a receive, which claims a message when first observed."""
        return Future._new(
            loop_thread,
            on_cancel=self.drop_cancelled,
            defer=self.receive_ranked if ranked else self.receive,
        )


class _Receive:
    """A receive's deferred work (``Deferred``): claim the next message for the future."""

    __slots__ = ("queue", "ranked")
    claimed = None  # a cancelled ``await`` of a receive cancels it (and frees its turn)

    def __init__(self, queue: _Queue, ranked: bool) -> None:
        self.queue = queue
        self.ranked = ranked

    def start(self, future: Future[Any], loop: Any) -> None:
        self.queue.claim(future, self.ranked)

    def drive(self, future: Future[Any], timeout: float | None) -> None:
        self.queue.claim(future, self.ranked)


def _settle(future: Future[Any], ranked: bool, rank: int, ok: bool, value: Any) -> None:
    if not ok:
        future._set_exception(value)
    else:
        future._set_result((rank, value) if ranked else value)


class Port(Generic[R]):
    """Where to send messages for a receiver (see the module docstring); it pickles.

    Args are internal: ``Channel.open()`` makes ports.
    """

    def __init__(self, address: str, port_id: int, once: bool = False) -> None:
        self._address = address
        self._id = port_id
        self._once = once
        self._used = False

    def send(self, value: R) -> None:
        """Send ``value`` to the receiver (any thread, any process; never waits).

        Raises:
            ActorDiedError: the receiver's process is gone.
            SerializationError: ``value`` cannot be pickled.
            RuntimeError: a port of ``Channel.open(once=True)`` was already used.
        """
        payload, buffers = dumps(value)
        self._use()
        self._deliver(True, [payload, *buffers])

    def exception(self, error: BaseException) -> None:
        """Make the receiver's ``recv()`` raise ``error`` (as it is)."""
        payload = error_payload(error, mesh="", point={}, endpoint="port", as_sent=True)
        self._use()
        self._deliver(False, [payload])

    def _use(self) -> None:
        if self._once:
            if self._used:
                raise RuntimeError("this port was already used: it takes one message (once=True)")
            self._used = True

    def _deliver(self, ok: bool, parts: list[Any]) -> None:
        runtime = Runtime.get()
        rank = current_rank().rank
        runtime.send(runtime.connection(self._address), headers.Reply(self._id, rank, ok), parts)

    @property
    def address(self) -> tuple[str, int]:
        """``(process address, port id)``: where ``send`` goes."""
        return self._address, self._id

    def __reduce__(self) -> tuple[Any, ...]:
        return (Port, (self._address, self._id, self._once))

    def __repr__(self) -> str:
        return f"<Port {self._id} at {self._address}>"


class PortReceiver(Generic[R]):
    """The receiving end of a channel: ``recv()`` gives the next message's ``Future``."""

    def __init__(self, queue: _Queue, runtime: Runtime, port_id: int) -> None:
        self._queue = queue
        self._loop_thread = runtime.in_loop_thread
        # When the receiver goes, nothing more can arrive: the runtime forgets the port.
        weakref.finalize(self, runtime.forget, port_id)

    def recv(self) -> Future[R]:
        """The next message (``.get()`` it, or ``await`` it); an error sent with
        ``port.exception(e)`` raises ``e``.

        As in Monarch, the future claims its message when it is first observed (``get``,
        ``await``, ``as_asyncio``, ``add_done_callback``), not when ``recv()`` is called:
        a receive dropped unobserved takes nothing, and receives observed in another
        order than they were made get the messages in the order they are observed. A
        future whose wait timed out keeps its claim (it gets the next message); a
        cancelled one (``cancel()``, or an ``await`` cancelled by ``asyncio.wait_for``)
        gives it up."""
        return self._queue.next(False, self._loop_thread)

    def ranked(self) -> RankedPortReceiver[R]:
        """The same receiver, giving ``(sender's rank, message)`` pairs."""
        ranked: RankedPortReceiver[R] = RankedPortReceiver.__new__(RankedPortReceiver)
        ranked._queue, ranked._loop_thread, ranked._owner = self._queue, self._loop_thread, self
        return ranked

    def __iter__(self) -> Iterator[Future[R]]:
        """Futures of the messages to come, one after another."""
        while True:
            yield self.recv()


class RankedPortReceiver(Generic[R]):
    """A receiver whose messages come with the sender's rank: ``(rank, message)``."""

    _queue: _Queue
    _loop_thread: Any
    _owner: Any

    def recv(self) -> Future[tuple[int, R]]:
        """The next ``(rank, message)``."""
        return self._queue.next(True, self._loop_thread)


class Channel(Generic[R]):
    """Opens ports: ``port, receiver = Channel.open()``."""

    @staticmethod
    def open(once: bool = False) -> tuple[Port[R], PortReceiver[R]]:
        """A new receiver in this process and the port that reaches it.

        ``once``: the port takes one message: a second ``send`` on the same port object
        raises ``RuntimeError`` (copies of it sent elsewhere count on their own, and the
        receiver keeps the first message that arrives).
        """
        runtime = Runtime.get()
        queue = _Queue(once)
        port_id = runtime.register(queue)
        return Port(runtime.address, port_id, once), PortReceiver(queue, runtime, port_id)

    @staticmethod
    def open_ranked(once: bool = False) -> tuple[Port[R], RankedPortReceiver[R]]:
        """As ``open``, with a receiver that gives ``(sender's rank, message)``."""
        port: Port[R]
        receiver: PortReceiver[R]
        port, receiver = Channel.open(once)
        return port, receiver.ranked()


class ExplicitPort(Port[R]):
    """The port an ``explicit_response_port`` endpoint answers its caller through.

    It stands for the call being handled: ``send`` (now or later, from any thread of this
    process) is the endpoint's answer, once. It does not leave this process.
    """

    def __init__(self, delivery: Any) -> None:
        self._delivery = delivery
        delivery.deferred = True

    def send(self, value: R) -> None:
        self._delivery.answer(value)

    def exception(self, error: BaseException) -> None:
        self._delivery.fail(error, as_sent=True)

    def __reduce__(self) -> tuple[Any, ...]:
        raise TypeError(
            "an explicit response port answers one call of this actor and cannot be sent "
            "to another process; open a Channel for that"
        )


def explicit_port() -> ExplicitPort[Any]:
    """The response port of the call the running endpoint handles."""
    delivery = CURRENT_MESSAGE.get()
    if delivery is None:
        raise RuntimeError("no call is being handled here")
    return ExplicitPort(delivery)
