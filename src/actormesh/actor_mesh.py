"""Monarch's ``monarch.actor_mesh`` names, so its programs run with only imports changed.

``from monarch.actor_mesh import Actor, endpoint, current_rank`` becomes
``from actormesh.actor_mesh import Actor, endpoint, current_rank``; each name is the
same object as the one ``actormesh`` exports.
"""

from __future__ import annotations

from ._api import Actor as Actor
from ._api import ActorMesh as ActorMesh
from ._api import Endpoint as Endpoint
from ._api import current_rank as current_rank
from ._api import current_size as current_size
from ._api import endpoint as endpoint
from ._exceptions import ActorError as ActorError
from ._shape import Point as Point
from ._shape import ValueMesh as ValueMesh

__all__ = [
    "Actor",
    "ActorError",
    "ActorMesh",
    "Endpoint",
    "Point",
    "ValueMesh",
    "current_rank",
    "current_size",
    "endpoint",
]
