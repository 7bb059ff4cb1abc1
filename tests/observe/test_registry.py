"""The per-user registry of jobs: abstract sockets found in /proc/net/unix, nothing on disk."""

from __future__ import annotations

import os
import signal

from observe_support import HERE, actormesh

from actormesh._observe import find_jobs
from actormesh._observe._registry import job_address

TABLE = """\
Num       RefCount Protocol Flags    Type St Inode Path
0000000000000000: 00000002 00000000 00010000 0001 01 111 @actormesh-job-1000-4242-a1b2c3d4e5f6
0000000000000000: 00000003 00000000 00000000 0001 03 112 @actormesh-job-1000-4242-a1b2c3d4e5f6
0000000000000000: 00000002 00000000 00010000 0001 01 113 @actormesh-job-1001-77-0123456789ab
0000000000000000: 00000002 00000000 00010000 0001 01 114 /run/other.sock
0000000000000000: 00000002 00000000 00010000 0001 01 115 @actormesh-1000-abc/ctl1.sock
0000000000000000: 00000002 00000000 00010000 0001 01 116
"""


def test_the_registry_lists_one_entry_per_job_of_the_user() -> None:
    jobs = find_jobs(TABLE, uid=1000)
    assert [(job.pid, job.address) for job in jobs] == [
        (4242, "@actormesh-job-1000-4242-a1b2c3d4e5f6")
    ]
    assert find_jobs(TABLE, uid=1001)[0].pid == 77


def test_job_addresses_are_abstract_and_unguessable() -> None:
    first, second = job_address(), job_address()
    assert first.startswith(f"@actormesh-job-{os.getuid()}-{os.getpid()}-")
    assert first != second


def test_a_running_job_is_listed_and_a_killed_one_leaves_nothing(job_factory) -> None:
    job = job_factory("serve", 2)
    assert job.pid in [found.pid for found in find_jobs()]
    listed = actormesh("jobs")
    assert listed.returncode == 0, listed.stderr
    line = next(line for line in listed.stdout.splitlines() if line.split()[0] == str(job.pid))
    assert line.split()[2] == "1"  # one mesh
    assert "observe_job.py serve 2" in line
    before = set(os.listdir(HERE))
    os.killpg(job.proc.pid, signal.SIGKILL)  # the controller and everything it started
    job.proc.wait(10)
    assert job.pid not in [found.pid for found in find_jobs()]  # the kernel dropped the name
    assert set(os.listdir(HERE)) == before
