"""An actor whose module takes as long to import as a test wants.

A stand-in for an actor class in a module that imports torch or a model library: in a
process whose environment names a FIFO in ``ACTORMESH_TEST_IMPORT_GATE``, importing this
module waits for a line on it. The controller imports it without the variable.
"""

from __future__ import annotations

import os

from actormesh import Actor, endpoint

_GATE = os.environ.get("ACTORMESH_TEST_IMPORT_GATE")
if _GATE:
    with open(_GATE) as gate:
        gate.readline()


class Gated(Actor):
    """Answers once its module finished importing."""

    @endpoint
    def imported(self) -> bool:
        return True
