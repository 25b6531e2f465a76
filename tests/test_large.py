"""Large cases, marked ``slow``: deselected by default (``addopts = -m "not slow"``), run them with
``python -m pytest -m slow``. Together about half a minute on 2 cores.

- the false-alarm target of the checkers: 0 failures on correct smooth ops with float32 inputs over 100
  seeds, for every checker (the default suite runs 20-40 seeds);
- a 10 000-node graph builds, binds and runs forward and backward with the values plain numpy gives.
"""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

import numpy as np
import pytest

import symgrad as sg
import symgrad.test_utils as tu
from symgrad.test_utils.report import GradientCheckError

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_chainer_and_pytorch_style_checkers_never_fail_correct_float32_ops_over_100_seeds():
    bench = _load(ROOT / "benchmarks" / "false_alarms.py", "symgrad_bench_false_alarms")
    rows = bench.run_chainer_torch(range(100))
    assert len(rows) >= 20
    alarms = [(checker, op, ours) for checker, op, ours, _, _ in rows if ours]
    assert not alarms, f"false alarms (checker, op, count of 100): {alarms}"


def test_check_numeric_gradient_never_fails_correct_float32_ops_over_100_seeds():
    from test_false_alarms import SMOOTH

    failures = []
    for op, build in SMOOTH.items():
        for seed in range(100):
            sym, loc, aux = build(np.random.default_rng(seed))
            np.random.seed(seed)
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # a smooth op has no kink to warn about
                try:
                    tu.check_numeric_gradient(sym, loc, aux_states=aux, dtype=np.float32)
                except GradientCheckError as err:
                    failures.append((op, seed, str(err).splitlines()[0]))
    assert not failures, f"{len(failures)} false alarms; first: {failures[0]}"


def test_ten_thousand_node_chain_matches_numpy():
    n = 10_000
    x = sg.sym.Variable("x")
    y = x
    for _ in range(n // 2):
        y = sg.sym.tanh(y) * 0.9 + 0.05
    exe = sg.sym.sum(y).simple_bind(sg.cpu(), x=(4, 3), type_dict={"x": np.float64})
    xv = np.random.default_rng(0).uniform(-1, 1, (4, 3))
    out = exe.forward(is_train=True, x=xv)[0]
    exe.backward(np.ones(1))  # MXNet: a full sum has shape (1,)
    # plain numpy: forward values, then the chain rule backwards
    v, ts = xv.copy(), []
    for _ in range(n // 2):
        t = np.tanh(v)
        ts.append(t)
        v = t * 0.9 + 0.05
    g = np.ones_like(v)
    for t in reversed(ts):
        g = g * 0.9 * (1 - t * t)
    np.testing.assert_allclose(out, [v.sum()], rtol=1e-12)
    np.testing.assert_allclose(exe.grad_dict["x"], g, rtol=1e-10, atol=1e-300)
