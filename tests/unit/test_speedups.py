"""The compiled per-message path (``_cframes.c``) behaves exactly as its Python twin.

Each test runs on both implementations side by side, so the suite checks the pair
whichever of them this process selected (``ACTORMESH_NO_EXTENSIONS``).
"""

from __future__ import annotations

import importlib
import os
import pickle
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actormesh._config import extensions_disabled
from actormesh._transport import _frames, _speedups
from actormesh._transport._frames import RETURNED, SHARED, encode_header

try:
    from actormesh._transport import _cframes
except ImportError:  # not built: the checks of the pair are skipped, the build test fails
    _cframes = None  # type: ignore[assignment]


class _Python:
    frame_header = staticmethod(_frames.frame_header)
    parse_inline = staticmethod(_frames.parse_inline)
    receive = staticmethod(_speedups.py_receive)
    send_buffers = staticmethod(_speedups.py_send_buffers)


IMPLEMENTATIONS = [pytest.param(_Python, id="python")]
if _cframes is not None:
    IMPLEMENTATIONS.append(pytest.param(_cframes, id="compiled"))


# Each compiled twin: (the module that selects it, its name there, the extension).
_SELECTIONS = [
    pytest.param("actormesh._transport._speedups", "parse_inline", "_cframes", id="frames"),
    pytest.param("actormesh._core._dispatch", "dispatch", "_cdispatch", id="dispatch"),
]


@pytest.mark.parametrize(("selector", "name", "extension"), _SELECTIONS)
def test_the_extension_is_built_and_selected_unless_disabled(
    selector: str, name: str, extension: str
) -> None:
    # scripts/bootstrap's `pip install -e .` builds it; a silent build failure would make
    # every run take the slow path unnoticed.
    module = importlib.import_module(selector)
    if extensions_disabled():
        assert module.COMPILED is False
        return
    package = selector.rsplit(".", 1)[0]
    try:
        compiled = importlib.import_module(f"{package}.{extension}")
    except ImportError:
        pytest.fail(f"the C extension {extension} was not built (see setup.py)")
    assert module.COMPILED is True
    assert getattr(module, name) is getattr(compiled, name)


@pytest.mark.parametrize(("selector", "name", "extension"), _SELECTIONS)
def test_setting_the_variable_selects_the_python_path(
    selector: str, name: str, extension: str
) -> None:
    code = f"import {selector} as s; print(s.COMPILED)"
    env = {**os.environ, "ACTORMESH_NO_EXTENSIONS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "False", out.stderr


parts_strategy = st.lists(st.binary(max_size=300), max_size=6)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@given(parts=parts_strategy)
@settings(max_examples=60, deadline=None)
def test_frame_header_matches_the_frame_format(impl: Any, parts: list[bytes]) -> None:
    header, size, largest = impl.frame_header(parts)
    assert header == encode_header([len(p) for p in parts])
    assert size == len(header) + sum(map(len, parts))
    assert largest == max(map(len, parts), default=0)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_frame_header_sizes_every_kind_of_buffer_in_bytes(impl: Any) -> None:
    floats = memoryview(bytearray(64)).cast("d")  # len 8, 64 bytes
    strided = memoryview(bytearray(range(10)))[::2]  # not contiguous: 5 bytes
    pickled = pickle.PickleBuffer(bytearray(7))
    header, size, largest = impl.frame_header([b"ab", bytearray(3), floats, strided, pickled])
    assert header == encode_header([2, 3, 64, 5, 7])
    assert (size, largest) == (len(header) + 81, 64)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_frame_header_refuses_what_is_not_a_buffer(impl: Any) -> None:
    with pytest.raises(TypeError):
        impl.frame_header([b"ok", 12])
    with pytest.raises(TypeError):
        impl.frame_header(7)


def _stream(frames: list[list[bytes]]) -> bytes:
    return b"".join(encode_header([len(p) for p in parts]) + b"".join(parts) for parts in frames)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@given(
    frames=st.lists(parts_strategy, max_size=5),
    cut=st.integers(0, 2000),
    lead=st.binary(max_size=5),
)
@settings(max_examples=80, deadline=None)
def test_parse_inline_returns_the_complete_frames_and_where_it_stopped(
    impl: Any, frames: list[list[bytes]], cut: int, lead: bytes
) -> None:
    data = _stream(frames)
    end = len(lead) + min(cut, len(data))
    buffer = bytearray(lead + data + b"\xff" * 3)  # bytes past `end` are never read
    got, stop = impl.parse_inline(buffer, len(lead), end, 1 << 30)
    expected = pure_parse(data[: end - len(lead)])
    assert [[bytes(p) for p in parts] for parts in got] == expected[0]
    assert stop == len(lead) + expected[1]
    for parts in got:  # each frame owns a writable copy: the read buffer may be reused
        for part in parts:
            assert not part.readonly
            assert part.obj is not buffer


def pure_parse(data: bytes) -> tuple[list[list[bytes]], int]:
    """The frames wholly inside ``data``, by the format's definition."""
    frames, offset = [], 0
    while len(data) - offset >= 12:
        count = int.from_bytes(data[offset : offset + 4], "little")
        body = int.from_bytes(data[offset + 4 : offset + 12], "little")
        head = 12 + 8 * count
        if len(data) - offset < head + body:
            break
        lengths = [
            int.from_bytes(data[offset + 12 + 8 * i : offset + 20 + 8 * i], "little")
            for i in range(count)
        ]
        position, parts = offset + head, []
        for length in lengths:
            parts.append(data[position : position + length])
            position += length
        frames.append(parts)
        offset += head + body
    return frames, offset


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_parse_inline_stops_in_front_of_frames_that_carry_descriptors(impl: Any) -> None:
    plain = _stream([[b"one"]])
    shared = encode_header([3, 4096 | SHARED]) + b"two"
    returned = encode_header([SHARED], returned=True)
    for special in (shared, returned):
        buffer = bytearray(plain + special + plain)
        frames, stop = impl.parse_inline(buffer, 0, len(buffer), 1 << 30)
        assert [[bytes(p) for p in f] for f in frames] == [[b"one"]]
        assert stop == len(plain)
    assert RETURNED  # the count bit that marks a control frame


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_parse_inline_refuses_bad_frames_with_clear_errors(impl: Any) -> None:
    big = bytearray(encode_header([100]) + bytes(100))
    with pytest.raises(OSError, match="over the limit"):
        impl.parse_inline(big, 0, len(big), 99)
    wrong = bytearray(b"\x01\x00\x00\x00" + (5).to_bytes(8, "little") + (4).to_bytes(8, "little"))
    with pytest.raises(OSError, match="do not add up"):
        impl.parse_inline(wrong, 0, len(wrong), 1 << 30)
    with pytest.raises(ValueError, match="bad range"):
        impl.parse_inline(bytearray(10), 5, 11, 1 << 30)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    left, right = socket.socketpair()
    left.setblocking(False)
    right.setblocking(False)
    yield left, right
    left.close()
    right.close()


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_send_and_receive_move_bytes_and_descriptors(
    impl: Any, pair: tuple[socket.socket, socket.socket]
) -> None:
    left, right = pair
    sent = impl.send_buffers(left, left.fileno(), [b"head", memoryview(b"-body-"), bytearray(b"!")])
    assert sent == 11
    into = memoryview(bytearray(64))
    n, fds, truncated = impl.receive(right, right.fileno(), into)
    assert (bytes(into[:n]), fds, truncated) == (b"head-body-!", [], False)
    read_end, write_end = os.pipe()
    try:
        socket.send_fds(left, [b"x"], [write_end])
        n, fds, truncated = impl.receive(right, right.fileno(), into)
        assert (n, len(fds), truncated) == (1, 1, False)
        os.write(fds[0], b"via the received descriptor")
        os.close(fds[0])
        assert os.read(read_end, 100) == b"via the received descriptor"
    finally:
        os.close(read_end)
        os.close(write_end)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_send_and_receive_raise_as_the_socket_module_does(
    impl: Any, pair: tuple[socket.socket, socket.socket]
) -> None:
    left, right = pair
    with pytest.raises(BlockingIOError):
        impl.receive(right, right.fileno(), memoryview(bytearray(8)))
    with pytest.raises(TypeError):
        impl.receive(right, right.fileno(), memoryview(b"read-only"))
    right.close()
    with pytest.raises(OSError):
        impl.receive(right, right.fileno(), memoryview(bytearray(8)))
    with pytest.raises(OSError):
        impl.send_buffers(left, left.fileno(), [b"to a closed peer"])
