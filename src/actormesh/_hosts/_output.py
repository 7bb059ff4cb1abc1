"""Actor output: prefixing lines in the worker, forwarding them in the owner.

In the worker, ``sys.stdout`` and ``sys.stderr`` become line-prefixing streams: every
complete line gets ``[mesh {coords}]`` of the actor that wrote it (from a context
variable, so two actors of one process are told apart), and goes to the real stream at
once. In the owner, the workers' pipes are read on the event loop and written to the
owner's ``sys.stdout``/``sys.stderr`` objects, so output shows up where the controller's
own prints go (a terminal, pytest's capture, a Jupyter cell).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import contextvars
import io
import os
import sys
import threading
from collections.abc import Callable
from typing import IO, Any

__all__ = [
    "ATTRIBUTED",
    "CURRENT_PREFIX",
    "PipeForwarder",
    "PrefixStream",
    "install_prefix_streams",
]

CURRENT_PREFIX: contextvars.ContextVar[str] = contextvars.ContextVar(
    "actormesh_output_prefix", default=""
)
# How a log record made in an actor starts (see _api._actor_logs).
ATTRIBUTED = "[actor="


class PrefixStream(io.TextIOBase):
    """A text stream that prefixes each complete line with the writer's actor label."""

    def __init__(self, target: IO[str], default_prefix: str) -> None:
        self._target = target
        self._default = default_prefix
        self._lock = threading.Lock()
        self._partial: dict[int, str] = {}

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._target, "encoding", "utf-8")

    def fileno(self) -> int:
        return self._target.fileno()

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        prefix = CURRENT_PREFIX.get() or self._default
        thread = threading.get_ident()
        with self._lock:
            pending = self._partial.pop(thread, "") + text
            lines = pending.split("\n")
            tail = lines.pop()
            if tail:
                self._partial[thread] = tail
            if lines:
                self._target.write("".join(f"{prefix} {_unattributed(line)}\n" for line in lines))
                self._target.flush()
        return len(text)

    def flush(self) -> None:
        with self._lock:
            self._target.flush()


def _unattributed(line: str) -> str:
    """The line without the actor name a log record starts with (see _api._actor_logs):
    the line prefix names the same actor, shorter."""
    if line.startswith(ATTRIBUTED):
        end = line.find(">] ")
        if end != -1:
            return line[end + 3 :]
    return line


def install_prefix_streams(default_prefix: str) -> None:
    """Replace ``sys.stdout``/``sys.stderr`` of this (worker) process with prefixing ones."""
    sys.stdout = PrefixStream(sys.__stdout__ or sys.stdout, default_prefix)
    sys.stderr = PrefixStream(sys.__stderr__ or sys.stderr, default_prefix)


class PipeForwarder:
    """Copies a worker's output pipe to one of the owner's streams, on the event loop.

    Args:
        loop: the owner's loop; ``start()`` runs on its thread.
        pipe: the read end (a file object from ``Popen``); closed at EOF.
        stream_name: ``"stdout"`` or ``"stderr"``: looked up on ``sys`` at each write, so
            redirections made later by the program (or a test's capture) are honoured.
        sink: where the text goes instead, as ``sink(stream_name, text)`` (the
            controller's line aggregator, see ``_aggregate``); ``sink(stream_name, None)``
            when the pipe ends.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        pipe: Any,
        stream_name: str,
        sink: Callable[[str, str | None], None] | None = None,
    ) -> None:
        self._loop = loop
        self._pipe = pipe
        self._fd: int = pipe.fileno()
        self._stream_name = stream_name
        self._sink = sink
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._done = False

    def start(self) -> None:
        """Begin forwarding; call on the loop thread."""
        os.set_blocking(self._fd, False)
        self._loop.add_reader(self._fd, self._readable)

    def _readable(self) -> None:
        try:
            data = os.read(self._fd, 65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.close()
            return
        text = self._decoder.decode(data)
        if text and self._sink is not None:
            self._sink(self._stream_name, text)
        elif text:
            stream = getattr(sys, self._stream_name)
            try:
                stream.write(text)
                stream.flush()
            except (OSError, ValueError):
                pass

    def drain(self) -> None:
        """Forward whatever is still buffered in the pipe, then close (loop thread)."""
        while not self._done and _has_data(self._fd):
            self._readable()
        self.close()

    def close(self) -> None:
        """Stop forwarding and close the pipe (loop thread)."""
        if self._done:
            return
        self._done = True
        if self._sink is not None:
            self._sink(self._stream_name, None)
        with contextlib.suppress(ValueError, OSError, RuntimeError):
            self._loop.remove_reader(self._fd)
        with contextlib.suppress(OSError):
            self._pipe.close()


def _has_data(fd: int) -> bool:
    import select

    readable, _, _ = select.select([fd], [], [], 0)
    return bool(readable)
