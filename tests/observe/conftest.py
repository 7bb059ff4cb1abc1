"""Fixtures for the observability tests: real jobs, driven as a person would.

A *job* is ``observe_job.py`` run as its own controller process (see its docstring); the
tests reach it with the ``actormesh`` command, in tmux (``top``), in a pseudo-terminal
(``debug``, and the controller's own terminal), or plainly (``stacks``). The actor classes
live in ``observe_actors.py``, importable by the workers through ``PYTHONPATH``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from observe_support import Job, start_job

HERE = Path(__file__).resolve().parent
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p
)


@pytest.fixture
def job_factory() -> Iterator[object]:
    """``job_factory(mode, size, *args, env=..., terminal=False)`` starts a job; all are
    ended (stdin closed, then killed) after the test."""
    started: list[Job] = []

    def start(mode: str, size: int = 4, *args: str, **kwargs: object) -> Job:
        job = start_job(mode, size, *args, **kwargs)  # type: ignore[arg-type]
        started.append(job)
        return job

    yield start
    for job in started:
        job.end()
