"""The shipped-bugs corpus under other frameworks' own checkers, each in its own virtual environment.

The corpus (``corpus.py``) is written against MXNet's CustomOp API, which symgrad keeps; this script imports it
with the name ``symgrad`` bound to a stand-in, so the same numpy forward and backward of every entry run:

- ``--peer mxnet`` (in an environment with ``mxnet==1.9.1``): ``symgrad`` is ``mxnet`` itself; each entry is an
  ``mx.sym.Custom`` op checked by ``mx.test_utils.check_numeric_gradient(sym, location, grad_nodes=...,
  dtype=dtype)`` at its defaults (numeric_eps 1e-3, rtol 1e-2);
- ``--peer torch`` (with PyTorch): the ops' numpy forward/backward become a ``torch.autograd.Function`` checked by
  ``torch.autograd.gradcheck`` at its defaults (eps 1e-6, atol 1e-5, rtol 1e-3; float64 inputs, as PyTorch asks;
  float32 as given), index inputs as int64 tensors;
- ``--peer chainer`` (with Chainer 7.8.1): a ``chainer.FunctionNode`` checked by
  ``chainer.gradient_check.check_backward(f, x_data, y_grad)`` at its defaults (eps 1e-3, atol 1e-5, rtol 1e-4),
  ``y_grad`` standard normal of the output's shape, index inputs as int32 arrays (``no_grads`` by dtype);
- ``--peer jax`` (with JAX, x64 enabled): a ``jax.custom_vjp`` whose forward and backward call the numpy rules
  through ``jax.pure_callback``, checked by ``jax.test_util.check_grads(f, args, order=1, modes=["rev"])`` at its
  defaults (reverse mode only: a custom VJP has no JVP), index inputs held fixed.

Inputs, seeds and points are those of ``run.py`` (``draw``). One JSON line per check to ``--out``; a table at
the end. Nothing here is imported by symgrad or its tests::

    ../mxvenv/bin/python benchmarks/shipped_bugs/peers.py --peer mxnet --seeds 10 --out mx.jsonl
    ../torchvenv/bin/python benchmarks/shipped_bugs/peers.py --peer torch --seeds 10 --out torch.jsonl
    ../chainervenv/bin/python benchmarks/shipped_bugs/peers.py --peer chainer --seeds 10 --out chainer.jsonl
    ../jaxvenv/bin/python benchmarks/shipped_bugs/peers.py --peer jax --seeds 10 --out jax.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import types
import warnings
from collections import defaultdict

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = (np.float32, np.float64)


# -- a stand-in for the CustomOp API (PyTorch: the ops' numpy functions are taken out of it) -------------------


class _CustomOp:
    def assign(self, dst, req, src):
        if req == "null":
            return
        if req == "add":
            dst[...] += src
        else:
            dst[...] = src


class _CustomOpProp:
    def __init__(self, need_top_grad=True):
        self.need_top_grad_ = need_top_grad


REGISTRY: dict = {}


def _register(name):
    def decorate(prop):
        REGISTRY[name] = prop
        return prop

    return decorate


def _stand_in():
    sg = types.ModuleType("symgrad")
    sg.operator = types.SimpleNamespace(CustomOp=_CustomOp, CustomOpProp=_CustomOpProp, register=_register)
    return sg


def load_corpus(peer):
    if peer == "mxnet":
        import mxnet as mx

        sys.modules["symgrad"] = mx
    else:
        sys.modules["symgrad"] = _stand_in()
    sys.path.insert(0, HERE)
    import corpus

    if peer == "mxnet":  # MXNet hands CustomOp.forward/backward NDArrays: the numpy rules get them as numpy
        to_numpy = lambda arrays: [a.asnumpy() if hasattr(a, "asnumpy") else np.asarray(a) for a in arrays]
        corpus._np = to_numpy
        grads = corpus._Op.grads
        corpus._Op.grads = lambda op, out_grad, in_data, out_data: grads(
            op, to_numpy(out_grad), in_data, to_numpy(out_data)
        )
    return corpus


def draw(entry, point, seed, dtype):
    """``run.draw`` without symgrad: the output's shape comes from the entry's own shape rule."""
    rng = np.random.default_rng(seed)
    loc = (entry.inputs if point == "user" else entry.special)(rng, dtype)
    loc = {a: np.asarray(loc[a], dtype=dtype) for a in entry.args}
    return loc, rng


# -- the checks -------------------------------------------------------------------------------------------------


def mxnet_check(entry, op_type, dtype, loc, rng):
    import mxnet as mx

    sym = mx.sym.Custom(*[mx.sym.Variable(a) for a in entry.args], op_type=op_type, name="op")
    nodes = [a for a in entry.args if a not in entry.index_args]
    mx.test_utils.check_numeric_gradient(sym, loc, grad_nodes=nodes, dtype=dtype)


def torch_check(entry, op_type, dtype, loc, rng):
    import torch

    op = REGISTRY[op_type]().create_operator(None, None, None)

    class Fn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *xs):
            arrays = [x.detach().numpy() for x in xs]
            with np.errstate(all="ignore"):
                y = np.asarray(op.fwd(*arrays), dtype=arrays[0].dtype)
            ctx.save_for_backward(*xs)
            ctx.y = y
            return torch.from_numpy(np.array(y))

        @staticmethod
        def backward(ctx, g):
            arrays = [x.detach().numpy() for x in ctx.saved_tensors]
            with np.errstate(all="ignore"):
                grads = op.bwd(g.detach().numpy(), ctx.y, *arrays)
            return tuple(
                None
                if gr is None or not x.dtype.kind == "f" or name in entry.index_args
                else torch.from_numpy(np.array(np.broadcast_to(np.asarray(gr, x.dtype), x.shape)))
                for gr, x, name in zip(grads, arrays, entry.args)
            )

    inputs = []
    for a in entry.args:
        if a in entry.index_args:
            inputs.append(torch.from_numpy(loc[a].astype(np.int64)))
        else:
            inputs.append(torch.from_numpy(loc[a].copy()).requires_grad_(True))
    torch.autograd.gradcheck(Fn.apply, tuple(inputs))


def _rule(entry, op_type):
    """The entry's numpy forward ``fwd(*arrays) -> y`` and backward ``bwd(g, *arrays) -> [grad of each float
    input]`` (index inputs dropped; None: zero), computing in the inputs' dtype."""
    op = REGISTRY[op_type]().create_operator(None, None, None)

    def fwd(*arrays):
        with np.errstate(all="ignore"):
            return np.asarray(op.fwd(*arrays), dtype=arrays[0].dtype)

    def bwd(g, *arrays):
        with np.errstate(all="ignore"):
            grads = op.bwd(np.asarray(g, arrays[0].dtype), fwd(*arrays), *arrays)
        return [
            np.array(np.broadcast_to(np.asarray(0 if gr is None else gr, x.dtype), x.shape))
            for gr, x, name in zip(grads, arrays, entry.args)
            if name not in entry.index_args
        ]

    return fwd, bwd


def chainer_check(entry, op_type, dtype, loc, rng):
    import chainer
    from chainer import gradient_check

    fwd, bwd = _rule(entry, op_type)

    class Fn(chainer.FunctionNode):
        def forward(self, xs):
            self.retain_inputs(tuple(range(len(xs))))
            return (fwd(*xs),)

        def backward(self, indexes, grad_outputs):
            arrays = [x.array for x in self.get_retained_inputs()]
            floats = iter(bwd(grad_outputs[0].array, *arrays))
            grads = [None if name in entry.index_args else chainer.Variable(next(floats)) for name in entry.args]
            return tuple(grads[i] for i in indexes)

    xs = [loc[a].astype(np.int32) if a in entry.index_args else loc[a] for a in entry.args]
    y_grad = rng.standard_normal(fwd(*xs).shape).astype(dtype)
    gradient_check.check_backward(lambda *v: Fn().apply(v)[0], tuple(xs), y_grad)


def jax_check(entry, op_type, dtype, loc, rng):
    import jax

    jax.config.update("jax_enable_x64", True)
    from jax.test_util import check_grads

    fwd, bwd = _rule(entry, op_type)
    floats = [a for a in entry.args if a not in entry.index_args]
    whole = lambda values: [
        loc[a] if a in entry.index_args else np.asarray(values[floats.index(a)]) for a in entry.args
    ]
    out = jax.ShapeDtypeStruct(fwd(*[loc[a] for a in entry.args]).shape, dtype)
    shapes = tuple(jax.ShapeDtypeStruct(loc[a].shape, dtype) for a in floats)

    @jax.custom_vjp
    def f(*values):
        return jax.pure_callback(lambda *v: fwd(*whole(v)), out, *values)

    def f_bwd(values, g):
        return jax.pure_callback(lambda g, *v: tuple(bwd(g, *whole(v))), shapes, g, *values)

    f.defvjp(lambda *values: (f(*values), values), f_bwd)
    check_grads(f, tuple(jax.numpy.asarray(loc[a]) for a in floats), order=1, modes=["rev"])


CHECKS = {"mxnet": mxnet_check, "torch": torch_check, "chainer": chainer_check, "jax": jax_check}


def run(args):
    corpus = load_corpus(args.peer)
    check = CHECKS[args.peer]
    caught_errors = (AssertionError,) if args.peer in ("mxnet", "chainer", "jax") else (RuntimeError, AssertionError)
    table = defaultdict(lambda: [0, 0, 0, 0])  # (dtype, point) -> buggy caught, buggy n, twin alarms, twin n
    out = open(args.out, "a") if args.out else None
    entries = [e for e in corpus.CORPUS if not args.only or e.id in args.only.split(",")]
    for entry in entries:
        for seed in range(args.seeds):
            for dtype in DTYPES:
                for point in ("user", "special"):
                    loc, rng = draw(entry, point, seed, dtype)
                    for variant, op_type in (("buggy", entry.buggy), ("correct", entry.correct)):
                        np.random.seed(seed)
                        t0 = time.perf_counter()
                        error = None
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            try:
                                check(entry, op_type, dtype, dict(loc), rng)
                                caught = False
                            except caught_errors as err:
                                caught, error = True, str(err).splitlines()[0][:200] if str(err) else type(err).__name__
                            except Exception as err:  # noqa: BLE001 -- recorded, the run goes on
                                caught, error = None, f"{type(err).__name__}: {str(err)[:200]}"
                        row = {
                            "peer": args.peer,
                            "id": entry.id,
                            "bug_class": entry.bug_class,
                            "variant": variant,
                            "dtype": np.dtype(dtype).name,
                            "seed": seed,
                            "point": point,
                            "caught": caught,
                            "error": error,
                            "seconds": round(time.perf_counter() - t0, 3),
                        }
                        if out:
                            out.write(json.dumps(row) + "\n")
                        cell = table[(np.dtype(dtype).name, point)]
                        if variant == "buggy":
                            cell[0] += bool(caught)
                            cell[1] += 1
                        else:
                            cell[2] += bool(caught)
                            cell[3] += 1
    print(f"{args.peer}: {len(entries)} entries, {args.seeds} seeds")
    for (dt, point), (c, n, fa, m) in sorted(table.items()):
        print(f"{dt:8s} {point:8s} buggy caught {100 * c / max(n, 1):5.1f}% ({c}/{n})   twin alarms {fa}/{m}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--peer", choices=tuple(CHECKS), required=True)
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--out")
    p.add_argument("--only", default=None, help="comma-separated entry ids (default: all)")
    run(p.parse_args())


if __name__ == "__main__":
    main()
