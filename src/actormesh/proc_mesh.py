"""Monarch's ``monarch.proc_mesh`` names, so its programs run with only imports changed.

``from monarch.proc_mesh import proc_mesh, ProcMesh`` becomes
``from actormesh.proc_mesh import proc_mesh, ProcMesh`` (the same objects as
``actormesh.proc_mesh`` and ``actormesh.ProcMesh``).
"""

from __future__ import annotations

from ._api import ProcMesh as ProcMesh
from ._api import proc_mesh as proc_mesh

__all__ = ["ProcMesh", "proc_mesh"]
