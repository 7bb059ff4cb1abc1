"""Where a ``MetricLogger`` writes each step's reduced metrics.

A backend is anything with ``write(step, values, wall_time)`` and ``close()``
(``MetricBackend``); four come with actormesh:

- ``ConsoleBackend``: a block of lines per step on a stream (stdout by default);
- ``JsonlBackend``: one JSON object per step appended to a file
  (``{"step": 3, "time": 1764203472.1, "metrics": {"loss": 0.31}}``);
- ``TensorBoardBackend``: scalar summaries in a TensorBoard event file (the
  ``tensorboard`` package, ``pip install 'actormesh[metrics]'``);
- ``WandbBackend``: a Weights & Biases run, offline by default (``wandb``).

The optional packages are imported when such a backend is made, never before, and a
missing one is named in the error. Backends run on a thread of the runtime's executor,
one step at a time, so a slow disk never stalls the runtime's loop.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, TextIO, runtime_checkable

__all__ = [
    "ConsoleBackend",
    "JsonlBackend",
    "MetricBackend",
    "TensorBoardBackend",
    "WandbBackend",
]


@runtime_checkable
class MetricBackend(Protocol):
    """Something a ``MetricLogger`` writes each step to."""

    def write(self, step: int, values: Mapping[str, float], wall_time: float) -> None:
        """Write one step's reduced metrics (one thread at a time)."""
        ...

    def close(self) -> None:
        """Flush and release what the backend holds; it is not written to again."""
        ...


def _optional(module: str, extra: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"this backend needs the {module.split('.')[0]!r} package: "
            f"pip install 'actormesh[{extra}]' ({error})"
        ) from None


class ConsoleBackend:
    """Each step as a block of ``key: value`` lines.

    Args:
        stream: where to write (default: ``sys.stdout`` at the time of writing).
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream

    def write(self, step: int, values: Mapping[str, float], wall_time: float) -> None:
        stream = self.stream or sys.stdout
        width = max((len(key) for key in values), default=0)
        lines = [f"=== metrics step {step} ==="]
        lines.extend(f"{key + ':':<{width + 1}} {value:.6g}" for key, value in values.items())
        stream.write("\n".join(lines) + "\n")
        stream.flush()

    def close(self) -> None:
        if self.stream is not None:
            self.stream.flush()


class JsonlBackend:
    """One JSON line per step, appended to ``path`` (its folder is made if missing).

    NaN and infinities are written as JavaScript's ``NaN`` and ``Infinity``, which
    Python's ``json`` reads back.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")

    def write(self, step: int, values: Mapping[str, float], wall_time: float) -> None:
        line = {"step": step, "time": wall_time, "metrics": dict(values)}
        self._file.write(json.dumps(line) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class TensorBoardBackend:
    """Scalars in a TensorBoard event file under ``logdir`` (one file per backend).

    Open it with ``tensorboard --logdir LOGDIR``. Written with the ``tensorboard``
    package's own event writer: neither TensorFlow nor torch is needed.
    """

    def __init__(self, logdir: str | os.PathLike[str]) -> None:
        writer = _optional("tensorboard.summary.writer.event_file_writer", "metrics")
        self._event = _optional("tensorboard.compat.proto.event_pb2", "metrics").Event
        self._summary = _optional("tensorboard.compat.proto.summary_pb2", "metrics").Summary
        self.logdir = Path(logdir)
        self.logdir.mkdir(parents=True, exist_ok=True)
        self._writer = writer.EventFileWriter(str(self.logdir))

    def write(self, step: int, values: Mapping[str, float], wall_time: float) -> None:
        scalars = [self._summary.Value(tag=key, simple_value=v) for key, v in values.items()]
        summary = self._summary(value=scalars)
        self._writer.add_event(self._event(wall_time=wall_time, step=step, summary=summary))
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class WandbBackend:
    """A Weights & Biases run; ``mode="offline"`` (the default) writes it under ``dir``
    for a later ``wandb sync``, with no account or network.

    Args:
        project: the W&B project.
        mode: ``"offline"``, ``"online"`` or ``"disabled"``.
        dir: where W&B keeps the run (``<dir>/wandb/offline-run-*``); default: the
            working directory.
        **init: more arguments for ``wandb.init`` (``name``, ``config``, ``tags``, ...).
    """

    def __init__(
        self,
        project: str,
        *,
        mode: str = "offline",
        dir: str | os.PathLike[str] | None = None,
        **init: Any,
    ) -> None:
        wandb = _optional("wandb", "wandb")
        settings = init.pop("settings", None) or wandb.Settings(silent=True)
        self.run = wandb.init(
            project=project,
            mode=mode,
            dir=None if dir is None else str(dir),
            settings=settings,
            reinit="create_new",
            **init,
        )

    def write(self, step: int, values: Mapping[str, float], wall_time: float) -> None:
        self.run.log(dict(values), step=step)

    def close(self) -> None:
        self.run.finish()
