#!/usr/bin/env python
"""Core symgrad benchmarks, in one process.

1. MLP overhead: forward+backward of a 784-256-256-10 MLP (FullyConnected + relu,
   SoftmaxOutput head; batch 64, float32; ``data`` grad_req null, every weight and
   bias ``write``) through a symgrad executor, against a hand-written numpy
   forward+backward of the same network that computes the same gradients into
   preallocated arrays (checked with np.allclose first). Prints symgrad time / numpy
   time; the target is <= 1.10 (issue 12).
   Two phases: glibc's default heap (what users get; whether ~1 MB temporaries are
   page-faulted in on every call then depends on heap history, and their cost on the
   machine, so page faults per call are printed too), then heap trimming off (mallopt,
   glibc only): no page faults, compute + interpreter overhead only. The verdict uses
   the second, which is reproducible.
2. Graph-size scaling: build, infer_shape and simple_bind a chain of 1 000 and
   10 000 elementwise nodes (x -> tanh -> +1.0 -> tanh -> ...), then two
   forward+backward passes over it; per-node costs show how the cost grows.
   ``--series`` runs build + simple_bind + one forward+backward of chains up to
   1 000 000 nodes, each in its own process (time and peak RSS); ``--mxnet PYTHON``
   times MXNet's compose + simple_bind of the same chains with that interpreter,
   in its own processes, alternating with symgrad's.
3. Per-instruction overhead: a chain of 200 x (tanh, x1.01) on 16 floats,
   forward+backward, against the same written by hand in numpy (target <= 1.5).

    python benchmarks/bench_core.py            # default (about 30 s on 2 cores)
    python benchmarks/bench_core.py --quick    # fewer repetitions (about 5 s)
    python benchmarks/bench_core.py --no-mlp --series --mxnet /work/mxvenv/bin/python

Every contender runs in this process with the same BLAS and thread settings;
timings are interleaved (rounds rotate the order) and summarised by medians. On a
busy machine (OpenBLAS threads are very sensitive to it) a warning says so.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

try:
    import resource
except ImportError:  # pragma: no cover - not on Windows
    resource = None

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmark this checkout, installed or not
import symgrad as sg  # noqa: E402

LAYERS = (784, 256, 256, 10)
PARAM_NAMES = ("fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias", "fc3_weight", "fc3_bias")
TARGET_RATIO = 1.10
SMALL_CHAIN_TARGET = 1.5


# ----------------------------------------------------------------------------
# 1. MLP: symgrad vs hand-written numpy
# ----------------------------------------------------------------------------


def build_mlp_executor(batch: int, seed: int):
    data = sg.sym.Variable("data")
    h = data
    for k, width in enumerate(LAYERS[1:], start=1):
        h = sg.sym.FullyConnected(h, num_hidden=width, name=f"fc{k}")
        if k < len(LAYERS) - 1:
            h = sg.sym.Activation(h, act_type="relu", name=f"relu{k}")
    out = sg.sym.SoftmaxOutput(h, name="softmax")
    req = {name: "write" for name in PARAM_NAMES}  # data and softmax_label: null
    exe = out.simple_bind(sg.cpu(), grad_req=req, data=(batch, LAYERS[0]))

    rng = np.random.default_rng(seed)
    args = exe.arg_dict
    args["data"][...] = rng.standard_normal(args["data"].shape, dtype=np.float32)
    args["softmax_label"][...] = rng.integers(0, LAYERS[-1], size=batch)
    for k in range(1, len(LAYERS)):
        fan_in = LAYERS[k - 1]
        w = args[f"fc{k}_weight"]
        w[...] = rng.standard_normal(w.shape, dtype=np.float32) * np.float32(np.sqrt(2.0 / fan_in))
        args[f"fc{k}_bias"][...] = rng.standard_normal(LAYERS[k], dtype=np.float32) * np.float32(0.1)
    return exe


class NumpyMLP:
    """The same network written by hand in numpy (float32 throughout).

    Gradients go into preallocated arrays, as symgrad's ``grad_req='write'`` does
    (``tight=True`` writes them with ``out=`` instead of ``arr[...] = expr``).
    """

    def __init__(self, exe, tight=False):
        a = exe.arg_dict
        self.x = a["data"]
        self.label = a["softmax_label"]
        self.params = [a[n] for n in PARAM_NAMES]
        self.grads = [np.zeros_like(p) for p in self.params]
        self.rows = np.arange(self.x.shape[0])
        self.tight = tight

    def step(self):
        x, label = self.x, self.label
        w1, b1, w2, b2, w3, b3 = self.params
        dw1, db1, dw2, db2, dw3, db3 = self.grads
        # forward
        a1 = x @ w1.T
        a1 += b1
        h1 = np.maximum(a1, 0)
        a2 = h1 @ w2.T
        a2 += b2
        h2 = np.maximum(a2, 0)
        a3 = h2 @ w3.T
        a3 += b3
        e = np.exp(a3 - a3.max(axis=1, keepdims=True))
        p = e / e.sum(axis=1, keepdims=True)
        # backward: d loss / d a3 = softmax - onehot (normalization 'null', grad_scale 1)
        g3 = p.copy()
        g3[self.rows, label.astype(np.intp)] -= 1
        if self.tight:
            np.matmul(g3.T, h2, out=dw3)
            np.sum(g3, axis=0, out=db3)
            g2 = g3 @ w3
            g2 *= a2 > 0
            np.matmul(g2.T, h1, out=dw2)
            np.sum(g2, axis=0, out=db2)
            g1 = g2 @ w2
            g1 *= a1 > 0
            np.matmul(g1.T, x, out=dw1)
            np.sum(g1, axis=0, out=db1)
        else:
            dw3[...] = g3.T @ h2
            db3[...] = g3.sum(axis=0)
            g2 = g3 @ w3
            g2 *= a2 > 0
            dw2[...] = g2.T @ h1
            db2[...] = g2.sum(axis=0)
            g1 = g2 @ w2
            g1 *= a1 > 0
            dw1[...] = g1.T @ x
            db1[...] = g1.sum(axis=0)
        return p


def verify_mlp(exe, refs):
    exe.forward(is_train=True)
    exe.backward()
    sg_out = exe.outputs[0]
    sg_grads = [exe.grad_dict[n] for n in PARAM_NAMES]
    for ref in refs:
        p = ref.step()
        if p.dtype != np.float32 or any(g.dtype != np.float32 for g in ref.grads):
            raise AssertionError("numpy reference left float32")
        if not np.allclose(sg_out, p, rtol=1e-4, atol=1e-6):
            raise AssertionError("MLP outputs differ between symgrad and numpy")
        for name, a, b in zip(PARAM_NAMES, sg_grads, ref.grads):
            if a.dtype != np.float32:
                raise AssertionError(f"symgrad gradient {name} is {a.dtype}, expected float32")
            if not np.allclose(a, b, rtol=1e-4, atol=1e-5):
                err = float(np.max(np.abs(a - b)))
                raise AssertionError(f"gradient {name} differs between symgrad and numpy (max abs err {err:.3g})")
        if not all(np.any(g != 0) for g in ref.grads):
            raise AssertionError("a gradient is identically zero: the check would be vacuous")


def _minor_faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt if resource is not None else 0


def _time_calls(fn, reps, budget_s=float("inf")):
    """Per-call wall times (seconds) of ``reps`` calls (fewer, at least 5, once ``budget_s`` is spent)."""
    out = []
    clock = time.perf_counter
    start = clock()
    for k in range(reps):
        t = clock()
        fn()
        out.append(clock() - t)
        if k >= 4 and out[-1] + t - start > budget_s:
            break
    return out


def heap_trimming_off() -> bool:
    """glibc only: stop malloc returning freed memory to the OS (mallopt, for the rest of the process).

    With glibc's defaults, whether a loop that allocates and frees ~1 MB temporaries
    page-faults on every call depends on the heap's history (its dynamic mmap/trim
    thresholds), and on a VM each fault is expensive: the same code can run 1.5x
    slower from one process to the next. With trimming off, nobody pays page faults
    and the comparison measures compute + interpreter overhead only.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(mallopt(m_trim_threshold, 1 << 30)) and bool(mallopt(m_mmap_threshold, 32 << 20))


def bench_mlp(exe, contenders, rounds, reps, warmup, budget_s):
    """Interleaved timing: per round, each contender runs ``reps`` calls (the order rotates)."""
    for fn in contenders.values():
        for _ in range(warmup):
            fn()
    medians = {k: [] for k in contenders}
    faults = {k: 0 for k in contenders}
    names = list(contenders)
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()  # as timeit does; both sides equally
    try:
        for r in range(rounds):
            order = names[r % len(names) :] + names[: r % len(names)]  # rotate who goes first
            for name in order:
                f0 = _minor_faults()
                times = _time_calls(contenders[name], reps, budget_s)
                medians[name].append(statistics.median(times))
                faults[name] += (_minor_faults() - f0) / len(times)
    finally:
        if gc_was_enabled:
            gc.enable()

    return {"medians": medians, "faults": {k: v / rounds for k, v in faults.items()}, "rounds": rounds}


def summarize_mlp(results):
    """Ratios per phase over the undisturbed rounds.

    A round is disturbed (another process, OpenBLAS threads descheduled: calls then take
    10-100x longer) when a contender ran over 2.5x its best round of the phase, or the
    allocation-free ``numpy_out`` over 2.5x its best round of any phase (it catches a phase
    that was disturbed from start to end). The ratio is the median of the per-round ratios
    over the undisturbed rounds, which is robust to drifts that hit both contenders.
    """
    canary = min(min(r["medians"]["numpy_out"]) for _, r in results)
    for _, r in results:
        med = r["medians"]
        floor = {k: min(v) for k, v in med.items()}
        clean = [
            i
            for i in range(r["rounds"])
            if med["numpy_out"][i] <= 2.5 * canary and all(med[k][i] <= 2.5 * floor[k] for k in med)
        ]
        use = clean or list(range(r["rounds"]))
        r["clean"] = len(clean)
        r["best"] = floor
        r["median"] = {k: statistics.median(v[i] for i in use) for k, v in med.items()}
        r["ratio"] = statistics.median(med["symgrad"][i] / med["numpy"][i] for i in use)
        r["ratio_tight"] = statistics.median(med["symgrad"][i] / med["numpy_out"][i] for i in use)
    return results


# ----------------------------------------------------------------------------
# 2. graph-size scaling: a long elementwise chain
# ----------------------------------------------------------------------------


def build_chain(n_nodes):
    """x -> tanh -> (+1.0) -> tanh -> (+1.0) ... with ``n_nodes`` operator nodes."""
    y = sg.sym.Variable("x")
    for k in range(n_nodes):
        y = sg.sym.tanh(y) if k % 2 == 0 else y + 1.0
    return y


def _chain_reference(x, n_nodes):
    """Forward value and d(sum of output)/dx of the chain, in numpy (float64)."""
    y = x.astype(np.float64)
    g = np.ones_like(y)
    for k in range(n_nodes):
        if k % 2 == 0:
            y = np.tanh(y)
            g *= 1.0 - y * y
        else:
            y = y + 1.0
    return y, g


def bench_chain(n_nodes, repeats, shape=(8, 8), seed=0):
    """Best-of-``repeats`` times of each phase (and instruction counts)."""
    best = None
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        out = build_chain(n_nodes)
        t1 = time.perf_counter()
        arg_shapes, out_shapes, _ = out.infer_shape(x=shape)
        t2 = time.perf_counter()
        exe = out.simple_bind(sg.cpu(), grad_req="write", x=shape)
        t3 = time.perf_counter()
        rng = np.random.default_rng(seed)
        exe.arg_dict["x"][...] = rng.standard_normal(shape, dtype=np.float32)
        head = np.ones(shape, np.float32)
        t4 = time.perf_counter()
        exe.forward(is_train=True)
        exe.backward(head)
        t5 = time.perf_counter()
        exe.forward(is_train=True)
        exe.backward(head)
        t6 = time.perf_counter()
        if out_shapes != [tuple(shape)] or arg_shapes != [tuple(shape)]:
            raise AssertionError(f"chain infer_shape gave {arg_shapes} -> {out_shapes}")
        want_y, want_g = _chain_reference(exe.arg_dict["x"], n_nodes)
        if not (
            np.allclose(exe.outputs[0], want_y, rtol=1e-4, atol=1e-5)
            and np.allclose(exe.grad_dict["x"], want_g, rtol=1e-3, atol=1e-6)
        ):
            raise AssertionError(f"chain of {n_nodes}: forward/backward disagree with numpy")
        times = {
            "build": t1 - t0,
            "infer_shape": t2 - t1,
            "simple_bind": t3 - t2,
            "fwd+bwd": t5 - t4,
            "2nd fwd+bwd": t6 - t5,
            "n_fwd": len(exe.plan.forward_instrs),
            "n_bwd": len(exe.plan.backward_instrs),
        }
        del exe, out
        best = times if best is None else {k: min(best[k], v) for k, v in times.items()}
    return best


# ----------------------------------------------------------------------------


# ----------------------------------------------------------------------------
# 3. per-instruction overhead: many tiny elementwise ops
# ----------------------------------------------------------------------------


def build_small_chain(layers):
    y = sg.sym.Variable("x")
    for _ in range(layers):
        y = sg.sym.tanh(y) * 1.01
    return y


def numpy_small_chain(x, head, layers, scale=1.01):
    """The same forward+backward by hand: keep each tanh, then g <- g * scale * (1 - t^2) backwards (float32)."""
    c, one = np.float32(scale), np.float32(1.0)
    ts = []
    y = x
    for _ in range(layers):
        t = np.tanh(y)
        ts.append(t)
        y = t * c
    g = head
    for t in reversed(ts):
        g = g * c
        g = g * (one - t * t)
    return y, g


def bench_small_chain(layers=200, size=16, rounds=9, reps=100, seed=0):
    """Interleaved rounds of symgrad and numpy; the ratio is the median of the per-round ratios."""
    exe = build_small_chain(layers).simple_bind(sg.cpu(), x=(size,))
    x = exe.arg_dict["x"]
    x[...] = np.random.default_rng(seed).standard_normal(size, dtype=np.float32)
    head = np.ones(size, np.float32)

    def sg_step():
        exe.forward(is_train=True)
        exe.backward(head)

    def np_step():
        numpy_small_chain(x, head, layers)

    sg_step()
    want_y, want_g = numpy_small_chain(x, head, layers)
    if not (
        np.allclose(exe.outputs[0], want_y, rtol=1e-5) and np.allclose(exe.grad_dict["x"], want_g, rtol=1e-4, atol=1e-7)
    ):
        raise AssertionError("small chain: symgrad and numpy disagree")
    for _ in range(20):
        sg_step()
        np_step()
    times = {"symgrad": [], "numpy": []}
    gc.collect()
    gc.disable()
    try:
        for r in range(rounds):
            for name, fn in (
                (("symgrad", sg_step), ("numpy", np_step)) if r % 2 == 0 else (("numpy", np_step), ("symgrad", sg_step))
            ):
                times[name].append(statistics.median(_time_calls(fn, reps)))
    finally:
        gc.enable()
    ratio = statistics.median(a / b for a, b in zip(times["symgrad"], times["numpy"]))
    n_instr = len(exe.plan.forward_instrs) + len(exe.plan.backward_instrs)
    return {k: statistics.median(v) for k, v in times.items()} | {
        "ratio": ratio,
        "instrs": n_instr,
        "layers": layers,
        "size": size,
    }


def _print_small_chain(r):
    print()
    print(
        f"Chain of {r['layers']} x (tanh, x1.01) on {r['size']} float32, forward+backward "
        f"({r['instrs']} instructions) against numpy by hand"
    )
    print(
        f"  symgrad {r['symgrad'] * 1e6:8.0f}us   numpy {r['numpy'] * 1e6:8.0f}us   "
        f"per instruction {r['symgrad'] / r['instrs'] * 1e6:.2f}us"
    )
    verdict = "OK" if r["ratio"] <= SMALL_CHAIN_TARGET else "ABOVE TARGET"
    print(f"  ratio symgrad / numpy: {r['ratio']:.3f} (target <= {SMALL_CHAIN_TARGET}) -> {verdict}")


# ----------------------------------------------------------------------------
# 2b. the scaling series, each size in its own process (time and peak RSS)
# ----------------------------------------------------------------------------

_SERIES_CHILD = """
import resource, sys, time
import numpy as np
sys.path.insert(0, {root!r})
n = {n}
if {mxnet}:
    import mxnet as mx
    S, ctx, ones = mx.sym, mx.cpu(), lambda s: mx.nd.ones(s)
else:
    import symgrad as sg
    S, ctx, ones = sg.sym, sg.cpu(), lambda s: np.ones(s, np.float32)
t0 = time.perf_counter()
y = S.Variable("x")
for k in range(n):
    y = S.tanh(y) if k % 2 == 0 else y + 1.0
t1 = time.perf_counter()
exe = y.simple_bind(ctx, grad_req="write", x=(8, 8))
t2 = time.perf_counter()
exe.forward(is_train=True)
exe.backward(ones((8, 8)))
if {mxnet}:
    mx.nd.waitall()
t3 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def _series_point(n, python=None):
    """(build, bind, run seconds, peak RSS bytes) of one chain in a fresh process."""
    code = _SERIES_CHILD.format(root=str(Path(__file__).resolve().parents[1]), n=n, mxnet=python is not None)
    out = subprocess.run([python or sys.executable, "-c", code], capture_output=True, text=True, check=True)
    build, bind, run, rss_kb = out.stdout.split()[-4:]
    return float(build), float(bind), float(run), int(rss_kb) * 1024


def bench_series(sizes, mxnet=None, repeats=1):
    """Per size, the best of ``repeats`` fresh processes (symgrad and MXNet alternating)."""
    rows = []
    for n in sizes:
        runs = {"symgrad": [], "mxnet": []}
        for _ in range(repeats):
            runs["symgrad"].append(_series_point(n))
            if mxnet and n <= 100_000:  # MXNet's compose of longer chains takes minutes
                runs["mxnet"].append(_series_point(n, mxnet))
        rows.append((n, {k: min(v, key=lambda t: t[0] + t[1]) for k, v in runs.items() if v}))
    return rows


def _print_series(rows):
    print()
    print(
        "Scaling series: chain x -> tanh -> +1.0 -> ... of n nodes, shape (8, 8), grad_req write; one fresh "
        "process per point; build + simple_bind + one forward+backward"
    )
    print(
        f"  {'nodes':>8s} {'who':>8s} {'build':>9s} {'bind':>9s} {'run':>9s} {'total':>9s} {'peak RSS':>9s} "
        f"{'build+bind/node':>16s}"
    )
    for n, by in rows:
        for who, (b, bd, r, rss) in by.items():
            print(
                f"  {n:8d} {who:>8s} {b:8.3f}s {bd:8.3f}s {r:8.3f}s {b + bd + r:8.2f}s {rss / 2**20:7.0f}MB "
                f"{(b + bd) / n * 1e6:14.1f}us"
            )
        if "mxnet" in by:
            s, m = by["symgrad"], by["mxnet"]
            print(f"  {'':8s} {'ratio':>8s} build+bind symgrad / MXNet = {(s[0] + s[1]) / (m[0] + m[1]):.2f}")


def _header(args):
    blas = "?"
    try:
        cfg = np.show_config(mode="dicts")
        info = cfg["Build Dependencies"]["blas"]
        blas = f"{info.get('name', '?')} {info.get('version', '')}".strip()
    except Exception:  # pragma: no cover - older numpy / odd builds
        pass
    print(
        f"symgrad benchmark  python {platform.python_version()}  numpy {np.__version__} ({blas})  "
        f"cpus {os.cpu_count()}  {'quick' if args.quick else 'default'} settings"
    )


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (a few seconds)")
    ap.add_argument("--rounds", type=int, help="interleaved MLP timing rounds (default 9, quick 3)")
    ap.add_argument("--reps", type=int, help="calls per contender per round (default 200, quick 60)")
    ap.add_argument("--batch", type=int, default=64, help="MLP batch size (default 64)")
    ap.add_argument(
        "--chain",
        type=int,
        nargs="*",
        default=[1000, 10000],
        help="chain lengths in operator nodes (default 1000 10000)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-mlp", action="store_true", help="skip the MLP benchmark")
    ap.add_argument(
        "--no-heap-phase", action="store_true", help="skip the second MLP phase with glibc heap trimming off (mallopt)"
    )
    ap.add_argument("--no-small-chain", action="store_true", help="skip the 200 x (tanh, x1.01) chain")
    ap.add_argument(
        "--series",
        type=int,
        nargs="*",
        help="scaling series sizes, each in its own process (no value: 1e3 1e4 1e5 1e6)",
    )
    ap.add_argument(
        "--mxnet", metavar="PYTHON", help="an interpreter with MXNet for the series (e.g. /work/mxvenv/bin/python)"
    )
    args = ap.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 9)
    reps = args.reps or (60 if args.quick else 200)
    warmup = 20 if args.quick else 50
    chain_repeats = 1 if args.quick else 3
    budget = 0.15 if args.quick else 0.6  # seconds per contender per round, caps pathological runs

    _header(args)
    mlp = []
    if not args.no_mlp:
        exe = build_mlp_executor(args.batch, args.seed)
        ref, tight = NumpyMLP(exe), NumpyMLP(exe, tight=True)
        verify_mlp(exe, [ref, tight])

        def sg_step():
            exe.forward(is_train=True)
            exe.backward()

        contenders = {"symgrad": sg_step, "numpy": ref.step, "numpy_out": tight.step}
        mlp.append(("default heap", bench_mlp(exe, contenders, rounds, reps, warmup, budget)))
    chain_rows = [(n, bench_chain(n, chain_repeats, seed=args.seed)) for n in args.chain]
    if not args.no_mlp and not args.no_heap_phase:
        if heap_trimming_off():
            mlp.append(("heap trimming off", bench_mlp(exe, contenders, rounds, reps, warmup, budget)))
        else:
            print("(mallopt unavailable: no 'heap trimming off' phase)")
    if mlp:
        _print_mlp(summarize_mlp(mlp), args, rounds, reps, exe)
    if chain_rows:
        _print_chain(chain_rows, chain_repeats)
    if not args.no_small_chain:
        _print_small_chain(bench_small_chain(rounds=rounds, reps=reps // 2))
    if args.series is not None:
        _print_series(bench_series(args.series or [1_000, 10_000, 100_000, 1_000_000], args.mxnet))
    return 0


def _print_mlp(results, args, rounds, reps, exe):
    print()
    print(
        f"MLP {'-'.join(map(str, LAYERS))}, batch {args.batch}, float32, forward+backward, "
        f"{len(exe.plan.forward_instrs)} forward + {len(exe.plan.backward_instrs)} backward instructions"
    )
    print(
        f"  {rounds} interleaved rounds x {reps} calls; per-call median per round; best = best round, "
        "median and ratio (of the per-round ratios) over the undisturbed rounds"
    )
    rows = [
        ("symgrad executor", "symgrad"),
        ("numpy reference (arr[...] = expr)", "numpy"),
        ("numpy with out= (info only)", "numpy_out"),
    ]
    head = "".join(f" | {label:^33s}" for label, _ in results)
    print(f"  {'':34s}{head}")
    print(f"  {'':34s}" + " | {:>9s} {:>9s} {:>13s}".format("best", "median", "faults/call") * len(results))
    for label, key in rows:
        cells = "".join(
            f" | {r['best'][key] * 1e6:7.0f}us {r['median'][key] * 1e6:7.0f}us {r['faults'][key]:13.0f}"
            for _, r in results
        )
        print(f"  {label:34s}{cells}")
    print(
        f"  {'symgrad - numpy reference':34s}"
        + "".join(f" | {(r['median']['symgrad'] - r['median']['numpy']) * 1e6:+17.0f}us {'':13s}" for _, r in results)
    )
    print(f"  {'ratio symgrad / numpy reference':34s}" + "".join(f" | {r['ratio']:19.3f} {'':13s}" for _, r in results))
    print(
        f"  {'ratio symgrad / numpy out=':34s}" + "".join(f" | {r['ratio_tight']:19.3f} {'':13s}" for _, r in results)
    )
    by = dict(results)
    for label, r in results:
        if r["clean"] < r["rounds"]:
            print(
                f"  note ({label}): {r['rounds'] - r['clean']} of {r['rounds']} rounds were disturbed "
                "(see summarize_mlp) and left out of the medians and ratios"
            )
        if r["clean"] < max(2, (r["rounds"] + 1) // 2):
            print(
                f"  WARNING ({label}): too few undisturbed rounds; the machine is busy and the numbers "
                "are unreliable: rerun on a quiet machine"
            )
    main = by.get("heap trimming off") or by["default heap"]
    verdict = "OK" if main["ratio"] <= TARGET_RATIO else "ABOVE TARGET"
    if main["clean"] < max(2, (main["rounds"] + 1) // 2):
        verdict += " (unreliable, see the warning)"
    which = "heap trimming off" if "heap trimming off" in by else "default heap"
    print(f"  target symgrad / numpy reference <= {TARGET_RATIO} ({which}): {main['ratio']:.3f} -> {verdict}")
    d = by.get("default heap")
    if d is not None and "heap trimming off" in by:
        print(
            f"  with glibc's default heap the ratio is {d['ratio']:.3f}; it depends on page faults per call "
            f"(symgrad {d['faults']['symgrad']:.0f}, numpy {d['faults']['numpy']:.0f}), whose count depends "
            "on heap history and whose cost on the machine"
        )


def _print_chain(rows, repeats):
    print()
    print(
        f"Elementwise chain x -> tanh -> +1.0 -> ... (shape (8, 8), grad_req write; best of {repeats}; "
        "total = the first four columns)"
    )
    cols = ("build", "infer_shape", "simple_bind", "fwd+bwd", "2nd fwd+bwd")
    print(f"  {'nodes':>6s} {'instrs f/b':>11s} " + " ".join(f"{c:>11s}" for c in cols) + f" {'total':>9s}")
    per_node = {}
    for n, t in rows:
        total = sum(t[c] for c in cols[:4])
        per_node[n] = {c: t[c] / n for c in cols}
        per_node[n]["total"] = total / n
        print(
            f"  {n:6d} {t['n_fwd']:5d}/{t['n_bwd']:<5d} "
            + " ".join(f"{t[c] * 1e3:9.1f}ms" for c in cols)
            + f" {total:8.2f}s"
        )
    print("  per node:")
    for n, pn in per_node.items():
        print(f"  {n:6d} {'':11s} " + " ".join(f"{pn[c] * 1e6:9.1f}us" for c in cols) + f" {pn['total'] * 1e6:7.0f}us")
    if len(per_node) >= 2:
        lo, hi = min(per_node), max(per_node)
        g = {c: per_node[hi][c] / per_node[lo][c] for c in cols + ("total",)}
        print(
            f"  per-node cost at {hi} / at {lo} nodes (1.00 = linear): "
            + ", ".join(f"{c} {v:.2f}x" for c, v in g.items())
        )


if __name__ == "__main__":
    sys.exit(main())
