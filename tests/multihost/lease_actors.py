"""Actor classes of the lease tests (workers import them by module name)."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

from actormesh import Actor, endpoint


class Counter(Actor):
    """A counter whose state must survive its controller."""

    def __init__(self) -> None:
        self.count = 0

    @endpoint
    def incr(self) -> int:
        self.count += 1
        return self.count

    @endpoint
    def value(self) -> int:
        return self.count

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def echo_from(self, fifo: str) -> None:
        """Print each line written to ``fifo`` (a named pipe), on a thread of its own,
        then touch ``fifo + ".said"``: output made while nobody calls the actor. A line
        ``flood N`` prints N lines of a kilobyte each instead."""

        def relay() -> None:
            with open(fifo, encoding="utf-8") as lines:
                for line in lines:
                    words = line.split()
                    if words[0] == "flood":
                        for index in range(int(words[1])):
                            print(f"flood {index} " + "x" * 1000)
                        sys.stdout.flush()
                    else:
                        print(f"heard {line.strip()}", flush=True)
                    Path(fifo + ".said").touch()

        threading.Thread(target=relay, daemon=True).start()
