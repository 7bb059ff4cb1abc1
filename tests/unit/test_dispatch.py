"""A received frame's dispatch (``_core._dispatch``): the compiled twin behaves exactly as
the Python one.

Each test runs on both side by side, so the suite checks the pair whichever of them this
process selected (``ACTORMESH_NO_EXTENSIONS``); that the extension is built and selected
is checked with the frame path's, in ``test_speedups.py``.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actormesh._core import _dispatch
from actormesh._core import headers as env

try:
    from actormesh._core import _cdispatch
except ImportError:  # not built: the checks of the pair are skipped, the build test fails
    _cdispatch = None  # type: ignore[assignment]

IMPLEMENTATIONS = [pytest.param(_dispatch.py_dispatch, id="python")]
if _cdispatch is not None:
    IMPLEMENTATIONS.append(pytest.param(_cdispatch.dispatch, id="compiled"))


class _Recorder:
    """Handlers and the unreadable-frame callback, recording what they were given."""

    def __init__(self) -> None:
        self.handled: list[tuple[str, Any, tuple[Any, ...], Any]] = []
        self.refused: list[tuple[Any, Exception]] = []

    def handler(self, name: str) -> _dispatch.Handler:
        def handle(conn: Any, header: tuple[Any, ...], parts: Any) -> str:
            self.handled.append((name, conn, header, parts))
            return f"{name} handled"

        return handle

    def unreadable(self, conn: Any, error: Exception) -> str:
        self.refused.append((conn, error))
        return "refused"


def _table(recorder: _Recorder) -> _dispatch.Table:
    handlers = {env.CALL: recorder.handler("call"), env.REPLY: recorder.handler("reply")}
    return _dispatch.frame_table(env.LAYOUTS, handlers, recorder.handler("other"))


def test_the_table_holds_each_kind_with_a_bit_per_allowed_item_count() -> None:
    def call(conn: Any, header: tuple[Any, ...], parts: Any) -> None: ...

    table = _dispatch.frame_table({2: (3,), 5: (5, 7)}, {5: call})
    assert table == (None, None, None, None, None, (call, (1 << 5) | (1 << 7)))


@pytest.mark.parametrize("dispatch", IMPLEMENTATIONS)
def test_a_frame_goes_to_its_kinds_handler_with_the_connection_header_and_parts(
    dispatch: Any,
) -> None:
    recorder = _Recorder()
    header = (env.CALL, 7, "mesh", (0, 1), "ping", "token", None, None)
    parts = [memoryview(env.encode(env.Call(7, "mesh", (0, 1), "ping", "token"))), b"args"]
    assert dispatch(_table(recorder), recorder.unreadable, "conn", parts) == "call handled"
    assert recorder.handled == [("call", "conn", header, parts)]
    assert recorder.refused == []


@pytest.mark.parametrize("dispatch", IMPLEMENTATIONS)
def test_a_kind_without_a_handler_of_its_own_goes_to_the_other_one(dispatch: Any) -> None:
    recorder = _Recorder()
    parts = [pickle.dumps((env.RELAY, "/x.sock"))]
    assert dispatch(_table(recorder), recorder.unreadable, "c", parts) == "other handled"
    assert [name for name, *_ in recorder.handled] == ["other"]


def _unreadable_cases() -> list[Any]:
    return [
        pytest.param([], IndexError, id="no parts"),
        pytest.param([b"not a pickle"], pickle.UnpicklingError, id="not a pickle"),
        pytest.param([pickle.dumps([env.CALL, 1])], ValueError, id="not a tuple"),
        pytest.param([pickle.dumps(())], ValueError, id="empty"),
        pytest.param([pickle.dumps((99, 1))], ValueError, id="unknown kind"),
        pytest.param([pickle.dumps((-1, 1))], ValueError, id="negative kind"),
        pytest.param([pickle.dumps((1 << 80, 1))], ValueError, id="huge kind"),
        pytest.param([pickle.dumps(("call", 1))], ValueError, id="kind not an int"),
        pytest.param([pickle.dumps((env.REPLY, 1, 0))], ValueError, id="short layout"),
        pytest.param([pickle.dumps((env.CALL, *range(70)))], ValueError, id="long layout"),
    ]


@pytest.mark.parametrize("dispatch", IMPLEMENTATIONS)
@pytest.mark.parametrize(("parts", "error_type"), _unreadable_cases())
def test_a_frame_that_cannot_be_read_is_refused_with_the_reason(
    dispatch: Any, parts: list[bytes], error_type: type[Exception]
) -> None:
    recorder = _Recorder()
    assert dispatch(_table(recorder), recorder.unreadable, "conn", parts) == "refused"
    assert recorder.handled == []
    [(conn, error)] = recorder.refused
    assert conn == "conn" and type(error) is error_type


@pytest.mark.parametrize(("parts", "error_type"), _unreadable_cases())
def test_both_dispatches_give_the_same_reason(parts: list[bytes], error_type: Any) -> None:
    if _cdispatch is None:
        pytest.skip("the C extension is not built")
    reasons = []
    for dispatch in (_dispatch.py_dispatch, _cdispatch.dispatch):
        recorder = _Recorder()
        dispatch(_table(recorder), recorder.unreadable, None, parts)
        reasons.append(str(recorder.refused[0][1]))
    assert reasons[0] == reasons[1]


@pytest.mark.parametrize("dispatch", IMPLEMENTATIONS)
def test_what_a_handler_raises_reaches_the_caller(dispatch: Any) -> None:
    def failing(conn: Any, header: tuple[Any, ...], parts: Any) -> None:
        raise KeyError("the handler's own")

    recorder = _Recorder()
    table = _dispatch.frame_table(env.LAYOUTS, {env.PING: failing})
    with pytest.raises(KeyError, match="the handler's own"):
        dispatch(table, recorder.unreadable, None, [pickle.dumps((env.PING, 1))])
    assert recorder.refused == []


@pytest.mark.parametrize("dispatch", IMPLEMENTATIONS)
def test_an_interrupt_while_decoding_is_not_taken_for_a_bad_frame(dispatch: Any) -> None:
    class Interrupting:
        def __reduce__(self) -> Any:
            return (_interrupt, ())

    recorder = _Recorder()
    with pytest.raises(KeyboardInterrupt):
        dispatch(_table(recorder), recorder.unreadable, None, [pickle.dumps(Interrupting())])
    assert recorder.refused == []


def _interrupt() -> None:
    raise KeyboardInterrupt


headers = st.builds(
    lambda kind, rest: (kind, *rest),
    st.integers(-3, 25) | st.booleans() | st.text(max_size=2),
    st.lists(st.integers(0, 9), max_size=9),
)


@given(header=headers)
@settings(max_examples=200, deadline=None)
def test_the_twins_agree_on_any_header(header: tuple[Any, ...]) -> None:
    if _cdispatch is None:
        pytest.skip("the C extension is not built")
    outcomes = []
    for dispatch in (_dispatch.py_dispatch, _cdispatch.dispatch):
        recorder = _Recorder()
        result = dispatch(_table(recorder), recorder.unreadable, None, [pickle.dumps(header)])
        refused = [(type(e), str(e)) for _, e in recorder.refused]
        outcomes.append((result, [(n, h) for n, _, h, _ in recorder.handled], refused))
    assert outcomes[0] == outcomes[1]


def test_decode_header_checks_as_the_dispatch_does() -> None:
    assert env.decode(pickle.dumps((env.PONG, 3))) == (env.PONG, 3)
    with pytest.raises(ValueError, match="a header of kind 10 with 3 items"):
        env.decode(pickle.dumps((env.PONG, 3, 4)))
    with pytest.raises(ValueError, match="unknown message kind 0"):
        env.decode(pickle.dumps((0,)))
