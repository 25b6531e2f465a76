"""The objectives numeric checks differentiate: the scalar whose gradient the analytic side is compared with.

- ``projected_objective``: ``sum_k sum(w_k * out_k)`` over the outputs, a loss head (SoftmaxOutput, MakeLoss,
  ``register_loss_objective``) contributing its implied loss instead;
- ``complex_objective``: the same projection keeping the imaginary part (complex steps).

Below ``differencer`` (whose scale-out ``Recipe`` rebuilds an objective in a worker) and ``numeric``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, overload

import numpy as np

from symgrad.symbol import Group

__all__ = ["projected_objective", "complex_objective", "register_loss_objective", "LOSS_OBJECTIVES"]

#: ``ndarray.sum()`` without its Python wrapper (``numpy._core._methods._sum`` calls exactly this)
_add_reduce = np.add.reduce


# -- loss heads ---------------------------------------------------------------------------------------
#
# A loss head (SoftmaxOutput, MakeLoss) ignores its head gradient: its backward is the gradient of an
# implied scalar loss. To check it numerically the objective must contain that loss, not a projection
# of the head's output. A factory gets the node's params, its inputs and output at the base point (float64
# numpy) and returns ``loss(inputs, output) -> (value, magnitude)``; constants (targets, masks, counts)
# are frozen at the base point.

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


def _rows3(x, params):
    """Softmax layout of SoftmaxOutput as (A, classes, B), softmax over axis 1."""
    if params.get("multi_output"):
        return x.reshape(x.shape[0], x.shape[1], -1)
    if params.get("preserve_shape"):
        return x.reshape(-1, x.shape[-1])[:, :, None]
    return x.reshape(x.shape[0], -1)[:, :, None]


@register_loss_objective("SoftmaxOutput")
def _softmax_output_loss(params, inputs, output):
    """L = sum_rows c * (logsumexp(z) - t . z), so dL/dz = c * (softmax(z) - t) (MXNet's backward).

    t is the (smoothed) one-hot label or the probability label, c folds grad_scale, use_ignore and
    normalization exactly as MXNet's SoftmaxOutput backward.
    """
    z, label = inputs[0], inputs[1]
    gs = float(params.get("grad_scale", 1.0))
    z3 = _rows3(z, params)
    if label.shape == z.shape:  # probability labels: grad = (p - label) * grad_scale
        t = _rows3(label, params)
        c = np.full((z3.shape[0], 1, z3.shape[2]), gs)
    else:
        multi = bool(params.get("multi_output"))
        k = z3.shape[1]
        lab = label.reshape(z.shape[0], -1) if multi else label.reshape(-1, 1)
        lab_int = lab.astype(np.int64)
        t = (np.arange(k).reshape(1, k, 1) == lab_int[:, None, :]).astype(np.float64)
        alpha = float(params.get("smooth_alpha", 0.0))
        if alpha:
            t = t * (1.0 - alpha - alpha / (k - 1)) + alpha / (k - 1)
        ignored = lab_int == int(params.get("ignore_label", -1.0))
        spatial = z3.shape[2] if multi else 1
        norm = params.get("normalization", "null")
        if norm == "batch":
            scale = gs / lab.shape[0] / spatial
        elif norm == "valid":
            scale = gs / max(int(lab.size - int(ignored.sum())), 1)
        else:
            scale = gs / spatial
        mask = (~ignored).astype(np.float64) if params.get("use_ignore") else np.ones(lab.shape)
        c = scale * mask[:, None, :]

    def loss(ins, out):
        zz = _rows3(np.asarray(ins[0], np.float64), params)
        m = zz.max(axis=1, keepdims=True)
        lse = m + np.log(np.exp(zz - m).sum(axis=1, keepdims=True))
        terms = c * (lse - (t * zz).sum(axis=1, keepdims=True))
        return float(terms.sum()), float(np.abs(c * lse).sum() + np.abs(c * t * zz).sum())

    return loss


@register_loss_objective("MakeLoss")
def _make_loss_loss(params, inputs, output):
    """L = scale * sum(data), scale = grad_scale (/ batch size, / count(data > valid_thresh) at the base point)."""
    data = inputs[0]
    gs = float(params.get("grad_scale", 1.0))
    norm = params.get("normalization", "null")
    if norm == "batch":
        scale = gs / data.shape[0]
    elif norm == "valid":
        scale = gs / max(int((data > float(params.get("valid_thresh", 0.0))).sum()), 1)
    else:
        scale = gs

    def loss(ins, out):
        d = np.asarray(ins[0], np.float64)
        return float(scale * d.sum()), float(abs(scale) * np.abs(d).sum())

    return loss


def _loss_key(head):
    op_type = head.params.get("op_type")
    if op_type is not None and op_type in LOSS_OBJECTIVES:
        return op_type
    return head.op_name


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
        key = _loss_key(head)
        if key not in LOSS_OBJECTIVES:
            raise NotImplementedError(
                f"{who}: output {sym.list_outputs()[k]!r} comes from the loss head {head.op_name} {head.name!r}, "
                f"whose backward ignores the head gradient, and its implied loss is unknown; register it with "
                f"symgrad.test_utils.register_loss_objective({key!r}, factory) (known: {sorted(LOSS_OBJECTIVES)})"
            )
        start = n + len(extras)
        extras.append(head.inputs)
        plan.append((key, head.params, slice(start, start + len(head.inputs))))
    ref_sym = sym if not extras else Group([sym, *extras])

    def make_objective(base_outputs):
        losses = []
        for k, p in enumerate(plan):
            if p is None:
                losses.append(None)
                continue
            key, params, sl = p
            losses.append((LOSS_OBJECTIVES[key](params, base_outputs[sl], base_outputs[k]), sl))

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
