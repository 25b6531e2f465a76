#!/usr/bin/env python
"""The workloads of the benchmark suite, one implementation per contender, and the worker that runs them.

``benchmarks/run.py`` starts one worker process per contender (symgrad, numpy by hand, MXNet, PyTorch), each
with its own Python (the peers live in their own virtual environments, see ``peers/setup.sh``), and drives
them over stdin/stdout, one JSON object per line:

    {"op": "setup", "workload": "mlp", "seed": 0, "warmup": 5}   -> {"ok": true, "check": {...}, "note": "..."}
                                                                  or {"skip": "why"} / {"error": "why"}
    {"op": "round", "reps": 100, "budget": 0.4}                  -> {"times": [seconds per call, ...]}
    {"op": "drop"}                                               -> {"ok": true}   (frees the workload)

A workload is a function ``(contender) -> Case``: the ``step`` it times (one forward+backward, one build+bind,
one numeric check...) and a ``check`` (a few numbers every contender must agree on, compared by run.py) run
once at setup, so a fast contender that computes something else is caught. Inputs come from
``np.random.default_rng(seed)`` in the same order everywhere (the PCG64 stream is the same in numpy 1.23 and
2.x), so every contender sees the same numbers. Imports of symgrad, MXNet and torch happen inside the
workload functions: a peer's environment needs only numpy and its own framework.

    python benchmarks/contenders.py --list     # which workload has which contenders
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
ZOO = REPO / "tests" / "fixtures" / "zoo"

MLP_LAYERS = (784, 256, 256, 10)
MLP_BATCH = 64
CHAIN_LINKS, CHAIN_SCALE, CHAIN_SIZE = 200, 1.01, 16
BIND_SHAPE = (8, 8)
RESNET_DATA = (2, 3, 224, 224)
DENSENET_DATA = (1, 3, 224, 224)
DENSENET_JSON = str(ZOO / "densenet121-symbol.json")
NUMCHECK_DATA = (2, 3, 8, 8)


@dataclass
class Case:
    step: object  # callable() -> anything; what is timed
    check: dict = field(default_factory=dict)  # numbers every contender must agree on (rtol 1e-3)
    note: str = ""


class Skip(Exception):
    """This contender does not run this workload (no numpy-by-hand ResNet, say)."""


WORKLOADS: dict[str, dict[str, object]] = {}


def workload(name, contender):
    def register(fn):
        WORKLOADS.setdefault(name, {})[contender] = fn
        return fn

    return register


BIND_NODES = {"bind1k": 1000, "bind10k": 10000}


def bind_workloads(contender):
    """Register ``bind_chain(n_nodes) -> Case`` as ``contender``'s bind1k and bind10k workloads."""

    def register(bind_chain):
        for name, n_nodes in BIND_NODES.items():
            workload(name, contender)(lambda seed, n_nodes=n_nodes: bind_chain(n_nodes))
        return bind_chain

    return register


# ----------------------------------------------------------------------------
# shared inputs (plain numpy: the same in every environment)
# ----------------------------------------------------------------------------


def mlp_arrays(seed):
    """data, label and (weight, bias) per layer, He-initialised; float32."""
    rng = np.random.default_rng(seed)
    arrays = {
        "data": rng.standard_normal((MLP_BATCH, MLP_LAYERS[0]), dtype=np.float32),
        "softmax_label": rng.integers(0, MLP_LAYERS[-1], size=MLP_BATCH).astype(np.float32),
    }
    for k in range(1, len(MLP_LAYERS)):
        fan_in, width = MLP_LAYERS[k - 1], MLP_LAYERS[k]
        scale = np.float32(np.sqrt(2.0 / fan_in))
        arrays[f"fc{k}_weight"] = rng.standard_normal((width, fan_in), dtype=np.float32) * scale
        arrays[f"fc{k}_bias"] = rng.standard_normal(width, dtype=np.float32) * np.float32(0.1)
    return arrays


MLP_PARAMS = tuple(f"fc{k}_{p}" for k in range(1, len(MLP_LAYERS)) for p in ("weight", "bias"))


def grad_norms(names, grads):
    return {f"|d {n}|": float(np.linalg.norm(np.asarray(g, dtype=np.float64))) for n, g in zip(names, grads)}


def chain_net(S):
    """The chain workload's graph from ``S`` (symgrad's or MXNet's ``sym``): CHAIN_LINKS times
    y <- tanh(y) * CHAIN_SCALE, from the variable x."""
    y = S.Variable("x")
    for _ in range(CHAIN_LINKS):
        y = S.tanh(y) * CHAIN_SCALE
    return y


def chain_input(seed):
    return np.random.default_rng(seed).standard_normal(CHAIN_SIZE, dtype=np.float32)


def fill_zoo_arrays(names, shapes, seed, head_shape):
    """Deterministic values for a zoo network's arguments: He-initialised weights, unit gamma, zero beta/bias."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in zip(names, shapes):
        if name.endswith("weight"):
            fan_in = int(np.prod(shape[1:]))
            out[name] = (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        elif name.endswith("gamma"):
            out[name] = np.ones(shape, np.float32)
        elif name == "data":
            out[name] = rng.standard_normal(shape, dtype=np.float32)
        else:  # beta, bias
            out[name] = np.zeros(shape, np.float32)
    head = rng.standard_normal(head_shape, dtype=np.float32)
    return out, head


def bind_zoo_resnet18(S, ctx, seed):
    """The zoo's ResNet-18 bound by ``S`` (symgrad's or MXNet's ``sym``) on ``ctx``, no gradient for the data,
    arguments from ``fill_zoo_arrays``, moving means 0 and variances 1: ``(executor, numpy head gradient)``."""
    net = S.load(str(ZOO / "resnet18_v1-symbol.json"))
    names = net.list_arguments()
    reqs = {n: ("null" if n == "data" else "write") for n in names}
    exe = net.simple_bind(ctx, grad_req=reqs, data=RESNET_DATA)
    values, head = fill_zoo_arrays(names, [exe.arg_dict[n].shape for n in names], seed, (RESNET_DATA[0], 1000))
    for n in names:
        exe.arg_dict[n][:] = values[n]
    for n, a in exe.aux_dict.items():
        a[:] = 1.0 if n.endswith("var") else 0.0
    return exe, head


def numcheck_net(S):
    """The numcheck network, conv 3x3 (4 filters) -> tanh -> fc 5, from ``S``: symgrad's or MXNet's ``sym``."""
    return S.FullyConnected(
        S.tanh(S.Convolution(S.Variable("data"), kernel=(3, 3), num_filter=4, name="conv")), num_hidden=5, name="fc"
    )


def numcheck_arrays(seed):
    rng = np.random.default_rng(seed)
    return {
        "data": rng.standard_normal(NUMCHECK_DATA),
        "conv_weight": rng.standard_normal((4, 3, 3, 3)) * 0.3,
        "conv_bias": rng.standard_normal(4) * 0.1,
        "fc_weight": rng.standard_normal((5, 4 * 6 * 6)) * 0.1,
        "fc_bias": rng.standard_normal(5) * 0.1,
    }


def train_step(exe, head=None, sync=None):
    """The timed step of an executor (symgrad's or MXNet's): a training forward, the backward with ``head``
    (None: the loss heads' own), then ``sync`` (MXNet's ``nd.waitall``: its engine is asynchronous)."""
    head_args = () if head is None else (head,)

    def step():
        exe.forward(is_train=True)
        exe.backward(*head_args)
        if sync is not None:
            sync()

    return step


def bind_case(build, ctx, sync=None, count_aux=False, **shapes):
    """A build + bind workload: the step builds the graph with ``build()`` and binds it on ``ctx`` (grad_req write)
    to ``shapes``, then ``sync``; the check counts the arguments (and, with ``count_aux``, the auxiliary states)."""

    def step():
        exe = build().simple_bind(ctx, grad_req="write", **shapes)
        if sync is not None:
            sync()
        return exe

    exe = step()
    check = {"n_args": len(exe.arg_dict)}
    if count_aux:
        check["n_aux"] = len(exe.aux_dict)
    return Case(step, check)


# ----------------------------------------------------------------------------
# symgrad (imports the checkout this file sits in, installed or not)
# ----------------------------------------------------------------------------


def _symgrad():
    sys.path.insert(0, str(REPO))
    import symgrad as sg

    return sg


def _bench_core():
    sys.path.insert(0, str(REPO / "benchmarks"))
    import bench_core

    return bench_core


@workload("mlp", "symgrad")
def mlp_symgrad(seed):
    """bench_core's executor (784-256-256-10, relu, SoftmaxOutput; data/label grad_req null), our inputs."""
    bc = _bench_core()
    exe = bc.build_mlp_executor(MLP_BATCH, seed)
    for name, value in mlp_arrays(seed).items():
        exe.arg_dict[name][...] = value
    bc.verify_mlp(exe, [bc.NumpyMLP(exe)])  # symgrad == bench_core's numpy reference, or no timing at all
    step = train_step(exe)
    step()
    return Case(step, grad_norms(MLP_PARAMS, [exe.grad_dict[n] for n in MLP_PARAMS]))


@workload("chain", "symgrad")
def chain_symgrad(seed):
    sg = _symgrad()
    exe = chain_net(sg.sym).simple_bind(sg.cpu(), grad_req="write", x=(CHAIN_SIZE,))
    exe.arg_dict["x"][...] = chain_input(seed)
    step = train_step(exe, np.ones(CHAIN_SIZE, np.float32))
    step()
    return Case(
        step,
        grad_norms(["x"], [exe.grad_dict["x"]]),
        f"{len(exe.plan.forward_instrs)} + {len(exe.plan.backward_instrs)} instructions",
    )


@workload("resnet18", "symgrad")
def resnet18_symgrad(seed):
    sg = _symgrad()
    exe, head = bind_zoo_resnet18(sg.sym, sg.cpu(), seed)
    step = train_step(exe, head)
    step()
    w = "resnetv10_dense0_weight"
    return Case(
        step, {"|out|": float(np.linalg.norm(exe.outputs[0])), f"|d {w}|": float(np.linalg.norm(exe.grad_dict[w]))}
    )


@bind_workloads("symgrad")
def _bind_chain_symgrad(n_nodes):
    sg, bc = _symgrad(), _bench_core()
    # x -> tanh -> +1.0 -> tanh -> ... (bench_core's chain)
    return bind_case(lambda: bc.build_chain(n_nodes), sg.cpu(), x=BIND_SHAPE)


@workload("densenet", "symgrad")
def densenet_symgrad(seed):
    sg = _symgrad()
    return bind_case(lambda: sg.sym.load(DENSENET_JSON), sg.cpu(), count_aux=True, data=DENSENET_DATA)


@workload("numcheck", "symgrad")
def numcheck_symgrad(seed):
    sg = _symgrad()
    from symgrad.test_utils import check_numeric_gradient

    net = numcheck_net(sg.sym)
    location = numcheck_arrays(seed)
    if sorted(net.list_arguments()) != sorted(location):
        raise AssertionError(f"arguments {net.list_arguments()}")

    def step():
        return check_numeric_gradient(net, location, dtype=np.float64, progress=False)

    step()
    return Case(step, {"params": sum(v.size for v in location.values())})


# ----------------------------------------------------------------------------
# numpy by hand
# ----------------------------------------------------------------------------


@workload("mlp", "numpy")
def mlp_numpy(seed):
    """bench_core.NumpyMLP: the reference the MLP target is stated against (needs only its arg_dict)."""
    from types import SimpleNamespace

    ref = _bench_core().NumpyMLP(SimpleNamespace(arg_dict=mlp_arrays(seed)))
    ref.step()
    return Case(ref.step, grad_norms(MLP_PARAMS, ref.grads))


@workload("chain", "numpy")
def chain_numpy(seed):
    x = chain_input(seed)
    head = np.ones(CHAIN_SIZE, np.float32)
    numpy_small_chain = _bench_core().numpy_small_chain  # keeps every tanh, then g <- g * s * (1 - t^2) backwards

    def step():
        return numpy_small_chain(x, head, CHAIN_LINKS, CHAIN_SCALE)

    _, g = step()
    return Case(step, grad_norms(["x"], [g]))


# ----------------------------------------------------------------------------
# MXNet 1.9.1 (its own venv; every step ends with waitall: the engine is asynchronous)
# ----------------------------------------------------------------------------


def _mx():
    os.environ.setdefault("MXNET_STORAGE_FALLBACK_LOG_VERBOSE", "0")
    import mxnet as mx

    return mx


@workload("mlp", "mxnet")
def mlp_mxnet(seed):
    mx = _mx()
    h = mx.sym.Variable("data")
    for k, width in enumerate(MLP_LAYERS[1:], start=1):
        h = mx.sym.FullyConnected(h, num_hidden=width, name=f"fc{k}")
        if k < len(MLP_LAYERS) - 1:
            h = mx.sym.Activation(h, act_type="relu", name=f"relu{k}")
    out = mx.sym.SoftmaxOutput(h, name="softmax")
    req = {n: ("write" if n in MLP_PARAMS else "null") for n in out.list_arguments()}
    exe = out.simple_bind(mx.cpu(), grad_req=req, data=(MLP_BATCH, MLP_LAYERS[0]))
    for name, value in mlp_arrays(seed).items():
        exe.arg_dict[name][:] = value
    step = train_step(exe, sync=mx.nd.waitall)
    step()
    return Case(step, grad_norms(MLP_PARAMS, [exe.grad_dict[n].asnumpy() for n in MLP_PARAMS]))


@workload("chain", "mxnet")
def chain_mxnet(seed):
    mx = _mx()
    exe = chain_net(mx.sym).simple_bind(mx.cpu(), grad_req="write", x=(CHAIN_SIZE,))
    exe.arg_dict["x"][:] = chain_input(seed)
    step = train_step(exe, mx.nd.ones(CHAIN_SIZE), mx.nd.waitall)
    step()
    return Case(step, grad_norms(["x"], [exe.grad_dict["x"].asnumpy()]))


@workload("resnet18", "mxnet")
def resnet18_mxnet(seed):
    mx = _mx()
    exe, head = bind_zoo_resnet18(mx.sym, mx.cpu(), seed)
    step = train_step(exe, mx.nd.array(head), mx.nd.waitall)
    step()
    w = "resnetv10_dense0_weight"
    return Case(
        step,
        {
            "|out|": float(np.linalg.norm(exe.outputs[0].asnumpy())),
            f"|d {w}|": float(np.linalg.norm(exe.grad_dict[w].asnumpy())),
        },
    )


@bind_workloads("mxnet")
def _bind_chain_mxnet(n_nodes):
    mx = _mx()

    def build():
        y = mx.sym.Variable("x")
        for k in range(n_nodes):  # the same chain as bench_core.build_chain
            y = mx.sym.tanh(y) if k % 2 == 0 else y + 1.0
        return y

    return bind_case(build, mx.cpu(), mx.nd.waitall, x=BIND_SHAPE)


@workload("densenet", "mxnet")
def densenet_mxnet(seed):
    mx = _mx()
    return bind_case(lambda: mx.sym.load(DENSENET_JSON), mx.cpu(), mx.nd.waitall, count_aux=True, data=DENSENET_DATA)


@workload("numcheck", "mxnet")
def numcheck_mxnet(seed):
    """MXNet's own check_numeric_gradient with its defaults (eps 1e-3, rtol 1e-2), in float64."""
    mx = _mx()
    from mxnet.test_utils import check_numeric_gradient

    net = numcheck_net(mx.sym)
    location = numcheck_arrays(seed)

    def step():
        check_numeric_gradient(net, location, dtype=np.float64)

    step()
    return Case(step, {"params": sum(v.size for v in location.values())})


# ----------------------------------------------------------------------------
# PyTorch (CPU, its own venv; default intra-op threads)
# ----------------------------------------------------------------------------


def _torch():
    import torch

    return torch


@workload("mlp", "torch")
def mlp_torch(seed):
    """SoftmaxOutput's gradient (softmax - onehot, summed over the batch) is that of summed cross-entropy."""
    torch = _torch()
    F = torch.nn.functional
    arrays = mlp_arrays(seed)
    x = torch.from_numpy(arrays["data"])
    label = torch.from_numpy(arrays["softmax_label"].astype(np.int64))
    params = [torch.from_numpy(arrays[n]).requires_grad_() for n in MLP_PARAMS]

    def step():
        for p in params:
            p.grad = None
        w1, b1, w2, b2, w3, b3 = params
        h = F.relu(F.linear(x, w1, b1))
        h = F.relu(F.linear(h, w2, b2))
        loss = F.cross_entropy(F.linear(h, w3, b3), label, reduction="sum")
        loss.backward()

    step()
    return Case(step, grad_norms(MLP_PARAMS, [p.grad.numpy() for p in params]))


@workload("chain", "torch")
def chain_torch(seed):
    torch = _torch()
    x = torch.from_numpy(chain_input(seed)).requires_grad_()
    head = torch.ones(CHAIN_SIZE)

    def step():
        x.grad = None
        y = x
        for _ in range(CHAIN_LINKS):
            y = torch.tanh(y) * CHAIN_SCALE
        y.backward(head)

    step()
    return Case(step, grad_norms(["x"], [x.grad.numpy()]))


def _torch_resnet18(torch):
    """ResNet-18 v1 as Gluon's resnet18_v1 (and torchvision's): 7x7/2 stem, BN, relu, 3x3/2 max pooling,
    four stages of two basic blocks (projection shortcut 1x1 + BN where the shape changes), average pooling,
    dense 1000."""
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
                nn.BatchNorm2d(cout),
                nn.ReLU(),
                nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
                nn.BatchNorm2d(cout),
            )
            self.short = (
                nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                if stride != 1 or cin != cout
                else nn.Identity()
            )

        def forward(self, x):
            return torch.relu(self.body(x) + self.short(x))

    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for stage, cout in enumerate((64, 128, 256, 512)):
        layers += [Block(cin, cout, 2 if stage else 1), Block(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000)]
    return nn.Sequential(*layers)


@workload("resnet18", "torch")
def resnet18_torch(seed):
    """Same architecture, torch's own initialisation (values differ from the zoo runs: no cross-check)."""
    torch = _torch()
    torch.manual_seed(seed)
    model = _torch_resnet18(torch).train()
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(rng.standard_normal(RESNET_DATA, dtype=np.float32))
    head = torch.from_numpy(rng.standard_normal((RESNET_DATA[0], 1000), dtype=np.float32))

    def step():
        model.zero_grad(set_to_none=True)
        model(x).backward(head)

    step()
    return Case(step, note="torch initialisation; parameters as the zoo network")


@workload("numcheck", "torch")
def numcheck_torch(seed):
    """torch.autograd.gradcheck (its defaults: eps 1e-6, atol 1e-5, rtol 1e-3) on every input, float64."""
    torch = _torch()
    F = torch.nn.functional
    arrays = numcheck_arrays(seed)
    inputs = tuple(
        torch.from_numpy(arrays[n]).requires_grad_()
        for n in ("data", "conv_weight", "conv_bias", "fc_weight", "fc_bias")
    )

    def net(x, w, b, fw, fb):
        return F.linear(torch.tanh(F.conv2d(x, w, b)).flatten(1), fw, fb)

    def step():
        if not torch.autograd.gradcheck(net, inputs):
            raise AssertionError("gradcheck failed")

    step()
    return Case(step, {"params": sum(int(t.numel()) for t in inputs)})


# ----------------------------------------------------------------------------
# the worker
# ----------------------------------------------------------------------------


def timed_round(step, reps, budget):
    """Per-call wall times of ``reps`` calls, fewer (at least one) once ``budget`` seconds are spent."""
    clock = time.perf_counter
    times = []
    start = clock()
    for _ in range(reps):
        t = clock()
        step()
        times.append(clock() - t)
        if clock() - start > budget:
            break
    return times


def handle(contender, request, state):
    op = request["op"]
    if op == "setup":
        state.clear()
        impl = WORKLOADS.get(request["workload"], {}).get(contender)
        if impl is None:
            return {"skip": "no such contender for this workload"}
        case = impl(request.get("seed", 0))
        for _ in range(request.get("warmup", 0)):
            case.step()
        state["case"] = case
        return {"ok": True, "check": case.check, "note": case.note}
    if op == "round":
        gc.collect()  # garbage of the previous round is not this round's cost
        return {"times": timed_round(state["case"].step, request["reps"], request["budget"])}
    if op == "drop":
        state.clear()
        gc.collect()
        return {"ok": True}
    raise ValueError(f"unknown request {op!r}")


def serve(contender):
    """Answer requests on stdin; anything else printed (warnings, library chatter) goes to stderr."""
    proto = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    state = {}
    proto.write(json.dumps({"ready": contender, "python": sys.version.split()[0], "numpy": np.__version__}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "quit":
            break
        try:
            reply = handle(contender, request, state)
        except Exception as exc:  # reported in the table; the worker stays up for the next workload
            traceback.print_exc()
            state.clear()
            reply = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        proto.write(json.dumps(reply) + "\n")


def versions(contender):
    """The framework version a contender runs, or raises ImportError."""
    if contender == "symgrad":
        return f"symgrad {_symgrad().__version__}"
    if contender == "mxnet":
        return f"MXNet {_mx().__version__}"
    if contender == "torch":
        torch = _torch()
        return f"PyTorch {torch.__version__} ({torch.get_num_threads()} threads)"
    return f"numpy {np.__version__}"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--list"]:
        for name, impls in WORKLOADS.items():
            print(f"{name:10s} {', '.join(impls)}")
        return 0
    if len(argv) == 2 and argv[0] == "--version":
        try:
            print(versions(argv[1]))
        except ImportError as exc:
            print(f"unavailable: {exc}")
            return 1
        return 0
    if len(argv) != 1:
        print(__doc__)
        return 2
    serve(argv[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
