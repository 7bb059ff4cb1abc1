"""Monarch's ``monarch.actor`` names, so its programs run with only imports changed.

``from monarch.actor import Actor, endpoint, proc_mesh, current_rank`` becomes
``from actormesh.actor import ...``; each name is the same object as the one
``actormesh`` exports.
"""

from __future__ import annotations

from ._api._actor import Actor as Actor
from ._api._actor_mesh import ActorMesh as ActorMesh
from ._api._context import current_rank as current_rank
from ._api._context import current_size as current_size
from ._api._endpoint import Endpoint as Endpoint
from ._api._endpoint import endpoint as endpoint
from ._api._future import Future as Future
from ._api._proc_mesh import ProcMesh as ProcMesh
from ._api._proc_mesh import proc_mesh as proc_mesh
from ._exceptions import ActorError as ActorError
from ._shape import Point as Point
from ._shape import ValueMesh as ValueMesh

__all__ = [
    "Actor",
    "ActorError",
    "ActorMesh",
    "Endpoint",
    "Future",
    "Point",
    "ProcMesh",
    "ValueMesh",
    "current_rank",
    "current_size",
    "endpoint",
    "proc_mesh",
]
