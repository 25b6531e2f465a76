"""Exact ties at unpinned decision nodes, and the point moved off them.

A finite difference judges a piecewise-smooth function at a kink by its one-sided derivatives: a backward that
picks one side, or a value between them, is right. That test fails where one argument element moves *several*
units of a node off their kinks together: a convolution with a zero bias over a zero border outputs exact
zeros, and moving one border pixel moves every relu unit of its window off 0 at once, to either side by the
signs of the weights. The one-sided derivatives then need not bracket the backward's value, which picks a side
at every unit separately (relu'(0) = 0 at each): measured, a correct Python relu there failed every checker
that differentiates across it and was named the faulty node.

Where the numeric side evaluates the forward's own pieces (``decisions.pinned_symbol``) no kink is crossed. An
opaque ``Custom`` node (or an op without a pinned rule) cannot be pinned, and no difference can judge it at such
a point from outside the node -- but any point off the ties can be judged, and exact ties are structure, not
chance: a generic point (random data, trained weights) has none. So a check that fails where an unpinned node
reads exactly equal values is taken again at a point with every float argument moved by up to ``MOVE_OFF_TIES``
of its RMS (seeded), and says so. A wrong backward stays wrong there -- unless it is wrong only *at* the ties (a
max-pool handing every tied maximum the whole gradient, Theano's): so first each tied node is checked alone along a
direction that keeps its ties (``tie_faults``), and where one fails, the failure stands.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Callable, Collection, Mapping

import numpy as np

from .context import to_numpy

#: how far the point moves off exact ties: every float argument by up to this share of its RMS (1 where it is
#: all 0), uniformly -- a thousand times the float64 central-difference step, so no difference reaches a kink
#: the move made
MOVE_OFF_TIES = 1e-3


def unpinned(pinned: Collection[str] | None = None) -> Callable:
    """The test ``tied_nodes`` applies to a node: an opaque ``Custom`` node, or a decision node (``op.decisions``)
    whose name is not in ``pinned`` (None: no decision node is pinned)."""
    names = set(pinned or ())
    return lambda node: node.op.name == "Custom" or (node.op.decisions is not None and node.name not in names)


def tied_nodes(sym, args: Mapping, aux: Mapping, wanted: Callable) -> list[str]:
    """The names of the op nodes of ``sym`` for which ``wanted(node)`` holds and a float input of which holds
    exactly equal values at ``args``/``aux`` (one float64 training forward of every node output)."""
    nodes = [n["node"] for n in sym.to_networkx().nodes.values() if n["node"].op is not None]
    nodes = [n for n in nodes if wanted(n)]
    if not nodes:
        return []
    values = _entry_values(sym, args, aux)
    found = []
    for node in nodes:
        for src, idx in node.inputs:
            v = values.get(src.name if src.op is None else src.output_name(idx))
            if v is not None and v.dtype.kind == "f" and v.size > 1 and np.unique(v).size < v.size:
                found.append(node.name)
                break
    return found


#: the relative step of the tie-keeping check, and the share of the one-sided derivatives' scale it allows
TIE_STEP = 1e-6
TIE_RTOL = 1e-4


def tie_faults(sym, names, args: Mapping, aux: Mapping, seed: int = 0) -> list[str]:
    """The nodes among ``names`` whose backward disagrees with their own forward along a direction that keeps
    their inputs' ties: each group of exactly equal input values moves together (a random sign per group), the
    other elements stay. Along it a tied max stays a max and a tied sort stays sorted, so a correct backward
    matches the difference; at tied kinks (relu at many zeros) the two one-sided derivatives bracket it. A
    backward that hands every tied maximum the whole gradient (Theano's max-pool) fails: such a bug shows only
    at the ties, which moving off them would hide. Checked at the recorded inputs, each node alone, in float64.
    """
    values = _entry_values(sym, args, aux)
    nodes = {n["node"].name: n["node"] for n in sym.to_networkx().nodes.values() if n["node"].op is not None}
    rng = np.random.default_rng([int(seed), 0x71E5])
    return [name for name in names if name in nodes and not _keeps_ties(sym, nodes[name], values, rng)]


def _keeps_ties(sym, node, values, rng) -> bool:
    """Whether ``node`` alone passes the tie-keeping check (True where it has no tied float input)."""
    from symgrad.context import cpu

    alone = sym.isolate(node.name)
    given = {
        slot: np.asarray(values[src.name if src.op is None else src.output_name(idx)])
        for (src, idx), slot in zip(node.inputs, node.input_names())
    }
    given = {k: (v.astype(np.float64) if v.dtype.kind == "f" else v) for k, v in given.items()}
    frozen = set(node.op.no_grad_inputs)
    r = {k: _tie_direction(v, rng) for k, v in given.items() if v.dtype.kind == "f" and k not in frozen}
    r = {k: v for k, v in r.items() if v is not None and k in alone.list_arguments()}
    if not r:
        return True
    args = {k: given[k] for k in alone.list_arguments()}
    aux = {k: given[k] for k in alone.list_auxiliary_states()}
    exe = alone.bind(cpu(), dict(args), args_grad={k: np.zeros_like(args[k]) for k in r}, aux_states=dict(aux))
    outs = [np.asarray(to_numpy(o), np.float64) for o in exe.forward(is_train=True)]
    heads = [rng.standard_normal(o.shape) for o in outs]
    exe.backward(heads)
    analytic = float(sum(np.sum(np.asarray(to_numpy(exe.grad_dict[k]), np.float64) * r[k]) for k in r))
    scale = max(max(float(np.max(np.abs(args[k]), initial=0.0)), 1.0) for k in r)

    def f(t):
        moved = {k: (args[k] + t * r[k] if k in r else args[k]) for k in args}
        run = alone.bind(cpu(), moved, grad_req="null", aux_states=dict(aux))
        return float(
            sum(np.sum(h * np.asarray(to_numpy(o), np.float64)) for h, o in zip(heads, run.forward(is_train=True)))
        )

    h = TIE_STEP * scale
    f0 = f(0.0)
    plus, minus = (f(h) - f0) / h, (f0 - f(-h)) / h
    if not all(math.isfinite(d) for d in (plus, minus, analytic)):
        return True  # not defined on both sides: nothing this check can say
    # the one-sided quotients bracket a smooth derivative (convex or concave there) up to TIE_RTOL, and a kink's
    # subgradients; float64 rounding of f adds ~eps |f| / h
    tol = TIE_RTOL * max(abs(plus), abs(minus), abs(analytic)) + 1e3 * float(np.finfo(np.float64).eps) * abs(f0) / h
    return min(plus, minus) - tol <= analytic <= max(plus, minus) + tol


def _tie_direction(v, rng):
    """A random sign per group of exactly equal elements of ``v`` (0 elsewhere); None when nothing is tied."""
    if v.size < 2:
        return None
    _, inverse, counts = np.unique(v, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(v.shape)
    signs = rng.choice([-1.0, 1.0], size=counts.size) * (counts > 1)
    r = signs[inverse]
    return r if np.any(r) else None


def _entry_values(sym, args, aux) -> dict:
    """Every argument's and every node output's value (float64 host arrays, one ``forward(is_train=True)``)."""
    from symgrad.context import cpu

    host = {k: np.asarray(to_numpy(v)) for k, v in args.items()}
    host = {k: (v.astype(np.float64) if v.dtype.kind == "f" else v.copy()) for k, v in host.items()}
    internals = sym.get_internals()
    aux64 = {k: np.asarray(to_numpy(v), np.float64) for k, v in aux.items()}
    exe = internals.bind(cpu(), host, grad_req="null", aux_states=aux64)
    outs = exe.forward(is_train=True)
    return {**host, **{name: np.asarray(to_numpy(o)) for name, o in zip(internals.list_outputs(), outs)}}


def moved_off_ties(values: Mapping, keep: Collection[str], seed: int) -> dict:
    """Copies of ``values`` with every float array not named in ``keep`` (index inputs) moved by up to
    ``MOVE_OFF_TIES`` of its RMS (uniform, drawn from ``seed``); the others as they are. Same dtypes."""
    rng = np.random.default_rng([int(seed), 0x7135])
    moved = {}
    for name, v in values.items():
        a = np.asarray(to_numpy(v))
        if a.dtype.kind != "f" or name in keep:
            moved[name] = v
            continue
        a64 = a.astype(np.float64)
        rms = float(np.sqrt(np.mean(np.square(a64)))) if a.size else 0.0
        moved[name] = (a64 + MOVE_OFF_TIES * (rms or 1.0) * rng.uniform(-1.0, 1.0, a.shape)).astype(a.dtype)
    return moved


def moved_note(nodes, failed: str) -> str:
    """The sentence a report or warning gives the retake: which nodes tied, what failed at the given point."""
    shown = ", ".join(repr(n) for n in nodes[:4]) + (f" and {len(nodes) - 4} more" if len(nodes) > 4 else "")
    return (
        f"checked at a point moved off exact ties: at the given point {failed} failed where unpinned node(s) "
        f"{shown} read exactly equal values (several units on a kink at once, which no finite difference can "
        f"judge from outside the node); every float argument was moved by up to {MOVE_OFF_TIES:g} of its RMS "
        "(seeded) and checked again"
    )


# -- the functional checkers (check_backward, gradcheck): one retake ---------------------------------------------

_RETAKING: contextvars.ContextVar[bool] = contextvars.ContextVar("symgrad_retaking_off_ties", default=False)


def off_ties(graph, who: str, failed: str, seed: int = 0) -> dict | None:
    """For a check of ``graph`` (a ``funcgraph.FuncGraph``) that failed (``failed`` says what, for the warning):
    the values to take it again at -- ``graph.values`` moved off exact ties -- when a node no pinned reference
    reaches (opaque ``Custom``, an op without a pinned rule) reads exactly equal values; None when none does, or
    inside a retake (one per check). Warns (``NondifferentiablePointWarning``) with what it moved."""
    import warnings

    from .decisions import pinned_symbol
    from .probes import index_inputs
    from .report import NondifferentiablePointWarning

    if _RETAKING.get():
        return None
    _, pinning = pinned_symbol(graph.sym, graph.decisions())
    names = set(pinning.opaque) | set(pinning.unpinnable)
    tied = tied_nodes(graph.sym, graph.values, graph.aux, lambda node: node.name in names) if names else []
    if not tied or tie_faults(graph.sym, tied, graph.values, graph.aux):
        return None  # nothing tied, or a tied node is wrong at its ties: the failure stands
    warnings.warn(NondifferentiablePointWarning(f"{who}: {moved_note(tied, failed)}"), stacklevel=4)
    return moved_off_ties(graph.values, index_inputs(graph.sym), seed)


@contextlib.contextmanager
def retaking():
    """The context of a retake: ``off_ties`` gives no second one."""
    token = _RETAKING.set(True)
    try:
        yield
    finally:
        _RETAKING.reset(token)
