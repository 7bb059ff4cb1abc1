"""Monarch's own tests, run on actormesh with the imports mapped, and on Monarch.

A development bar, not part of CI (``scripts/test`` never runs it)::

    scripts/monarch-suite PATH [--side both|actormesh|monarch] [--monarch-python PY]
                               [--control FILE] [--mine FILE] [--keep DIR]
                               [--only FILE_PART]... [--timeout S] [--actormesh-src DIR]
                               [-- PYTEST_ARGS...]

PATH holds Monarch's test files: a Monarch checkout (its ``python/tests``), a folder of
test files, or a torchmonarch wheel (0.7.0 ships the exact 0.7.0 tests as its top-level
``tests/`` folder). The tests are copied to a scratch folder; nothing of Monarch's comes
into the repository.

Each selected file (``selection.FILES``; every other file of 0.7.0 is in
``selection.EXCLUDED`` with its reason) runs one at a time on two sides:

- **monarch** (the control): the copy as it is, Monarch's own conftest included, under
  a Python with torchmonarch 0.7.0: ``--monarch-python``, else ``$ACTORMESH_MONARCH_PYTHON``,
  else ``.venv-monarch`` (git-ignored), created on first use with torch 2.13.0 (the CPU
  build), torchmonarch 0.7.0, torchx and the same pytest, pytest-timeout,
  pytest-asyncio and cloudpickle as the other side.
- **actormesh**: the same copy under the project's Python, with an import hook
  (``shim/sitecustomize.py``, first on ``PYTHONPATH``, so pytest, isolated subprocesses
  and actormesh's workers all have it) that maps ``monarch``, ``monarch.actor``,
  ``monarch.rdma``, ``monarch.spmd`` to actormesh's modules and makes every other Monarch
  module a stand-in whose names raise ``MonarchInternalUsed`` when used. The test files
  are not edited. Monarch's ``conftest.py`` (crash-recovery plugin, Rust probes) and two
  helpers that only do harness work through ``monarch.config``
  (``rdma_test_utils.py``, ``proc_mesh_test_utils.py``) are replaced by the stand-ins in
  ``shim/`` (same test ids, same skips).

Both sides run pytest as Monarch's CI does (``-m "not oss_skip"``, asyncio auto mode),
with pytest-timeout on every test (``--timeout``, default 120 s: a hang is a failure), a
watchdog for hangs the timeout cannot interrupt, and compat/_launch.py, which ends every
process a run leaves behind. A test that reaches a Monarch internal
(``selection.internal_uses``, decided from its source) is not run on either side.

It prints ``P/N passed (control: C/N)``, the share of Monarch's C passes that actormesh
passes, the failures by cause (``report.CAUSES``; others "unexplained: <error>"), and
what is not counted and why. Exit status 0 when that share is at least 95%.

``--keep DIR`` saves each side's record (``monarch.json``, ``actormesh.json``: one
entry per test with its outcome, error line, traceback tail and time) and logs;
``--control FILE`` reuses a saved Monarch record instead of running Monarch again,
``--mine FILE`` a saved actormesh record; ``--side`` runs one side only.
``--actormesh-src DIR`` tests the ``actormesh`` package in DIR instead of the project's
(for instance ``git archive HEAD src`` unpacked, to measure a commit while the work tree
changes; copy the built ``*.so`` files along or set ``ACTORMESH_NO_EXTENSIONS=1``).
"""

from __future__ import annotations
