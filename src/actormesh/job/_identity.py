"""Service proc ids of a job's hosts (Monarch's ``service_identity``).

Monarch gives each host's worker loop a proc id (``service<uid>``) written in front of
its address (``service<uid>@tcp://node:22222``), so two spellings of one host's address
name one host. actormesh's worker loops accept that form and dial the address part; the
ids are kept so a job's addresses read as Monarch's do. A launcher that starts many hosts
with one environment (Slurm) passes every id as a JSON list and each host picks its own
by rank.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Sequence

from .._api import ProcId, Uid

__all__ = [
    "SERVICE_PROC_IDS_ENV",
    "SERVICE_PROC_RANK_ENV",
    "allocate_service_proc_ids",
    "deserialize_service_proc_ids",
    "new_service_proc_id",
    "ranked_service_proc_id_from_env",
    "serialize_service_proc_ids",
    "service_proc_addr",
    "service_proc_addrs",
]

SERVICE_PROC_IDS_ENV = "MONARCH_SERVICE_PROC_IDS"
SERVICE_PROC_RANK_ENV = "MONARCH_SERVICE_PROC_RANK"


def new_service_proc_id() -> ProcId:
    """A fresh proc id for one host's worker loop."""
    return ProcId(Uid.instance("service"))


def allocate_service_proc_ids(count: int) -> list[ProcId]:
    """``count`` distinct, related proc ids for the hosts of one job."""
    base = secrets.randbits(64)
    return [
        ProcId(Uid.instance_from_value((base + rank) % 2**64, "service")) for rank in range(count)
    ]


def serialize_service_proc_ids(proc_ids: Sequence[ProcId]) -> str:
    """The ids as one environment value (a JSON list)."""
    return json.dumps([str(proc_id) for proc_id in proc_ids])


def deserialize_service_proc_ids(serialized: str) -> list[ProcId]:
    """The ids of ``serialize_service_proc_ids``."""
    return [ProcId.from_string(text) for text in json.loads(serialized)]


def service_proc_addr(address: str, proc_id: ProcId | None) -> str:
    """``address`` with ``proc_id`` in front (``address`` itself without one)."""
    return address if proc_id is None else f"{proc_id}@{address}"


def service_proc_addrs(addresses: Sequence[str], proc_ids: Sequence[ProcId] | None) -> list[str]:
    """``service_proc_addr`` of each address with its id.

    Raises:
        ValueError: the two lists differ in length.
    """
    if proc_ids is None:
        return list(addresses)
    if len(addresses) != len(proc_ids):
        raise ValueError(
            f"got {len(addresses)} worker addresses and {len(proc_ids)} service ProcIds"
        )
    return [service_proc_addr(a, p) for a, p in zip(addresses, proc_ids, strict=True)]


def ranked_service_proc_id_from_env(*, rank_env: str = SERVICE_PROC_RANK_ENV) -> ProcId | None:
    """This host's id: entry ``$rank_env`` of the list in ``MONARCH_SERVICE_PROC_IDS``;
    ``None`` when either is unset."""
    serialized = os.environ.get(SERVICE_PROC_IDS_ENV)
    rank = os.environ.get(rank_env)
    if serialized is None or rank is None:
        return None
    return deserialize_service_proc_ids(serialized)[int(rank)]
