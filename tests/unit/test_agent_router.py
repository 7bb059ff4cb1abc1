"""The runtime's ``AgentRouter`` alone (``_hosts/_agent_router.py``): how one call's frames
leave a process, batched per host agent, with no runtime, no process and no socket.

The router gets a way to send one frame and the bulk part; here both record what they
are given, and each agent is a small stand-in with what ``RelayConnection`` and the
router use of an ``AgentLink`` (its connection, its tree, ``cast``). The real agents,
over real sockets, are ``tests/multihost/test_host_agents.py`` and ``test_agent_tree.py``.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any, cast

import pytest

from actormesh._core import headers
from actormesh._exceptions import ActorDiedError
from actormesh._hosts._agent_link import AgentLink, RelayConnection
from actormesh._hosts._agent_router import AgentRouter, Frame, Group
from actormesh._hosts._cast_tree import CastTree
from actormesh._transport import Buffer, Connection, SegmentShare, TransportClosed

pytestmark = pytest.mark.timeout(30)


class _AgentConn:
    """The connection to one agent: the frames sent on it."""

    def __init__(self) -> None:
        self.closed = False
        self.sent: list[list[Any]] = []
        self.refuse = False

    def send(self, parts: Sequence[Buffer], share: SegmentShare | None = None) -> None:
        if self.refuse:
            raise TransportClosed("the agent is gone")
        self.sent.append(list(parts))


class _Agent:
    """What the router uses of an ``AgentLink``: the casts it was asked to send."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.conn = _AgentConn()
        self.tree: CastTree | None = None
        self.casts: list[tuple[int, list[headers.CastTarget], list[Any], bytes | None]] = []

    def cast(
        self,
        gather: int,
        targets: list[headers.CastTarget],
        parts: list[Any],
        combine: bytes | None,
    ) -> None:
        if self.conn.refuse:
            raise TransportClosed(f"the agent {self.name} is gone")
        self.casts.append((gather, targets, parts, combine))

    def worker(self, index: int) -> RelayConnection:
        return RelayConnection(cast(AgentLink, self), f"{self.name}/w{index}")


class _Sent:
    """The router's ``send``: every frame sent straight, and to whom."""

    def __init__(self) -> None:
        self.frames: list[tuple[Any, Any, list[Any], SegmentShare | None]] = []
        self.dead: set[int] = set()

    def __call__(
        self,
        conn: Connection,
        header: Any,
        parts: Sequence[Buffer],
        share: SegmentShare | None = None,
    ) -> None:
        if id(conn) in self.dead:
            raise ActorDiedError("gone", reason="the process is gone")
        self.frames.append((conn, header, list(parts), share))


class _Bulk:
    """The bulk part: no routes of its own; records the groups offered, takes none."""

    def __init__(self) -> None:
        self.routes: dict[str, Any] = {}
        self.offered: list[list[Group]] = []

    def cast(
        self,
        groups: list[Group],
        gather: int,
        combine: bytes | None,
        failed: list[tuple[tuple[int, ...], str]],
    ) -> list[Group]:
        self.offered.append(groups)
        return groups

    def cast_routed(
        self,
        frames: Sequence[Frame],
        gather: int,
        combine: bytes | None,
        failed: list[tuple[tuple[int, ...], str]],
    ) -> list[Frame]:
        return list(frames)


def _router() -> tuple[AgentRouter, _Sent, _Bulk]:
    sent, bulk = _Sent(), _Bulk()
    return AgentRouter(sent, bulk), sent, bulk


def _call(rank: int) -> headers.Call:
    return headers.Call(7, "mesh", (rank,), "step", None, None, None, None)


def test_the_workers_of_one_agent_get_one_cast_and_a_worker_of_this_host_its_frame() -> None:
    router, sent, bulk = _router()
    agent = _Agent("a")
    local = cast(Connection, object())
    parts = [b"args"]
    frames: list[Frame] = [
        (agent.worker(0), (0,), _call(0), parts),
        (agent.worker(1), (1,), _call(1), parts),
        (agent.worker(2), (2,), _call(2), parts),
        (local, (3,), _call(3), parts),
    ]
    assert router.send_frames(frames, gather=7) == []
    ((gather, targets, cast_parts, combine),) = agent.casts
    assert gather == 7 and cast_parts is parts and combine is None
    assert [(address, ranks) for address, ranks, _ in targets] == [
        ("a/w0", (0,)),
        ("a/w1", (1,)),
        ("a/w2", (2,)),
    ]
    # Each target carries its own header, encoded once for the agent to pass on.
    assert [pickle.loads(header)[3] for _, _, header in targets] == [(0,), (1,), (2,)]
    assert [(conn, ranks) for conn, (_, _, ranks, *_), _, _ in sent.frames] == [(local, (3,))]
    assert bulk.offered == []  # one agent: no chain to send down


def test_a_single_worker_behind_an_agent_gets_its_frame_alone() -> None:
    router, sent, _ = _router()
    agent = _Agent("a")
    worker = agent.worker(0)
    assert router.send_frames([(worker, (0,), _call(0), [b"x"])]) == []
    assert agent.casts == []
    ((conn, header, parts, share),) = sent.frames
    assert conn is worker and header == _call(0) and parts == [b"x"] and share is None


def test_frames_to_several_processes_here_with_the_same_parts_share_one_segment() -> None:
    router, sent, _ = _router()
    shared, alone = [b"big"], [b"other"]
    a, b, c = (cast(Connection, object()) for _ in range(3))
    router.send_frames([(a, (0,), _call(0), shared), (b, (1,), _call(1), shared)])
    router.send_frames([(c, (2,), _call(2), alone), (a, (0,), _call(0), [b"x"])])
    first, second, third, fourth = (share for _, _, _, share in sent.frames)
    assert first is not None and first is second
    assert third is None and fourth is None  # nobody else reads their parts


def test_several_agents_are_offered_to_the_bulk_part_then_each_gets_its_cast() -> None:
    router, _, bulk = _router()
    agents = [_Agent("a"), _Agent("b")]
    parts = [b"weights"]
    frames: list[Frame] = [
        (agent.worker(i), (2 * n + i,), _call(2 * n + i), parts)
        for n, agent in enumerate(agents)
        for i in range(2)
    ]
    assert router.send_frames(frames, gather=7) == []
    ((first, second),) = bulk.offered
    assert [len(group) for group, _ in (first, second)] == [2, 2]
    assert [[ranks for _, ranks, _ in agent.casts[0][1]] for agent in agents] == [
        [(0,), (1,)],
        [(2,), (3,)],
    ]


def test_what_cannot_be_sent_is_named_with_its_ranks() -> None:
    router, sent, _ = _router()
    gone, alive = _Agent("gone"), _Agent("alive")
    gone.conn.refuse = True
    dead = cast(Connection, object())
    sent.dead.add(id(dead))
    shared = [b"p"]  # (frames are batched per agent when they share their parts)
    frames: list[Frame] = [
        (gone.worker(0), (0,), _call(0), shared),
        (gone.worker(1), (1,), _call(1), shared),
        (alive.worker(0), (2,), _call(2), [b"q"]),
        (dead, (3,), _call(3), [b"r"]),
    ]
    failed = router.send_frames(frames)
    assert sorted(failed) == [
        ((0,), "the agent gone is gone"),
        ((1,), "the agent gone is gone"),
        ((3,), "the process is gone"),
    ]
    assert [conn.peer for conn, _, _, _ in sent.frames] == ["alive/w0"]


def test_a_tree_of_agents_gets_one_tree_cast_per_child_of_this_process() -> None:
    router, _, bulk = _router()
    agents = [_Agent(f"h{i}") for i in range(3)]
    CastTree(cast(list[AgentLink], agents), 1, [f"tcp://h{i}:1" for i in range(3)])
    parts = [b"args"]
    frames: list[Frame] = [(agents[i].worker(0), (i,), _call(i), parts) for i in range(3)]
    assert router.send_frames(frames, gather=7) == []
    assert bulk.offered == []  # in a tree the parts go down with the cast
    assert [agent.conn.sent for agent in agents[1:]] == [[], []] and agents[0].casts == []
    ((header, *rest),) = agents[0].conn.sent  # one frame, to the top of the tree
    assert rest == parts
    tree_cast = headers.read(headers.TreeCast, headers.decode(header))
    assert tree_cast.gather == 7
    assert [(address, ranks) for address, ranks, _ in tree_cast.targets] == [("h0/w0", (0,))]
    ((address, targets, below),) = tree_cast.below  # fan-out 1: a chain h0 -> h1 -> h2
    assert address == "tcp://h1:1" and [ranks for _, ranks, _ in targets] == [(1,)]
    ((address, targets, below),) = below
    assert address == "tcp://h2:1" and [ranks for _, ranks, _ in targets] == [(2,)]
    assert below == []


def test_a_tree_whose_top_cannot_be_reached_fails_every_rank_below_it() -> None:
    router, _, _ = _router()
    agents = [_Agent(f"h{i}") for i in range(3)]
    CastTree(cast(list[AgentLink], agents), 1, [f"tcp://h{i}:1" for i in range(3)])
    agents[0].conn.refuse = True
    parts = [b"p"]
    frames: list[Frame] = [(agents[i].worker(0), (i,), _call(i), parts) for i in range(3)]
    failed = router.send_frames(frames, gather=7)
    assert failed == [((0, 1, 2), "the agent is gone")]
