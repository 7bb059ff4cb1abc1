"""Checking a call's arguments against the endpoint's signature at the call site.

Wrong arguments should fail where the call is written, not as a ``TypeError`` raised in
every actor of the mesh. ``Arity`` is a summary of a method's signature, computed once
when ``@endpoint`` decorates it and carried with the mesh reference (so handles passed to
other processes check too). Checking is a couple of comparisons for the common call with
positional arguments only; the exact rules of ``inspect.Signature.bind`` are used only
to word the error once a call is known to be wrong.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Arity"]


@dataclass(frozen=True)
class Arity:
    """What a method accepts, ``self`` excluded.

    Attributes:
        required: positional parameters without defaults.
        positional: every parameter that may be given by position (``None``: ``*args``).
        names: parameters that may be given by keyword (``None``: ``**kwargs``).
        keyword_only: keyword-only parameters without defaults.
        text: the signature, for messages.
    """

    required: int
    positional: int | None
    names: frozenset[str] | None
    keyword_only: frozenset[str]
    text: str
    positional_names: tuple[str, ...] = ()

    @classmethod
    def of(cls, fn: Callable[..., Any], *, hidden: int = 0) -> Arity | None:
        """The arity of an unbound method, or ``None`` when it has no usable signature.

        ``hidden``: leading parameters after ``self`` that callers do not pass (the
        response port of an explicit-port endpoint).
        """
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):
            return None
        params = list(signature.parameters.values())[1 + hidden :]  # drop self
        kinds = inspect.Parameter
        by_position = [
            p for p in params if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)
        ]
        variadic = any(p.kind is kinds.VAR_POSITIONAL for p in params)
        any_keyword = any(p.kind is kinds.VAR_KEYWORD for p in params)
        keywords = frozenset(
            p.name for p in params if p.kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY)
        )
        return cls(
            required=sum(1 for p in by_position if p.default is p.empty),
            positional=None if variadic else len(by_position),
            names=None if any_keyword else keywords,
            keyword_only=frozenset(
                p.name for p in params if p.kind is kinds.KEYWORD_ONLY and p.default is p.empty
            ),
            text=str(signature.replace(parameters=params, return_annotation=signature.empty)),
            positional_names=tuple(p.name for p in by_position),
        )

    def check(self, endpoint: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Raise ``TypeError`` when ``endpoint(*args, **kwargs)`` cannot bind."""
        count = len(args)
        if not kwargs:
            if (
                self.required <= count
                and (self.positional is None or count <= self.positional)
                and not self.keyword_only
            ):
                return
        elif self._fits(count, kwargs):
            return
        raise TypeError(f"endpoint {endpoint}{self.text} {self._complaint(args, kwargs)}")

    def _fits(self, count: int, kwargs: dict[str, Any]) -> bool:
        if self.positional is not None and count > self.positional:
            return False
        given = set(kwargs)
        if self.names is not None and not given <= self.names:
            return False
        taken = set(self.positional_names[:count])
        if given & taken:
            return False
        missing = [
            name for name in self.positional_names[count : self.required] if name not in given
        ]
        return not missing and self.keyword_only <= given

    def _complaint(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        count = len(args)
        if self.positional is not None and count > self.positional:
            return f"takes {self.positional} positional argument(s) but {count} were given"
        given = set(kwargs)
        if self.names is not None and given - self.names:
            unknown = ", ".join(repr(n) for n in sorted(given - self.names))
            return f"got unexpected keyword argument(s) {unknown}"
        twice = given & set(self.positional_names[:count])
        if twice:
            return f"got multiple values for argument(s) {', '.join(sorted(twice))}"
        missing = [n for n in self.positional_names[count : self.required] if n not in given]
        missing += sorted(self.keyword_only - given)
        return f"is missing required argument(s) {', '.join(repr(n) for n in missing)}"
