"""Errors and naming scopes shared by every layer.

Every error symgrad raises derives from a built-in exception so that plain
``except ValueError`` / ``pytest.raises(ValueError)`` work, and names the thing
at fault (op instance, argument, expected vs got).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeAlias, TypeVar

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
    "NotImplementedForSymbol",
    "HIDDEN_KEYS",
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


class NotImplementedForSymbol(SymgradError, TypeError):
    """An NDArray-only operation was tried on a Symbol (MXNet's ``mx.base.NotImplementedForSymbol``): ``bool(sym)``.

    Also a ``TypeError`` (Python's error for an unsupported operation) and a ``SymgradError``/``MXNetError``.
    ``function`` is the name of the method, ``alias`` the operator it implements (``"bool"``).

    >>> str(NotImplementedForSymbol("__bool__", "bool"))
    'Function __bool__ (namely operator "bool") is not implemented for Symbol and only available in NDArray.'
    """

    def __init__(self, function: str | Callable[..., object], alias: str | None = None, *args: object) -> None:
        self.function = function if isinstance(function, str) else getattr(function, "__name__", str(function))
        self.alias = alias
        self.arg_types = [str(type(a)) for a in args]
        super().__init__(self._message())

    def _message(self) -> str:
        msg = f"Function {self.function}"
        if self.alias:
            msg += f' (namely operator "{self.alias}")'
        if self.arg_types:
            msg += f" with arguments ({', '.join(self.arg_types)})"
        return msg + " is not implemented for Symbol and only available in NDArray."


#: A file name: a ``str`` or a path object (``pathlib.Path``).
StrPath: TypeAlias = "str | os.PathLike[str]"

#: The attribute keys MXNet stores hidden, as ``__lr_mult__`` & co. (its ``kHiddenKeys``): given plainly to
#: ``Variable``/``AttrScope``/an op creator/``_set_attr`` they are stored in the ``__key__`` form, and
#: ``list_attr``/``attr_dict``/``attr`` answer for both spellings.
HIDDEN_KEYS = ("ctx_group", "lr_mult", "wd_mult", "force_mirroring", "mirror_stage")

_local = threading.local()
_ScopeT = TypeVar("_ScopeT", bound="_Scope")


class _ScopeMeta(type):
    """Gives the scope classes MXNet's class property ``current``: this thread's scope (a fresh default one
    until set), assignable (``NameManager.current = NameManager()``) for this thread only."""

    @property
    def current(cls: Any) -> Any:  # the instance of ``cls._root``, as the subclass's ``current`` says
        return cls._current_scope()

    @current.setter
    def current(cls: Any, value: Any) -> None:
        root = cls._root()
        if not isinstance(value, root):
            raise TypeError(f"{root.__name__}.current must be a {root.__name__}, got {type(value).__name__}")
        setattr(_local, root._key, value)


class _Scope(metaclass=_ScopeMeta):
    """A thread-local current scope (``Cls.current``), replaced inside ``with scope:`` and restored after.

    Each thread starts with its own default scope; entering a scope saves the one it replaces on a
    per-thread stack, so a scope object can be entered again (nested or later).
    """

    _key = ""

    @classmethod
    def _root(cls) -> type[_Scope]:
        """The class whose ``current`` this one shares (``Prefix`` is a ``NameManager``)."""
        return next(c for c in cls.__mro__ if "_key" in vars(c))

    @classmethod
    def _current_scope(cls) -> Any:
        root = cls._root()
        value = getattr(_local, root._key, None)
        if value is None:
            value = root()
            setattr(_local, root._key, value)
        return value

    def __enter__(self: _ScopeT) -> _ScopeT:
        root = self._root()
        _saved(root._key).append(root._current_scope())
        setattr(_local, root._key, self)
        return self

    def __exit__(self, *exc: object) -> None:
        root = self._root()
        setattr(_local, root._key, _saved(root._key).pop())


def _saved(key: str) -> list[Any]:
    """The scopes that ``with`` blocks of this thread replaced (innermost last)."""
    stack = getattr(_local, key + "_saved", None)
    if stack is None:
        stack = []
        setattr(_local, key + "_saved", stack)
    return stack


class NameManager(_Scope):
    """Gives automatic names ``<hint><counter>`` (MXNet's ``mx.name.NameManager``).

    ``NameManager.current`` is this thread's manager (assignable); ``with NameManager():`` counts afresh.

    >>> with NameManager():
    ...     NameManager.current.get(None, "fullyconnected")
    'fullyconnected0'
    """

    _key = "name_manager"
    if TYPE_CHECKING:
        current: ClassVar[NameManager]

    def __init__(self) -> None:
        self._counter: dict[str, int] = {}

    def get(self, name: str | None, hint: str) -> str:
        """``name`` when given, else ``hint`` followed by how many names this manager has made from it."""
        if name:
            return name
        n = self._counter.get(hint, 0)
        self._counter[hint] = n + 1
        return f"{hint}{n}"


class Prefix(NameManager):
    """Prefixes every operator name, given or automatic (``mx.name.Prefix``)."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self._prefix = prefix

    def get(self, name: str | None, hint: str) -> str:
        return self._prefix + super().get(name, hint)


class AttrScope(_Scope):
    """Attaches string attributes to every symbol created inside it (``mx.AttrScope``).

    ``AttrScope.current`` is this thread's scope (assignable); ``_attr`` its attributes, which on entering a
    ``with`` block become the enclosing scope's overridden by this one's (MXNet semantics).
    """

    _key = "attr_scope"
    #: how many control-flow subgraphs of each base name were made (MXNet's ``AttrScope._subgraph_names``;
    #: ``symgrad.control_flow`` counts here, and assigning a fresh ``defaultdict(int)`` restarts the count)
    _subgraph_names: ClassVar[defaultdict[str, int]] = defaultdict(int)
    if TYPE_CHECKING:
        current: ClassVar[AttrScope]

    def __init__(self, **kwargs: str) -> None:
        for k, v in kwargs.items():
            if not isinstance(v, str):
                raise ParamError(f"AttrScope: attribute {k!r} must be a string, got {type(v).__name__}")
        self._own = dict(kwargs)
        self._attr = dict(kwargs)

    def __enter__(self) -> AttrScope:
        # Nested scopes inherit the outer attributes (MXNet semantics).
        self._attr = {**AttrScope._current_scope()._attr, **self._own}
        return super().__enter__()

    def get(self, attr: Mapping[str, str] | None) -> dict[str, str]:
        """This scope's attributes overridden by ``attr`` (a fresh dict)."""
        merged = dict(self._attr)
        if attr:
            merged.update(attr)
        return merged

    @staticmethod
    def current_attrs() -> dict[str, str]:
        """The attributes of this thread's current scope (a fresh dict)."""
        return dict(AttrScope._current_scope()._attr)
