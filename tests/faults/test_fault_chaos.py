"""Chaos: random SIGKILLs of workers under a steady load of calls, with restarts on.

Senders call ``Ledger.apply(sender, seq)`` with increasing ``seq``, several calls in flight
each, spread over the ranks, while a killer thread SIGKILLs a random worker now and then.
Each rank appends every call it runs to its ledger file before answering, so afterwards:

- every acknowledged call (one that returned a value) must be in its rank's ledger
  exactly once: none lost, none run twice;
- each sender's calls must appear in its rank's ledger in increasing order: none
  reordered, across restarts too;
- every call must end, with its value or with ``ActorDiedError`` (it was in flight when
  its process died), and nothing else: no timeouts, no hangs.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

from faults_actors import Ledger

from actormesh import ActorDiedError, Future, ProcMesh, proc_mesh
from actormesh._hosts import Runtime
from actormesh.testing import wait_until

FULL = os.environ.get("ACTORMESH_FAULTS_FULL") == "1"
SECONDS = 30.0 if FULL else 6.0
KILL_EVERY = (0.15, 0.45)  # seconds between kills, drawn uniformly
RANKS = 4
SENDERS = 3
WINDOW = 8  # calls in flight per sender


class Sender:
    """Sends numbered calls, ``WINDOW`` at a time, and records how each ended."""

    def __init__(self, name: str, mesh: object, stop: threading.Event, seed: int) -> None:
        self.name = name
        self.mesh = mesh
        self.stop = stop
        self.random = random.Random(seed)
        self.acked: list[tuple[int, int]] = []  # (rank, seq) that returned their value
        self.died = 0
        self.other: list[BaseException] = []
        self.thread = threading.Thread(target=self.run, name=f"sender-{name}")

    def run(self) -> None:
        in_flight: list[tuple[int, int, Future[int]]] = []
        seq = 0
        while not self.stop.is_set() or in_flight:
            while not self.stop.is_set() and len(in_flight) < WINDOW:
                rank = self.random.randrange(RANKS)
                one = self.mesh.slice(gpus=rank)  # type: ignore[attr-defined]
                in_flight.append((rank, seq, one.apply.call_one(self.name, seq)))
                seq += 1
            rank, sent, future = in_flight.pop(0)
            try:
                assert future.get(timeout=30) == sent
                self.acked.append((rank, sent))
            except ActorDiedError:
                self.died += 1
            except BaseException as error:  # a timeout here is a hang
                self.other.append(error)


def test_random_sigkills_lose_reorder_or_duplicate_no_acknowledged_call(
    tmp_path: Path, figures: object
) -> None:
    procs: ProcMesh = proc_mesh(
        gpus=RANKS, restart="rank", max_restarts=1000, restart_window=60
    ).get(timeout=30)
    try:
        mesh = procs.spawn("ledger", Ledger, str(tmp_path))
        stop = threading.Event()
        senders = [Sender(f"s{i}", mesh, stop, seed=i) for i in range(SENDERS)]
        for sender in senders:
            sender.thread.start()
        kills, detections, restarts = _kill_randomly(procs, SECONDS)
        stop.set()
        for sender in senders:
            sender.thread.join(timeout=60)
            assert not sender.thread.is_alive(), "a sender hung"
        # Every rank is back and serving.
        assert len(mesh.pid.call().get(timeout=60)) == RANKS
        restored = mesh.was_restored.call().get(timeout=10)
    finally:
        procs.stop().get(timeout=30)

    acked = {(s.name, rank, seq) for s in senders for rank, seq in s.acked}
    ledgers = _read_ledgers(tmp_path)
    seen = Counter((sender, rank, seq) for rank, lines in ledgers.items() for sender, seq in lines)
    lost = [call for call in acked if seen[call] == 0]
    duplicated = [call for call, count in seen.items() if count > 1]
    order_violations = sum(_order_violations(lines) for lines in ledgers.values())
    other = [error for s in senders for error in s.other]

    record: Callable[[str, float], None] = figures.add  # type: ignore[attr-defined]
    record("chaos_kills", kills)
    record("chaos_acked", len(acked))
    record("chaos_died", sum(s.died for s in senders))
    record("lost", len(lost))
    record("duplicated", len(duplicated))
    record("order_violations", order_violations)
    for seconds in detections:
        record("detect_s", seconds)
    for seconds in restarts:
        record("restart_s", seconds)

    assert kills >= 3
    assert other == [], f"calls ended with neither a value nor ActorDiedError: {other[:3]}"
    assert lost == [], f"acknowledged calls missing from the ledgers: {lost[:5]}"
    assert duplicated == [], f"calls run twice: {duplicated[:5]}"
    assert order_violations == 0
    assert len(acked) > 100
    assert any(restored.values())


def _kill_randomly(procs: ProcMesh, seconds: float) -> tuple[int, list[float], list[float]]:
    """SIGKILL random workers for ``seconds``; kills, detection and restart times.

    Kills do not wait for earlier restarts: several ranks may be down at once.
    """
    runtime = Runtime.get()
    chooser = random.Random(42)
    detections: list[float] = []
    restarts: list[float] = []
    watchers: list[threading.Thread] = []
    kills = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(chooser.uniform(*KILL_EVERY))  # the chaos pace, not synchronisation
        victim = chooser.choice(procs._processes.children)
        path = victim.listen_path
        if runtime.children.relaunching(path) or not victim.alive():
            continue  # that rank is down already
        killed_at = time.monotonic()
        os.kill(victim.pid, signal.SIGKILL)
        kills += 1
        detections.append(
            wait_until(lambda p=path: runtime.children.relaunching(p), 5, "the death to be noticed")
        )

        def restarted(path: str = path, killed_at: float = killed_at) -> None:
            wait_until(lambda: not runtime.children.relaunching(path), 30, "the restart")
            restarts.append(time.monotonic() - killed_at)

        watchers.append(threading.Thread(target=restarted))
        watchers[-1].start()
    for watcher in watchers:
        watcher.join()
    return kills, detections, restarts


def _read_ledgers(directory: Path) -> dict[int, list[tuple[str, int]]]:
    ledgers: dict[int, list[tuple[str, int]]] = {}
    for rank in range(RANKS):
        path = directory / f"rank{rank}.log"
        lines = path.read_text().splitlines() if path.exists() else []
        ledgers[rank] = [(line.split()[0], int(line.split()[1])) for line in lines]
    return ledgers


def _order_violations(lines: list[tuple[str, int]]) -> int:
    last: dict[str, int] = defaultdict(lambda: -1)
    violations = 0
    for sender, seq in lines:
        if seq <= last[sender]:
            violations += 1
        last[sender] = max(last[sender], seq)
    return violations
