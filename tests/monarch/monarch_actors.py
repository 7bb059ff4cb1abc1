"""Actor classes of the Monarch behaviour tests, written as a Monarch 0.7 user writes them.

Only ``actormesh.actor`` is imported (a Monarch program's ``from monarch.actor import X``
with the module renamed), and every class is a valid Monarch actor: its endpoints are all
``def`` or all ``async def`` (Monarch refuses to spawn a class that mixes them).

Workers import this module by name (``conftest.py`` puts this directory on
``PYTHONPATH``), so it stays cheap to import: no pytest, no test helpers.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
from typing import Any

from actormesh.actor import (
    Actor,
    Channel,
    MeshFailure,
    Port,
    ProcMesh,
    concurrent_endpoint,
    context,
    current_actor_name,
    current_rank,
    current_size,
    endpoint,
    this_host,
    this_proc,
)

BOOT_VARIABLE = "MONARCH_TEST_BOOTED"


def mark_booted() -> None:
    """A ``spawn_procs(bootstrap=...)`` callable: leaves a mark in the new process."""
    os.environ[BOOT_VARIABLE] = f"booted-{os.getpid()}"


def _identity(init_rank: dict[str, int]) -> dict[str, Any]:
    ctx = context()
    instance = ctx.actor_instance
    return {
        "rank": dict(instance.rank),
        "flat_rank": instance.rank.rank,
        "message_rank": dict(ctx.message_rank),
        "message_flat_rank": ctx.message_rank.rank,
        "current_rank": dict(current_rank()),
        "current_size": current_size(),
        "name": instance.name,
        "class_name": instance.class_name,
        "actor_id": str(instance.actor_id),
        "actor_name": current_actor_name(),
        "init_rank": init_rank,
        "pid": os.getpid(),
    }


class Echo(Actor):
    """``async def`` endpoints: identity, a counter, delays, errors."""

    def __init__(self, tag: str = "echo", peer: Echo | None = None) -> None:
        self.tag = tag
        self.peer = peer
        self.count = 0
        # The rank of the init message: the actor's place in the whole mesh.
        self.init_rank = dict(current_rank())

    @endpoint
    async def ping(self) -> str:
        return "pong"

    @endpoint
    async def get_tag(self) -> str:
        return self.tag

    @endpoint
    async def rank(self) -> int:
        return context().actor_instance.rank.rank

    @endpoint
    async def inc(self, k: int = 1) -> int:
        self.count += k
        return self.count

    @endpoint
    async def identity(self) -> dict[str, Any]:
        return _identity(self.init_rank)

    @endpoint
    async def pid(self) -> int:
        return os.getpid()

    @endpoint
    async def env(self, name: str) -> str | None:
        return os.environ.get(name)

    @endpoint
    async def sleep_then(self, seconds: float, value: Any) -> Any:
        await asyncio.sleep(seconds)
        return value

    @endpoint
    async def sleep_by_rank(self, delays: list[float]) -> int:
        """Sleeps ``delays[r]`` for message rank ``r``; returns ``r``."""
        rank = context().message_rank.rank
        await asyncio.sleep(delays[rank])
        return rank

    @endpoint
    async def fail(self, message: str) -> None:
        raise ValueError(message)

    @endpoint
    async def peer_identity(self, other: Echo) -> dict[str, Any]:
        """Asks the actor of ``other`` at this actor's coordinates (ping_pong's pattern)."""
        result: dict[str, Any] = await other.slice(**current_rank()).identity.call_one()
        return result

    @endpoint
    async def ask_constructor_peer(self) -> str:
        assert self.peer is not None
        mine = context().actor_instance.rank
        tag: str = await self.peer.slice(**mine).get_tag.call_one()
        return tag

    @endpoint
    async def where(self) -> dict[str, Any]:
        return {"host": dict(this_host().extent), "proc": dict(this_proc().extent)}

    @endpoint
    async def spawn_here(self) -> tuple[int, int]:
        """Spawns an actor on ``this_proc()``: (this pid, the new actor's pid)."""
        local = this_proc().spawn("local", Echo, "local")
        try:
            pid: int = await local.pid.call_one()
        finally:
            await local.stop()
        return os.getpid(), pid

    @endpoint
    async def logger_name(self) -> str:
        actor: Any = self  # Monarch's Actor has a `logger`
        return str(actor.logger.name)

    @endpoint(propagate=lambda x: x)
    async def propagated(self, x: int) -> int:
        return x + 1

    @endpoint(instrument=False)
    async def uninstrumented(self, x: int) -> int:
        return x + 2

    async def not_an_endpoint(self, x: int) -> tuple[str, int]:
        return ("plain", x)

    @endpoint
    async def blocking_get(self, other: SyncCounter) -> int:
        """``.get()`` inside an ``async def`` endpoint (Monarch warns, and it works)."""
        value: int = other.inc.call_one().get(timeout=30)
        return value


class SyncCounter(Actor):
    """Plain ``def`` endpoints, which Monarch runs on a thread without an event loop."""

    def __init__(self) -> None:
        self.count = 0

    @endpoint
    def inc(self) -> int:
        self.count += 1
        return self.count

    @endpoint
    def has_running_loop(self) -> bool:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return False
        return True

    @endpoint
    def ask(self, other: Echo) -> str:
        """A blocking ``.get()`` on another actor inside a ``def`` endpoint (ping_pong)."""
        answer: str = other.ping.call_one().get(timeout=30)
        return answer

    @endpoint
    def collect(self, senders: PortUser, count: int) -> list[tuple[dict[str, int], int]]:
        """Opens a channel here, has ``senders`` send to it, and receives with ``.get()``."""
        port: Port[tuple[dict[str, int], int]]
        port, receiver = Channel.open()
        senders.send_many.broadcast(port, count)
        total = senders.size() * count
        return [receiver.recv().get(timeout=30) for _ in range(total)]


class Gate(Actor):
    """Waits for ``open()``: shows whether a message runs while another one is running."""

    def __init__(self) -> None:
        self.opened: asyncio.Event | None = None

    def _event(self) -> asyncio.Event:
        if self.opened is None:
            self.opened = asyncio.Event()
        return self.opened

    async def _wait(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self._event().wait(), timeout)
        except TimeoutError:
            return False
        return True

    @endpoint
    async def wait_open(self, timeout: float) -> bool:
        """True if ``open()`` ran while this waited (it cannot, one message at a time)."""
        return await self._wait(timeout)

    @concurrent_endpoint
    async def wait_open_concurrently(self, timeout: float) -> bool:
        return await self._wait(timeout)

    @endpoint
    async def open(self) -> None:
        self._event().set()


class PortUser(Actor):
    """Sends to ports it is given and receives on a channel it opened in ``__init__``."""

    def __init__(self, port: Port[Any] | None = None) -> None:
        self.constructor_port = port
        self.own_port: Port[Any]
        self.own_port, self.own_receiver = Channel.open()

    @endpoint
    async def send_many(self, port: Port[tuple[dict[str, int], int]], count: int) -> int:
        for i in range(count):
            port.send((dict(current_rank()), i))
        return count

    @endpoint
    async def send_to_constructor_port(self, value: str) -> None:
        assert self.constructor_port is not None
        self.constructor_port.send((value, context().actor_instance.rank.rank))

    @endpoint
    async def my_port(self) -> Port[Any]:
        return self.own_port

    @endpoint
    async def receive(self, count: int) -> list[Any]:
        return [await self.own_receiver.recv() for _ in range(count)]

    @endpoint
    async def send_error(self, port: Port[Any], message: str) -> None:
        port.exception(ValueError(message))

    @endpoint
    async def gather_from(self, senders: PortUser, count: int) -> list[tuple[dict[str, int], int]]:
        """Opens a channel here, has ``senders`` send to it, and ``await``s each message."""
        port: Port[tuple[dict[str, int], int]]
        port, receiver = Channel.open()
        senders.send_many.broadcast(port, count)
        return [await receiver.recv() for _ in range(senders.size() * count)]


class Engine(Actor):
    """getting_started's inference engine: ``infer`` keeps its response port, and a
    background thread answers every waiting request once ``update`` gives a value."""

    def __init__(self) -> None:
        self.waiting: list[Port[int]] = []
        self.answers: queue.SimpleQueue[tuple[Port[int], int]] = queue.SimpleQueue()
        threading.Thread(target=self._answer, daemon=True).start()

    def _answer(self) -> None:
        while True:
            port, value = self.answers.get()
            port.send(value)

    @endpoint(explicit_response_port=True)
    def infer(self, port: Port[int]) -> None:
        self.waiting.append(port)

    @endpoint(explicit_response_port=True)
    def infer_now(self, port: Port[int], x: int) -> None:
        port.send(x * 100)

    @endpoint(explicit_response_port=True)
    def reject(self, port: Port[int], message: str) -> None:
        port.exception(ValueError(message))

    @endpoint
    def update(self, value: int) -> int:
        waiting, self.waiting = self.waiting, []
        for port in waiting:
            self.answers.put((port, value))
        return len(waiting)


class Cleaner(Actor):
    """Reports its ``__cleanup__`` (an ``async def``) to the port it was built with."""

    def __init__(self, port: Port[tuple[str, int, str]]) -> None:
        self.port = port

    @endpoint
    async def ping(self) -> str:
        return "pong"

    async def __cleanup__(self, exc: Exception | None) -> None:
        self.port.send(("cleanup", context().actor_instance.rank.rank, repr(exc)))


class SyncCleaner(Actor):
    """Reports its ``__cleanup__`` (a plain ``def``) to the port it was built with."""

    def __init__(self, port: Port[tuple[str, int, str]]) -> None:
        self.port = port

    @endpoint
    def ping(self) -> str:
        return "pong"

    def __cleanup__(self, exc: Exception | None) -> None:
        self.port.send(("cleanup", context().actor_instance.rank.rank, repr(exc)))


class Victim(Actor):
    """An actor whose process can be made to exit."""

    @endpoint
    async def pid(self) -> int:
        return os.getpid()

    @endpoint
    async def die(self, code: int) -> None:
        os._exit(code)


class Parent(Actor):
    """Spawns two ``Victim`` processes in ``__init__`` and supervises them.

    ``__supervise__`` records each failure and answers ``handles``.
    """

    def __init__(self, handles: bool) -> None:
        self.handles = handles
        self.failures: list[dict[str, Any]] = []
        self.procs = this_host().spawn_procs(per_host={"gpus": 2})
        self.kids = self.procs.spawn("kids", Victim)

    @endpoint
    async def kid_pids(self) -> list[int]:
        pids: list[int] = (await self.kids.pid.call()).values()
        return pids

    @endpoint
    async def kill_kid(self, rank: int, code: int) -> str:
        try:
            await self.kids.slice(gpus=rank).die.call_one(code)
        except Exception as error:
            return type(error).__name__
        return "no error"

    @endpoint
    async def kid_pid(self, rank: int) -> int:
        pid: int = await self.kids.slice(gpus=rank).pid.call_one()
        return pid

    @endpoint
    async def seen(self) -> list[dict[str, Any]]:
        return self.failures

    @endpoint
    async def stop_kids(self) -> None:
        await self.procs.stop()

    async def __supervise__(self, failure: MeshFailure) -> bool:
        self.failures.append(
            {
                "type": type(failure).__name__,
                "is_mesh_failure": isinstance(failure, MeshFailure),
                "mesh_name": failure.mesh_name,
                "text": str(failure),
                "report": failure.report(),
            }
        )
        return self.handles


class Spawner(Actor):
    """Starts processes of its own: in ``__init__`` and in an ``async def`` endpoint."""

    def __init__(self) -> None:
        self.procs = this_host().spawn_procs(per_host={"gpus": 1})
        self.child = self.procs.spawn("child", Echo, "child")

    @endpoint
    async def child_tag(self) -> str:
        tag: str = await self.child.get_tag.call_one()
        return tag

    @endpoint
    async def spawn_in_endpoint(self) -> str:
        procs = this_host().spawn_procs(per_host={"gpus": 1})
        try:
            child = procs.spawn("late", Echo, "late")
            tag: str = await child.get_tag.call_one()
        finally:
            await procs.stop()
        return tag

    @endpoint
    async def stop_procs(self) -> None:
        await self.procs.stop()


class SiblingMaker(Actor):
    """Spawns meshes in its own process and hands them back at once (never awaited)."""

    @endpoint
    def sibling(self, index: int) -> Any:
        return context().actor_instance.proc.spawn(f"sibling{index}", Echo, "sibling")


class AsyncThreadLocal(Actor):
    """Thread-local state made in ``__init__`` and used by ``async`` endpoints."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.local.value = 0
        self.init_thread = threading.get_ident()

    @endpoint
    async def increment(self) -> int:
        self.local.value += 1
        return int(self.local.value)

    @endpoint
    async def same_thread_as_init(self) -> bool:
        return threading.get_ident() == self.init_thread


class SyncThreadLocal(Actor):
    """Thread-local state made in ``__init__`` and used by ``def`` endpoints."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.local.value = 0

    @endpoint
    def increment(self) -> int:
        self.local.value += 1
        return int(self.local.value)


class CancelledBeforeCleanup(Actor):
    """A concurrent endpoint still running when the actor stops: records, to the port it
    was built with, that its task was cancelled, then that ``__cleanup__`` ran."""

    def __init__(self, port: Port[str]) -> None:
        self.port = port
        self.started = asyncio.Event()

    @concurrent_endpoint
    async def wait_forever(self) -> None:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.port.send("task cancelled")
            raise

    @endpoint
    async def until_started(self) -> str:
        await self.started.wait()
        return "started"

    async def __cleanup__(self, exc: Exception | None) -> None:
        self.port.send("cleanup")


class ProcMeshHolder(Actor):
    """Is given a process mesh, spawns on it, and tries to stop it."""

    @endpoint
    def pids_of_spawned(self, procs: Any) -> list[int]:
        spawned = procs.spawn("spawned_by_holder", Echo)
        return sorted(spawned.pid.call().get(timeout=30).values())

    @endpoint
    def pids_on_own_proc_mesh(self) -> list[int]:
        spawned = context().actor_instance.proc_mesh.spawn("beside_holder", Echo)
        return sorted(spawned.pid.call().get(timeout=30).values())

    @endpoint
    def try_stopping(self, procs: Any) -> str:
        try:
            procs.stop()
        except RuntimeError as error:
            return str(error)
        return "stopped"


class FailsInInit(Actor):
    """Raises in ``__init__`` on every rank."""

    def __init__(self) -> None:
        raise ValueError(f"no good on rank {context().actor_instance.rank.rank}")

    @endpoint
    async def ping(self) -> str:
        return "pong"


class _WritesOnFinalize:
    """Writes ``finalized`` to a file when it is finalized (its file opened up front:
    ``open`` may be gone when the interpreter finalizes)."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "w")  # noqa: SIM115 (closed by __del__)

    def __del__(self) -> None:
        self._file.write("finalized")
        self._file.close()


_FINALIZED_AT_EXIT: _WritesOnFinalize | None = None


class KeepsAModuleGlobal(Actor):
    """Leaves an object with a finalizer in a module global: it is finalized only when
    the process' interpreter is, at its exit."""

    def __init__(self, path: str) -> None:
        global _FINALIZED_AT_EXIT
        _FINALIZED_AT_EXIT = _WritesOnFinalize(path)

    @endpoint
    def pid(self) -> int:
        return os.getpid()


def _append(path: str, label: str) -> None:
    with open(path, "a") as log:
        log.write(label + "\n")


class FailsInBroadcast(Actor):
    """A child whose ``fail`` raises: broadcast, it ends the child and its owner hears."""

    @endpoint
    async def fail(self) -> None:
        raise RuntimeError("child failure")

    @endpoint
    async def ping(self) -> str:
        return "pong"


class BackloggedOwner(Actor):
    """A sync owner that logs to ``path``; its child fails while it is busy."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.child = this_proc().spawn("failing_child", FailsInBroadcast)

    @endpoint
    def block(self, seconds: float) -> None:
        _append(self.path, "block-start")
        self.child.fail.broadcast()
        threading.Event().wait(seconds)  # long enough for the failure to arrive
        _append(self.path, "block-end")

    @endpoint
    def record(self, i: int) -> None:
        _append(self.path, f"record-{i}")

    def __supervise__(self, failure: MeshFailure) -> bool:
        _append(self.path, "__supervise__")
        return True


class WaitsForItsSupervisor(Actor):
    """An async owner whose endpoint waits for ``__supervise__`` to hear of its child."""

    def __init__(self) -> None:
        self.child = this_proc().spawn("failing_child", FailsInBroadcast)
        self.heard = asyncio.Event()
        self.failures: list[str] = []

    @endpoint
    async def fail_child_and_wait(self) -> list[str]:
        await self.child.ping.call()
        self.child.fail.broadcast()
        await asyncio.wait_for(self.heard.wait(), timeout=30)
        return self.failures

    def __supervise__(self, failure: MeshFailure) -> bool:
        self.failures.append(str(failure))
        self.heard.set()
        return True


class _Fatal(BaseException):
    """Not an ``Exception``: ends the actor that raises it."""


class DiesOfABaseException(Actor):
    """Logs to ``path``: ``die`` raises a ``BaseException``, ``after`` must never run."""

    def __init__(self, path: str) -> None:
        self.path = path

    @endpoint
    def die(self) -> None:
        _append(self.path, "die")
        raise _Fatal()

    @endpoint
    def after(self) -> None:
        _append(self.path, "after")

    def __cleanup__(self, exc: Exception | None) -> None:
        _append(self.path, "__cleanup__")


class Introspects(Actor):
    """Reports how it sees itself: its rank as text, its name, its creator, and what one
    of its log records looks like in a handler of its own."""

    @endpoint
    def describe(self) -> dict[str, Any]:
        import io
        import logging

        captured = io.StringIO()
        handler = logging.StreamHandler(captured)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger = logging.getLogger("introspects")
        logger.addHandler(handler)
        try:
            logger.warning("checked %s", "in")
            logger.warning("")
        finally:
            logger.removeHandler(handler)
        instance = context().actor_instance
        return {
            "rank": str(current_rank()),
            "instance": str(instance),
            "creator": instance.creator.name if instance.creator is not None else None,
            "logged": captured.getvalue().splitlines(),
        }


class CountsCleanups(Actor):
    """Counts the ``__cleanup__`` of the actors that report to it."""

    def __init__(self) -> None:
        self.count = 0

    @endpoint
    def cleaned(self) -> None:
        self.count += 1

    @endpoint
    def value(self) -> int:
        return self.count


class ReportsItsCleanup(Actor):
    """Tells ``counter`` when its ``__cleanup__`` runs."""

    def __init__(self, counter: CountsCleanups) -> None:
        self.counter = counter

    @endpoint
    def ping(self) -> str:
        return "pong"

    def __cleanup__(self, exc: Exception | None) -> None:
        self.counter.cleaned.call_one().get(timeout=30)


class OwnsMeshes(Actor):
    """Spawns actors on process meshes of its own and on one it was given, and nothing
    else: stopping it must stop them all (it defines no ``__cleanup__``)."""

    def __init__(self, lent: ProcMesh, counter: CountsCleanups) -> None:
        self.own = this_host().spawn_procs(per_host={"gpus": 1})
        self.on_lent = lent.spawn("on_lent", ReportsItsCleanup, counter)
        self.on_own = self.own.spawn("on_own", ReportsItsCleanup, counter)

    @endpoint
    def own_pids(self) -> list[int]:
        return [child.pid for child in self.own._processes.children]

    @endpoint
    def ready(self) -> str:
        self.on_lent.ping.call().get(timeout=30)
        return self.on_own.ping.call_one().get(timeout=30)


class RunsWhatItIsGiven(Actor):
    """A nested actor: ``run`` raises when told to, ``pid`` says where it lives."""

    @endpoint
    def run(self, fail: bool) -> str:
        if fail:
            raise ValueError("nested failure")
        return "ran"

    @endpoint
    def pid(self) -> int:
        return os.getpid()


class Nests(Actor):
    """Owns a nested mesh on processes of its own and handles none of its failures."""

    def __init__(self) -> None:
        procs = this_host().spawn_procs(per_host={"a_dim": 1})
        self.nested = procs.spawn("nested", RunsWhatItIsGiven)

    @endpoint
    def fail_nested(self) -> None:
        self.nested.run.broadcast(True)

    @endpoint
    def kill_nested(self) -> None:
        os.kill(self.nested.pid.call_one().get(timeout=30), 9)


class EndsItself(Actor):
    """Three ways an endpoint ends its actor in Monarch: a ``BaseException``, an exception
    escaping an explicit-response-port endpoint, and ``abort``."""

    @endpoint
    def fatal(self) -> None:
        raise _Fatal()

    @endpoint(explicit_response_port=True)
    def raises_past_its_port(self, port: Port[None]) -> None:
        raise ValueError("raised instead of sent")

    @endpoint
    def abort(self, reason: str | None = None) -> None:
        context().actor_instance.abort(reason)

    @endpoint
    def ping(self) -> str:
        return "pong"
