"""Actor classes spawned by the integration tests.

Workers import this module by name (``conftest.py`` puts this directory on
``PYTHONPATH``), so it must stay cheap to import: no pytest, no test helpers.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from actormesh import Actor, ActorMesh, context, current_rank, current_size, endpoint


class Oops(Exception):
    """An application error with an extra field, to check it survives the trip."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message, code)
        self.code = code


class CountsPickles:
    """Counts how often it is pickled in this process (the arguments of a fan-out)."""

    pickled = 0

    def __reduce__(self) -> tuple[Any, ...]:
        type(self).pickled += 1
        return (CountsPickles, ())


class Echo(Actor):
    """``def`` and ``async def`` endpoints mixed, plus identity and failure endpoints."""

    def __init__(self, tag: str = "echo") -> None:
        self.tag = tag
        self.value: Any = None
        self.init_rank = current_rank().rank

    @endpoint
    def sync_echo(self, x: Any) -> tuple[str, Any, str]:
        return ("def", x, threading.current_thread().name)

    @endpoint
    async def async_echo(self, x: Any) -> tuple[str, Any, str]:
        return ("async", x, self.tag)

    @endpoint
    async def ping(self) -> str:
        return "pong"

    def helper(self) -> str:
        """A plain method: not reachable through a mesh."""
        return "not an endpoint"

    @endpoint
    async def whoami(self) -> dict[str, Any]:
        return _identity(self.init_rank)

    @endpoint
    def whoami_sync(self) -> dict[str, Any]:
        return _identity(self.init_rank)

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    async def set_value(self, value: Any) -> None:
        self.value = value

    @endpoint
    async def get_value(self) -> Any:
        return self.value

    @endpoint
    async def fail(self, message: str) -> None:
        raise ValueError(message)

    @endpoint
    def fail_sync(self, message: str, code: int) -> None:
        raise Oops(message, code)

    @endpoint
    async def unpicklable_result(self) -> Any:
        return threading.Lock()

    @endpoint
    async def socket_dir(self) -> str:
        return os.environ["ACTORMESH_OWNER_SOCKET_DIR"]


def _identity(init_rank: int) -> dict[str, Any]:
    point = context().actor_instance.rank  # the place in the whole mesh
    message = current_rank()  # the place in the slice the call was made on
    return {
        "rank": point.rank,
        "init_rank": init_rank,
        "point": dict(point),
        "message_point": dict(message),
        "message_size": current_size(),
        "size": point.extent,
        "pid": os.getpid(),
        "env_rank": int(os.environ["ACTORMESH_RANK"]),
        "env_coords": json.loads(os.environ["ACTORMESH_COORDS"]),
    }


class Broken(Actor):
    """An actor whose ``__init__`` fails."""

    def __init__(self) -> None:
        raise KeyError("no config")

    @endpoint
    async def never(self) -> None:
        pass


class Relay(Actor):
    """Holds references to other meshes and calls them from inside the worker."""

    def __init__(self) -> None:
        self.peer: ActorMesh[Echo] | None = None

    @endpoint
    async def init(self, peer: ActorMesh[Echo]) -> None:
        self.peer = peer

    @endpoint
    async def peer_identity(self) -> dict[str, Any]:
        """Ask this actor's peer (same coordinates in the other mesh) who it is."""
        assert self.peer is not None
        return await self.peer.slice(**current_rank()).whoami.call_one()

    @endpoint
    async def relay(self, peer: ActorMesh[Echo], x: Any, mark: str | None = None) -> Any:
        """Call ``peer`` directly; then, if asked, write the answer to the file ``mark``."""
        value = await peer.async_echo.call_one(x)
        if mark is not None:
            Path(mark).write_text(json.dumps(value))
        return value

    @endpoint
    async def relay_failure(self, peer: ActorMesh[Echo], message: str) -> None:
        """Call ``peer.fail`` and let its error propagate."""
        await peer.fail.call_one(message)

    @endpoint
    async def get_in_async(self, peer: ActorMesh[Echo]) -> Any:
        """Block on a future inside an async endpoint: its actor's own loop waits."""
        return peer.async_echo.call_one(1).get(timeout=5)

    @endpoint
    def get_in_def(self, peer: ActorMesh[Echo]) -> Any:
        """Block on a future on the actor's own thread: allowed."""
        return peer.async_echo.call_one(2).get(timeout=5)

    @endpoint
    async def send_in_order(self, peer: ActorMesh[Recorder], count: int) -> None:
        futures = [peer.record.call_one(i) for i in range(count)]
        await asyncio.gather(*futures)


class Recorder(Actor):
    """Records what it receives, in order; measures overlap of its handlers."""

    def __init__(self) -> None:
        self.seen: list[Any] = []
        self.active = 0
        self.most_active = 0

    @endpoint
    async def record(self, item: Any) -> None:
        self.seen.append(item)

    @endpoint
    def record_sync(self, item: Any) -> None:
        self.seen.append(item)

    @endpoint
    async def recorded(self) -> list[Any]:
        return self.seen

    @endpoint
    async def overlap(self, pause: float) -> int:
        return await self._measure(pause)

    @endpoint(concurrent=True)
    async def concurrent_overlap(self, pause: float) -> int:
        return await self._measure(pause)

    @endpoint
    def overlap_sync(self, pause: float) -> int:
        """As ``overlap``, blocking the actor's thread instead of awaiting."""
        self.active += 1
        self.most_active = max(self.most_active, self.active)
        time.sleep(pause)
        self.active -= 1
        return self.most_active

    async def _measure(self, pause: float) -> int:
        self.active += 1
        self.most_active = max(self.most_active, self.active)
        await asyncio.sleep(pause)
        self.active -= 1
        return self.most_active

    @endpoint
    async def reset(self) -> None:
        self.seen = []
        self.most_active = 0


class Sleeper(Actor):
    """Slow and blocking endpoints."""

    def __init__(self) -> None:
        self.blocking = threading.Event()

    @endpoint
    async def nap(self, seconds: float, only_rank: int | None = None) -> int:
        """Sleep ``seconds`` (only on ``only_rank`` when given); return the rank."""
        rank = context().actor_instance.rank.rank
        if only_rank is None or rank == only_rank:
            await asyncio.sleep(seconds)
        return rank

    @endpoint
    def block(self, seconds: float) -> str:
        """Block the actor's thread (a long training step, say)."""
        self.blocking.set()
        time.sleep(seconds)
        return "woke"

    @endpoint(concurrent=True)
    async def is_blocking(self) -> bool:
        return self.blocking.is_set()

    @endpoint
    async def ping(self) -> str:
        return "pong"

    @endpoint
    def pid(self) -> int:
        return os.getpid()


class DataPlane(Actor):
    """Receives and returns large buffers (the shared-memory path)."""

    def __init__(self) -> None:
        self.kept: list[Any] = []

    @endpoint
    async def checksum(self, value: Any) -> int:
        import zlib

        return zlib.crc32(_flat_bytes(value))

    @endpoint
    async def echo(self, value: Any) -> Any:
        return value

    @endpoint
    async def kinds(self, value: Any) -> dict[str, str]:
        return {key: type(item).__name__ for key, item in value.items()}

    @endpoint
    async def make(self, nbytes: int, seed: int) -> Any:
        import torch

        generator = torch.Generator().manual_seed(seed)
        return torch.randint(0, 255, (nbytes,), dtype=torch.uint8, generator=generator)

    @endpoint
    async def hold(self, value: Any) -> None:
        self.kept.append(value)

    @endpoint
    async def bump_kept(self) -> int:
        """Add one to every byte of the last value kept, in place; its checksum after."""
        import zlib

        self.kept[-1].add_(1)
        return zlib.crc32(_flat_bytes(self.kept[-1]))

    @endpoint
    async def kept_checksum(self) -> int:
        import zlib

        return zlib.crc32(_flat_bytes(self.kept[-1]))

    @endpoint
    async def drop_kept(self) -> None:
        import gc

        self.kept.clear()
        gc.collect()  # the mappings go now, so their segments return

    @endpoint
    async def stall(self, value: Any) -> None:
        """Keep ``value`` mapped and never answer (until the process dies)."""
        import asyncio

        self.kept.append(value)
        await asyncio.Event().wait()

    @endpoint
    async def pid(self) -> int:
        import os

        return os.getpid()


def _flat_bytes(value: Any) -> bytes:
    import numpy as np
    import torch

    if isinstance(value, torch.Tensor):
        return value.contiguous().view(torch.uint8).numpy().tobytes()
    if isinstance(value, np.ndarray):
        return value.tobytes()
    return bytes(value)


class TaskUser(Actor):
    """Async endpoints that need to run as a task from their first line."""

    @endpoint
    async def timed_out(self) -> str:
        # asyncio.timeout and TaskGroup refuse to run outside a task, and a timeout
        # cancels the task it was entered in.
        assert asyncio.current_task() is not None
        async with asyncio.TaskGroup() as group:
            group.create_task(asyncio.sleep(0))
        try:
            async with asyncio.timeout(0.05):
                await asyncio.sleep(30)
        except TimeoutError:
            return "timed out"
        return "not timed out"

    @endpoint
    async def same_task(self) -> bool:
        # The task that runs the endpoint's first line runs the rest too.
        first = asyncio.current_task()
        await asyncio.sleep(0.01)
        return asyncio.current_task() is first


class ProcessFacts(Actor):
    """What a worker process is, as the process itself sees it."""

    @endpoint
    def facts(self) -> dict[str, Any]:
        with open("/proc/self/cmdline", "rb") as cmdline:
            command = [part.decode() for part in cmdline.read().split(b"\0") if part]
        return {
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "sid": os.getsid(0),
            "cwd": os.getcwd(),
            "cmdline": command,
            "mark": os.environ.get("ACTORMESH_TEST_MARK"),
        }
