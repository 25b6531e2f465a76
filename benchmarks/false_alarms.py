"""False-alarm rate of the gradient checkers on correct smooth ops with float32 inputs.

A false alarm is a check that fails although the op's gradient is right. For every seed each op gets
fresh float32 inputs and head gradients and each checker runs at its default settings (float64
finite-difference reference). The "anchor" column runs the anchor library's own method on the same
float32 inputs, emulated here on symgrad executors: MXNet's check_numeric_gradient (float32 steps of
``2^-9``, float32 sums, ``assert_almost_equal`` at float32's tolerances), PyTorch's gradcheck (``x +- 1e-6``
stored in float32, divided by ``2e-6``, ``allclose(analytic, numeric, rtol=1e-3, atol=1e-5)``) and Chainer's
check_backward (``x + delta r`` in float32, normal ``r`` with ``|r| = 1``, ``eps=1e-3``,
``|numeric - backward| <= 1e-5 + 1e-4 |backward|``).

    python benchmarks/false_alarms.py                # 100 seeds
    python benchmarks/false_alarms.py --seeds 20
    python benchmarks/false_alarms.py --detection    # also: planted wrong gradients caught and named
    python benchmarks/false_alarms.py --seeds 5 --part issue8   # quick: only the cases of issue 8

Issue 8 (``run_issue8(seeds)``, tables per checker x case x dtype, float32 and float64, default settings): every
checker at exact kinks of relu / abs / max / maximum / clip / Pooling(max) (``tests/checker_cases.py``; a run
counts as a false alarm when it fails, and the "kink warning" column counts the runs that warned), on gradients
that are zero in exact arithmetic (InstanceNorm(x - c) w.r.t. c, sum(x - mean(x)), a BatchNorm beta feeding
another BatchNorm, a softmax shift), and check_numeric_gradient on relu(FullyConnected) with a pre-activation
exactly at 0 (tests/test_false_alarms.py's case, including its assertions: no element left excluded). Target:
0 false alarms everywhere.

``run_chainer_torch(seeds)`` holds the false alarms of the MXNet-style ``check_numeric_gradient`` and of the
Chainer-style and PyTorch-style checkers,
``detect_chainer_torch(seeds)`` their detection of the planted bugs of tests/test_chainer_checks.py; other
parts of the tables can be added next to them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import symgrad as sg  # noqa: E402
import symgrad.test_utils as tu  # noqa: E402
from symgrad.test_utils import GradientCheckError  # noqa: E402
from symgrad.test_utils.chainer_checks import check_backward, check_double_backward  # noqa: E402
from symgrad.test_utils.torch_checks import gradcheck, gradgradcheck  # noqa: E402

S = sg.sym
F32 = np.float32


def _ops(rng):
    """``name -> (func, inputs)``: every argument is an input (PyTorch style); float32 values."""

    def normal(*shape):
        return rng.standard_normal(shape).astype(F32)

    return {
        "tanh": (lambda x: S.tanh(x), (normal(4, 5),)),
        "sigmoid": (lambda x: S.sigmoid(x), (normal(4, 5),)),
        "exp": (lambda x: S.exp(x), (normal(4, 5),)),
        "FullyConnected": (
            lambda x, w, b: S.FullyConnected(x, weight=w, bias=b, num_hidden=4),
            (normal(3, 5), normal(4, 5), normal(4)),
        ),
        "softmax": (lambda x: S.softmax(x, axis=-1), (normal(4, 5),)),
        "BatchNorm": (
            lambda x, g, b: S.BatchNorm(x, gamma=g, beta=b, fix_gamma=False, name="bn"),
            (normal(6, 3), rng.uniform(0.5, 1.5, 3).astype(F32), normal(3)),
        ),
    }


def _head(rng, func, inputs):
    shapes = S.Group([func(*[S.Variable(f"x{i}") for i in range(len(inputs))])]).infer_shape(
        **{f"x{i}": v.shape for i, v in enumerate(inputs)}
    )[1]
    return tuple(rng.standard_normal(s).astype(F32) for s in shapes)


def _bind(func, inputs):
    names = [f"x{i}" for i in range(len(inputs))]
    sym = S.Group([func(*[S.Variable(n) for n in names])])
    args = {n: v.copy() for n, v in zip(names, inputs)}
    grads = {n: np.zeros_like(v) for n, v in args.items()}
    aux_shapes = sym.infer_shape(**{n: v.shape for n, v in args.items()})[2]
    aux = [np.zeros(a, F32) for a in aux_shapes]
    exe = sym.bind(sg.cpu(), args, args_grad=grads, aux_states=aux)
    return exe, names, args, grads


def _anchor_torch(func, inputs, eps=1e-6, atol=1e-5, rtol=1e-3):
    """PyTorch's slow gradcheck as it runs on float32 tensors: x +- eps stored in float32, divided by 2 eps."""
    exe, names, args, grads = _bind(func, inputs)
    outs = [o.copy() for o in exe.forward(is_train=True)]
    for n in names:
        x = args[n]
        numeric = np.zeros((sum(o.size for o in outs), x.size))
        for m, idx in enumerate(np.ndindex(*x.shape)):
            old = x[idx]
            x[idx] = old + F32(eps)
            plus = np.concatenate([o.ravel() for o in exe.forward(is_train=True)])
            x[idx] = old - F32(eps)
            minus = np.concatenate([o.ravel() for o in exe.forward(is_train=True)])
            x[idx] = old
            numeric[:, m] = (plus - minus) / (2 * eps)
        exe.forward(is_train=True)
        row = 0
        for k, o in enumerate(outs):
            for e in range(o.size):
                heads = [np.zeros_like(h) for h in outs]
                heads[k].flat[e] = 1
                exe.backward(heads)
                if not np.allclose(grads[n].ravel(), numeric[row], rtol=rtol, atol=atol):
                    return False
                row += 1
    return True


def _anchor_chainer(func, inputs, gys, eps=1e-3, atol=1e-5, rtol=1e-4, rng=None):
    """Chainer's check_backward as it runs on float32 arrays: x + delta r in float32, normal r with |r| = 1."""
    exe, names, args, grads = _bind(func, inputs)
    exe.forward(is_train=True)
    exe.backward(list(gys))
    r = [rng.standard_normal(args[n].shape) for n in names]
    norm = np.sqrt(sum(float((d * d).sum()) for d in r))
    r = [d / norm for d in r]
    analytic = sum(float((grads[n].astype(np.float64) * d).sum()) for n, d in zip(names, r))
    base = {n: args[n].copy() for n in names}
    ys = []
    for delta in (-eps, eps):
        for n, d in zip(names, r):
            args[n][...] = (base[n] + F32(delta) * d.astype(F32)).astype(F32)
        ys.append([o.copy() for o in exe.forward(is_train=True)])
    numeric = sum(float(((yp.astype(np.float64) - ym) * g).sum()) for yp, ym, g in zip(ys[1], ys[0], gys)) / (2 * eps)
    return abs(numeric - analytic) <= atol + rtol * abs(analytic)


def _anchor_mxnet(func, inputs, eps=2.0**-9, rtol=1e-4, atol=1e-3):
    """MXNet 1.9's check_numeric_gradient as it runs on float32 arrays: the analytic gradient of sum(w * out)
    (w uniform in [0.1, 1.1)), MXNet's float32 step 2^-9 (x +- eps/2 stored in float32, the differences of
    the float32 outputs summed in float32), ``assert_almost_equal(numeric, backward)`` at float32's tolerances."""
    exe, names, args, grads = _bind(func, inputs)
    outs = exe.forward(is_train=True)
    weights = [(np.random.rand(*o.shape) + 0.1).astype(F32) for o in outs]
    exe.backward(weights)
    for n in names:
        x, analytic = args[n], grads[n].copy()
        numeric = np.zeros_like(x)
        for idx in np.ndindex(*x.shape):
            old = x[idx]
            x[idx] = old + F32(eps / 2)
            plus = [o * w for o, w in zip(exe.forward(is_train=True), weights)]
            x[idx] = old - F32(eps / 2)
            minus = [o * w for o, w in zip(exe.forward(is_train=True), weights)]
            x[idx] = old
            numeric[idx] = sum((p - m).sum() for p, m in zip(plus, minus)) / F32(eps)
        if not (np.abs(numeric - analytic) <= atol + rtol * np.abs(analytic)).all():
            return False
    return True


def _symbol(func, inputs):
    return func(*[S.Variable(f"x{i}") for i in range(len(inputs))])


def _checks():
    """``checker name -> (symgrad run, anchor run or None)``; a run returns True when the check passes."""

    def mxnet(rng, func, inputs):
        tu.check_numeric_gradient(_symbol(func, inputs), list(inputs))
        return True

    def mxnet_anchor(rng, func, inputs):
        return _anchor_mxnet(func, inputs)

    def chainer(rng, func, inputs):
        check_backward(func, inputs, _head(rng, func, inputs))
        return True

    def chainer_anchor(rng, func, inputs):
        return _anchor_chainer(func, inputs, _head(rng, func, inputs), rng=rng)

    def chainer2(rng, func, inputs):
        gy = _head(rng, func, inputs)
        ggx = tuple(rng.standard_normal(x.shape).astype(F32) for x in inputs)
        check_double_backward(func, inputs, gy, ggx)
        return True

    def torch(rng, func, inputs):
        return gradcheck(func, inputs, raise_exception=False)

    def torch_fast(rng, func, inputs):
        return gradcheck(func, inputs, raise_exception=False, fast_mode=True)

    def torch2(rng, func, inputs):
        return gradgradcheck(func, inputs, raise_exception=False)

    return {
        "check_numeric_gradient": (mxnet, mxnet_anchor),
        "check_backward": (chainer, chainer_anchor),
        "check_double_backward": (chainer2, None),
        "gradcheck": (torch, lambda rng, func, inputs: _anchor_torch(func, inputs)),
        "gradcheck(fast_mode)": (torch_fast, None),
        "gradgradcheck": (torch2, None),
    }


#: second order is not defined through fused backward nodes (BatchNorm's _backward_BatchNorm)
_NO_SECOND_ORDER = {"BatchNorm"}


def run_chainer_torch(seeds):
    """False alarms of the Chainer- and PyTorch-style checkers over ``seeds`` (float32 inputs).

    Returns rows ``(checker, op, alarms of symgrad's checker, alarms of the anchor's float32 method or None,
    milliseconds per symgrad check)``.
    """
    rows = []
    names = list(_ops(np.random.default_rng(0)))
    for checker, (ours, anchor) in _checks().items():
        for op in names:
            if op in _NO_SECOND_ORDER and checker in ("check_double_backward", "gradgradcheck"):
                continue
            alarms = {"ours": 0, "anchor": 0}
            spent = 0.0
            for which, run in (("ours", ours), ("anchor", anchor)):
                if run is None:
                    alarms[which] = None
                    continue
                for seed in seeds:
                    rng = np.random.default_rng(seed)
                    np.random.seed(seed)
                    func, inputs = _ops(rng)[op]
                    tic = time.perf_counter()
                    try:
                        ok = run(rng, func, inputs)
                    except GradientCheckError:
                        ok = False
                    if which == "ours":
                        spent += time.perf_counter() - tic
                    alarms[which] += not ok
            rows.append((checker, op, alarms["ours"], alarms["anchor"], 1000 * spent / len(seeds)))
    return rows


def detect_chainer_torch(seeds):
    """Detection of the planted wrong gradients of tests/test_chainer_checks.py, float32 inputs.

    Returns rows ``(bug, checker, caught, caught with the expected diagnosis pattern)`` over ``seeds``.
    """
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from test_chainer_checks import planted, planted_bias, planted_cube, planted_matmul

    def unary(rng, n=(3, 4)):
        return (rng.standard_normal(n).astype(F32),)

    bugs = [  # name, func, inputs, expected pattern, order
        ("scaled by 1.5", planted("scale", 1.5), unary, "scaled", 1),
        ("doubled", planted("scale", 2.0), unary, "doubled", 1),
        ("sign flipped", planted("scale", -1.0), unary, "sign", 1),
        ("zero", planted("scale", 0.0), unary, "missing", 1),
        ("product-rule term missing", planted("product"), unary, "spread", 1),
        ("1% error", planted("pct"), unary, "small", 1),
        ("1 of 1000 elements off by 25%", planted("one"), lambda rng: unary(rng, (10, 100)), "confined", 1),
        (
            "transposed weight gradient",
            planted_matmul,
            lambda rng: (rng.standard_normal((3, 4)).astype(F32), rng.standard_normal((4, 4)).astype(F32)),
            "transposed",
            1,
        ),
        (
            "wrong broadcast reduction",
            planted_bias,
            lambda rng: (rng.standard_normal((3, 4)).astype(F32), rng.standard_normal(4).astype(F32)),
            "broadcast",
            1,
        ),
        ("second order doubled", planted_cube(2.0), unary, "doubled", 2),
    ]
    runs = {
        1: {
            "check_backward": lambda rng, f, x: check_backward(f, x, _head(rng, f, x)),
            "gradcheck": lambda rng, f, x: gradcheck(f, x),
            "gradcheck(fast_mode)": lambda rng, f, x: gradcheck(f, x, fast_mode=True),
        },
        2: {
            "check_double_backward": lambda rng, f, x: check_double_backward(
                f, x, _head(rng, f, x), tuple(rng.standard_normal(v.shape).astype(F32) for v in x)
            ),
            "gradgradcheck": lambda rng, f, x: gradgradcheck(f, x),
            "gradgradcheck(fast_mode)": lambda rng, f, x: gradgradcheck(f, x, fast_mode=True),
        },
    }
    rows = []
    for bug, func, make, pattern, order in bugs:
        for checker, run in runs[order].items():
            caught = named = 0
            for seed in seeds:
                rng = np.random.default_rng(seed)
                np.random.seed(seed)
                try:
                    run(rng, func, make(rng))
                except GradientCheckError as err:
                    caught += 1
                    named += err.pattern == pattern
            rows.append((bug, checker, caught, named))
    return rows


def _quiet(seed, fn, *args):
    """``fn(*args)`` under ``tu.with_seed(seed)``, without its "failed with seed" line on stderr."""
    import contextlib
    import io

    with contextlib.redirect_stderr(io.StringIO()):
        return tu.with_seed(seed)(fn)(*args)


def run_issue8(seeds, dtypes=(np.float32, np.float64)):
    """False alarms of every checker on the cases of issue 8 (kinks, exact-zero gradients, relu(FC) at 0).

    Returns rows ``(group, case, checker, dtype name, false alarms, kink warnings, first failure or "")``.
    """
    import warnings

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    import checker_cases as cc

    rows = []
    groups = [
        ("kink", cc.KINK_NAMES, cc.NO_SECOND_ORDER, lambda rng, dt, name: cc.kink_cases(rng, dt)[name][:2]),
        (
            "zero gradient",
            cc.ZERO_NAMES,
            cc.ZERO_NO_SECOND_ORDER,
            lambda rng, dt, name: cc.zero_grad_cases(rng, dt)[name][:2],
        ),
    ]
    for group, names, no_second, make in groups:
        for name in names:
            for checker in cc.CHECKERS:
                if checker in cc.SECOND_ORDER and name in no_second:
                    continue
                for dt in dtypes if checker != "check_consistency" else (np.float32,):
                    alarms = warned = 0
                    first = ""
                    for seed in seeds:
                        func, inputs = make(np.random.default_rng(seed), dt, name)
                        try:
                            warned += bool(_quiet(seed, cc.run_checker, checker, func, inputs))
                        except GradientCheckError as err:
                            alarms += 1
                            first = first or f"seed {seed}: {err.diagnosis or str(err).splitlines()[0]}"
                    label = "float32 vs 64" if checker == "check_consistency" else np.dtype(dt).name
                    rows.append((group, name, checker, label, alarms, warned, first))
    # relu(FullyConnected) with a pre-activation exactly 0: tests/test_false_alarms.py's test, seed by seed
    from test_false_alarms import test_kinked_ops_at_kinks_pass_and_say_so as relu_fc

    for dt in dtypes:
        alarms, first = 0, ""
        for seed in seeds:
            os.environ["SYMGRAD_TEST_SEED"] = str(seed)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    _quiet(seed, relu_fc, "relu(FullyConnected) at 0", dt)
            except BaseException as err:  # also pytest.warns' Failed (no warning), an OutcomeException
                if isinstance(err, KeyboardInterrupt):
                    raise
                alarms += 1
                first = first or f"seed {seed}: {getattr(err, 'diagnosis', None) or str(err).splitlines()[0]}"
            finally:
                os.environ.pop("SYMGRAD_TEST_SEED", None)
        rows.append(
            ("kink", "relu(FullyConnected) at 0", "check_numeric_gradient", np.dtype(dt).name, alarms, None, first)
        )
    return rows


def print_issue8(rows, n, width=90):
    print(f"\nIssue 8 cases: false alarms of correct gradients, default settings, {n} seeds (target 0)")
    wc = max(len(r[1]) for r in rows)
    print(
        f"{'group':<13} {'case':<{wc}} {'checker':<22} {'dtype':<13} {'alarms':>7} {'kink warning':>12}  first failure"
    )
    for group, case, checker, dt, alarms, warned, first in rows:
        w = "-" if warned is None else f"{warned}/{n}"
        text = first if len(first) <= width else first[: width - 3] + "..."
        print(f"{group:<13} {case:<{wc}} {checker:<22} {dt:<13} {f'{alarms}/{n}':>7} {w:>12}  {text}")
    total = sum(r[4] for r in rows)
    print(f"issue 8 total false alarms: {total} of {len(rows) * n} checks")
    return total


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--detection", action="store_true", help="also measure the detection of planted bugs")
    parser.add_argument(
        "--part",
        choices=("all", "smooth", "issue8"),
        default="all",
        help="smooth ops against the anchors, the cases of issue 8, or both (default)",
    )
    args = parser.parse_args(argv)
    seeds = range(args.seeds)
    n = args.seeds
    total = 0
    if args.part in ("all", "smooth"):
        rows = run_chainer_torch(seeds)
        print(f"False alarms on correct ops, float32 inputs, default settings, {n} seeds")
        print(f"{'checker':<22} {'op':<15} {'symgrad':>12} {'anchor (float32 differences)':>30} {'ms/check':>9}")
        for checker, op, ours, anchor, ms in rows:
            theirs = "-" if anchor is None else f"{anchor}/{n}"
            print(f"{checker:<22} {op:<15} {f'{ours}/{n}':>12} {theirs:>30} {ms:>9.1f}")
        total = sum(r[2] for r in rows)
        print(f"total false alarms with the float64 reference: {total} of {len(rows) * args.seeds} checks")
    if args.part in ("all", "issue8"):
        total += print_issue8(run_issue8(seeds), n)
    if args.detection:
        print(f"\nPlanted wrong gradients, float32 inputs, default settings, {n} seeds")
        print(f"{'bug':<32} {'checker':<26} {'caught':>8} {'diagnosis names it':>19}")
        for bug, checker, caught, named in detect_chainer_torch(seeds):
            print(f"{bug:<32} {checker:<26} {f'{caught}/{n}':>8} {f'{named}/{n}':>19}")
    return 0 if total == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
