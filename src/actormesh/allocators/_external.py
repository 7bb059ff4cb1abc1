"""``ExternalAllocator``: processes started by someone else join the controller's mesh.

A cluster scheduler (SLURM's ``srun``, ``torchrun``, a Kubernetes job, a shell loop over
``ssh``) starts ``actormesh worker --join HOST:PORT`` on every node; the controller, in
``proc_mesh(..., allocator=ExternalAllocator(...))``, listens at ``HOST:PORT`` and waits
until the mesh's number of processes has joined. Every connection proves the job's secret
first. Ranks follow the rank each process asks for (``--rank``, or the launcher's
``RANK`` / ``SLURM_PROCID``), else host by host.

Processes that join before a mesh asks for them wait for it (in joining order), so one
allocator can serve several meshes in turn. The processes belong to a mesh from then on:
stopping the mesh (or the controller going away, however it ends) closes their
connections, and they exit.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._api import ProcessSpec
from .._hosts import (
    AgentLink,
    ChildProcess,
    JoinWait,
    ProcessSetup,
    Runtime,
    is_agent,
    join_order,
    prepare,
)
from .._transport import parse_tcp

__all__ = ["ExternalAllocator"]

DEFAULT_PORT = 29600


class ExternalAllocator:
    """Processes that join by themselves (``actormesh worker --join HOST:PORT``).

    Args:
        listen: ``"host:port"`` to accept joining processes on. The default listens on
            loopback only; use ``"0.0.0.0:29600"`` (or one interface's address) so that
            other hosts can join.
        secret: the job's secret, which every joining process must know (give it to them
            in ``ACTORMESH_SECRET`` or ``--secret-file``). ``None``: this process' secret,
            ``ACTORMESH_SECRET`` if set.
        timeout: seconds to wait for all processes to join (``None``:
            ``Config.spawn_timeout``).

    Example::

        procs = await proc_mesh(
            hosts=2, gpus=8, allocator=ExternalAllocator(listen="0.0.0.0:29600", secret=s)
        )
    """

    def __init__(
        self,
        listen: str = f"127.0.0.1:{DEFAULT_PORT}",
        *,
        secret: str | None = None,
        timeout: float | None = None,
    ) -> None:
        self.host, self.port = parse_tcp(listen)
        if secret is not None and not secret:
            raise ValueError("the secret must not be empty")
        self._secret = secret
        self._timeout = timeout
        self.address: str | None = None  # where it listens, once a mesh asked for processes
        self._opened = False  # its listen() opened the listener (not one already there)
        self._effective_secret: str | None = None

    def listen(self) -> str:
        """Start accepting joining processes now; returns the address to give them.

        ``proc_mesh`` does this itself; call it first to learn the port when you asked
        for port 0, or to let processes join before the mesh is asked for (they wait).
        """
        return self._listen(Runtime.get())

    def _listen(self, runtime: Runtime) -> str:
        if self._secret is not None:
            runtime.use_secret(self._secret)
        known = runtime.tcp_addresses()
        self.address = runtime.listen_tcp(self.host, self.port)
        self._opened = self._opened or self.address not in known
        self.port = parse_tcp(self.address)[1]  # the real one, if 0 was asked for
        self._effective_secret = runtime.secret
        return self.address

    def close(self) -> None:
        """Stop accepting joining processes (those in meshes already keep running)."""
        if self.address is not None:
            Runtime.get().stop_listening(self.address)
            self.address = None

    @property
    def secret(self) -> str | None:
        """The secret joining processes must know (once listening; ``None`` before)."""
        return self._effective_secret

    async def start(self, runtime: Runtime, specs: Sequence[ProcessSpec]) -> list[ChildProcess]:
        """Listen, wait for ``len(specs)`` processes to join, and give them their ranks."""
        self._listen(runtime)
        timeout = runtime.config.spawn_timeout if self._timeout is None else self._timeout
        waiting = JoinWait(runtime, len(specs), accept=lambda joined: not is_agent(joined))
        try:
            joined = await waiting.wait(timeout, f"at {self.address}")
        except BaseException:
            waiting.close()
            raise
        children: list[ChildProcess] = [
            runtime.adopt(j, spec.rank) for j, spec in zip(join_order(joined), specs)
        ]
        try:
            setup = ProcessSetup({c.rank: dict(s.env) for c, s in zip(children, specs)})
            await prepare(runtime, children, setup, timeout)
        except BaseException:
            await runtime.stop_processes(children, grace=0.0)
            raise
        return children

    async def start_hosts(self, runtime: Runtime, count: int) -> list[AgentLink]:
        """Listen, wait for ``count`` host agents (``actormesh host --join``) to join, and
        own them: the hosts of a ``host_mesh``, in joining order by host name."""
        self._listen(runtime)
        timeout = runtime.config.spawn_timeout if self._timeout is None else self._timeout
        waiting = JoinWait(runtime, count, accept=is_agent)
        try:
            joined = await waiting.wait(timeout, f"as host agents at {self.address}")
        except BaseException:
            waiting.close()
            raise
        ordered = sorted(joined, key=lambda j: (str(j.info.get("host", "")), j.address))
        return [runtime.adopt_agent(j) for j in ordered]

    async def stop_hosts(self, runtime: Runtime, links: Sequence[AgentLink], grace: float) -> None:
        """Let the host agents go: they exit, and end every process they started; then
        stop listening where this allocator opened a listener (a later job of this
        process on another network must not be advertised an address of this one)."""
        await runtime.stop_processes([link.process for link in links], grace)
        if self._opened and self.address is not None:
            runtime.stop_listening(self.address)
            self.address, self._opened = None, False

    async def stop(self, runtime: Runtime, processes: Sequence[ChildProcess], grace: float) -> None:
        """Ask the processes to exit, and close their connections (which ends them)."""
        await runtime.stop_processes(processes, grace)

    def __repr__(self) -> str:
        return f"ExternalAllocator(listen={self.host}:{self.port})"
