"""Time forward + backward of ResNet-18 v1 on cpu: symgrad alone, per operator, per convolution, against MXNet.

    python benchmarks/bench_resnet18.py [--batch 2] [--size 224] [--repeat 3] [--dtype float32]
                                        [--profile] [--convs] [--mxnet PYTHON] [--rounds 5] [--threads N]

Builds the ImageNet ResNet-18 (v1: 7x7/2 stem + BN + relu + 3x3/2 max pooling, four stages of
two basic blocks with 64/128/256/512 filters, 1x1/2 projection shortcuts, global average
pooling, FullyConnected(1000), SoftmaxOutput) with the same code for symgrad and MXNet,
``simple_bind``s it with grad_req='write' for every parameter ('null' for data and label, as a
training Module does) and times ``forward(is_train=True)`` + ``backward()`` after one warm-up.

- default: symgrad in this process: median forward / backward seconds, peak RSS.
- ``--profile``: seconds per iteration by operator.
- ``--convs``: every convolution instruction of the step (forward, data gradient, weight
  gradient) with its shape, GFLOP/s, and numpy float32 matmul's GFLOP/s on the GEMM of the
  same sizes, timed in the same process right after (``im2col`` GEMM: ``(F, C*K) @ (C*K, N*Y)``;
  data gradient ``(C*K, F) @ (F, N*Y)``; weight gradient ``(F, N*Y) @ (N*Y, C*K)``).
- ``--mxnet PYTHON`` (e.g. ``/work/mxvenv/bin/python``): symgrad and MXNet 1.9.1 each in its
  own process (this file run by each Python with ``--worker``), ``--rounds`` rounds with the
  order alternating, ``--repeat`` timed steps per process; prints each contender's median
  over rounds of its per-round median, the median (range) of the per-round ratio
  symgrad / MXNet, both peak RSS, and the load average before and after.
- ``--threads N`` sets OPENBLAS/OMP/MKL_NUM_THREADS for the worker processes (both
  contenders); on a loaded 2-core machine multi-threaded BLAS timings swing, 1 is steadier.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve()
_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


# ----------------------------------------------------------------------------
# The network (the same code builds it in symgrad and in MXNet)
# ----------------------------------------------------------------------------


def _conv_bn(S, x, num_filter, kernel, stride, pad, name, relu=True):
    x = S.Convolution(
        x, kernel=kernel, stride=stride, pad=pad, num_filter=num_filter, no_bias=True, name=f"{name}_conv"
    )
    x = S.BatchNorm(x, fix_gamma=False, eps=1e-5, name=f"{name}_bn")
    return S.Activation(x, act_type="relu", name=f"{name}_relu") if relu else x


def _basic_block(S, x, num_filter, stride, name, project):
    h = _conv_bn(S, x, num_filter, (3, 3), (stride, stride), (1, 1), f"{name}_a")
    h = _conv_bn(S, h, num_filter, (3, 3), (1, 1), (1, 1), f"{name}_b", relu=False)
    sc = _conv_bn(S, x, num_filter, (1, 1), (stride, stride), (0, 0), f"{name}_sc", relu=False) if project else x
    return S.Activation(h + sc, act_type="relu", name=f"{name}_out")


def resnet18(S, num_classes=1000):
    """ResNet-18 v1 from the symbol namespace ``S`` (``symgrad.sym`` or ``mxnet.sym``)."""
    x = S.Variable("data")
    x = _conv_bn(S, x, 64, (7, 7), (2, 2), (3, 3), "stem")
    x = S.Pooling(x, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="max", name="stem_pool")
    for stage, nf in enumerate((64, 128, 256, 512)):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            x = _basic_block(S, x, nf, stride, f"stage{stage + 1}_unit{block + 1}", project=(stride != 1))
    x = S.Pooling(x, kernel=(7, 7), global_pool=True, pool_type="avg", name="gap")
    x = S.FullyConnected(S.Flatten(x), num_hidden=num_classes, name="fc")
    return S.SoftmaxOutput(x, name="softmax")


def _initial_values(exe_args, shape, seed=0):
    """Arguments as numpy arrays: He-normal weights, unit gammas, random data and labels."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, arr_shape in exe_args.items():
        if name == "softmax_label":
            out[name] = rng.integers(0, 1000, arr_shape).astype(np.float32)
        elif name.endswith("gamma"):
            out[name] = np.ones(arr_shape, np.float32)
        elif name.endswith("weight"):
            fan_in = int(np.prod(arr_shape[1:]))
            out[name] = (rng.standard_normal(arr_shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        elif name == "data":
            out[name] = rng.standard_normal(shape).astype(np.float32)
        else:
            out[name] = np.zeros(arr_shape, np.float32)
    return out


def _fill(exe, shape, dtype):
    values = _initial_values({n: a.shape for n, a in exe.arg_dict.items()}, shape)
    for name, arr in exe.arg_dict.items():
        arr[:] = values[name].astype(dtype)
    for name, arr in exe.aux_dict.items():
        arr[:] = np.full(arr.shape, 1.0 if name.endswith("var") else 0.0, dtype)


def _train_reqs(net):
    # as a training Module binds it: no gradient for the data (nor the label), every parameter 'write'
    return {n: ("null" if n in ("data", "softmax_label") else "write") for n in net.list_arguments()}


# ----------------------------------------------------------------------------
# Contenders (each run in its own process by the comparison)
# ----------------------------------------------------------------------------


def bind_symgrad(args):
    sys.path.insert(0, str(REPO))
    import symgrad as sg

    net = resnet18(sg.sym)
    shape = (args.batch, 3, args.size, args.size)
    types = {n: np.dtype(args.dtype) for n in net.list_arguments()}
    exe = net.simple_bind(sg.cpu(), grad_req=_train_reqs(net), type_dict=types, data=shape)
    _fill(exe, shape, args.dtype)
    return exe, lambda: None


def bind_mxnet(args):
    import mxnet as mx

    net = resnet18(mx.sym)
    shape = (args.batch, 3, args.size, args.size)
    types = {n: np.dtype(args.dtype) for n in net.list_arguments()}
    exe = net.simple_bind(mx.cpu(), grad_req=_train_reqs(net), type_dict=types, data=shape)
    _fill(exe, shape, args.dtype)
    return exe, mx.nd.waitall


def _minor_faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def time_steps(exe, sync, repeat):
    """(forward seconds, backward seconds) of each of ``repeat`` steps after one warm-up step, and the
    page faults per timed step (fresh memory touched: buffers not reused across steps)."""
    fwd, bwd = [], []
    for i in range(repeat + 1):
        if i == 1:
            faults = _minor_faults()
        t0 = time.perf_counter()
        exe.forward(is_train=True)
        sync()
        t1 = time.perf_counter()
        exe.backward()
        sync()
        t2 = time.perf_counter()
        if i:  # the first run warms caches and allocators
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
    return fwd, bwd, (_minor_faults() - faults) / max(repeat, 1)


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def worker(args):
    """One contender's steps; prints one JSON line (medians, cpu seconds per step, peak RSS)."""
    exe, sync = (bind_mxnet if args.worker == "mxnet" else bind_symgrad)(args)
    c0 = time.process_time()
    fwd, bwd, faults = time_steps(exe, sync, args.repeat)
    cpu = (time.process_time() - c0) / (args.repeat + 1)
    steps = [f + b for f, b in zip(fwd, bwd)]
    print(
        json.dumps(
            {
                "step_s": statistics.median(steps),
                "forward_s": statistics.median(fwd),
                "backward_s": statistics.median(bwd),
                "cpu_s": cpu,
                "peak_rss_mb": peak_rss_mb(),
                "faults": faults,
            }
        )
    )


# ----------------------------------------------------------------------------
# Per-operator and per-convolution timers (symgrad, in this process)
# ----------------------------------------------------------------------------

_CONV_OPS = ("Convolution", "_conv_transpose_like", "_conv_weight_grad")


def _conv_key(op, params, shapes):
    """(kind, (N, C, F, X, Y, k, groups)) of a convolution instruction from its input shapes."""
    k = tuple(params["kernel"])
    g = params.get("num_group", 1)
    if op == "Convolution":
        (n, c, *xs), (f,) = shapes[0], shapes[1][:1]
        return "forward", (n, c, f, tuple(xs), k, g)
    if op == "_conv_transpose_like":  # (gy, w, like)
        (n, f, *_), (_, c, *xs) = shapes[0], shapes[2]
        return "data grad", (n, c, f, tuple(xs), k, g)
    (n, c, *xs), (_, f, *_) = shapes[0], shapes[1]  # (x, gy)
    return "weight grad", (n, c, f, tuple(xs), k, g)


def instrument(exe, clock=time.perf_counter):
    """Wrap every instruction of both phases: seconds by operator name and by convolution shape.

    Wrapping happens before the first run, so the plan's generated code calls the wrappers.
    ``clock=time.process_time`` counts this process's CPU seconds (all threads) instead of wall
    seconds: steadier on a loaded machine, but it counts BLAS threads' spinning too.
    """
    plan = exe._plan if hasattr(exe, "_plan") else exe.plan
    by_op = defaultdict(float)
    by_conv = defaultdict(lambda: [0.0, 0, None])  # key -> [seconds, calls, output shape]

    def wrap(ins):
        fn, op, params = ins.fn, ins.node.op_name, ins.node.params

        def timed(*a, **k):
            t0 = clock()
            r = fn(*a, **k)
            dt = clock() - t0
            by_op[op] += dt
            if op in _CONV_OPS:
                entry = by_conv[_conv_key(op, params, [x.shape for x in a])]
                entry[0] += dt
                entry[1] += 1
                entry[2] = r.shape
            return r

        ins.fn = timed

    for ins in plan.forward_instrs + plan.backward_instrs:
        wrap(ins)
    return by_op, by_conv


def _matmul_gflops(m, k, n, clock, reps=5):
    """numpy float32 matmul GFLOP/s of (m, k) @ (k, n), median of ``reps`` after one warm-up."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    a @ b
    ts = []
    for _ in range(reps):
        t0 = clock()
        a @ b
        ts.append(clock() - t0)
    return 2.0 * m * k * n / statistics.median(ts) / 1e9


def conv_table(by_conv, steps, conv_geom, clock):
    """Rows (kind, shape text, ms per step, GFLOP/s, matmul GFLOP/s, ratio) and the totals."""
    rows, total_flop, total_s, total_mm_s = [], 0.0, 0.0, 0.0
    order = sorted(by_conv.items(), key=lambda kv: (-kv[0][1][3][0], kv[0][1][2], kv[0][0]))  # by stage
    for (kind, dims), (secs, calls, _) in order:
        n, c, f, xs, k, g = dims
        ys = conv_geom[(n, c, f, xs, k)]
        cgk, nys = (c // g) * int(np.prod(k)), n * int(np.prod(ys))
        flop = 2.0 * f * cgk * nys * calls / steps
        m, kk, nn = {"forward": (f, cgk, nys), "data grad": (cgk, f, nys), "weight grad": (f, nys, cgk)}[kind]
        mm = _matmul_gflops(m, kk, nn, clock)
        per_step = secs / steps
        gf = flop / per_step / 1e9
        rows.append(
            (
                kind,
                f"{c}x{'x'.join(map(str, xs))} -> {f}x{'x'.join(map(str, ys))} k{'x'.join(map(str, k))}",
                per_step * 1e3,
                gf,
                mm,
                gf / mm,
            )
        )
        total_flop += flop
        total_s += per_step
        total_mm_s += flop / (mm * 1e9)
    return rows, total_flop, total_s, total_mm_s


def print_convs(by_conv, steps, clock):
    """Per-convolution table: the output shape recorded for forward instructions gives Y."""
    ys_of = {}
    for (kind, dims), (_, _, out) in by_conv.items():
        if kind == "forward":
            n, c, f, xs, k, g = dims
            ys_of[(n, c, f, xs, k)] = tuple(out[2:])
    rows, flop, secs, mm_secs = conv_table(by_conv, steps, ys_of, clock)
    print(f"{'convolution':12s} {'shape':34s} {'ms/step':>8s} {'GFLOP/s':>8s} {'matmul':>7s} {'ratio':>6s}")
    for kind, shape, ms, gf, mm, ratio in rows:
        print(f"{kind:12s} {shape:34s} {ms:8.2f} {gf:8.1f} {mm:7.1f} {ratio:6.2f}")
    print(
        f"{'all':12s} {'':34s} {secs * 1e3:8.1f} {flop / secs / 1e9:8.1f} {flop / mm_secs / 1e9:7.1f} "
        f"{mm_secs / secs:6.2f}"
    )


def run_alone(args):
    exe, sync = bind_symgrad(args)
    by_op = by_conv = None
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.profile or args.convs:
        by_op, by_conv = instrument(exe, clock)
    fwd, bwd, faults = time_steps(exe, sync, args.repeat)
    f, b = statistics.median(fwd), statistics.median(bwd)
    print(
        f"ResNet-18 batch {args.batch} x 3 x {args.size} x {args.size} {args.dtype} on cpu, symgrad "
        f"(median of {args.repeat}; load {_load()})"
    )
    print(f"forward  {f:.3f} s\nbackward {b:.3f} s\ntotal    {f + b:.3f} s per iteration")
    print(f"peak RSS {peak_rss_mb():.0f} MB, {faults:.0f} page faults per step")
    steps = args.repeat + 1
    if args.profile:
        print("per operator (s per iteration):")
        for name, t in sorted(by_op.items(), key=lambda kv: -kv[1]):
            print(f"  {name:28s} {t / steps:.4f}")
    if args.convs:
        print_convs(by_conv, steps, clock)
    grads = [g for g in exe.grad_dict.values() if g is not None]
    assert all(np.isfinite(g).all() for g in grads), "non-finite gradient"


# ----------------------------------------------------------------------------
# symgrad against MXNet, each in its own process, alternating
# ----------------------------------------------------------------------------


def _load():
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


def _spawn(python, contender, args):
    env = dict(os.environ)
    if args.threads:
        env.update({v: str(args.threads) for v in _THREAD_VARS})
    cmd = [
        python,
        str(HERE),
        "--worker",
        contender,
        "--batch",
        str(args.batch),
        "--size",
        str(args.size),
        "--repeat",
        str(args.repeat),
        "--dtype",
        args.dtype,
    ]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def compare(args):
    pythons = {"symgrad": sys.executable, "mxnet": args.mxnet}
    results = {"symgrad": [], "mxnet": []}
    load_before = _load()
    for r in range(args.rounds):
        order = ("symgrad", "mxnet") if r % 2 == 0 else ("mxnet", "symgrad")
        for who in order:
            results[who].append(_spawn(pythons[who], who, args))
    load_after = _load()
    ratios = [s["step_s"] / m["step_s"] for s, m in zip(results["symgrad"], results["mxnet"])]
    print(
        f"ResNet-18 batch {args.batch} x 3 x {args.size}^2 {args.dtype}, forward+backward; {args.rounds} rounds "
        f"x {args.repeat} steps, alternating processes; threads {args.threads or 'default'}; "
        f"load {load_before} -> {load_after}"
    )
    print(f"{'':8s} {'step s':>7s} {'fwd s':>6s} {'bwd s':>6s} {'cpu s':>6s} {'peak RSS MB':>11s} {'faults':>7s}")
    for who in ("symgrad", "mxnet"):
        rs = results[who]
        med = {k: statistics.median(x[k] for x in rs) for k in rs[0]}
        print(
            f"{who:8s} {med['step_s']:7.3f} {med['forward_s']:6.3f} {med['backward_s']:6.3f} {med['cpu_s']:6.3f} "
            f"{max(x['peak_rss_mb'] for x in rs):11.0f} {med['faults']:7.0f}"
        )
    print(f"symgrad / MXNet: {statistics.median(ratios):.2f} (rounds {min(ratios):.2f}-{max(ratios):.2f})")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--profile", action="store_true", help="seconds per operator")
    ap.add_argument("--convs", action="store_true", help="GFLOP/s per convolution against numpy matmul")
    ap.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="what --profile and --convs count: wall seconds or process CPU seconds",
    )
    ap.add_argument("--mxnet", metavar="PYTHON", help="compare with MXNet run by this Python")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="BLAS/OpenMP threads of the compared processes")
    ap.add_argument("--worker", choices=("symgrad", "mxnet"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args)
    elif args.mxnet:
        compare(args)
    else:
        run_alone(args)


if __name__ == "__main__":
    main()
