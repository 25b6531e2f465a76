"""Operator families. Importing this package registers every operator."""

from . import conv, elemwise, indexing, loss, matrix, nn, pool, reduce, shape, softmax  # noqa: F401
from .registry import OpDef, Param, get_op, list_ops, register

__all__ = ["OpDef", "Param", "get_op", "list_ops", "register"]
