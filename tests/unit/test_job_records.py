"""Records of leased jobs: one file per job, this user's only; bad names and leases refused."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

import actormesh
from actormesh._api import _job_records


@pytest.fixture
def jobs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "jobs"
    monkeypatch.setenv("ACTORMESH_JOBS_DIR", str(folder))
    return folder


def test_a_record_holds_the_secret_for_its_owner_only(jobs_dir: Path) -> None:
    saved = _job_records.save("rl-exp", ["tcp://10.0.0.1:4000"], "s3cret", 600)
    path = jobs_dir / "rl-exp.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(jobs_dir.stat().st_mode) == 0o700
    assert json.loads(path.read_text())["secret"] == "s3cret"
    loaded = _job_records.load("rl-exp")
    assert loaded == saved and loaded.agents == ("tcp://10.0.0.1:4000",)
    assert loaded.pid == os.getpid()
    assert [r.name for r in _job_records.records()] == ["rl-exp"]
    _job_records.remove("rl-exp")
    assert _job_records.records() == [] and not path.exists()


def test_an_unknown_job_is_named_with_where_it_was_looked_for(jobs_dir: Path) -> None:
    with pytest.raises(LookupError, match=f"no job named 'nope' in {jobs_dir}"):
        _job_records.load("nope")
    with pytest.raises(LookupError, match="no job named 'nope'"):
        actormesh.attach("nope")


@pytest.mark.parametrize("name", ["", "../etc", "a b", "-x", "é"])
def test_a_job_name_is_a_plain_file_name(name: str) -> None:
    with pytest.raises(ValueError, match="a job's name must be"):
        _job_records.check_name(name)
    with pytest.raises(ValueError, match="a job's name must be"):
        actormesh.attach(name)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"keep_alive": 60}, "keep_alive needs a name="),
        ({"keep_alive": 0, "name": "j"}, "keep_alive must be positive"),
        ({"keep_alive": "60", "name": "j"}, "keep_alive must be a number"),
        ({"keep_alive": True, "name": "j"}, "keep_alive must be a number"),
        ({"keep_alive": 60, "name": "a/b"}, "a job's name must be"),
    ],
)
def test_a_lease_is_checked_where_it_is_asked_for(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        actormesh.host_mesh(2, **kwargs)  # type: ignore[arg-type]


def test_attach_needs_a_name_or_exec_s_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACTORMESH_JOB", raising=False)
    with pytest.raises(ValueError, match="needs the job's name"):
        actormesh.attach()
    with pytest.raises(TypeError, match="take_over must be True or False"):
        actormesh.attach("rl-exp", take_over="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        actormesh.attach("rl-exp", timeout=0)
