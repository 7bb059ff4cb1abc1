"""The C extensions (everything else is in pyproject.toml).

``actormesh._transport._cframes`` is the compiled twin of the per-message frame path
(see ``src/actormesh/_transport/_speedups.py``), ``actormesh._core._cdispatch`` that of a
received frame's dispatch to its handler (``src/actormesh/_core/_dispatch.py``), and
``actormesh._hosts._cfork`` the fork of the fork server. All are optional: where they
cannot be built (no C compiler), the install goes on and the pure-Python path is used
(workers then start as fresh interpreters).
"""

from __future__ import annotations

from setuptools import Extension, setup

_FLAGS = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"]

setup(
    ext_modules=[
        Extension(
            "actormesh._transport._cframes",
            sources=["src/actormesh/_transport/_cframes.c"],
            extra_compile_args=_FLAGS,
            optional=True,
        ),
        Extension(
            "actormesh._core._cdispatch",
            sources=["src/actormesh/_core/_cdispatch.c"],
            extra_compile_args=_FLAGS,
            optional=True,
        ),
        # The fork server's fork (see src/actormesh/_hosts/_forkserver.py); without it
        # workers are started as fresh interpreters.
        Extension(
            "actormesh._hosts._cfork",
            sources=["src/actormesh/_hosts/_cfork.c"],
            extra_compile_args=_FLAGS,
            optional=True,
        ),
    ]
)
