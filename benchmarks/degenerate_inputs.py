"""Correct ops and layers at the inputs users' own tests feed them, through every checker at default settings.

A test written by hand rarely draws standard normals: it feeds ``np.ones``, ``np.zeros``, integer pixels (0-255),
binary masks, ``np.arange``, zero-initialised weights, constant rows. Such points sit on ties (a sort of ones,
a max-pool window of equal values), on kinks (relu at 0 everywhere), or beside a steep turn (a BatchNorm or
LayerNorm over a constant channel: ``x_hat = d / sqrt(var + eps)`` turns on a scale of ``sqrt(eps)``). Every
case here is a correct built-in op, so every failure is a false alarm -- except where the gradient itself is
not finite (``norm`` at 0 is NaN in MXNet 1.9.1 as here, ``sqrt`` at 0 or below), which the table counts apart.

Families (``--families``): ``conv`` (conv [+ BatchNorm] + relu + max-pool, and conv + BatchNorm alone, over 5
data kinds x 3 weight kinds),
``norm`` (LayerNorm, InstanceNorm, BatchNorm, L2Normalization, softmax, log_softmax, norm over constant, almost
constant and zero data), ``ops`` (pooling, maximum/minimum, max/min, sort, topk, abs, relu, leaky, elu, clip,
sqrt, softmax, logsumexp, norm, smooth_l1, FullyConnected, hard_sigmoid at ones, zeros, integers, arange).
Checkers: ``check_numeric_gradient``, ``check_backward``, ``gradcheck`` (slow and fast); ``symgrad check``'s
engine (``check_model``, fast and sample) on the conv family.

    python benchmarks/degenerate_inputs.py --seeds 3            # ~25 min on 2 cores
"""

from __future__ import annotations

import argparse
import collections
import time
import warnings

import numpy as np

import symgrad as sg
from symgrad.test_utils import GradientCheckError, check_backward, check_model, check_numeric_gradient, gradcheck

S = sg.sym
#: ops whose gradient is not finite at some of these inputs (NaN or infinite, in MXNet 1.9.1 as here)
NOT_FINITE = {"norm", "norm2", "sqrt"}


def _data(kind, rng, shape):
    x = {
        "ones": lambda: np.ones(shape),
        "zeros": lambda: np.zeros(shape),
        "pixels255": lambda: rng.integers(0, 256, shape).astype(float),
        "binary": lambda: rng.integers(0, 2, shape).astype(float),
        "ints": lambda: rng.integers(-2, 3, shape).astype(float),
        "arange": lambda: (np.arange(np.prod(shape)).reshape(shape) % 7).astype(float),
        "const_rows": lambda: np.repeat(rng.standard_normal(shape[:-1] + (1,)), shape[-1], axis=-1),
        "almost_const": lambda: 1.0 + 1e-4 * rng.standard_normal(shape),
    }
    if kind == "mnist":
        x = np.zeros(shape)
        x[..., 2:6, 2:6] = rng.uniform(0, 1, shape[:-2] + (4, 4))
        return x
    return x[kind]()


# -- the families: (label, func, inputs) -------------------------------------------------------------------
def _conv_net(d, w, b, g=None, be=None):
    h = S.Convolution(d, w, b, kernel=(3, 3), num_filter=4, pad=(1, 1), name="c")
    if g is not None:
        h = S.BatchNorm(h, g, be, fix_gamma=False, name="bn")
    return S.Pooling(S.relu(h, name="r"), kernel=(2, 2), stride=(2, 2), pool_type="max", name="p")


def _conv_bn(d, w, b, g, be):
    """The BatchNorm's output checked directly: with zero weights each channel is constant, the bias gradient
    exactly 0 and its numeric gradient exactly 0 (no relu at 0 zeroes the head gradient)."""
    h = S.Convolution(d, w, b, kernel=(3, 3), num_filter=4, pad=(1, 1), name="c")
    return S.BatchNorm(h, g, be, fix_gamma=False, name="bn")


def conv_cases(rng):
    weights = {
        "random": lambda: rng.standard_normal((4, 2, 3, 3)) * 0.1,
        "zeros": lambda: np.zeros((4, 2, 3, 3)),
        "ones": lambda: np.ones((4, 2, 3, 3)),
    }
    for dk in ("pixels255", "ones", "binary", "arange", "mnist"):
        for wk, make in weights.items():
            for bn in (False, True):
                ins = [_data(dk, rng, (2, 2, 8, 8)), make(), np.zeros(4)]
                if bn:
                    ins += [rng.uniform(0.5, 1.5, 4), np.zeros(4)]
                yield f"conv {dk} w={wk}{' bn' if bn else ''}", _conv_net, ins
    # added later: drawn from a child generator, so the cases above keep their draws
    child = np.random.default_rng(rng.bit_generator.seed_seq.spawn(1)[0])
    for dk in ("pixels255", "ones", "binary", "arange", "mnist"):
        for wk in ("random", "zeros", "ones"):
            w = child.standard_normal((4, 2, 3, 3)) * 0.1 if wk == "random" else getattr(np, wk)((4, 2, 3, 3))
            ins = [_data(dk, child, (2, 2, 8, 8)), w, np.zeros(4), child.uniform(0.5, 1.5, 4), np.zeros(4)]
            yield f"conv {dk} w={wk} bn-out", _conv_bn, ins


def norm_cases(rng):
    layers = {
        "LayerNorm": (lambda x, g, b: S.LayerNorm(x, g, b, axis=-1), lambda sh: sh[-1]),
        "InstanceNorm": (lambda x, g, b: S.InstanceNorm(x, g, b), lambda sh: sh[1]),
        "BatchNorm": (lambda x, g, b: S.BatchNorm(x, g, b, fix_gamma=False), lambda sh: sh[1]),
    }
    plain = {
        "L2Normalization": lambda x: S.L2Normalization(x),
        "L2Normalization_channel": lambda x: S.L2Normalization(x, mode="channel"),
        "softmax": lambda x: S.softmax(x),
        "log_softmax": lambda x: S.log_softmax(x),
        "norm": lambda x: S.norm(x, axis=1),
    }
    shape = (2, 4, 3, 3)
    for dk in ("ones", "const_rows", "almost_const", "zeros"):
        for name, (f, n) in layers.items():
            c = n(shape)
            yield f"{name} {dk}", f, [_data(dk, rng, shape), rng.uniform(0.5, 1.5, c), rng.uniform(0.5, 1.5, c)]
        for name, f in plain.items():
            yield f"{name} {dk}", f, [_data(dk, rng, shape)]


def op_cases(rng):
    unary = {
        "maxpool": lambda x: S.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max"),
        "maxpool_overlapping": lambda x: S.Pooling(x, kernel=(3, 3), stride=(1, 1), pad=(1, 1), pool_type="max"),
        "avgpool": lambda x: S.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="avg"),
        "global_maxpool": lambda x: S.Pooling(x, kernel=(1, 1), global_pool=True, pool_type="max"),
        "max": lambda x: S.max(x, axis=1),
        "min": lambda x: S.min(x, axis=(2, 3)),
        "sort": lambda x: S.sort(x, axis=-1),
        "topk": lambda x: S.topk(x, axis=-1, k=2, ret_typ="value"),
        "abs": lambda x: S.abs(x),
        "relu": lambda x: S.relu(x),
        "leaky": lambda x: S.LeakyReLU(x, act_type="leaky", slope=0.1),
        "elu": lambda x: S.LeakyReLU(x, act_type="elu"),
        "clip": lambda x: S.clip(x, 0.0, 1.0),
        "sqrt": lambda x: S.sqrt(x),
        "softmax": lambda x: S.softmax(x, axis=1),
        "logsumexp": lambda x: S.log(S.sum(S.exp(x), axis=1)),
        "norm2": lambda x: S.norm(x, axis=(2, 3)),
        "smooth_l1": lambda x: S.smooth_l1(x, scalar=1.0),
        "hard_sigmoid": lambda x: S.hard_sigmoid(x),
    }
    binary = {
        "maximum": lambda x, y: S.maximum(x, y),
        "minimum": lambda x, y: S.minimum(x, y),
        "broadcast_maximum": lambda x, y: S.broadcast_maximum(x, S.sum(y, axis=(2, 3), keepdims=True)),
    }
    shape = (2, 3, 4, 4)
    for dk in ("ones", "zeros", "ints", "arange"):
        for name, f in unary.items():
            yield f"{name} {dk}", f, [_data(dk, rng, shape)]
        for name, f in binary.items():
            yield f"{name} {dk}", f, [_data(dk, rng, shape), _data(dk, rng, shape)]
        fc = lambda x, w: S.FullyConnected(x, w, num_hidden=3, no_bias=True)
        yield f"FullyConnected {dk}", fc, [_data(dk, rng, shape), rng.standard_normal((3, 48))]


FAMILIES = {"conv": conv_cases, "norm": norm_cases, "ops": op_cases}


# -- the checkers ------------------------------------------------------------------------------------------
def _checks(f, ins, dtype, seed, with_model):
    names = [f"v{i}" for i in range(len(ins))]
    sym = f(*[S.Variable(n) for n in names])
    loc = dict(zip(sym.list_arguments(), ins))
    aux = {
        n: (np.zeros if "mean" in n else np.ones)(sym.infer_shape(**{k: v.shape for k, v in loc.items()})[2][i]).astype(
            dtype
        )
        for i, n in enumerate(sym.list_auxiliary_states())
    }
    out_shape = sym.infer_shape(**{k: v.shape for k, v in loc.items()})[1][0]
    y_grad = np.random.default_rng(seed).standard_normal(out_shape).astype(dtype)
    yield "check_numeric_gradient", lambda: check_numeric_gradient(sym, loc, aux_states=aux or None, dtype=dtype)
    yield "check_backward", lambda: check_backward(f, tuple(ins), y_grad)
    yield "gradcheck", lambda: gradcheck(f, tuple(ins), progress=False)
    yield "gradcheck fast", lambda: gradcheck(f, tuple(ins), fast_mode=True, progress=False)
    if with_model:
        params = {**{f"arg:{k}": v for k, v in loc.items() if k != names[0]}, **{f"aux:{k}": v for k, v in aux.items()}}
        for mode in ("fast", "sample"):
            yield (
                f"check_model {mode}",
                lambda mode=mode: check_model(
                    sym,
                    params,
                    shapes={names[0]: ins[0].shape},
                    dtype=np.dtype(dtype).name,
                    mode=mode,
                    seed=seed,
                    progress=False,
                ),
            )


def run(families, seeds):
    counts = collections.defaultdict(collections.Counter)
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        for family in families:
            for label, f, raw in FAMILIES[family](rng):
                for dtype in (np.float32, np.float64):
                    ins = [a.astype(dtype) for a in raw]
                    op = label.split()[0]
                    for checker, check in _checks(f, ins, dtype, seed, family == "conv"):
                        np.random.seed(seed)
                        try:
                            with warnings.catch_warnings():
                                warnings.simplefilter("ignore")
                                check()
                            verdict = "pass"
                        except GradientCheckError as err:
                            verdict = "not finite" if op in NOT_FINITE else "FALSE ALARM"
                            if verdict == "FALSE ALARM":
                                print(
                                    f"FALSE ALARM s{seed} {label} {np.dtype(dtype).name} {checker}: "
                                    f"{str(err).splitlines()[0][:160]}",
                                    flush=True,
                                )
                        counts[(family, checker)][verdict] += 1
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--families", default="conv,norm,ops")
    args = ap.parse_args()
    t0 = time.perf_counter()
    counts = run(args.families.split(","), args.seeds)
    print("\n| family | checker | checks | pass | false alarms | gradient not finite |")
    print("|---|---|---|---|---|---|")
    for (family, checker), c in sorted(counts.items()):
        print(f"| {family} | {checker} | {sum(c.values())} | {c['pass']} | {c['FALSE ALARM']} | {c['not finite']} |")
    print(f"\n{args.seeds} seeds, {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
