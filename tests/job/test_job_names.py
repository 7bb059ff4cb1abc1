"""The names of ``actormesh.job``: Monarch 0.7's ``monarch.job`` list, their errors, the
job file and the current-job context. No hosts are started here."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

import actormesh.job
from actormesh.actor import this_host
from actormesh.job import (
    DEFAULT_JOB_PATH,
    JobState,
    LocalJob,
    MeshAdminConfig,
    ProcessJob,
    SlurmJob,
    TelemetryConfig,
    job_load,
    job_loads,
    load_current_job,
    ranked_service_proc_id_from_env,
    serialize_service_proc_ids,
    service_proc_addrs,
    set_current_job,
)
from actormesh.job._identity import allocate_service_proc_ids
from actormesh.job.kubernetes import ImageSpec, KubeConfig, KubernetesJob

# monarch.job.__all__ in torchmonarch 0.7.0.
MONARCH_JOB_ALL = {
    "DEFAULT_JOB_PATH",
    "deserialize_service_proc_ids",
    "exec_command",
    "hosts_from_config",
    "JobTrait",
    "job_load",
    "job_loads",
    "JobState",
    "load_current_job",
    "LocalJob",
    "MeshAdminConfig",
    "new_service_proc_id",
    "PortForwarder",
    "ProcessJob",
    "ranked_service_proc_id_from_env",
    "serialize_service_proc_ids",
    "service_proc_addr",
    "service_proc_addrs",
    "SERVICE_PROC_IDS_ENV",
    "SERVICE_PROC_RANK_ENV",
    "set_current_job",
    "shell",
    "SlurmJob",
    "TelemetryConfig",
}


def test_every_name_of_monarch_job_is_here() -> None:
    assert set(actormesh.job.__all__) == MONARCH_JOB_ALL
    assert DEFAULT_JOB_PATH == ".monarch/job_state.pkl"
    assert ProcessJob.__module__ == "actormesh.job"  # what a cache file names


def test_names_that_need_what_this_machine_lacks_say_so() -> None:
    for cls in (KubernetesJob, ImageSpec, KubeConfig):
        with pytest.raises(NotImplementedError, match="Kubernetes"):
            cls()
    with pytest.raises(NotImplementedError, match="gateway"):
        SlurmJob({"hosts": 1}, out_of_cluster=True)
    job = LocalJob()
    with pytest.raises(NotImplementedError, match="telemetry"):
        job.profile()
    with pytest.raises(NotImplementedError, match="FUSE"):
        job.remote_mount("/tmp")
    with pytest.raises(NotImplementedError, match="batch mode"):
        job.apply(client_script="train.py")


def test_telemetry_and_admin_settings_are_accepted_and_record_nothing() -> None:
    job = LocalJob().enable_telemetry(TelemetryConfig(batch_size=3)).enable_admin(MeshAdminConfig())
    with pytest.raises(RuntimeError, match="not active"):
        job.telemetry_query_client()
    state = job.state(cached_path=None)
    assert (state.telemetry_url, state.admin_url, state.query_engine) == (None, None, None)
    with pytest.raises(RuntimeError, match="runs no telemetry service"):
        job.telemetry_query_client()
    plain = LocalJob()
    plain.apply()
    with pytest.raises(RuntimeError, match="no distributed telemetry configured"):
        plain.telemetry_query_client()


def test_bad_specifications_are_refused_where_they_are_made() -> None:
    with pytest.raises(TypeError, match="numbers of hosts"):
        ProcessJob({"hosts": "2"})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="at least one host"):
        ProcessJob({"hosts": 0})
    with pytest.raises(ValueError, match="bind_to"):
        SlurmJob({"hosts": 1}, bind_to="node-1")
    with pytest.raises(TypeError, match="mesh names"):
        LocalJob("hosts")


def test_job_state_names_its_meshes() -> None:
    state = JobState({"trainers": this_host()})
    assert state.trainers is not None
    with pytest.raises(AttributeError, match="Available names: trainers"):
        state.evaluators  # noqa: B018
    assert "trainers" in repr(state)


def test_a_local_job_is_this_host_and_never_reused_from_the_cache(tmp_path: Path) -> None:
    cache = tmp_path / "job.pkl"
    state = LocalJob(("a", "b")).state(cached_path=str(cache))
    assert state.a.extent == this_host().extent == {}
    assert cache.exists()
    other = LocalJob(("c",))
    assert other.state(cached_path=str(cache)).c.extent == {}
    assert job_load(str(cache)).apply_id == other.apply_id


def test_a_job_pickles_without_its_live_hosts(tmp_path: Path) -> None:
    job = LocalJob()
    job.state(cached_path=None)
    assert job._live is not None
    copy = job_loads(job.dumps())
    assert isinstance(copy, LocalJob) and copy._live is None
    assert copy.apply_id == job.apply_id and copy.active
    path = tmp_path / "sub" / "job.pkl"
    job.dump(str(path))
    assert os.stat(path).st_mode & 0o777 == 0o600  # it says where the hosts listen
    with pytest.raises(TypeError, match="not a job"):
        job_loads(pickle.dumps({"not": "a job"}))


def test_the_current_job_context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "myjobs.py").write_text(
        "from actormesh.job import LocalJob\njob = LocalJob(('trainers',))\nnot_a_job = 3\n"
    )
    with pytest.raises(FileNotFoundError, match="set_current_job"):
        load_current_job()
    Path(".monarch").mkdir()
    Path(DEFAULT_JOB_PATH).write_bytes(b"legacy")  # a plain cache file from before
    set_current_job("myjobs.job")
    assert os.path.islink(DEFAULT_JOB_PATH)
    assert Path(".monarch/default/state.pkl").read_bytes() == b"legacy"  # moved, kept
    job = load_current_job()
    assert isinstance(job, LocalJob) and job._host_names == ("trainers",)
    set_current_job("myjobs.not_a_job")
    with pytest.raises(TypeError, match="must be a JobTrait"):
        load_current_job()
    with pytest.raises(ValueError, match=r"module\.attr"):
        set_current_job("nodot")


def test_service_proc_ids_travel_as_one_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    ids = allocate_service_proc_ids(3)
    assert len({str(i) for i in ids}) == 3
    monkeypatch.setenv("MONARCH_SERVICE_PROC_IDS", serialize_service_proc_ids(ids))
    monkeypatch.setenv("SLURM_NODEID", "2")
    assert ranked_service_proc_id_from_env(rank_env="SLURM_NODEID") == ids[2]
    assert service_proc_addrs(["tcp://a:1"], ids[:1]) == [f"{ids[0]}@tcp://a:1"]
    with pytest.raises(ValueError, match="2 service ProcIds"):
        service_proc_addrs(["tcp://a:1"], ids[:2])
