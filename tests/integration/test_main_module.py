"""Code in ``__main__`` (issue 2, point 10): the driver script's classes and functions work.

Each test runs a script in a new Python process, as a user would run their program; the
workers cannot import ``__main__`` of that script, so its code travels by value.
"""

from __future__ import annotations

from pathlib import Path

from integration_support import run_script

SCRIPT = """
    import asyncio

    from actormesh import Actor, current_rank, endpoint, proc_mesh


    def square(x):
        return x * x


    class Scale:
        def __init__(self, factor):
            self.factor = factor

        def __call__(self, x):
            return self.factor * x


    class MainError(Exception):
        pass


    class Applier(Actor):
        def __init__(self, offset):
            self.offset = offset

        @endpoint
        def apply(self, fn, x):
            return fn(x) + self.offset

        @endpoint
        async def fail(self):
            raise MainError("defined in the script")

        @endpoint
        async def make(self):
            return Scale(current_rank().rank + 1)


    def build_local_actor():
        class Local(Actor):
            @endpoint
            async def hello(self):
                return f"local {current_rank().rank}"

        return Local


    async def main():
        procs = await proc_mesh(gpus=2)
        appliers = await procs.spawn("appliers", Applier, 100)
        print("function:", list((await appliers.apply.call(square, 3)).values()))
        print("lambda:", list((await appliers.apply.call(lambda v: v - 1, 3)).values()))
        print("instance:", list((await appliers.apply.call(Scale(10), 3)).values()))
        made = await appliers.make.call()
        print("returned:", [type(m).__name__ for m in made.values()], [m(1) for m in made.values()])
        try:
            await appliers.slice(gpus=1).fail.call_one()
        except MainError as error:
            print("caught:", type(error.cause).__name__, error.cause is not None)
            print("remote traceback:", error.remote_traceback)
        local = await procs.spawn("local", build_local_actor())
        print("local class:", list((await local.hello.call()).values()))
        await procs.stop()


    asyncio.run(main())
"""


def test_classes_and_functions_of_the_main_script_run_in_the_workers(tmp_path: Path) -> None:
    done = run_script(SCRIPT, tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "function: [109, 109]" in lines
    assert "lambda: [102, 102]" in lines
    assert "instance: [130, 130]" in lines
    assert "returned: ['Scale', 'Scale'] [1, 2]" in lines
    assert "local class: ['local 0', 'local 1']" in lines
    # An exception class of the script reaches the controller as that very class.
    assert "caught: MainError True" in lines
    # Its frames name the script and show its lines, though the code travelled by value.
    script = tmp_path / "script.py"
    assert f'File "{script}", line' in done.stdout
    assert 'raise MainError("defined in the script")' in done.stdout
    assert "<dynamic-code>" not in done.stdout


PACKAGE_USER = """
    import actormesh
    from actormesh import Actor, endpoint, proc_mesh


    class UsesThePackage(Actor):
        @endpoint
        def check(self):
            # The method's globals hold the actormesh module itself: it travels by name.
            return actormesh.cancelled(), actormesh.current_rank().rank


    with proc_mesh(gpus=2).get(timeout=60) as procs:
        print(procs.spawn("users", UsesThePackage).check.call().get(timeout=30).values())
"""


def test_a_script_class_that_uses_the_actormesh_module_can_be_spawned(tmp_path: Path) -> None:
    result = run_script(PACKAGE_USER, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[(False, 0), (False, 1)]"


TORCH_SPAWNS = """
    import torch
    import torch.nn as nn
    import torch.optim as optim
    from torch.distributions import Categorical

    from actormesh.actor import Actor, endpoint, this_host


    class Queue(Actor):
        @endpoint
        def ping(self):
            return "queue"


    class Buffer(Actor):
        def __init__(self):
            self.items = [torch.zeros(2)]

        @endpoint
        def ping(self):
            return "buffer"


    class Learner(Actor):
        def __init__(self, buffer):
            self.model = nn.Linear(4, 2)
            self.optimizer = optim.Adam(self.model.parameters())
            self.buffer = buffer

        @endpoint
        def ping(self):
            return "learner"


    class Scorer(Actor):
        def __init__(self, queue, buffer):
            self.dist = Categorical(logits=torch.zeros(3))

        @endpoint
        def ping(self):
            return "scorer"


    procs = this_host().spawn_procs(per_host={"gpus": 1})
    # Four spawns in a row, none awaited: their classes load on four threads at once.
    queue = procs.spawn("queue", Queue)
    buffer = procs.spawn("buffer", Buffer)
    learner = procs.spawn("learner", Learner, buffer)
    scorer = procs.spawn("scorer", Scorer, queue, buffer)
    print([mesh.ping.call_one().get(timeout=60) for mesh in (queue, buffer, learner, scorer)])
    procs.stop().get(timeout=60)
"""


def test_spawns_in_a_row_whose_classes_import_torch_all_load(tmp_path: Path) -> None:
    # Loaded on one thread each, the specs imported torch's modules at once and one got
    # the other's half-initialized torch.nn ("partially initialized module").
    done = run_script(TORCH_SPAWNS, tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[-2] == "['queue', 'buffer', 'learner', 'scorer']"
