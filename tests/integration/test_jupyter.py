"""Actor meshes from a real Jupyter kernel: top-level await, classes defined in cells."""

from __future__ import annotations

import pytest
from integration_support import run_cell

jupyter_client = pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def kernel():
    manager, client = jupyter_client.manager.start_new_kernel(kernel_name="python3")
    try:
        yield client
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def test_a_notebook_spawns_actors_defined_in_cells_and_awaits_at_top_level(kernel) -> None:
    _, errors = run_cell(
        kernel,
        """
        from actormesh import Actor, endpoint, proc_mesh, current_rank

        class Greeter(Actor):
            def __init__(self):
                self.rank = current_rank().rank

            @endpoint
            async def greet(self, who):
                print(f"hello {who} from {self.rank}")
                return self.rank * 10
        """,
    )
    assert errors == []
    out, errors = run_cell(
        kernel,
        """
        procs = await proc_mesh(gpus=2)
        greeters = await procs.spawn("greeters", Greeter)
        values = await greeters.greet.call("notebook")
        print("values", sorted(values.values()))
        """,
    )
    assert errors == []
    assert "values [0, 10]" in out
    # Actor output reaches the cell that caused it, prefixed with mesh and coordinates.
    assert "[greeters {gpus=0}] hello notebook from 0" in out
    assert "[greeters {gpus=1}] hello notebook from 1" in out
    # A cell may use the sync form too: the kernel's loop thread is not actormesh's.
    out, errors = run_cell(
        kernel,
        """
        print("one", greeters.slice(gpus=1).greet.call_one("sync").get(timeout=30))
        procs.stop().get(timeout=30)
        """,
    )
    assert errors == []
    assert "one 10" in out
