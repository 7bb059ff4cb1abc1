"""Log records written inside actors name their actor, as Monarch's do.

In a worker process, a record made while an actor runs gets its message prefixed with
the actor's qualified name: ``[actor=<root>.<train.Trainer trainer{'gpus': 0/2}>] loss
0.3``, whatever handler writes it (a file the actor opened, the console). Empty messages
are left alone (torch's structured trace logging uses them). The record also gets an
``actor_prefix`` attribute, for formatters that would rather place it themselves.
``actormesh.actor.config.prefix_python_logs_with_actor = False`` turns it off.

This uses ``logging``'s own extension point, the record factory (chained to the one in
place), and only in worker processes, which actormesh runs: the controller's logging is
never touched.
"""

from __future__ import annotations

import logging
from typing import Any

from ._context import context, current_actor

__all__ = ["install"]

_installed = False


def install() -> None:
    """Prefix log records made inside actors in this (worker) process; idempotent."""
    global _installed
    if _installed:
        return
    _installed = True
    previous = logging.getLogRecordFactory()

    def make_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        if record.msg and current_actor() is not None and _enabled():
            prefix = f"[actor={context().actor_instance!r}] "
            record.actor_prefix = prefix
            # The message is %-formatted with the record's args later.
            record.msg = f"{prefix.replace('%', '%%') if record.args else prefix}{record.msg}"
        return record

    logging.setLogRecordFactory(make_record)


def _enabled() -> bool:
    from ._monarch import config

    return bool(config.prefix_python_logs_with_actor)
