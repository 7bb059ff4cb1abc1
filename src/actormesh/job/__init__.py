"""Jobs: Monarch's ``monarch.job``, on actormesh.

A job is a specification of named host meshes (``ProcessJob({"trainers": 2})``,
``SlurmJob({"trainers": 3})``, ``LocalJob()``), the allocation that satisfies it
(``apply()``), and a cache file (``.monarch/job_state.pkl``) that remembers the
allocation, so a re-run of the controller attaches to the same hosts instead of
allocating again:

    from actormesh.job import ProcessJob

    job = ProcessJob({"trainers": 2})
    hosts = job.state().trainers  # first run: starts the hosts; later runs: re-attach
    procs = hosts.spawn_procs(per_host={"gpus": 2})
    ...
    job.kill()  # the hosts end

See docs/jobs.md.
"""

from __future__ import annotations

from ._current import load_current_job as load_current_job
from ._current import set_current_job as set_current_job
from ._exec import exec_command as exec_command
from ._identity import SERVICE_PROC_IDS_ENV as SERVICE_PROC_IDS_ENV
from ._identity import SERVICE_PROC_RANK_ENV as SERVICE_PROC_RANK_ENV
from ._identity import deserialize_service_proc_ids as deserialize_service_proc_ids
from ._identity import new_service_proc_id as new_service_proc_id
from ._identity import ranked_service_proc_id_from_env as ranked_service_proc_id_from_env
from ._identity import serialize_service_proc_ids as serialize_service_proc_ids
from ._identity import service_proc_addr as service_proc_addr
from ._identity import service_proc_addrs as service_proc_addrs
from ._local import LocalJob as LocalJob
from ._port_forward import PortForwarder as PortForwarder
from ._process import ProcessJob as ProcessJob
from ._process import hosts_from_config as hosts_from_config
from ._shell import shell as shell
from ._slurm import SlurmJob as SlurmJob
from ._telemetry import MeshAdminConfig as MeshAdminConfig
from ._telemetry import TelemetryConfig as TelemetryConfig
from ._trait import DEFAULT_JOB_PATH as DEFAULT_JOB_PATH
from ._trait import JobState as JobState
from ._trait import JobTrait as JobTrait
from ._trait import job_load as job_load
from ._trait import job_loads as job_loads

__all__ = [
    "DEFAULT_JOB_PATH",
    "JobState",
    "JobTrait",
    "LocalJob",
    "MeshAdminConfig",
    "PortForwarder",
    "ProcessJob",
    "SERVICE_PROC_IDS_ENV",
    "SERVICE_PROC_RANK_ENV",
    "SlurmJob",
    "TelemetryConfig",
    "deserialize_service_proc_ids",
    "exec_command",
    "hosts_from_config",
    "job_load",
    "job_loads",
    "load_current_job",
    "new_service_proc_id",
    "ranked_service_proc_id_from_env",
    "serialize_service_proc_ids",
    "service_proc_addr",
    "service_proc_addrs",
    "set_current_job",
    "shell",
]

# Tracebacks and pickles say actormesh.job.X, not the private module. A job is pickled
# into its cache file, so the name it is saved under must stay importable.
for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type) or callable(_obj):
        _obj.__module__ = __name__
del _name, _obj
