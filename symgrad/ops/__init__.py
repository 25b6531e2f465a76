"""Operator families. Importing this package registers every operator."""

from . import (  # noqa: F401
    bbox,
    contrib,
    conv,
    creation,
    elemwise,
    hawkes,
    image,
    indexing,
    legacy,
    linalg,
    loss,
    matrix,
    multibox,
    nn,
    norm,
    pool,
    random,
    reduce,
    rnn,
    roi,
    sequence,
    shape,
    softmax,
    vision,
)
from .registry import OpDef, Param, get_op, list_ops, register

__all__ = ["OpDef", "Param", "get_op", "list_ops", "register"]
