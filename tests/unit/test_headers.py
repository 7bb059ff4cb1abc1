"""Message headers (``_core/_headers.py``): each kind's class, built, encoded as the plain
wire tuple, checked and read back."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from actormesh._core import headers

pytestmark = pytest.mark.timeout(30)

# One header of every kind, with values of the types its fields hold.
EXAMPLES: list[Any] = [
    headers.Hello("tcp://10.0.0.2:7000", 4242, "k-1", {"joined": True}),
    headers.Spawn(3, "mesh-1", (0, 1)),
    headers.Call(
        4, "mesh-1", (0,), "ping", "tok", ("/tmp/p.sock", 9), (("x",), (2,), (0, 1)), "00-ab-cd-01"
    ),
    headers.Reply(4, 0, True),
    headers.Failure("mesh-1", 1, "ping"),
    headers.StopMesh(5, "mesh-1"),
    headers.Cancel(4, "mesh-1", (1,)),
    headers.Shutdown(),
    headers.Ping(17),
    headers.Pong(17),
    headers.Inspect(6, "mesh-1", (0, 1), 4),
    headers.ReplyTo("tok"),
    headers.Relay("/tmp/w.sock"),
    headers.Cast(4, [("/tmp/w.sock", (0,), b"\x80\x05")]),
    headers.Replies([(4, 0, True, 1), (4, 1, False, 1)]),
    headers.HostOp(7, "spawn"),
    headers.Event("exited", "/tmp/w.sock"),
    headers.Observe(8, "stats"),
    headers.Debug("s-1", "open"),
    headers.BulkOpen(9, [1 << 20, 5], 1 << 18, 1, [("tcp://10.0.0.3:7001", "b")]),
    headers.BulkData(9, 1 << 18),
    headers.BulkAck(9, 1 << 18, False),
    headers.BulkCast(9, 4, [("/tmp/w.sock", (0,), b"\x80\x05")], None, [1]),
    headers.TreeCast(
        4,
        [("/tmp/w.sock", (0,), b"\x80\x05")],
        None,
        [("tcp://10.0.0.3:7001", [("/tmp/v.sock", (1,), b"\x80\x05")], [])],
    ),
    headers.Route(("tcp://10.0.0.3:7001",), "/tmp/v.sock"),
    headers.CastPlan(
        "mesh-1",
        2,
        [("tcp://10.0.0.2:7002", (0, 1))],
        [("tcp://10.0.0.3:7001", [("tcp://10.0.0.3:7003", (2, 3))], [])],
    ),
    headers.PlannedCast(4, None, "mesh-1", 2, 4, "ping", None),
    headers.Up("tcp://10.0.0.3:7001"),
]


def test_every_kind_has_an_example_here() -> None:
    assert sorted(type(h).__name__ for h in EXAMPLES) == sorted(
        cls.__name__ for cls in headers.KINDS.values()
    )


@pytest.mark.parametrize("header", EXAMPLES, ids=lambda h: type(h).__name__)
def test_a_header_travels_as_a_plain_tuple_of_its_kind_then_its_fields(header: Any) -> None:
    wire = pickle.loads(headers.encode(header))
    assert type(wire) is tuple  # not the class: the wire and the C dispatch see tuples
    assert headers.KINDS[wire[0]] is type(header)
    assert wire[1:] == tuple(header)
    assert len(wire) in headers.LAYOUTS[wire[0]]


@pytest.mark.parametrize("header", EXAMPLES, ids=lambda h: type(h).__name__)
def test_decode_then_read_gives_back_the_header(header: Any) -> None:
    wire = headers.decode(headers.encode(header))
    read = headers.read(type(header), wire)
    assert read == header and type(read) is type(header)


@pytest.mark.parametrize("ok", [True, False])
def test_encode_reply_is_encode_of_a_reply(ok: bool) -> None:
    # The answers' shortcut must stay byte for byte what ``encode`` makes of the class.
    assert headers.encode_reply(12, 3, ok) == headers.encode(headers.Reply(12, 3, ok))


def test_read_gives_the_kinds_class_with_every_field_named() -> None:
    call = headers.read(headers.Call, (headers.CALL, 1, "m", (0,), "ep", "t", None, None, "tp"))
    assert type(call) is headers.Call
    assert (call.req_id, call.endpoint, call.token, call.trace) == (1, "ep", "t", "tp")


def test_make_is_the_class_of_every_field_given() -> None:
    fields = (4, "mesh-1", (0,), "ping", "tok", None, None, None)
    call = headers.make(headers.Call, fields)
    assert type(call) is headers.Call and call == headers.Call(*fields)
    assert call.endpoint == "ping" and call.trace is None


def test_call_and_reply_fields_are_in_the_order_their_handlers_unpack() -> None:
    # Hosting._handle_call and CoreRuntime._handle_reply unpack the wire tuple in this
    # order (no instance made for the two most frequent frames): a field added or moved
    # must change them too.
    assert headers.Call._fields == (
        "req_id", "mesh_id", "ranks", "endpoint", "token", "port", "view", "trace",
    )  # fmt: skip
    assert headers.Reply._fields == ("req_id", "rank", "ok")


def test_a_call_without_its_optional_fields_still_has_them_on_the_wire() -> None:
    wire = headers.decode(headers.encode(headers.Call(1, "m", (0,), "ep")))
    assert wire == (headers.CALL, 1, "m", (0,), "ep", None, None, None, None)
    call = headers.read(headers.Call, wire)
    assert (call.token, call.port, call.view, call.trace) == (None, None, None, None)


@pytest.mark.parametrize(
    ("wire", "problem"),
    [
        ((headers.REPLY, 1, 0), "with 3 items"),
        ((headers.CALL, 1, "m", (0,), "ep"), "with 5 items"),
        ((99, 1), "unknown message kind 99"),
        ([headers.PING, 1], "malformed envelope header"),
    ],
)
def test_decode_refuses_what_is_not_a_header_of_a_known_layout(wire: Any, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        headers.decode(pickle.dumps(wire))


def test_the_kind_numbers_are_the_protocols() -> None:
    # Changing a number changes the protocol: peers of two versions would misread frames.
    assert (headers.HELLO, headers.CALL, headers.REPLY, headers.CAST, headers.DEBUG) == (
        1,
        3,
        4,
        14,
        19,
    )
