"""Settings: one frozen object, read from ``ACTORMESH_*`` variables in exactly one place.

Nothing here runs at import: ``Config.from_env()`` is called when a runtime starts, so a
program may set variables before its first mesh. The one exception is
``extensions_disabled()``, read when the compiled hot path is chosen (at import, as
aiohttp's ``AIOHTTP_NO_EXTENSIONS`` is: a choice made once per process).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = ["Config", "OutputMode", "extensions_disabled"]

OutputMode = Literal["prefix", "raw", "off"]


@dataclass(frozen=True, kw_only=True)
class Config:
    """Runtime settings.

    Attributes:
        output: what happens to actors' stdout/stderr: ``"prefix"`` forwards every line to
            the controller prefixed with mesh name and coordinates; ``"raw"`` lets workers
            write to the controller's terminal unprefixed; ``"off"`` discards it.
        default_timeout: seconds every wait may take when the caller gives none
            (``None``: wait forever; death of a peer still ends the wait).
        spawn_timeout: seconds a process mesh may take to start.
        stop_grace: seconds between SIGTERM and SIGKILL when stopping processes.
        max_message_bytes: the largest message a sender may send; larger ones raise
            ``MessageTooLargeError`` before anything is sent.
        shm_threshold: buffers at least this large travel through shared memory between
            processes of one host (0 disables shared memory).
        event_loop: ``"uvloop"`` (default when installed) or ``"asyncio"``.
        socket_dir: ``None`` (the default): Unix sockets get names in Linux's abstract
            namespace, so nothing is ever created on disk. A directory: socket files in a
            private directory under it instead (mode 0700), removed when the process
            that made it exits (not after a SIGKILL).
        heartbeat_interval: seconds between liveness probes of worker processes.
        heartbeat_timeout: seconds without an answer after which a worker that is alive
            but frozen is declared dead.
        listen_host: the interface TCP listeners bind to (processes on other hosts reach
            this one there). ``None``: loopback in a controller; in a worker, the address
            of the interface that reaches its owner.
        handshake_timeout: seconds a peer that connects to one of this process' TCP
            listeners gets to authenticate; a slower one is dropped.
        max_handshakes: authentications in progress at once on one listener; when a new
            peer would pass it, the one silent longest is dropped to make room.
        max_handshakes_per_host: the same cap for peers from one address.
        observe: keep what ``actormesh top`` and ``actormesh stacks`` show: a controller
            registers itself (an abstract Unix socket only this user can reach, found by
            the ``actormesh`` command; nothing on disk) and workers count each endpoint's
            calls, errors and run times. ``False`` turns both off; breakpoints in actors
            and ``mesh.stacks()`` work either way.
        timeline_spans: call spans each process keeps for ``actormesh timeline`` (a ring:
            the last ones), recorded as each message ends; 0 keeps none. Off with
            ``observe``.
        otel: OpenTelemetry (``actormesh[otel]``): ``"on"`` traces every call (a span
            in the caller, one in each actor that runs it, the trace context carried
            with the call) and records runtime metrics per rank, through the process'
            tracer and meter providers; ``"otlp"`` also installs the SDK's providers
            exporting over OTLP/HTTP (``OTEL_EXPORTER_OTLP_ENDPOINT``), for workers;
            ``"off"`` imports nothing.
        event_log: keep the job event log (process starts and exits, restarts,
            supervision events, timeouts, meshes, weight versions) in a SQLite file under
            ``state_dir`` that survives the job, read with ``actormesh log``; the
            controller writes it, and each host agent one of its own for its host.
        state_dir: where event logs go (``<state_dir>/jobs/<job>.sqlite``). ``None``:
            ``$XDG_STATE_HOME/actormesh``, else ``~/.local/state/actormesh``.
        job_name: the job's name in its event log's file name and ``job`` table.
            ``None``: the program's name, its start time (UTC) and pid
            (``train-20261127-013502-4947``).
        output_aggregate: identical lines printed by several actors of a mesh larger than
            this within ``output_window`` seconds are shown once, with the ranks and a
            count (``[trainer {gpus=0..7}] x8 loss 0.31``); 0 shows every line as printed.
        output_window: seconds within which identical lines are merged (see above).
        progress: progress lines on stderr for long operations (spawning many processes,
            weight sync, a stop that waits): ``"auto"`` when stderr is a terminal and the
            operation has taken more than 2 s, ``"always"`` (to stderr, even into a log),
            ``"never"``.
        fork_server: fork local workers from one pre-imported template process per
            owner (milliseconds each) instead of starting each as a fresh interpreter;
            used where the compiled fork is built (see ``_hosts._forkserver``).
        reply_spin: seconds a thread waiting in ``.get()`` for a reply keeps polling its
            socket before it sleeps, and an ``await`` on an asyncio loop with nothing
            else ready polls the loop's reply route before yielding (0: sleep at once).
            A short poll catches the replies of quick calls without the wake-up a
            sleeping thread costs (tens of µs on a VM); a longer call pays at most this
            much CPU before the thread sleeps.
        secret: the job's secret; every TCP connection proves it before a frame is read.
            ``None``: a controller makes one up when it first listens on TCP and hands it
            to the workers it starts; workers started by someone else need it given.
        jobs_dir: where the records of leased jobs are written (one file per job, mode
            0600, in a directory of mode 0700: where its agents are and its secret; see
            docs/leases.md). ``None``: ``$XDG_STATE_HOME/actormesh/jobs``, else
            ``~/.local/state/actormesh/jobs``.
        bulk_threshold: a cast to workers on several host agents whose large parts
            (each at least ``shm_threshold``) add up to this many bytes sends them down
            a chain of the agents (see ``bulk_fanout``) in pipelined chunks, so the
            sender's link carries them once whatever the number of hosts
            (docs/multihost.md, "Bulk data"); 0: never, every agent gets its own copy.
        bulk_fanout: how many agents each agent (and the sender) forwards bulk data
            to: 1 is a chain (each link carries the bytes once in each direction), 2 a
            binary tree (shallower, but an interior agent's uplink carries two copies).
        bulk_chunk: the bytes of one chunk of bulk data; each agent forwards a chunk
            once it has it whole, so a chain of ``n`` agents adds ``n`` chunks' transfer
            time to the first agent's.
        fan_out: a host mesh with more hosts than this has its host agents form a tree
            of this fan-out: the controller sends a cast to at most this many agents,
            each forwards it to its children and merges their replies
            (docs/multihost.md); ``host_mesh(fan_out=...)`` overrides it per mesh. At
            least 2.
    """

    output: OutputMode = "prefix"
    default_timeout: float | None = None
    spawn_timeout: float = 60.0
    stop_grace: float = 3.0
    max_message_bytes: int = 1 << 40
    shm_threshold: int = 1 << 20
    event_loop: Literal["uvloop", "asyncio"] = "uvloop"
    socket_dir: str | None = None
    heartbeat_interval: float = 1.0
    heartbeat_timeout: float = 30.0
    listen_host: str | None = None
    handshake_timeout: float = 5.0
    max_handshakes: int = 256
    max_handshakes_per_host: int = 64
    observe: bool = True
    timeline_spans: int = 8192
    otel: Literal["off", "on", "otlp"] = "off"
    event_log: bool = True
    state_dir: str | None = None
    job_name: str | None = None
    output_aggregate: int = 4
    output_window: float = 0.25
    progress: Literal["auto", "always", "never"] = "auto"
    secret: str | None = dataclasses.field(default=None, repr=False)
    fork_server: bool = True
    reply_spin: float = 100e-6
    jobs_dir: str | None = None
    bulk_threshold: int = 16 << 20
    bulk_fanout: int = 1
    bulk_chunk: int = 256 << 10
    fan_out: int = 16

    def __post_init__(self) -> None:
        if self.output not in ("prefix", "raw", "off"):
            raise ValueError(f"output must be 'prefix', 'raw' or 'off', not {self.output!r}")
        if self.event_loop not in ("uvloop", "asyncio"):
            raise ValueError(f"event_loop must be 'uvloop' or 'asyncio', not {self.event_loop!r}")
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.type in ("float", "int", "float | None", "int | None") and not (
                (value is None and "None" in field.type)
                or (isinstance(value, int | float) and not isinstance(value, bool))
            ):
                raise TypeError(
                    f"{field.name} must be a number{' or None' if 'None' in field.type else ''}, "
                    f"not {value!r}"
                )
        if self.default_timeout is not None and self.default_timeout <= 0:
            raise ValueError(
                f"default_timeout must be positive or None, not {self.default_timeout!r}"
            )
        for name in (
            "spawn_timeout",
            "stop_grace",
            "heartbeat_interval",
            "heartbeat_timeout",
            "handshake_timeout",
            "max_handshakes",
            "max_handshakes_per_host",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, not {getattr(self, name)!r}")
        if self.progress not in ("auto", "always", "never"):
            raise ValueError(f"progress must be 'auto', 'always' or 'never', not {self.progress!r}")
        if self.output_aggregate < 0 or self.output_window <= 0:
            raise ValueError("output_aggregate must be >= 0 and output_window positive")
        if not 0 <= self.reply_spin <= 0.01:
            raise ValueError(f"reply_spin must be between 0 and 0.01 s, not {self.reply_spin!r}")
        if self.max_message_bytes <= 0 or self.shm_threshold < 0:
            raise ValueError("max_message_bytes must be positive and shm_threshold >= 0")
        if self.otel not in ("off", "on", "otlp"):
            raise ValueError(f"otel must be 'off', 'on' or 'otlp', not {self.otel!r}")
        if self.bulk_threshold < 0 or self.bulk_fanout < 1 or self.bulk_chunk < 4096:
            raise ValueError(
                "bulk_threshold must be >= 0, bulk_fanout >= 1 and bulk_chunk >= 4096, not "
                f"{self.bulk_threshold!r}, {self.bulk_fanout!r}, {self.bulk_chunk!r}"
            )
        if self.fan_out < 2:
            raise ValueError(f"fan_out must be an int >= 2, not {self.fan_out!r}")
        if self.timeline_spans < 0:
            raise ValueError(f"timeline_spans must be >= 0, not {self.timeline_spans!r}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Config:
        """Build a Config from ``ACTORMESH_<FIELD>`` variables (upper case field names)."""
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for field in dataclasses.fields(cls):
            raw = env.get(f"ACTORMESH_{field.name.upper()}")
            if raw is None or raw == "":
                continue
            values[field.name] = _parse(field.name, str(field.type), raw)
        return cls(**values)  # type: ignore[arg-type]

    def replace(self, **changes: object) -> Config:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def _parse(name: str, type_text: str, raw: str) -> object:
    try:
        if raw.lower() == "none" and "None" in type_text:
            return None
        if type_text == "bool":
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if type_text.startswith("float"):
            return float(raw)
        if type_text.startswith("int"):
            return int(raw)
    except ValueError:
        raise ValueError(f"ACTORMESH_{name.upper()}={raw!r} is not a valid {type_text}") from None
    return raw


def extensions_disabled(environ: Mapping[str, str] | None = None) -> bool:
    """True when ``ACTORMESH_NO_EXTENSIONS`` is set (non-empty): use the pure-Python hot
    path even where the compiled one is built."""
    env = os.environ if environ is None else environ
    return bool(env.get("ACTORMESH_NO_EXTENSIONS"))
