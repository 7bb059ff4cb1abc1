"""actormesh.torch: torch.distributed inside a mesh, and weights moved between meshes.

``await setup_process_group(trainers)`` makes the actors of a mesh one process group
(gloo on CPU, nccl with GPUs) so their endpoints can run ``DistributedDataParallel`` or
collectives; ``await sync_weights(trainers, generators, version=step)`` sends the
trainers' ``state_dict`` to every generator, which then knows its `weights_version`.
torch is imported by the actors that use these, not by ``import actormesh``.
"""

from __future__ import annotations

from ._process_group import destroy_process_group as destroy_process_group
from ._process_group import setup_process_group as setup_process_group
from ._weights import SyncReport as SyncReport
from ._weights import sync_weights as sync_weights
from ._weights import weights_version as weights_version
from ._weights import weights_versions as weights_versions

__all__ = [
    "SyncReport",
    "destroy_process_group",
    "setup_process_group",
    "sync_weights",
    "weights_version",
    "weights_versions",
]
