"""Errors and naming scopes shared by every layer.

Every error symgrad raises derives from a built-in exception so that plain
``except ValueError`` / ``pytest.raises(ValueError)`` work, and names the thing
at fault (op instance, argument, expected vs got).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

if TYPE_CHECKING:
    import os

__all__ = [
    "SymgradError",
    "MXNetError",
    "ParamError",
    "ShapeError",
    "BindError",
    "DTypeError",
    "AllocationError",
    "SerializationError",
    "NameManager",
    "Prefix",
    "AttrScope",
]


class SymgradError(ValueError):
    """Base class of symgrad's own errors (a ``ValueError``)."""


#: MXNet spelling, so ``except mx.base.MXNetError`` ports unchanged.
MXNetError = SymgradError


class ParamError(SymgradError, TypeError):
    """An operator parameter is unknown, missing or has a bad value."""


class ShapeError(SymgradError):
    """Shapes conflict or cannot be inferred."""


class BindError(SymgradError):
    """Arrays handed to ``bind``/``forward``/``backward`` do not fit the symbol."""


class DTypeError(BindError, TypeError):
    """An array handed to ``bind``/``forward``/``backward`` has the wrong dtype (also a ``TypeError``)."""


class AllocationError(SymgradError, MemoryError):
    """The arrays asked for (``simple_bind`` shapes) are too large to allocate (also a ``MemoryError``)."""


class SerializationError(SymgradError):
    """A model file (symbol JSON, ``.params``, ``.npz``) is malformed, truncated or cannot be written;
    the message names the node or the byte offset at fault."""


#: A file name: a ``str`` or a path object (``pathlib.Path``).
StrPath: TypeAlias = "str | os.PathLike[str]"

_local = threading.local()
_ScopeT = TypeVar("_ScopeT", bound="_Scope")


class _Scope:
    """A thread-local stack of scope objects used as context managers."""

    _attr = ""

    def __enter__(self: _ScopeT) -> _ScopeT:
        stack = _stack(self._attr)
        stack.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _stack(self._attr).pop()


def _stack(attr: str) -> list[Any]:
    stack = getattr(_local, attr, None)
    if stack is None:
        stack = []
        setattr(_local, attr, stack)
    return stack


class NameManager(_Scope):
    """Gives automatic names ``<hint><counter>`` (MXNet's ``mx.name.NameManager``).

    >>> with NameManager():
    ...     NameManager.current().get(None, "fullyconnected")
    'fullyconnected0'
    """

    _attr = "name_stack"

    def __init__(self) -> None:
        self._counter: dict[str, int] = {}

    def get(self, name: str | None, hint: str) -> str:
        if name:
            return name
        n = self._counter.get(hint, 0)
        self._counter[hint] = n + 1
        return f"{hint}{n}"

    @staticmethod
    def current() -> NameManager:
        stack = _stack(NameManager._attr)
        if not stack:
            stack.append(NameManager())
        return stack[-1]


class Prefix(NameManager):
    """Prefixes every operator name, given or automatic (``mx.name.Prefix``)."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self._prefix = prefix

    def get(self, name: str | None, hint: str) -> str:
        return self._prefix + super().get(name, hint)


class AttrScope(_Scope):
    """Attaches string attributes to every symbol created inside it (``mx.AttrScope``)."""

    _attr = "attr_stack"

    def __init__(self, **kwargs: str) -> None:
        for k, v in kwargs.items():
            if not isinstance(v, str):
                raise TypeError(f"AttrScope: attribute {k!r} must be a string, got {type(v).__name__}")
        self._attr_values = kwargs

    def __enter__(self) -> AttrScope:
        # Nested scopes inherit the outer attributes (MXNet semantics).
        outer = AttrScope.current_attrs()
        self._merged = {**outer, **self._attr_values}
        return super().__enter__()

    def get(self, attr: Mapping[str, str] | None) -> dict[str, str]:
        merged = dict(getattr(self, "_merged", self._attr_values))
        if attr:
            merged.update(attr)
        return merged

    @staticmethod
    def current_attrs() -> dict[str, str]:
        stack = _stack(AttrScope._attr)
        return dict(stack[-1]._merged) if stack else {}
