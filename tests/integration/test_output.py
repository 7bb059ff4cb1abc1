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


def test_logging_option_stream_to_client_false_drops_the_processes_output(
    tmp_path: Path,
) -> None:
    # Monarch's ProcMesh.logging_option; actormesh drops what the processes print from
    # then on (Monarch 0.7 stops only its client's aggregated stream). Stopping the mesh
    # delivers whatever the processes printed before they exit, so what is missing after
    # it never came.
    script = """
        import asyncio
        import sys

        from actormesh import Actor, current_rank, endpoint, proc_mesh


        class Talker(Actor):
            @endpoint
            def say(self, text):
                print(f"{text} from {current_rank().rank}", flush=True)
                print(f"{text} on stderr from {current_rank().rank}", file=sys.stderr)
                return current_rank().rank


        async def main():
            procs = await proc_mesh(gpus=2)
            talkers = await procs.spawn("talkers", Talker)
            await procs.logging_option(stream_to_client=True, aggregate_window_sec=None)
            assert (await talkers.say.call("streamed")).values() == [0, 1]
            await procs.logging_option(stream_to_client=False)
            assert (await talkers.say.call("dropped")).values() == [0, 1]
            await procs.stop()
            print("controller ends")


        asyncio.run(main())
    """
    done = run_script(script, tmp_path)
    assert done.returncode == 0, done.stderr
    for rank in (0, 1):
        assert f"[talkers {{gpus={rank}}}] streamed from {rank}" in done.stdout.splitlines()
        assert f"[talkers {{gpus={rank}}}] streamed on stderr from {rank}" in done.stderr
    assert "dropped" not in done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "controller ends"
