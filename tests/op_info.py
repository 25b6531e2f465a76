"""``In`` and ``OpInfo``: the row types of the operator table (see ``tests/op_db.py``); ``bind_grads`` for the
op-specific tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import symgrad as sg

S = sg.sym

FLOATS = (np.float16, np.float32, np.float64)

# forward tolerances per dtype (rtol, atol): the reference is computed in float64
FWD_TOL = {np.float16: (1e-2, 1e-2), np.float32: (1e-5, 1e-6), np.float64: (1e-10, 1e-12)}


@dataclass
class In:
    """One input: its shape and how its values are drawn.

    ``low``/``high`` bound a uniform draw; ``away`` keeps |x - k| >= away from each kink k;
    ``sample`` overrides everything (``rng -> array``); ``grad`` False for index inputs.
    """

    shape: tuple
    low: float = -1.0
    high: float = 1.0
    away: float = 0.0
    kinks: tuple = (0.0,)
    sample: Callable | None = None
    grad: bool = True
    integer: bool = False

    def draw(self, rng):
        if self.sample is not None:
            return np.asarray(self.sample(rng), dtype=np.float64)
        x = rng.uniform(self.low, self.high, self.shape)
        if self.away:
            for k in self.kinks:
                close = np.abs(x - k) < self.away
                x[close] = k + np.sign(x[close] - k + 1e-12) * self.away * (1 + rng.random(close.sum()))
        return x


def norm_inputs(x_shape, channels):
    """The inputs of a normalisation layer: x, and per channel a gamma drawn in [0.5, 1.5] and a beta."""
    return {"x": In(x_shape), "g": In((channels,), 0.5, 1.5), "b": In((channels,))}


def unary_row(name, op, shape, ref, fwd_tol=None, **params):
    """The row of ``op(x, **params)`` on one input of ``shape``."""
    return OpInfo(name, lambda x: op(x, **params), {"x": In(shape)}, ref, fwd_tol=fwd_tol or {})


@dataclass
class OpInfo:
    """One row of the table. ``make(*variables) -> Symbol``; ``ref(*arrays) -> array or tuple``."""

    name: str
    make: Callable
    inputs: dict  # name -> In (order = the order make() takes them)
    ref: Callable | None
    dtypes: tuple = FLOATS
    grad: bool = True  # has a gradient worth checking
    second_order: bool = True
    grad_ref: Callable | None = None  # loss heads: the defined gradient (head gradient ignored)
    aux: dict = field(default_factory=dict)  # aux name -> In
    is_train: bool = False
    grad_rtol: float = 1e-6
    grad_atol: float = 1e-8
    fwd_tol: dict = field(default_factory=dict)  # dtype -> (rtol, atol) overrides

    def __repr__(self):
        return self.name

    def symbol(self):
        return self.make(*[S.Variable(n) for n in self.inputs])

    def sample(self, seed=0):
        rng = np.random.default_rng(seed)
        args = {n: spec.draw(rng) for n, spec in self.inputs.items()}
        aux = {n: spec.draw(rng) for n, spec in self.aux.items()}
        return args, aux

    def tol(self, dtype):
        return self.fwd_tol.get(dtype, FWD_TOL[dtype])


def bind_grads(sym, head, **arrays):
    """The gradients (grad_req write) of ``sym``'s arguments, taken from ``arrays`` by name, for the head
    gradient ``head`` of its one output."""
    args = {n: arrays[n] for n in sym.list_arguments()}
    grads = {n: np.zeros_like(a) for n, a in args.items()}
    exe = sym.bind(sg.cpu(), args, args_grad=grads)
    exe.forward(is_train=True)
    exe.backward([head])
    return grads
