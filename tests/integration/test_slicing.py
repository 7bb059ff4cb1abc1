"""Slicing (issue 2, point 6) against real actors: each view reaches exactly its actors.

The shape math itself is property-tested in ``tests/unit/test_shape.py``; here every view
is called and the actors that answer are checked.
"""

from __future__ import annotations

from typing import Any

import pytest
from integration_actors import Echo

from actormesh import ActorMesh, ProcMesh


@pytest.fixture(scope="module")
def echo(procs: ProcMesh) -> ActorMesh[Echo]:
    return procs.spawn("sliced", Echo)  # type: ignore[return-value]


def ranks_of(view: ActorMesh[Any]) -> list[int]:
    """Root ranks of the actors that answer a call on ``view``, in the view's order."""
    return [identity["rank"] for identity in view.whoami.call().get(timeout=30).values()]


@pytest.mark.parametrize(
    ("select", "ranks", "labels"),
    [
        (lambda m: m.slice(dp=1), [2, 3], ("tp",)),
        (lambda m: m.slice(tp=0), [0, 2], ("dp",)),
        (lambda m: m.slice(dp=1, tp=0), [2], ()),
        (lambda m: m.slice(dp=-1), [2, 3], ("tp",)),
        (lambda m: m.slice(tp=range(1, 2)), [1, 3], ("dp", "tp")),
        (lambda m: m.slice(dp=slice(None, None, -1)), [2, 3, 0, 1], ("dp", "tp")),
        (lambda m: m[1, 0], [2], ()),
        (lambda m: m[1, :], [2, 3], ("tp",)),
        (lambda m: m[:, 1], [1, 3], ("dp",)),
        (lambda m: m[0], [0, 1], ("tp",)),
        (lambda m: m.flatten("rank"), [0, 1, 2, 3], ("rank",)),
        (lambda m: m.flatten("rank")[1:3], [1, 2], ("rank",)),
        (lambda m: m.rename(dp="replica").slice(replica=1), [2, 3], ("tp",)),
        (lambda m: m.flatten("r").split(r={"a": 2, "b": 2}).slice(b=1), [1, 3], ("a",)),
        (lambda m: m.split(tp={"x": 2, "y": 1}).slice(x=0), [0, 2], ("dp", "y")),
        (lambda m: m.slice(dp=1).slice(tp=1), [3], ()),
    ],
)
def test_view_reaches_exactly_its_actors(
    echo: ActorMesh[Echo], select: Any, ranks: list[int], labels: tuple[str, ...]
) -> None:
    view = select(echo)
    assert view.shape.labels == labels
    assert view.size() == len(ranks)
    assert ranks_of(view) == ranks


def test_slice_of_a_slice_keeps_the_point_the_actor_sees(echo: ActorMesh[Echo]) -> None:
    identity = echo.slice(dp=1)[1].whoami.call_one().get(timeout=30)
    # The actor's own coordinates are in the whole mesh, whatever view reached it.
    assert identity["point"] == {"dp": 1, "tp": 1}


@pytest.mark.parametrize(
    ("select", "error", "message"),
    [
        (lambda m: m.slice(pp=0), ValueError, "does not have dimension 'pp'"),
        (lambda m: m.slice(dp=2), IndexError, "out of range for dimension 'dp' of size 2"),
        (lambda m: m.slice(tp=-3), IndexError, "out of range"),
        (lambda m: m.slice(tp=range(1, 3)), IndexError, "out of range"),
        (lambda m: m.slice(dp=slice(5, 9)), ValueError, "selects nothing"),
        (lambda m: m.slice(dp="0"), TypeError, "int, slice or range"),
        (lambda m: m[2, 0], IndexError, "out of range"),
        (lambda m: m[0, 0, 0], IndexError, "too many indices"),
        (lambda m: m.split(dp={"a": 3}), ValueError, "cannot split"),
        (lambda m: m.rename(zz="y"), ValueError, "does not have dimension 'zz'"),
        (lambda m: m.rename(dp="tp"), ValueError, "tp"),
    ],
)
def test_bad_selection_is_a_clear_error_at_the_call_site(
    echo: ActorMesh[Echo], select: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        select(echo)


def test_slices_of_the_process_mesh_slice_the_same_way(procs: ProcMesh) -> None:
    assert procs.slice(dp=0).shape.labels == ("tp",)
    assert procs[1, 1].size() == 1
    with pytest.raises(ValueError, match="does not have dimension 'gpus'"):
        procs.slice(gpus=0)
