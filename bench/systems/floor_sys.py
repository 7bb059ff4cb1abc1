"""The floor of the machine: what any runtime's figures are bounded by.

- Messages: bare Python echo processes on Unix socket pairs, 8-byte messages with
  blocking ``recv``/``sendall`` (sync code) or the event loop's ``sock_recv`` (asyncio
  code). No serialisation, no framing beyond a fixed size: the round trip is two
  context switches and four system calls.
- Bytes: a memcpy (``numpy.copyto`` into a preallocated array), the least that moving
  a tensor from one place in memory to another can cost (``tensor_*`` rows).
- The payload sweep: the raw bytes of the array sent through the socket (the echo
  process reads them all, then answers 8 bytes): the floor of any transport that
  copies through a socket, with memcpy beside it (``memcpy_<size>_mbps``).
"""

from __future__ import annotations

import asyncio
import functools
import socket
import struct
import subprocess
import sys
from typing import Any

from bench.catalog import SWEEP_SIZES
from bench.payload import MIB, size_label
from bench.stats import Budget, Summary, mbps, time_sync
from bench.systems.base import Mesh, Metrics, NotAvailable, System, WorkloadFn
from bench.workloads import Context

__all__ = ["SYSTEM", "FloorMesh", "FloorSystem"]

# A header of n >= 0 is a ping, answered at once; n < 0 announces -n bytes of payload,
# read to the end (into a scratch buffer) before the header is echoed back.
_SERVER = """
import socket, sys
s = socket.socket(fileno=int(sys.argv[1]))
scratch = memoryview(bytearray(1 << 20))
while True:
    b = s.recv(8, socket.MSG_WAITALL)
    if len(b) < 8:
        break
    left = -int.from_bytes(b, "little", signed=True)
    while left > 0:
        got = s.recv_into(scratch[: min(left, len(scratch))])
        if not got:
            sys.exit(0)
        left -= got
    s.sendall(b)
"""
_MSG = struct.Struct("<q")


class FloorMesh(Mesh):
    """Echo processes, one socket pair each; ``ping`` is the only endpoint."""

    def __init__(self, actors: int) -> None:
        super().__init__(actors)
        self.socks: list[socket.socket] = []
        # asyncio mode: bytes not yet accepted by the socket, and the task writing them.
        self._unsent = [bytearray() for _ in range(actors)]
        self._writers: list[asyncio.Task[None] | None] = [None] * actors
        self.procs: list[subprocess.Popen[bytes]] = []
        for _ in range(actors):
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            fd = theirs.fileno()
            cmd = [sys.executable, "-c", _SERVER, str(fd)]
            self.procs.append(subprocess.Popen(cmd, pass_fds=(fd,)))
            theirs.close()
            self.socks.append(ours)
        for rank in range(actors):
            self.call_sync(rank, "ping", rank)

    def _check(self, method: str) -> None:
        if method != "ping":
            raise NotAvailable(f"the floor's echo processes only answer ping, not {method}")

    def send(self, rank: int, method: str, *args: Any) -> Any:
        self._check(method)
        value = args[0] if args and isinstance(args[0], int) else 0
        data = _MSG.pack(value)
        sock = self.socks[rank]
        if sock.getblocking():
            sock.sendall(data)
            return rank
        # Pipelined sends outrun the socket buffer (a few hundred small messages): what
        # does not fit now is written by a task as the echo process drains the socket.
        if not self._unsent[rank]:
            try:
                sent = sock.send(data)
            except BlockingIOError:
                sent = 0
            data = data[sent:]
        if data:
            self._unsent[rank] += data
            if self._writers[rank] is None:
                self._writers[rank] = asyncio.get_running_loop().create_task(self._write(rank))
        return rank

    async def _write(self, rank: int) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._unsent[rank]:
                data, self._unsent[rank] = bytes(self._unsent[rank]), bytearray()
                await loop.sock_sendall(self.socks[rank], data)
        finally:
            self._writers[rank] = None

    def wait_sync(self, pending: Any) -> Any:
        return _MSG.unpack(self.socks[pending].recv(8, socket.MSG_WAITALL))[0]

    async def wait(self, pending: Any) -> Any:
        loop = asyncio.get_running_loop()
        sock = self.socks[pending]
        data = b""
        while len(data) < 8:
            chunk = await loop.sock_recv(sock, 8 - len(data))
            if not chunk:
                raise ConnectionError("echo process went away")
            data += chunk
        return _MSG.unpack(data)[0]

    async def call_all(self, method: str, *args: Any) -> list[Any]:
        if method == "pid":
            return [p.pid for p in self.procs]
        return await self.wait_many([self.send(r, method, *args) for r in range(self.size)])

    def ref(self, rank: int) -> Any:
        raise NotAvailable("echo processes do not call each other")

    def transfer_sync(self, rank: int, data: memoryview) -> None:
        """Send ``data`` to echo process ``rank`` and wait until it has read it all."""
        sock = self.socks[rank]
        header = _MSG.pack(-data.nbytes)
        sock.sendall(header)
        sock.sendall(data)
        if sock.recv(8, socket.MSG_WAITALL) != header:
            raise ConnectionError("echo process answered out of turn")

    def blocking(self, flag: bool) -> None:
        """Switch every socket between blocking (sync code) and non-blocking (asyncio)."""
        for sock in self.socks:
            sock.setblocking(flag)

    def close_sync(self) -> None:
        for sock in self.socks:
            sock.close()
        for proc in self.procs:
            proc.wait(timeout=10)


class FloorSystem(System):
    """Bare processes and memcpy; see the module docstring."""

    multi_actor_procs = False

    def open_sync(self, actors: int, procs: int) -> Mesh:
        return FloorMesh(actors)

    async def open(self, actors: int, procs: int) -> Mesh:
        mesh = FloorMesh(actors)
        mesh.blocking(False)
        return mesh

    def overrides(self) -> dict[str, WorkloadFn]:
        return {
            "a2a_rtt": _socket_pingpong,
            "payload_sweep": _socket_sweep,
            "tensor_arg_1m": _memcpy(MIB),
            "tensor_arg_64m": _memcpy(64 * MIB),
            "tensor_ret_64m": _memcpy(64 * MIB),
        }


_PINGPONG = Budget(max_n=20000, seconds=2.0, warmup=500)
_PINGPONG_QUICK = Budget(max_n=5000, seconds=0.5, warmup=100)


def _socket_pingpong(ctx: Context) -> Metrics:
    """Blocking ping-pong between this process and an echo process (2 processes)."""
    mesh = FloorMesh(1)
    try:
        samples = time_sync(
            lambda: mesh.call_sync(0, "ping", 1), ctx.pick(_PINGPONG, _PINGPONG_QUICK)
        )
    finally:
        mesh.close_sync()
    return {**Summary.of(samples).micros(), "n": len(samples)}


_COPY = Budget(max_n=200, seconds=1.0, min_n=5, warmup=2)
_COPY_QUICK = Budget(max_n=50, seconds=0.3, min_n=3, warmup=1)


def _copy_seconds(nbytes: int, budget: Budget) -> float:
    import numpy as np

    src = np.arange(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    median = Summary.of(time_sync(lambda: np.copyto(dst, src), budget)).median
    if not np.array_equal(src[::1024], dst[::1024]):
        raise AssertionError("memcpy did not copy")
    return median


def _memcpy(nbytes: int) -> WorkloadFn:
    def run(ctx: Context) -> Metrics:
        median = _copy_seconds(nbytes, ctx.pick(_COPY, _COPY_QUICK))
        return {"mbps": mbps(nbytes, median), "median_ms": median * 1e3, "method": "memcpy"}

    run.__doc__ = f"memcpy of {size_label(nbytes)} between preallocated arrays."
    return run


_SEND = Budget(max_n=100, seconds=0.6, min_n=3, warmup=1)
_SEND_QUICK = Budget(max_n=30, seconds=0.2, min_n=2, warmup=1)


def _socket_sweep(ctx: Context) -> Metrics:
    """Each payload size through a raw socket (round trip, MB/s), and memcpy's MB/s."""
    import numpy as np

    out: Metrics = {"sizes": list(SWEEP_SIZES), "method": "raw Unix socket; memcpy_* beside"}
    mesh = FloorMesh(1)
    try:
        for nbytes in SWEEP_SIZES:
            data = np.arange(nbytes // 4, dtype=np.float32).data.cast("B")
            send = functools.partial(mesh.transfer_sync, 0, data)
            median = Summary.of(time_sync(send, ctx.pick(_SEND, _SEND_QUICK))).median
            label = size_label(nbytes)
            out[f"{label}_us"] = median * 1e6
            out[f"{label}_mbps"] = mbps(nbytes, median)
            copy = _copy_seconds(nbytes, ctx.pick(_COPY, _COPY_QUICK))
            out[f"memcpy_{label}_mbps"] = mbps(nbytes, copy)
    finally:
        mesh.close_sync()
    return out


SYSTEM = FloorSystem
