"""The C extension (everything else is in pyproject.toml).

``actormesh._transport._cframes`` is the compiled twin of the per-message frame path
(see ``src/actormesh/_transport/_speedups.py``). It is optional: where it cannot be built
(no C compiler), the install goes on and the pure-Python path is used.
"""

from __future__ import annotations

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "actormesh._transport._cframes",
            sources=["src/actormesh/_transport/_cframes.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            optional=True,
        )
    ]
)
