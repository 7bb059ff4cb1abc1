"""Running one program in a group of worker processes (plain functions, no fixtures).

``run_group(program, world_size, *args)`` starts ``world_size`` processes with the
``spawn`` start method, as users of torch's RPC do; each runs
``program(rank, world_size, *args)`` with ``MASTER_ADDR``/``MASTER_PORT`` set to a free
loopback port, and sends back what it returns (or its traceback). A process that dies
without answering, or a group that outlives its time limit, fails the test; every
process is gone when ``run_group`` returns.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import Any

Program = Callable[..., Any]


def free_port() -> int:
    """A TCP port on the loopback interface that nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


_GRACE_AFTER_ERROR_S = 15.0


class GroupFailed(AssertionError):
    """A worker raised, died, or the group ran out of time."""


def _entry(
    program: Program, rank: int, world_size: int, port: int, conn: Connection, args: tuple[Any, ...]
) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    try:
        result = program(rank, world_size, *args)
    except BaseException:
        conn.send(("error", traceback.format_exc()))
    else:
        conn.send(("ok", result))
    conn.close()


def run_group(
    program: Program,
    world_size: int,
    *args: Any,
    timeout: float = 60.0,
    may_die: frozenset[int] = frozenset(),
) -> dict[int, Any]:
    """Run ``program`` in ``world_size`` fresh processes; returns each rank's result.

    Ranks in ``may_die`` may be killed by the program (they then have no result); the
    group ends when every other rank has answered.
    """
    ctx = multiprocessing.get_context("spawn")
    port = free_port()
    procs, readers = [], {}
    try:
        for rank in range(world_size):
            reader, writer = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=_entry,
                args=(program, rank, world_size, port, writer, args),
                name=f"rpc-worker-{rank}",
                daemon=True,
            )
            proc.start()
            writer.close()
            procs.append(proc)
            readers[reader] = rank
        return _collect(procs, {r: k for r, k in readers.items() if k not in may_die}, timeout)
    finally:
        for rank, proc in enumerate(procs):
            if rank in may_die:
                proc.kill()  # a victim the program did not get to kill
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)


def _collect(procs: list[Any], readers: dict[Connection, int], timeout: float) -> dict[int, Any]:
    deadline = time.monotonic() + timeout
    results: dict[int, Any] = {}
    errors: dict[int, str] = {}
    pending = dict(readers)
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            details = "\n".join(f"--- rank {r}:\n{text}" for r, text in sorted(errors.items()))
            raise GroupFailed(
                f"ranks {sorted(pending.values())} did not finish in time; other ranks "
                f"failed:\n{details}"
                if errors
                else f"ranks {sorted(pending.values())} did not finish within {timeout} s"
            )
        for reader in wait(list(pending), timeout=left):
            rank = pending.pop(reader)  # type: ignore[call-overload]
            try:
                status, value = reader.recv()  # type: ignore[union-attr]
            except EOFError:
                procs[rank].join(timeout=5)
                errors[rank] = f"died without answering (exit code {procs[rank].exitcode})"
                continue
            if status == "ok":
                results[rank] = value
            else:
                errors[rank] = value
                # The others may wait for the failed rank forever (torch's shutdown does):
                # give them a short grace, not the whole time limit.
                deadline = min(deadline, time.monotonic() + _GRACE_AFTER_ERROR_S)
    if errors:
        details = "\n".join(f"--- rank {rank}:\n{text}" for rank, text in sorted(errors.items()))
        raise GroupFailed(f"{len(errors)} worker(s) failed:\n{details}")
    return results
