"""Output (issue 2, point 11): actors' print, stderr and logging reach the controller.

Each test runs a controller script in a new process and reads what it printed, so the
runtime sees the script's own settings (``ACTORMESH_OUTPUT``) from its start.
"""

from __future__ import annotations

from pathlib import Path

from integration_support import run_script

SCRIPT = """
    import asyncio
    import logging
    import sys

    from actormesh import Actor, current_rank, endpoint, proc_mesh


    class Talker(Actor):
        def __init__(self):
            print(f"init says hi from {current_rank().rank}")

        @endpoint
        def talk(self):
            rank = current_rank().rank
            print(f"stdout line from {rank}")
            print(f"stderr line from {rank}", file=sys.stderr)
            logging.getLogger("talker").warning("logged line from %d", rank)

        @endpoint
        async def talk_async(self, text):
            print(text, "partial", end="")
            print(" line")


    async def main():
        print("controller starts", flush=True)
        procs = await proc_mesh({"dp": 1, "tp": 2})
        talkers = await procs.spawn("talkers", Talker)
        await talkers.talk.call()
        await talkers.talk_async.call("async")
        await procs.stop()
        print("controller ends")


    asyncio.run(main())
"""


def test_actor_output_is_prefixed_with_mesh_and_coordinates(tmp_path: Path) -> None:
    done = run_script(SCRIPT, tmp_path)
    assert done.returncode == 0, done.stderr
    out, err = done.stdout.splitlines(), done.stderr.splitlines()
    for tp in (0, 1):
        prefix = f"[talkers {{dp=0, tp={tp}}}]"
        assert f"{prefix} init says hi from {tp}" in out
        assert f"{prefix} stdout line from {tp}" in out
        assert f"{prefix} async partial line" in out
        assert f"{prefix} stderr line from {tp}" in err
        assert f"{prefix} logged line from {tp}" in err
    assert out[0] == "controller starts"
    assert out[-1] == "controller ends"


def test_output_can_be_turned_off(tmp_path: Path) -> None:
    done = run_script(SCRIPT, tmp_path, env={"ACTORMESH_OUTPUT": "off"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["controller starts", "controller ends"]
    assert done.stderr == ""
