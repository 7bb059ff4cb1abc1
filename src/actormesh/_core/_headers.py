"""Message headers: one definition per message kind, its builder and its reader.

A frame's first part is its header, pickled on its own so a fan-out re-encodes only the
header per destination, never the arguments. On the wire a header is a plain tuple
whose first item is the message kind and whose other items are the fields below, in
order: ``(CALL, req_id, mesh_id, ranks, endpoint, token, port, view, trace)``. Code never
builds or unpacks those tuples by hand: it builds the kind's ``NamedTuple`` (the fields
alone; ``KINDS`` maps each kind to its class), ``encode`` turns it into the wire tuple's
bytes, and a handler reads a received tuple back with ``read(Call, header)``. The wire
stays a plain tuple (a ``NamedTuple`` pickles with its class name, five times slower),
so the dispatch (``_dispatch``, and its compiled twin) checks it as before, against
``LAYOUTS``, which is derived from these classes.

Between an owner and its workers::

    Hello     worker -> owner, once connected (info: a dict; a joining process says who
              it is)
    Spawn     + factory pickle and buffers
    Call      + (args, kwargs) pickle and buffers; with a token, answer on the
              connection that said ReplyTo with it (if still open); with a port
              (address, id), send each actor's answer there as a Reply to that id;
              view: (labels, sizes, ranks) of the slice called
    Reply     + value pickle (or error payload) and buffers
    Failure   + error payload: a reply-less call failed
    StopMesh  drop every actor of a mesh in this process
    Cancel    the caller gave up on a request
    Shutdown  the owner asks the worker to exit
    Ping/Pong owner -> worker heartbeat, answered on the worker's loop (never an actor
              thread)
    Inspect   what are these actors doing about request ``call_id``? one Reply (rank
              -1) with a ``{rank: description}`` pickle
    ReplyTo   first frame of a connection that a caller's own event loop reads replies on
    Observe   what the process and its actors are doing (``what``: "stats" or
              "stacks"); one Reply (rank -1) with a dict pickle, built on the worker's
              loop
    Debug     + details pickle: a remote breakpoint. Worker -> owner on a connection of
              its own ("open", "out", "state", "close"); owner -> worker ("in"); owners
              that are not the controller pass them on by ``session``

Between an owner and a host agent (``actormesh._hosts``), which stands between the owner
and the workers of one host::

    Relay     + a whole frame for the worker at ``address``
    Cast      + parts shared by every worker named: each target ``(address, ranks,
              encoded header)`` gets its header and the parts; ``gather``: the req_id
              whose replies the agent batches; ``combine``: how it folds their values
    Replies   + every reply's parts, back to back; ``replies``: ``(req_id, rank, ok,
              nparts)`` for each
    HostOp    + args pickle: a host operation (spawn, relaunch, signal); one Reply
              (rank -1)
    Event     + details pickle: a worker exited, or output lines for the owner's streams

Bulk data of a cast, down a chain (or small tree) of agents (``actormesh._hosts._bulk``)::

    BulkOpen  parent -> child: transfer ``transfer`` of parts of ``sizes`` bytes, in
              chunks of ``chunk``; ``hosts``: the child's subtree, ``(address, host)``
              each, the child first; its children are cut from the rest by ``fanout``
    BulkData  + one chunk: the bytes of the transfer's stream at ``offset``
    BulkAck   child -> parent: it holds the first ``have`` bytes; ``done``: it and its
              whole subtree hold everything
    BulkCast  + the cast's small parts: a Cast whose parts at ``places`` are the
              transfer's, delivered once the transfer is in
Between host agents, when a host mesh has more hosts than its fan-out (``_hosts._tree``)::

    TreeCast  + parts shared by every worker named: a Cast whose ``targets`` are this
              host's, and ``below`` the branches to forward: ``(agent address, targets,
              below)`` for each child agent whose subtree the cast touches; a gathering
              one comes back as one Replies frame per child link, once its whole
              subtree answered
    Route     + a whole frame for the worker at ``address``, through the agents at
              ``hops`` in turn (the last is its own): one actor's path down the tree;
              ``address`` "" (``TO_AGENT``): the frame is for the last agent itself,
              from its owner (an agent that joined through its parent, ``_hosts._uplink``)
    Up        + a whole frame for the owner from the agent at ``origin``, which joined
              through its parent: each agent above passes it on as it came, and the
              owner reads the frame as if that agent's own connection carried it
    CastPlan  where a whole mesh's casts go, learnt once by every agent of its tree
              (``_hosts._cast_plan``): this host's workers ``targets``, ``(address,
              ranks)`` each, and ``below`` the branches to forward, ``(agent address,
              targets, below)`` each; plan ``plan`` of mesh ``mesh_id`` replaces any
              older one
    PlannedCast + parts shared by every worker: a call to the whole mesh by its plan;
              each agent makes its workers' Call headers (``req_id``, ``endpoint``,
              ``port``) and forwards the frame as it came to its children of the plan;
              ``gather`` and ``combine`` as in a TreeCast

``req_id`` 0 means no reply is wanted (``broadcast``). A reply whose rank is ``PARTIAL``
carries the combined value of several ranks, and which ranks they are, as runs
(``_shape.rank_runs``; a reducing call through a host agent).
"""

from __future__ import annotations

import pickle
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from ._dispatch import entry_for, frame_table

__all__ = [
    "BULK_ACK",
    "BULK_CAST",
    "BULK_DATA",
    "BULK_OPEN",
    "Branch",
    "BulkAck",
    "BulkCast",
    "BulkData",
    "BulkOpen",
    "CALL",
    "CANCEL",
    "CAST",
    "CAST_PLAN",
    "Call",
    "Cancel",
    "Cast",
    "CastPlan",
    "CastTarget",
    "DEBUG",
    "Debug",
    "EVENT",
    "Event",
    "FAILURE",
    "Failure",
    "HELLO",
    "HOST",
    "Header",
    "Hello",
    "HostOp",
    "INSPECT",
    "Inspect",
    "KINDS",
    "LAYOUTS",
    "OBSERVE",
    "Observe",
    "PARTIAL",
    "PING",
    "PLANNED_CAST",
    "PONG",
    "Ping",
    "PlanBranch",
    "PlanTarget",
    "PlannedCast",
    "Pong",
    "RELAY",
    "REPLIES",
    "REPLY",
    "REPLY_TO",
    "ROUTE",
    "Ranks",
    "Relay",
    "Replies",
    "Reply",
    "ReplyTo",
    "Route",
    "SHUTDOWN",
    "SPAWN",
    "STOP_MESH",
    "Shutdown",
    "Spawn",
    "StopMesh",
    "TO_AGENT",
    "TREE_CAST",
    "TreeCast",
    "UNPLANNED",
    "UP",
    "Up",
    "View",
    "decode",
    "encode",
    "encode_reply",
    "make",
    "read",
]

HELLO, SPAWN, CALL, REPLY, FAILURE, STOP_MESH, CANCEL, SHUTDOWN = range(1, 9)
PING, PONG, INSPECT, REPLY_TO = range(9, 13)
RELAY, CAST, REPLIES, HOST, EVENT = range(13, 18)
OBSERVE, DEBUG = range(18, 20)
# Bulk data (kept apart from the kinds above, which may grow).
BULK_OPEN, BULK_DATA, BULK_ACK, BULK_CAST = range(40, 44)
TREE_CAST, ROUTE, CAST_PLAN, PLANNED_CAST, UP = range(20, 25)
# A Route's address for a frame to the last agent of its hops itself.
TO_AGENT = ""

# The rank of a reply that stands for several ranks: ``(runs of ranks, combined value)``.
PARTIAL = -2
# The rank of an agent's error reply to a PlannedCast whose plan it does not know.
UNPLANNED = -4

Ranks = tuple[int, ...]
# A called slice's shape: its dimension labels, sizes, and the ranks it holds, packed
# (``_shape.pack_ranks``: a strided block of ranks travels as its offset and strides).
View = tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...]]
# One worker of a Cast: its address, the ranks called there, its encoded header.
CastTarget = tuple[str, Ranks, bytes]
# One child agent's part of a TreeCast: its address, its targets, and its own branches.
Branch = tuple[str, list[CastTarget], list[Any]]
# One worker of a CastPlan: its address and the mesh's ranks there.
PlanTarget = tuple[str, Ranks]
# One child agent's part of a CastPlan: its address, its targets, and its own branches.
PlanBranch = tuple[str, list[PlanTarget], list[Any]]
# One reply of a Replies batch: req_id, rank, ok, and how many of the frame's parts are its.
BatchedReply = tuple[int, int, bool, int]


class Hello(NamedTuple):
    address: str
    pid: int
    key: str
    info: dict[str, Any]


class Spawn(NamedTuple):
    req_id: int
    mesh_id: str
    ranks: Ranks


class Call(NamedTuple):
    req_id: int
    mesh_id: str
    ranks: Ranks
    endpoint: str
    token: str | None = None  # answer on the reply route this token named
    port: tuple[str, int] | None = None  # answer there, as a Reply to its id
    view: View | None = None  # the slice the call was made on
    trace: str | None = None  # the caller's W3C traceparent (OpenTelemetry on; _otel)


class Reply(NamedTuple):
    req_id: int
    rank: int
    ok: bool


class Failure(NamedTuple):
    mesh_id: str
    rank: int
    endpoint: str


class StopMesh(NamedTuple):
    req_id: int
    mesh_id: str


class Cancel(NamedTuple):
    req_id: int
    mesh_id: str
    ranks: Ranks


class Shutdown(NamedTuple):
    pass


class Ping(NamedTuple):
    seq: int


class Pong(NamedTuple):
    seq: int


class Inspect(NamedTuple):
    req_id: int
    mesh_id: str
    ranks: Ranks
    call_id: int


class ReplyTo(NamedTuple):
    token: str


class Relay(NamedTuple):
    address: str


class Cast(NamedTuple):
    gather: int
    targets: list[CastTarget]
    # A reducing call's combine function, pickled: the agent folds its workers' values
    # with it and answers with one PARTIAL reply for them (see ``_hosts/_reduction.py``).
    combine: bytes | None = None


class TreeCast(NamedTuple):
    gather: int
    targets: list[CastTarget]
    combine: bytes | None
    below: list[Branch]


class Route(NamedTuple):
    hops: tuple[str, ...]
    address: str


class Up(NamedTuple):
    origin: str


class CastPlan(NamedTuple):
    mesh_id: str
    plan: int
    targets: list[PlanTarget]
    below: list[PlanBranch]


class PlannedCast(NamedTuple):
    gather: int
    combine: bytes | None
    mesh_id: str
    plan: int
    req_id: int
    endpoint: str
    port: tuple[str, int] | None


class Replies(NamedTuple):
    replies: list[BatchedReply]


class HostOp(NamedTuple):
    req_id: int
    op: str


class Event(NamedTuple):
    what: str
    address: str


class Observe(NamedTuple):
    req_id: int
    what: str


class Debug(NamedTuple):
    session: str
    op: str


class BulkOpen(NamedTuple):
    transfer: int
    sizes: list[int]
    chunk: int
    fanout: int
    hosts: list[tuple[str, str]]


class BulkData(NamedTuple):
    transfer: int
    offset: int


class BulkAck(NamedTuple):
    transfer: int
    have: int
    done: bool


class BulkCast(NamedTuple):
    transfer: int
    gather: int
    targets: list[CastTarget]
    combine: bytes | None
    places: list[int]


# Each kind's class; a header is an instance of one of them.
KINDS: dict[int, type[tuple[Any, ...]]] = {
    HELLO: Hello,
    SPAWN: Spawn,
    CALL: Call,
    REPLY: Reply,
    FAILURE: Failure,
    STOP_MESH: StopMesh,
    CANCEL: Cancel,
    SHUTDOWN: Shutdown,
    PING: Ping,
    PONG: Pong,
    INSPECT: Inspect,
    REPLY_TO: ReplyTo,
    RELAY: Relay,
    CAST: Cast,
    REPLIES: Replies,
    HOST: HostOp,
    EVENT: Event,
    OBSERVE: Observe,
    DEBUG: Debug,
    BULK_OPEN: BulkOpen,
    BULK_DATA: BulkData,
    BULK_ACK: BulkAck,
    BULK_CAST: BulkCast,
    TREE_CAST: TreeCast,
    ROUTE: Route,
    CAST_PLAN: CastPlan,
    PLANNED_CAST: PlannedCast,
    UP: Up,
}
_KIND_OF = {cls: kind for kind, cls in KINDS.items()}
Header = tuple[Any, ...]  # an instance of a class of KINDS

# How many items a header of each kind has on the wire (the kind, then its fields), for
# the dispatch's check.
LAYOUTS: dict[int, tuple[int, ...]] = {
    kind: (len(cls._fields) + 1,)  # type: ignore[attr-defined]
    for kind, cls in KINDS.items()
}


# Both run for every message: module-level names, bound once (no attribute look-ups).
_dumps = pickle.dumps
_tuple_new = tuple.__new__


def encode(header: Header) -> bytes:
    """The bytes of ``header`` (an instance of a class of ``KINDS``) on the wire: its
    kind, then its fields, as a plain tuple, pickled."""
    return _dumps((_KIND_OF[type(header)], *header), 5)


def encode_reply(req_id: int, rank: int, ok: bool) -> bytes:
    """``encode(Reply(req_id, rank, ok))``, without making the instance first: every
    answer an actor sends is encoded here (a unit test holds the two equal)."""
    return _dumps((REPLY, req_id, rank, ok), 5)


_H = TypeVar("_H")


def read(kind: type[_H], header: tuple[Any, ...]) -> _H:
    """A received (and checked) wire tuple as its kind's class: ``read(Call, header)``.

    The header must have passed the dispatch's (or ``decode``'s) check against
    ``LAYOUTS``, which makes sure it holds every field of its kind: so the instance is made
    straight from the wire tuple's items (``tuple.__new__``, in C), not through the
    class' generated ``__new__``, a Python call that takes every field as an argument
    (about twice as slow for a CALL's 8 fields; this runs for every call and every
    reply).
    """
    return _tuple_new(kind, header[1:])  # type: ignore[type-var]


if TYPE_CHECKING:

    def make(kind: type[_H], fields: tuple[Any, ...]) -> _H:
        """``kind(*fields)``, every field given in order: ``make(Call, (req_id, ...))``."""
        ...

else:
    # Made in C (``tuple.__new__``), not through the class' generated ``__new__``, a
    # Python call: the caller's side of every call makes a Call per frame with it.
    make = _tuple_new


def _known(conn: Any, header: tuple[Any, ...], parts: Any) -> None:
    """The handler of every kind in ``_CHECKS`` (a table used only to check headers)."""


_CHECKS = frame_table(LAYOUTS, {}, _known)


def decode(data: Any) -> tuple[Any, ...]:
    """The wire tuple of a frame's first part, checked (frames a runtime receives go
    through ``_dispatch.dispatch``, which checks them the same way); read it with its
    ``read``.

    Raises:
        ValueError: not a header of a kind this version knows, with that kind's layout.
    """
    header: tuple[Any, ...] = pickle.loads(data)
    entry_for(_CHECKS, header)
    return header
