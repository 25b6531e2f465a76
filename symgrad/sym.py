"""The symbol namespace users type (``sg.sym.<Op>``), like ``mx.sym``.

Holds ``Variable``, ``Group``, the naming scopes and one creator function per
registered operator: ``sg.sym.FullyConnected(x, num_hidden=4, name="fc")``.
Gradient rules receive this module as ``F``.
"""

from .base import AttrScope, NameManager, Prefix
from .symbol import Group, Symbol, Variable, populate, var

__all__ = ["Symbol", "Variable", "var", "Group", "NameManager", "Prefix", "AttrScope"]

populate(globals())
