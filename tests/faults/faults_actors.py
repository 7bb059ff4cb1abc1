"""Actor classes of the fault suite (workers import this module by name)."""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import actormesh
from actormesh import Actor, context, current_rank, endpoint, proc_mesh


def hold_gil(seconds: float) -> None:
    """Sleep inside a C call that keeps the GIL (``PyDLL`` functions never release it)."""
    ctypes.PyDLL(None).usleep(int(seconds * 1_000_000))


class Worker(Actor):
    """A general-purpose victim: answers, sleeps, crashes, starts processes."""

    def __init__(self, label: str = "") -> None:
        self.label = label
        self.rank = current_rank().rank
        self.children: list[subprocess.Popen[bytes]] = []

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def echo(self, value: Any) -> Any:
        return value

    @endpoint
    async def aecho(self, value: Any) -> Any:
        return value

    @endpoint
    def sleep(self, seconds: float, marker: str = "") -> float:
        if marker:
            Path(marker).touch()  # tell the test the endpoint is running
        time.sleep(seconds)
        return seconds

    @endpoint
    async def asleep(self, seconds: float) -> float:
        await asyncio.sleep(seconds)
        return seconds

    @endpoint
    def hold_gil(self, seconds: float, marker: str = "") -> float:
        if marker:
            Path(marker).touch()  # tell the test the GIL is about to be held
        hold_gil(seconds)
        return seconds

    @endpoint
    async def block_loop(self, seconds: float, marker: str = "") -> float:
        if marker:
            Path(marker).touch()  # tell the test the loop is blocked from now on
        time.sleep(seconds)  # a badly written async endpoint: its actor's loop stalls
        return seconds

    @endpoint
    def die(self, how: str) -> None:
        if how == "exit":
            os._exit(3)
        if how == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if how == "raise-systemexit":
            raise SystemExit(4)
        time.sleep(30)

    @endpoint
    def start_sleeper(self, detached: bool = False) -> int:
        """Start a ``sleep`` process; ``detached`` puts it in a new session (a daemon)."""
        if not detached:
            child = subprocess.Popen(["sleep", "1000"])
            self.children.append(child)
            return child.pid
        # A daemon: a shell starts `sleep` in a new session and exits at once.
        out = subprocess.run(
            ["sh", "-c", "setsid sleep 1000 >/dev/null 2>&1 & echo $!"],
            capture_output=True,
            text=True,
            check=True,
        )
        return int(out.stdout.strip())

    @endpoint
    def start_short_daemon(self, seconds: float) -> int:
        """A daemon (new session, its parent gone) that exits after ``seconds``: adopted."""
        out = subprocess.run(
            ["sh", "-c", f"setsid sleep {seconds} >/dev/null 2>&1 & echo $!"],
            capture_output=True,
            text=True,
            check=True,
        )
        return int(out.stdout.strip())

    @endpoint
    def own_child_exit_code(self, code: int, wait_before: float) -> int | None:
        """Start a child that exits with ``code``; collect it only after ``wait_before``."""
        child = subprocess.Popen(["sh", "-c", f"exit {code}"])
        time.sleep(wait_before)  # the worker's reaper runs meanwhile: it must not take it
        return child.wait()

    @endpoint
    def lock(self) -> Any:
        return threading.Lock()  # cannot be pickled

    @endpoint
    def fail(self, message: str) -> None:
        raise ValueError(message)

    @endpoint
    def add(self, a: int, b: int = 0) -> int:
        return a + b

    def helper(self) -> str:
        return "not an endpoint"


class Ledger(Actor):
    """Applies numbered operations and keeps them in a file, to check the chaos run.

    Every call appends ``sender seq`` to this rank's ledger file before answering, so a
    restarted rank (``__restore__``) knows what its predecessor acknowledged.
    """

    def __init__(self, directory: str) -> None:
        self.path = Path(directory) / f"rank{current_rank().rank}.log"
        self.last: dict[str, int] = {}
        self.restored = False

    def __restore__(self) -> None:
        self.restored = True
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                sender, seq = line.split()
                self.last[sender] = max(self.last.get(sender, -1), int(seq))

    @endpoint
    def apply(self, sender: str, seq: int) -> int:
        with self.path.open("a") as ledger:
            ledger.write(f"{sender} {seq}\n")
        self.last[sender] = seq
        return seq

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def was_restored(self) -> bool:
        return self.restored


class Counter(Actor):
    """Counts its constructions and restorations (for restart tests)."""

    def __init__(self, start: int, directory: str) -> None:
        self.start = start
        self.value = start
        self.rank = current_rank().rank
        self.restored = False
        marker = Path(directory) / f"init-{self.rank}"
        with marker.open("a") as out:
            out.write("x")

    def __restore__(self) -> None:
        self.restored = True

    @endpoint
    def incr(self) -> int:
        self.value += 1
        return self.value

    @endpoint
    def state(self) -> dict[str, Any]:
        return {
            "start": self.start,
            "value": self.value,
            "restored": self.restored,
            "point": dict(context().actor_instance.rank),
            "pid": os.getpid(),
        }

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def sleep(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    @endpoint(idempotent=True)
    def slow_idempotent(self, seconds: float) -> int:
        time.sleep(seconds)
        return os.getpid()


class RestartRefuser(Actor):
    """Starts the first time, refuses in a restarted process."""

    def __init__(self) -> None:
        if os.environ.get("ACTORMESH_RESTARTS"):
            raise RuntimeError("no second life")

    @endpoint
    def pid(self) -> int:
        return os.getpid()


class Relay(Actor):
    """Calls another mesh through a handle it was given (a pickled mesh reference)."""

    @endpoint
    async def pids(self, mesh: Any) -> list[int]:
        return list((await mesh.pid.call()).values())


class FailingInit(Actor):
    def __init__(self, bad_rank: int) -> None:
        if current_rank().rank == bad_rank:
            raise RuntimeError(f"rank {bad_rank} refuses to start")

    @endpoint
    def ping(self) -> str:
        return "pong"


class FailsFastOthersSlow(Actor):
    """The bad rank fails at once; the others take a while to start (calls made to the
    bad rank meanwhile are answered before the spawn is complete)."""

    def __init__(self, bad_rank: int) -> None:
        if current_rank().rank == bad_rank:
            raise RuntimeError(f"rank {bad_rank} refuses to start")
        time.sleep(0.3)

    @endpoint
    def ping(self) -> str:
        return "pong"


class Spawner(Actor):
    """Spawns a mesh whose ``__init__`` fails at rank 1 and handles the error itself
    (no ``__supervise__``)."""

    @endpoint
    async def spawn_and_handle(self) -> str:
        procs = await proc_mesh(gpus=2, name="spawned")
        child = procs.spawn("child", FailingInit, 1)
        try:
            await child.initialized
        except actormesh.ActorInitError as error:
            return f"handled {type(error.cause).__name__}"
        finally:
            await procs.stop()
        return "no error"

    @endpoint
    def ping(self) -> str:
        return "pong"


class Supervisor(Actor):
    """Owns a child mesh; ``__supervise__`` records failures and handles them or not."""

    def __init__(self, handle: bool) -> None:
        self.handle = handle
        self.seen: list[dict[str, Any]] = []
        self.procs: Any = None
        self.child: Any = None

    def __supervise__(self, failure: actormesh.Failure) -> bool:
        self.seen.append({"mesh": failure.mesh, "ranks": list(failure.ranks), "kind": failure.kind})
        return self.handle

    @endpoint
    async def start_child(self, size: int) -> list[int]:
        self.procs = await proc_mesh(gpus=size, name="child")
        self.child = await self.procs.spawn("child", Worker)
        pids = await self.child.pid.call()
        return list(pids.values())

    @endpoint
    async def child_sleepers(self) -> list[int]:
        """A detached and an attached grandchild per child worker."""
        attached = await self.child.start_sleeper.call(False)
        detached = await self.child.start_sleeper.call(True)
        return [*attached.values(), *detached.values()]

    @endpoint
    async def call_child(self, value: Any) -> list[Any]:
        return list((await self.child.echo.call(value)).values())

    @endpoint
    def seen_failures(self) -> list[dict[str, Any]]:
        return self.seen

    @endpoint
    def child_mesh(self) -> Any:
        """The child mesh itself, for a caller that is not its owner to hold."""
        return self.child

    @endpoint
    async def stop_child(self) -> str:
        await self.procs.stop()
        await self.procs.stop()  # twice is fine
        try:
            await self.child.echo.call(1)
        except actormesh.MeshStoppedError as error:
            return type(error).__name__
        return "no error"

    @endpoint
    def pid(self) -> int:
        return os.getpid()


class Cancellable(Actor):
    """Endpoints that notice cancellation."""

    def __init__(self) -> None:
        self.events: list[str] = []

    @endpoint
    async def wait_async(self, seconds: float) -> str:
        self.events.append("async started")
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            self.events.append("async cancelled")
            raise
        self.events.append("async finished")
        return "finished"

    @endpoint
    def wait_sync(self, seconds: float) -> str:
        self.events.append("sync started")
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if actormesh.cancelled():
                self.events.append("sync saw the flag")
                return "cancelled"
            time.sleep(0.01)
        self.events.append("sync finished")
        return "finished"

    @endpoint(concurrent=True)
    async def log(self) -> list[str]:
        return self.events  # concurrent: answers while another call runs


class Unpicklable(Exception):
    """Pickles fine, but cannot be rebuilt: creating one takes other arguments than its
    ``args`` (even without calling ``__init__``)."""

    def __new__(cls, a: int, b: int) -> Unpicklable:
        return super().__new__(cls, a, b)

    def __init__(self, a: int, b: int) -> None:
        super().__init__(f"{a}-{b}")


class HttpError(Exception):
    """Its ``__init__`` takes other arguments than it passes up: a plain pickle of it
    cannot be unpickled."""

    def __init__(self, status: int, url: str) -> None:
        super().__init__(f"{status} for {url}")
        self.status, self.url = status, url


class HoldsALock(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()
        self.code = 7


class BadReturns(Actor):
    @endpoint
    def raise_unpicklable(self) -> None:
        raise Unpicklable(1, 2)

    @endpoint
    def raise_http_error(self) -> None:
        raise HttpError(503, "http://example/x")

    @endpoint
    def raise_holding_a_lock(self) -> None:
        raise HoldsALock("busy")

    @endpoint
    def return_lambda(self) -> Any:
        return lambda: None

    @endpoint
    def big(self, size: int) -> bytes:
        return b"x" * size

    @endpoint
    def ping(self) -> str:
        return "pong"


def flush() -> None:
    sys.stdout.flush()


class SlowInit(Actor):
    """An ``__init__`` that takes ``seconds`` (loading a model, say)."""

    def __init__(self, seconds: float) -> None:
        time.sleep(seconds)

    @endpoint
    def echo(self, value: Any) -> Any:
        return value
