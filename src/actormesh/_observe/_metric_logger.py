"""The controller's end of ``record_metric``: one reduced value per metric per step.

``MetricLogger.flush(step)`` asks every process of the controller's live meshes for the
tallies recorded since the last flush (an OBSERVE for ``"metrics"``, answered from the
worker's loop), adds the controller's own, merges them per key across ranks
(``actormesh._pure._reduce``) and writes the values to each backend. Metrics recorded by
processes the controller does not talk to itself (meshes spawned by actors) are not
collected. A process that does not answer in time is named in a warning; what it
recorded before that flush is lost rather than counted in a later step.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

from .._api import Future, from_concurrent
from .._core import metrics, observe
from .._hosts import Runtime
from .._pure import State, reduce_states
from ._metric_backends import MetricBackend

__all__ = ["MetricLogger"]

log = logging.getLogger("actormesh.observe")


class MetricLogger:
    """Reduces the metrics of every rank per step and writes them to backends.

    Made in the controller::

        logger = MetricLogger([ConsoleBackend(), TensorBoardBackend("runs/exp1")])
        for step in range(steps):
            trainers.train_step.call().get()  # the actors call record_metric(...)
            logger.flush(step).get()
        logger.close()

    Args:
        backends: where each step goes (``ConsoleBackend``, ``JsonlBackend``,
            ``TensorBoardBackend``, ``WandbBackend``, or any ``MetricBackend``).
        timeout: seconds each process gets to answer a flush.
        per_rank: also write each process' own reduction of each key, as
            ``<key>/<mesh>_<rank>`` (``loss/trainer_3``; the controller's as
            ``<key>/controller``), as torchforge's ``per_rank_reduce`` does: which rank
            was slow in step 4212, or diverged.

    Raises:
        TypeError: a backend without ``write`` and ``close``.
    """

    def __init__(
        self,
        backends: Sequence[MetricBackend] = (),
        *,
        timeout: float = 5.0,
        per_rank: bool = False,
    ) -> None:
        for backend in backends:
            if not isinstance(backend, MetricBackend):
                raise TypeError(
                    f"MetricLogger: {backend!r} is not a metric backend (it needs "
                    "write(step, values, wall_time) and close())"
                )
        if timeout <= 0:
            raise ValueError(f"MetricLogger: timeout must be positive, not {timeout!r}")
        self.backends = list(backends)
        self.timeout = timeout
        self.per_rank = per_rank
        self._closed = False

    def flush(self, step: int) -> Future[dict[str, float]]:
        """Collect, reduce and write the metrics recorded since the last flush as step
        ``step``; the future's value is what was written (``{key: value}``).

        Raises:
            TypeError: ``step`` is not an int.
            RuntimeError: the logger was closed.
        """
        if not isinstance(step, int) or isinstance(step, bool):
            raise TypeError(f"MetricLogger.flush: step must be an int, not {step!r}")
        if self._closed:
            raise RuntimeError("MetricLogger.flush: the logger was closed")
        from . import observer

        runtime = Runtime.get()
        found = observer(runtime)
        labels: dict[str, str] = {}  # process path -> "<mesh>_<rank>" (its first mesh's)
        # Actors hosted by the controller itself record into its own tallies, which
        # _flush takes as the controller's: asking its own process too would take them
        # first, under a mesh's name.
        own = {runtime.address, runtime.listen_path}
        for ref in found.meshes.live() if found is not None else ():
            for rank, path in enumerate(ref.paths):
                if path not in own:
                    labels.setdefault(path, f"{ref.name}_{rank}")
        return from_concurrent(runtime, runtime.submit(self._flush(runtime, labels, step)))

    async def _flush(self, runtime: Any, labels: dict[str, str], step: int) -> dict[str, float]:
        answers = await observe(runtime, labels, "metrics", self.timeout)
        states: dict[str, dict[str, State]] = {"controller": metrics.take()}
        for path, answer in answers.items():
            if "error" in answer:
                log.warning("metrics of %s not collected at step %d: %s", path, step, answer)
                continue
            states[labels[path]] = answer["metrics"]
        values, _, conflicts = reduce_states(states.values())
        if self.per_rank:
            for label, own in sorted(states.items()):
                for key, value in reduce_states([own])[0].items():
                    values[f"{key}/{label}"] = value
        if conflicts:
            log.warning(
                "metrics recorded with different reductions by different ranks: %s",
                ", ".join(conflicts),
            )
        if values and self.backends:
            wall = time.time()
            await asyncio.get_running_loop().run_in_executor(None, self._write, step, values, wall)
        return values

    def _write(self, step: int, values: dict[str, float], wall_time: float) -> None:
        for backend in self.backends:
            try:
                backend.write(step, values, wall_time)
            except Exception:
                log.exception("metric backend %r failed at step %d", backend, step)

    def close(self) -> None:
        """Close every backend (flushing what they hold); later flushes raise."""
        if self._closed:
            return
        self._closed = True
        for backend in self.backends:
            try:
                backend.close()
            except Exception:
                log.exception("metric backend %r failed to close", backend)

    def __enter__(self) -> MetricLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
