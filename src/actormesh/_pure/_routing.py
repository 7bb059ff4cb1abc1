"""Choose policies: which live rank of a mesh gets the next ``choose`` call.

Everything here is pure: a policy sees plain integers (the candidate ranks and
the caller's count of calls still in flight to each) and returns one of the
candidates. The runtime owns the counters, the waiting and the sending.

Policies keep a little state (a random generator, a round-robin cursor), so one
policy object serves one caller on one thread; it is not meant to be shared
across threads.
"""

from __future__ import annotations

import hashlib
import random
import struct
from collections.abc import Callable, Hashable, Sequence
from typing import Protocol, runtime_checkable

__all__ = [
    "Affinity",
    "ChoosePolicy",
    "LeastLoaded",
    "NoCapacity",
    "PowerOfTwo",
    "Random",
    "RoundRobin",
    "WorkQueue",
    "policy_from",
    "takes_key",
]


class NoCapacity(Exception):
    """Every candidate is at its capacity; retry after one of its calls completes.

    Raised by `WorkQueue.choose`. It is a signal to the runtime, not a failure:
    the runtime waits for an outstanding call to finish and chooses again.
    """


@runtime_checkable
class ChoosePolicy(Protocol):
    """Picks one rank among the live ranks of a mesh for a ``choose`` call.

    A policy may declare ``uses_key = False``: it ignores routing keys, so a call made
    with a key is routed by `Affinity` instead (a key is never silently dropped). A
    policy that does not declare it gets the key (see `takes_key`).
    """

    def choose(
        self, candidates: Sequence[int], in_flight: Sequence[int], key: Hashable | None = None
    ) -> int:
        """Return the chosen element of ``candidates``.

        Args:
            candidates: The live ranks that may take the call (local indices into the mesh).
            in_flight: ``in_flight[i]`` is the caller's count of outstanding calls to
                ``candidates[i]``.
            key: An optional routing key (used by `Affinity`; other policies ignore it).

        Raises:
            ValueError: ``candidates`` is empty or its length differs from ``in_flight``'s.
        """
        ...


def takes_key(policy: ChoosePolicy) -> bool:
    """Whether ``policy`` routes by the key of a keyed call (its ``uses_key``, True when
    it does not say)."""
    return bool(getattr(policy, "uses_key", True))


def _check(candidates: Sequence[int], in_flight: Sequence[int]) -> None:
    if not candidates:
        raise ValueError("no live ranks to choose from")
    if len(candidates) != len(in_flight):
        raise ValueError(f"got {len(candidates)} candidates but {len(in_flight)} in-flight counts")


class _Cursor:
    """A round-robin position kept as the last rank chosen, not as a list index.

    Keeping the rank makes the rotation stable when candidates come and go: the
    next pick is the smallest candidate above the last one, wrapping around.
    """

    def __init__(self) -> None:
        self._last = -1

    def next_of(self, pool: Sequence[int]) -> int:
        above = [c for c in pool if c > self._last]
        self._last = min(above) if above else min(pool)
        return self._last


class PowerOfTwo:
    """Sample two distinct candidates and take the one with fewer calls in flight.

    The default policy: nearly as good as least-loaded at spreading load, but
    two random probes keep many callers with stale counts from herding onto the
    same idle rank. Ties are broken at random.

    Args:
        seed: Seed for the policy's own random generator (for reproducible tests).
    """

    uses_key = False  # a keyed call goes to Affinity

    def __init__(self, seed: int | None = None) -> None:
        self._rng = random.Random(seed)

    def choose(
        self, candidates: Sequence[int], in_flight: Sequence[int], key: Hashable | None = None
    ) -> int:
        """Return the less loaded of two random candidates; see `ChoosePolicy.choose`."""
        _check(candidates, in_flight)
        if len(candidates) == 1:
            return candidates[0]
        i, j = self._rng.sample(range(len(candidates)), 2)
        # sample() already ordered the pair at random, so on a tie taking i is a fair coin.
        return candidates[j] if in_flight[j] < in_flight[i] else candidates[i]


class Random:
    """Pick a candidate uniformly at random, ignoring load.

    Args:
        seed: Seed for the policy's own random generator.
    """

    uses_key = False  # a keyed call goes to Affinity

    def __init__(self, seed: int | None = None) -> None:
        self._rng = random.Random(seed)

    def choose(
        self, candidates: Sequence[int], in_flight: Sequence[int], key: Hashable | None = None
    ) -> int:
        """Return a uniformly random candidate; see `ChoosePolicy.choose`."""
        _check(candidates, in_flight)
        return candidates[self._rng.randrange(len(candidates))]


class RoundRobin:
    """Cycle over the candidates in rank order, ignoring load.

    The rotation remembers the last rank chosen, so a rank that disappears is
    skipped and one that comes back rejoins in its place without restarting the cycle.
    """

    uses_key = False  # a keyed call goes to Affinity

    def __init__(self) -> None:
        self._cursor = _Cursor()

    def choose(
        self, candidates: Sequence[int], in_flight: Sequence[int], key: Hashable | None = None
    ) -> int:
        """Return the next candidate after the last one chosen; see `ChoosePolicy.choose`."""
        _check(candidates, in_flight)
        return self._cursor.next_of(candidates)


def _least_loaded(cursor: _Cursor, candidates: Sequence[int], loads: Sequence[int]) -> int:
    low = min(loads)
    return cursor.next_of([c for c, n in zip(candidates, loads, strict=True) if n == low])


class LeastLoaded:
    """Pick a candidate with the fewest calls in flight; ties go round-robin.

    Breaking ties round-robin (rather than always taking the lowest rank) spreads
    a burst of calls over equally idle ranks.
    """

    uses_key = False  # a keyed call goes to Affinity

    def __init__(self) -> None:
        self._cursor = _Cursor()

    def choose(
        self, candidates: Sequence[int], in_flight: Sequence[int], key: Hashable | None = None
    ) -> int:
        """Return a least-loaded candidate; see `ChoosePolicy.choose`."""
        _check(candidates, in_flight)
        return _least_loaded(self._cursor, candidates, in_flight)


class WorkQueue:
    """Pull-based dispatch: a rank takes a new call only while it has spare capacity.

    A rank is eligible while its in-flight count is below ``capacity``; the
    eligible rank with the fewest in flight is chosen (ties round-robin). When no
    rank is eligible, `choose` raises `NoCapacity`, and the runtime's contract is
    to wait until one of the caller's outstanding calls completes and then call
    `choose` again. With ``capacity=1`` each rank works on one call at a time and
    pulls the next as soon as it finishes, so a slow call never has work queued
    behind it.

    Args:
        capacity: Calls a rank may have in flight at once (at least 1).
    """

    uses_key = False  # a keyed call goes to Affinity

    def __init__(self, capacity: int = 1) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._cursor = _Cursor()

    def choose(
        self, candidates: Sequence[int], in_flight: Sequence[int], key: Hashable | None = None
    ) -> int:
        """Return the least-loaded candidate below capacity; see `ChoosePolicy.choose`.

        Raises:
            NoCapacity: Every candidate has ``capacity`` or more calls in flight.
        """
        _check(candidates, in_flight)
        pairs = [(c, n) for c, n in zip(candidates, in_flight, strict=True) if n < self.capacity]
        if not pairs:
            raise NoCapacity(
                f"all {len(candidates)} ranks have {self.capacity} or more calls in flight"
            )
        eligible, loads = zip(*pairs, strict=True)
        return _least_loaded(self._cursor, eligible, loads)


def _encode_key(key: object) -> bytes:
    """A byte encoding of ``key`` that is the same in every process and every run.

    Built-in ``hash()`` is salted per process for str and bytes, so it cannot be
    used to agree on a rank across processes. Each encoding starts with a type
    tag so that, e.g., ``1``, ``"1"`` and ``b"1"`` do not collide, while keys
    that compare equal as dict keys (``True``, ``1``, ``1.0``) encode the same.
    """
    if key is None:
        return b"N"
    if isinstance(key, float) and key.is_integer():
        key = int(key)
    if isinstance(key, int):
        return b"i" + str(int(key)).encode()
    if isinstance(key, float):
        return b"f" + struct.pack("<d", key)
    if isinstance(key, str):
        return b"s" + key.encode("utf-8", "surrogatepass")
    if isinstance(key, bytes):
        return b"b" + key
    if isinstance(key, tuple):
        # Length-prefix each part so ("ab", "c") and ("a", "bc") differ.
        parts = [_encode_key(k) for k in key]
        return b"t" + b"".join(struct.pack("<Q", len(p)) + p for p in parts)
    raise TypeError(
        f"affinity key must be None, bool, int, float, str, bytes or a tuple of them, "
        f"not {type(key).__name__}"
    )


class Affinity:
    """Send the same key to the same rank, unless that rank is overloaded.

    Each key ranks the candidates by rendezvous (highest-random-weight) hashing:
    the weight of a (key, rank) pair is a blake2b digest, identical in every
    process. The key's preferred rank is the candidate of highest weight, so
    removing a rank only moves the keys that preferred it, and adding one only
    takes keys from others.

    Load is bounded additively: a rank is acceptable while its in-flight count
    is at most ``max_imbalance`` above the least-loaded candidate's. The first
    acceptable rank in the key's preference order is chosen (the least-loaded
    rank is always acceptable, so there is always one). ``max_imbalance=0``
    therefore degrades to least-loaded among the key's ranks, and a large value
    to pure stickiness.

    A call with ``key=None`` has no affinity and is routed like `PowerOfTwo`.

    Args:
        max_imbalance: How many more calls in flight than the least-loaded rank the
            preferred rank may have before the key spills to its next rank (at least 0).
        seed: Seed for the `PowerOfTwo` used for calls without a key.
    """

    uses_key = True

    def __init__(self, max_imbalance: int = 2, seed: int | None = None) -> None:
        if max_imbalance < 0:
            raise ValueError(f"max_imbalance must be at least 0, got {max_imbalance}")
        self.max_imbalance = max_imbalance
        self._no_key = PowerOfTwo(seed)

    def preference(self, key: Hashable, candidates: Sequence[int]) -> list[int]:
        """Return ``candidates`` in ``key``'s order of preference, most preferred first.

        Raises:
            TypeError: ``key`` is not None, bool, int, float, str, bytes or a tuple of them.
        """
        return sorted(candidates, key=_weigher(key), reverse=True)

    def choose(
        self, candidates: Sequence[int], in_flight: Sequence[int], key: Hashable | None = None
    ) -> int:
        """Return ``key``'s most preferred rank within the load bound; see `ChoosePolicy`."""
        _check(candidates, in_flight)
        if key is None:
            return self._no_key.choose(candidates, in_flight)
        bound = min(in_flight) + self.max_imbalance
        acceptable = [c for c, n in zip(candidates, in_flight, strict=True) if n <= bound]
        # The first acceptable rank in preference order is the acceptable one of highest
        # weight: one pass instead of sorting every candidate.
        return max(acceptable, key=_weigher(key))


def _weigher(key: Hashable) -> Callable[[int], bytes]:
    """The rendezvous weight of each rank for ``key`` (compared as big-endian bytes)."""
    base = hashlib.blake2b(_encode_key(key), digest_size=8)

    def weight(rank: int) -> bytes:
        h = base.copy()
        h.update(struct.pack("<q", rank))
        return h.digest()

    return weight


_POLICIES: dict[str, type[ChoosePolicy]] = {
    "affinity": Affinity,
    "least_loaded": LeastLoaded,
    "power_of_two": PowerOfTwo,
    "random": Random,
    "round_robin": RoundRobin,
    "work_queue": WorkQueue,
}


def policy_from(spec: ChoosePolicy | str | None) -> ChoosePolicy:
    """Normalise what a user passes as a choose policy.

    Args:
        spec: A policy object (returned as is), one of the names ``"affinity"``,
            ``"least_loaded"``, ``"power_of_two"``, ``"random"``, ``"round_robin"``,
            ``"work_queue"`` (a new policy with default settings), or None for the
            default, `PowerOfTwo`.

    Raises:
        ValueError: ``spec`` is an unknown name.
        TypeError: ``spec`` is neither a name nor an object with a ``choose`` method.
    """
    if spec is None:
        return PowerOfTwo()
    if isinstance(spec, str):
        try:
            return _POLICIES[spec]()
        except KeyError:
            names = ", ".join(repr(n) for n in _POLICIES)
            raise ValueError(f"unknown choose policy {spec!r}; expected one of {names}") from None
    if isinstance(spec, ChoosePolicy):
        return spec
    raise TypeError(f"a choose policy must be a name or have a choose() method, not {spec!r}")
