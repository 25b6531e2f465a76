"""Operator families. Importing this package registers every operator."""

from ..opdef import OpDef, Param, get_op, list_ops, register
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

__all__ = ["OpDef", "Param", "get_op", "list_ops", "register"]
