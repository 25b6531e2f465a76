"""The objectives numeric checks differentiate: the scalar whose gradient the analytic side is compared with.

- ``projected_objective``: ``sum_k sum(w_k * out_k)`` over the outputs, a loss head (SoftmaxOutput, MakeLoss,
  the regression outputs, SVMOutput: ``OpDef.implied_loss``; a Custom op: ``register_loss_objective``)
  contributing its implied loss instead;
- ``complex_objective``: the same projection keeping the imaginary part (complex steps).

Below ``differencer`` (whose scale-out ``Recipe`` rebuilds an objective in a worker) and ``numeric``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, overload

import numpy as np

from symgrad.opdef import get_op
from symgrad.symbol import Group

__all__ = ["projected_objective", "complex_objective", "register_loss_objective", "LOSS_OBJECTIVES"]

#: ``ndarray.sum()`` without its Python wrapper (``numpy._core._methods._sum`` calls exactly this)
_add_reduce = np.add.reduce


# -- loss heads ---------------------------------------------------------------------------------------
#
# A loss head (SoftmaxOutput, MakeLoss) ignores its head gradient: its backward is the gradient of an
# implied scalar loss. To check it numerically the objective must contain that loss, not a projection
# of the head's output. The built-in heads declare theirs where they are defined (``OpDef.implied_loss``);
# ``register_loss_objective`` adds one for a Custom op (by its ``op_type``) or overrides an op's. A factory
# gets the node's params, its inputs and output at the base point (float64 numpy) and returns
# ``loss(inputs, output) -> (value, magnitude)``; constants (targets, masks, counts) are frozen at the base point.

LOSS_OBJECTIVES: dict[str, Callable] = {}

_F = TypeVar("_F", bound=Callable[..., Any])


@overload
def register_loss_objective(op_name: str, factory: None = None) -> Callable[[_F], _F]: ...
@overload
def register_loss_objective(op_name: str, factory: _F) -> _F: ...


def register_loss_objective(op_name: str, factory: Callable[..., Any] | None = None) -> Callable[..., Any]:
    """Register the implied loss of a loss-head op (an op name, or a Custom op's ``op_type``).

    Usable as a decorator. ``factory(params, inputs, output) -> loss(inputs, output) -> (value, magnitude)``.
    """

    def do(f):
        LOSS_OBJECTIVES[op_name] = f
        return f

    return do(factory) if factory is not None else do


def _loss_factory(head):
    """The implied-loss factory of a loss head: a registration by its Custom ``op_type`` or op name first
    (``register_loss_objective``), else its operator's ``OpDef.implied_loss``; None when neither is known."""
    op_type = head.params.get("op_type")
    for key in (op_type, head.op_name):
        if key is not None and key in LOSS_OBJECTIVES:
            return LOSS_OBJECTIVES[key]
    return get_op(head.op_name).implied_loss


def projected_objective(sym, weights, who="check_numeric_gradient"):
    """The symbol to evaluate and the objective of a numeric gradient check.

    Every output ``k`` that is not a loss head contributes ``sum(w_k * out_k)`` (``weights[k]``); a loss
    head contributes its implied loss (``LOSS_OBJECTIVES``), which needs the head's inputs: they are
    appended as extra outputs of the returned symbol.

    Returns:
        ``(ref_sym, loss_heads, make_objective)``: ``loss_heads[k]`` is True for loss-head outputs;
        ``make_objective(base_outputs)`` freezes the loss constants at the base point and returns
        ``objective(outputs) -> (value, magnitude)``; ``objective.value(outputs)`` is its value alone (the same
        float, one array pass less per output: what a numeric gradient evaluates per perturbation).
    """
    heads = sym.heads()
    n = len(heads)
    extras, plan, loss_heads = [], [], []
    for k, head in enumerate(heads):
        loss_heads.append(head.loss_head)
        if not head.loss_head:
            plan.append(None)
            continue
        factory = _loss_factory(head)
        if factory is None:
            key = head.params.get("op_type") or head.op_name
            raise NotImplementedError(
                f"{who}: output {sym.list_outputs()[k]!r} comes from the loss head {head.op_name} {head.name!r}, "
                f"whose backward ignores the head gradient, and its implied loss is unknown; register it with "
                f"symgrad.test_utils.register_loss_objective({key!r}, factory)"
            )
        start = n + len(extras)
        extras.append(head.inputs)
        plan.append((factory, head.params, slice(start, start + len(head.inputs))))
    ref_sym = sym if not extras else Group([sym, *extras])

    def make_objective(base_outputs):
        losses = []
        for k, p in enumerate(plan):
            if p is None:
                losses.append(None)
                continue
            factory, params, sl = p
            losses.append((factory(params, base_outputs[sl], base_outputs[k]), sl))

        def objective(outputs):
            total, mag = 0.0, 0.0
            for k in range(n):
                out = np.asarray(outputs[k], np.float64)
                if losses[k] is None:
                    terms = weights[k] * out
                    total += float(terms.sum())
                    mag += float(np.abs(terms).sum())
                else:
                    fn, sl = losses[k]
                    v, m = fn(outputs[sl], out)
                    total += v
                    mag += m
            return total, mag

        def value(outputs):
            # objective(outputs)[0], the same float for float: the same terms, summed by the same reduction
            # (``ndarray.sum`` is ``np.add.reduce`` over every axis), without the magnitude's pass -- this is
            # what a numeric gradient evaluates once per perturbation
            total = 0.0
            for k in range(n):
                out = np.asarray(outputs[k], np.float64)
                if losses[k] is None:
                    total += float(_add_reduce(weights[k] * out, None))
                else:
                    fn, sl = losses[k]
                    total += fn(outputs[sl], out)[0]
            return total

        objective.value = value
        return objective

    return ref_sym, loss_heads, make_objective


def complex_objective(weights):
    """``objective(outputs) = sum_k sum(w_k * out_k)`` keeping the imaginary part (complex steps)."""

    def objective(outputs):
        return complex(sum(np.sum(w * np.asarray(o)) for w, o in zip(weights, outputs)))

    return objective
