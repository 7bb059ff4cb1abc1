"""Actors and endpoints (issue 2, point 2): def and async def mixed, clear call-site errors."""

from __future__ import annotations

import pytest
from integration_actors import Echo, TaskUser

from actormesh import Actor, ActorMesh, EndpointNotFoundError, ProcMesh, endpoint
from actormesh._api._endpoint import as_endpoint
from actormesh.testing import run


@pytest.fixture(scope="module")
def echo(procs: ProcMesh) -> ActorMesh[Echo]:
    return procs.spawn("echo", Echo, "tagged")  # type: ignore[return-value]


def test_def_and_async_def_endpoints_mix_in_one_class(echo: ActorMesh[Echo]) -> None:
    async def main() -> tuple[list[object], list[object]]:
        sync_values = await echo.sync_echo.call(1)
        async_values = await echo.async_echo.call(2)
        return list(sync_values.values()), list(async_values.values())

    sync_values, async_values = run(main())
    assert [v[:2] for v in sync_values] == [("def", 1)] * 4  # type: ignore[index]
    # def endpoints run on the actor's own thread, not the worker's event loop.
    assert all(v[2].startswith("actor echo") for v in sync_values)  # type: ignore[index]
    assert async_values == [("async", 2, "tagged")] * 4


def test_unknown_endpoint_raises_at_the_call_site(echo: ActorMesh[Echo]) -> None:
    with pytest.raises(EndpointNotFoundError, match=r"no endpoint 'nope'.*async_echo"):
        echo.nope.call()  # type: ignore[attr-defined]


def test_unknown_endpoint_error_is_an_attribute_error(echo: ActorMesh[Echo]) -> None:
    assert not hasattr(echo, "nope")


def test_plain_method_is_not_callable_through_the_mesh(echo: ActorMesh[Echo]) -> None:
    expected = r"'helper' is a method of integration_actors\.Echo but not annotated as an endpoint"
    with pytest.raises(EndpointNotFoundError, match=expected):
        echo.helper.call()
    with pytest.raises(EndpointNotFoundError, match="as_endpoint"):
        echo.helper()


def test_as_endpoint_calls_a_plain_method(echo: ActorMesh[Echo]) -> None:
    values = as_endpoint(echo.helper).call().get(timeout=30)
    assert values.values() == ["not an endpoint"] * 4
    with pytest.raises(ValueError, match="method of a spawned actor"):
        as_endpoint(echo.sync_echo)


def test_endpoint_on_a_slice_is_checked_too(echo: ActorMesh[Echo]) -> None:
    with pytest.raises(EndpointNotFoundError):
        echo.slice(dp=0).missing  # type: ignore[attr-defined]  # noqa: B018


def test_endpoint_names_of_the_mesh_are_listed_by_dir(echo: ActorMesh[Echo]) -> None:
    assert {"async_echo", "sync_echo", "whoami"} <= set(dir(echo))
    assert "helper" not in dir(echo)


def test_endpoint_with_options_and_bare_decorator_both_work() -> None:
    class Both(Actor):
        @endpoint
        async def bare(self) -> int:
            return 1

        @endpoint(concurrent=True)
        async def with_options(self) -> int:
            return 2

    assert Both.bare.options.kind.value == "async"
    assert Both.with_options.options.kind.value == "concurrent"


def test_concurrent_needs_an_async_def() -> None:
    with pytest.raises(TypeError, match="needs an `async def`"):

        class Bad(Actor):
            @endpoint(concurrent=True)
            def step(self) -> None:
                pass


def test_endpoint_names_that_shadow_mesh_operations_are_refused() -> None:
    with pytest.raises(TypeError, match="slice"):

        class Bad(Actor):
            @endpoint
            async def slice(self) -> None:
                pass


def test_endpoint_called_directly_on_the_mesh_explains_the_adverbs(
    echo: ActorMesh[Echo],
) -> None:
    with pytest.raises(TypeError, match="use an adverb"):
        echo.async_echo(1)


def test_async_endpoints_run_as_a_task_from_their_first_line(procs: ProcMesh) -> None:
    # An endpoint starts in the callback that read its message (no loop turn lost): it
    # still is its task's, so timeouts, task groups and current_task() work.
    users = procs.spawn("task_users", TaskUser)
    assert users.timed_out.call().get(timeout=30).values() == ["timed out"] * 4
    assert users.same_task.call().get(timeout=30).values() == [True] * 4
