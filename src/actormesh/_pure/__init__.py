"""Layer 0, pure: policies and plans computed from plain data, with no I/O.

``choose`` policies (``_routing``), how ``shard`` splits arguments and combines results
(``_sharding``), the summary of an endpoint's signature that checks calls at the call
site (``_signature``), the placement plan of one-actor processes (``_placement``), and
the compressed form of a large mesh's table of processes in a pickle (``_packed``).
They import nothing of actormesh above layer 0, so each is tested alone (hypothesis
properties in ``tests/unit``), and the layers above, the Ray face included, use them
without the runtime.
"""

from __future__ import annotations

from ._packed import pack, unpack
from ._placement import Placement, plan, resources_from
from ._reduce import Reduce, State, Tally, reduce_states
from ._routing import (
    Affinity,
    ChoosePolicy,
    LeastLoaded,
    NoCapacity,
    PowerOfTwo,
    Random,
    RoundRobin,
    WorkQueue,
    policy_from,
    takes_key,
)
from ._sharding import CallbackDispatch, Dispatch, as_dispatch, split_along
from ._signature import Arity

__all__ = [
    "Affinity",
    "Arity",
    "CallbackDispatch",
    "ChoosePolicy",
    "Dispatch",
    "LeastLoaded",
    "NoCapacity",
    "Placement",
    "PowerOfTwo",
    "Random",
    "Reduce",
    "RoundRobin",
    "State",
    "Tally",
    "WorkQueue",
    "as_dispatch",
    "pack",
    "plan",
    "policy_from",
    "reduce_states",
    "resources_from",
    "split_along",
    "takes_key",
    "unpack",
]
