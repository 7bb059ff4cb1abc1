"""Monarch programs the worker tests run as processes of their own.

``python -m monarch_programs NAME ARGS...`` runs the function ``NAME`` and prints its
result as one line of JSON. Each is a complete program as a Monarch user writes it (only
``actormesh.actor`` imported), for what needs a fresh controller: attaching to workers,
choosing a transport before the first call, ``shutdown_context()``.
"""

from __future__ import annotations

import functools
import json
import sys
from typing import TYPE_CHECKING, Any

from actormesh.actor import (
    ChannelTransport,
    attach_to_workers,
    enable_transport,
    run_worker_loop_forever,
    run_worker_loop_until_shutdown,
    shutdown_context,
    start_worker_loop_forever,
    this_host,
)
from actormesh.testing import process_gone, wait_until

if TYPE_CHECKING:  # mypy sees this directory as the package tests.monarch
    from tests.monarch.monarch_actors import Echo
    from tests.monarch.monarch_support import tcp_listening
else:
    from monarch_actors import Echo
    from monarch_support import tcp_listening


def attach(first_port: str, second_port: str) -> dict[str, Any]:
    """Attaches to the workers waiting at ``first_port`` and ``second_port``; spawns a
    process per host, then shuts the hosts down."""
    for port in (first_port, second_port):
        wait_until(functools.partial(tcp_listening, int(port)), 60, f"a worker at {port}")
    hosts = attach_to_workers(
        ca="trust_all_connections",
        workers=[f"tcp://127.0.0.1:{first_port}", f"tcp://127.0.0.1:{second_port}"],
    )
    result: dict[str, Any] = {
        "extent": dict(hosts.extent),
        "initialized": hosts.initialized.get(timeout=60),
        "one_host": dict(hosts.slice(hosts=1).extent),
        "kept_host": dict(hosts.slice(hosts=slice(0, 1)).extent),
    }
    try:
        hosts.spawn_procs(per_host={"hosts": 1})
    except ValueError as error:
        result["overlap"] = str(error)
    procs = hosts.spawn_procs(per_host={"gpus": 1})
    result["proc_extent"] = dict(procs.extent)
    echo = procs.spawn("remote", Echo)
    result["ranks"] = [dict(p) for p, _ in echo.rank.call().get(timeout=60).items()]
    result["pids"] = echo.pid.call().get(timeout=60).values()
    result["where"] = echo.where.call().get(timeout=60).values()
    one = hosts.slice(hosts=1).spawn_procs(per_host={"gpus": 1})
    result["sliced_host_proc_extent"] = dict(one.extent)
    result["sliced_host_tag"] = one.spawn("one", Echo, "one").get_tag.call_one().get(timeout=60)
    one.stop().get(timeout=60)
    procs.stop().get(timeout=60)
    hosts.shutdown().get(timeout=60)
    return result


def attach_one(port: str) -> dict[str, Any]:
    """Attaches to the worker waiting at ``port``, calls an actor there, shuts it down."""
    wait_until(lambda: tcp_listening(int(port)), 60, f"a worker at {port}")
    hosts = attach_to_workers(ca="trust_all_connections", workers=[f"tcp://127.0.0.1:{port}"])
    procs = hosts.spawn_procs(per_host={"gpus": 1})
    result = {"tag": procs.spawn("remote", Echo, "remote").get_tag.call().get(timeout=60).values()}
    procs.stop().get(timeout=60)
    hosts.shutdown().get(timeout=60)
    return result


def serve_forever(port: str) -> dict[str, Any]:
    """A worker that ``run_worker_loop_forever`` serves: its process ends with its host
    mesh, so this never returns."""
    run_worker_loop_forever(ca="trust_all_connections", address=f"tcp://127.0.0.1:{port}")
    return {"returned": True}


def serve(port: str) -> dict[str, Any]:
    """A worker that ``start_worker_loop_forever`` serves, until its host mesh ends."""
    serving = start_worker_loop_forever(
        ca="trust_all_connections", address=f"tcp://127.0.0.1:{port}"
    )
    return {"ended": serving.get()}


def serve_until_shutdown(port: str) -> dict[str, Any]:
    """A worker that ``run_worker_loop_until_shutdown`` serves: it returns once its host
    mesh is shut down, and the program goes on."""
    run_worker_loop_until_shutdown(ca="trust_all_connections", address=f"tcp://127.0.0.1:{port}")
    return {"returned": True}


def shutdown() -> dict[str, Any]:
    """Picks the transport before the first call, starts processes, then ends them all
    with ``shutdown_context()``."""
    enable_transport(ChannelTransport.Unix)
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    pids: list[int] = procs.spawn("echo", Echo).pid.call().get(timeout=60).values()
    result: dict[str, Any] = {"first": shutdown_context().get(timeout=60)}
    wait_until(lambda: all(process_gone(pid) for pid in pids), 30, "the processes to end")
    result["gone"] = [process_gone(pid) for pid in pids]
    result["second"] = shutdown_context().get(timeout=60)
    return result


if __name__ == "__main__":
    name, *args = sys.argv[1:]
    print(json.dumps(globals()[name](*args)), flush=True)
