"""An actor whose module installs a signal handler when a worker imports it.

Python allows ``signal.signal`` on the main thread only, and a worker imports a spawn's
actor module on the new actor's thread: the spawn must fail saying so. (Nothing is
installed in the controller, which imports it too.)
"""

from __future__ import annotations

import os
import signal

from actormesh import Actor, endpoint

if os.environ.get("ACTORMESH_KEY"):  # set in workers only
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)


class SignalAtImport(Actor):
    @endpoint
    def ping(self) -> str:
        return "pong"
