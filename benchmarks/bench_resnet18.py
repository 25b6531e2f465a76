"""Time forward + backward of a ResNet-18-shaped symbol on cpu.

    python benchmarks/bench_resnet18.py [--batch 2] [--size 224] [--repeat 3] [--dtype float32] [--profile]

Builds the ImageNet ResNet-18 (v1: 7x7/2 stem + BN + relu + 3x3/2 max pooling, four stages of
two basic blocks with 64/128/256/512 filters, 1x1/2 projection shortcuts, global average
pooling, FullyConnected(1000), SoftmaxOutput), ``simple_bind``s it with grad_req='write' for
every parameter ('null' for data and label, as a training Module does) and reports the median
seconds of ``forward(is_train=True)`` and of ``backward()`` over ``--repeat`` runs after one
warm-up. ``--profile`` prints the time spent per operator. On a shared machine multi-threaded
BLAS timings swing with the load; ``OPENBLAS_NUM_THREADS=1`` gives a steadier number.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import symgrad as sg  # noqa: E402

S = sg.sym


def _conv_bn(x, num_filter, kernel, stride, pad, name, relu=True):
    x = S.Convolution(x, kernel=kernel, stride=stride, pad=pad, num_filter=num_filter, no_bias=True,
                      name=f"{name}_conv")
    x = S.BatchNorm(x, fix_gamma=False, eps=1e-5, name=f"{name}_bn")
    return S.Activation(x, act_type="relu", name=f"{name}_relu") if relu else x


def _basic_block(x, num_filter, stride, name, project):
    h = _conv_bn(x, num_filter, (3, 3), (stride, stride), (1, 1), f"{name}_a")
    h = _conv_bn(h, num_filter, (3, 3), (1, 1), (1, 1), f"{name}_b", relu=False)
    sc = _conv_bn(x, num_filter, (1, 1), (stride, stride), (0, 0), f"{name}_sc", relu=False) if project else x
    return S.Activation(h + sc, act_type="relu", name=f"{name}_out")


def resnet18(num_classes=1000):
    x = S.Variable("data")
    x = _conv_bn(x, 64, (7, 7), (2, 2), (3, 3), "stem")
    x = S.Pooling(x, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="max", name="stem_pool")
    for stage, nf in enumerate((64, 128, 256, 512)):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            x = _basic_block(x, nf, stride, f"stage{stage + 1}_unit{block + 1}", project=(stride != 1))
    x = S.Pooling(x, kernel=(7, 7), global_pool=True, pool_type="avg", name="gap")
    x = S.FullyConnected(S.Flatten(x), num_hidden=num_classes, name="fc")
    return S.SoftmaxOutput(x, name="softmax")


def _profile(exe):
    """Wrap every instruction of both phases to time it by operator name (slows the run slightly)."""
    plan = exe._plan if hasattr(exe, "_plan") else exe.plan
    totals = defaultdict(float)

    def wrap(ins):
        fn = ins.fn

        def timed(*a, **k):
            t0 = time.perf_counter()
            r = fn(*a, **k)
            totals[ins.node.op_name] += time.perf_counter() - t0
            return r

        ins.fn = timed

    for ins in plan.forward_instrs + plan.backward_instrs:
        wrap(ins)
    return plan, totals


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args(argv)

    net = resnet18()
    dtype = np.dtype(args.dtype)
    shape = (args.batch, 3, args.size, args.size)
    types = {n: dtype for n in net.list_arguments()}
    t0 = time.perf_counter()
    # as a training Module binds it: no gradient for the data (nor the label), every parameter 'write'
    reqs = {n: ("null" if n in ("data", "softmax_label") else "write") for n in net.list_arguments()}
    exe = net.simple_bind(sg.cpu(), grad_req=reqs, type_dict=types, data=shape)
    bind_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    for name, arr in exe.arg_dict.items():
        if name == "softmax_label":
            arr[...] = rng.integers(0, 1000, arr.shape)
        elif name.endswith("gamma"):
            arr[...] = 1.0
        elif name.endswith("weight"):
            fan_in = int(np.prod(arr.shape[1:]))
            arr[...] = rng.standard_normal(arr.shape) * np.sqrt(2.0 / fan_in)
        elif name == "data":
            arr[...] = rng.standard_normal(arr.shape)
    for name, arr in exe.aux_dict.items():
        arr[...] = 1.0 if name.endswith("var") else 0.0

    totals = None
    if args.profile:
        try:
            plan, totals = _profile(exe)
            # the generated straight-line functions captured the old fns: re-generate them
            from symgrad.executor.plan import _generate

            plan.run_forward = _generate(plan.forward_instrs, plan.forward_frees, "forward")
            plan.run_backward = _generate(plan.backward_instrs, plan.backward_frees, "backward")
        except (AttributeError, ImportError) as exc:
            print(f"profiling unavailable: {exc}")
            totals = None

    fwd, bwd = [], []
    for i in range(args.repeat + 1):
        t0 = time.perf_counter()
        exe.forward(is_train=True)
        t1 = time.perf_counter()
        exe.backward()
        t2 = time.perf_counter()
        if i:  # the first run warms caches and allocators
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
    f, b = statistics.median(fwd), statistics.median(bwd)
    print(f"ResNet-18 batch {args.batch} x 3 x {args.size} x {args.size} {dtype.name} on cpu "
          f"(bind {bind_s:.2f} s, median of {args.repeat})")
    print(f"forward  {f:.3f} s")
    print(f"backward {b:.3f} s")
    print(f"total    {f + b:.3f} s per iteration")
    if totals:
        runs = args.repeat + 1
        print("per operator (s per iteration):")
        for name, t in sorted(totals.items(), key=lambda kv: -kv[1]):
            print(f"  {name:28s} {t / runs:.3f}")
    grads = [g for g in exe.grad_dict.values() if g is not None]
    assert all(np.isfinite(g).all() for g in grads), "non-finite gradient"


if __name__ == "__main__":
    main()
