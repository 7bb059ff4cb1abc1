"""The current job of a working directory: ``set_current_job`` / ``load_current_job``.

As in Monarch, ``.monarch/job_state.pkl`` is a symlink to the state of the active
context (``.monarch/default/state.pkl`` at first) and ``.monarch/<context>/spec`` holds
the dotted path (``module.attr``) of the job object that specifies it.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from ._trait import DEFAULT_JOB_PATH, JobTrait

__all__ = ["load_current_job", "set_current_job"]

_MONARCH_DIR = ".monarch"
_STATE_FILE = "state.pkl"
_SPEC_FILE = "spec"


def _current_spec_file() -> Path:
    link = Path(DEFAULT_JOB_PATH)
    if link.is_symlink():
        target = Path(os.readlink(link))
        return Path(_MONARCH_DIR) / target.parent / _SPEC_FILE
    return Path(_MONARCH_DIR) / "default" / _SPEC_FILE


def _import_job(module_path: str) -> JobTrait:
    if not isinstance(module_path, str) or "." not in module_path:
        raise ValueError(f"module_path must be 'module.attr', got {module_path!r}")
    module_name, attr = module_path.rsplit(".", 1)
    job = getattr(importlib.import_module(module_name), attr, None)
    if job is None:
        raise AttributeError(f"Module '{module_name}' has no '{attr}' attribute")
    if not isinstance(job, JobTrait):
        raise TypeError(f"'{module_path}' must be a JobTrait, got {type(job).__name__}")
    return job


def set_current_job(module_path: str) -> None:
    """Make ``module_path`` (``module.attr``, a job object) the current context's job.

    Sets up ``.monarch/`` on first use: ``job_state.pkl`` becomes a symlink to
    ``default/state.pkl`` (a plain ``job_state.pkl`` from before is moved there).

    Raises:
        ValueError: ``module_path`` is not ``module.attr``.
    """
    if not isinstance(module_path, str) or "." not in module_path:
        raise ValueError(f"module_path must be 'module.attr', got {module_path!r}")
    link = Path(DEFAULT_JOB_PATH)
    Path(_MONARCH_DIR).mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        default = Path(_MONARCH_DIR) / "default"
        default.mkdir(parents=True, exist_ok=True)
        if link.exists():
            link.rename(default / _STATE_FILE)
        link.symlink_to(Path("default") / _STATE_FILE)
    spec = _current_spec_file()
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(module_path)


def load_current_job() -> JobTrait:
    """A fresh job object from the current context's spec (not attached: call
    ``state()`` on it, which may find the cached job).

    Raises:
        FileNotFoundError: no spec (``set_current_job`` was never called here).
    """
    spec = _current_spec_file()
    try:
        module_path = spec.read_text().strip()
    except FileNotFoundError:
        raise FileNotFoundError(
            f"No spec found at {spec}. Call set_current_job('module.attr') first."
        ) from None
    return _import_job(module_path)
