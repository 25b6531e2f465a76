"""Numeric checks spread over a ``concurrent.futures.Executor`` give the serial run's results and reports.

A process pool of fresh interpreters (spawn: nothing is shared with the workers but the pickled symbol JSON and
arrays) and a local ``dask.distributed`` cluster with in-process workers take the perturbations; the numbers
must be those of the serial run bit for bit, and a failure's report the same text.
"""

from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import os
import sys
import warnings

import numpy as np
import pytest

import symgrad as sg
from symgrad import cli, model_zoo
from symgrad.test_utils import GradientCheckError, check_model, check_numeric_gradient
from symgrad.test_utils.scaleout import SPREAD_TASKS, Recipe, Spread
from symgrad.test_utils.torch_checks import gradcheck, gradgradcheck

S = sg.sym


@pytest.fixture(scope="module")
def pool():
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as ex:
        yield ex


@pytest.fixture(scope="module")
def dask_executor():
    distributed = pytest.importorskip("distributed")
    with distributed.Client(processes=False, n_workers=2, threads_per_worker=1, dashboard_address=None) as client:
        yield client.get_executor()


def conv_net():
    """conv(4, 3x3) + tanh + FC(5), as in the issue's numeric-check workload (smaller input)."""
    c = S.Convolution(S.Variable("data"), kernel=(3, 3), num_filter=4, name="conv")
    return S.FullyConnected(S.Flatten(S.tanh(c)), num_hidden=5, name="fc")


def values_of(sym, seed=0, **shapes):
    rng = np.random.default_rng(seed)
    arg_shapes = sym.infer_shape(**shapes)[0]
    return {n: rng.normal(size=s) for n, s in zip(sym.list_arguments(), arg_shapes)}


def serial_and_spread(check, executor, seed=5):
    """``check(executor)`` without and with the executor, from the same RNG state: (result, warnings, error)."""
    runs = []
    for ex in (None, executor):
        np.random.seed(seed)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                runs.append((check(ex), [str(w.message) for w in caught], None))
            except GradientCheckError as err:
                runs.append((None, [str(w.message) for w in caught], str(err)))
    return runs


def assert_same_gradients(a, b):
    assert sorted(a) == sorted(b)
    for k in a:
        for x, y in zip(a[k], b[k]):
            assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), k


# -- check_numeric_gradient -----------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["central", "richardson"])
def test_numeric_gradient_on_a_process_pool_is_the_serial_one(pool, method):
    sym = conv_net()
    loc = values_of(sym, data=(2, 3, 6, 6))
    (a, wa, ea), (b, wb, eb) = serial_and_spread(
        lambda ex: check_numeric_gradient(sym, loc, dtype=np.float32, method=method, progress=False, executor=ex), pool
    )
    assert ea is None and eb is None and wa == wb
    assert_same_gradients(a, b)


def test_complex_step_on_a_process_pool_is_the_serial_one(pool):
    x, w = S.Variable("x"), S.Variable("w")
    sym = S.sin(x) * S.exp(w) + S.square(x)
    loc = values_of(sym, 1, x=(3, 4), w=(3, 4))
    (a, _, ea), (b, _, eb) = serial_and_spread(
        lambda ex: check_numeric_gradient(
            sym, loc, dtype=np.float64, method="complex_step", progress=False, executor=ex
        ),
        pool,
    )
    assert ea is None and eb is None
    assert_same_gradients(a, b)


def test_a_failure_reports_the_same_text(pool):
    # BlockGrad plants a bug with built-in ops: the forward uses x twice, the backward sees one of them
    x = S.Variable("x")
    sym = S.tanh(S.BlockGrad(x) * x)
    loc = {"x": np.linspace(-1.0, 1.0, 12).reshape(3, 4)}
    (_, _, ea), (_, _, eb) = serial_and_spread(
        lambda ex: check_numeric_gradient(sym, loc, dtype=np.float64, progress=False, executor=ex), pool
    )
    assert ea is not None and "'x'" in ea
    assert ea == eb


def test_kink_redraws_are_spread_and_the_same(pool):
    # relu at exactly 0: mismatches at kinks are re-drawn, and the check runs again there (spread again)
    x, w = S.Variable("x"), S.Variable("w")
    sym = S.relu(S.FullyConnected(x, weight=w, no_bias=True, num_hidden=3, name="fc"))
    loc = {"x": np.zeros((2, 4)), "w": np.random.default_rng(2).normal(size=(3, 4))}
    runs = serial_and_spread(
        lambda ex: check_numeric_gradient(sym, loc, dtype=np.float64, progress=False, executor=ex), pool
    )
    (a, wa, ea), (b, wb, eb) = runs
    assert ea is None and eb is None
    assert wa and wa == wb  # a NondifferentiablePointWarning naming the same elements
    assert a.redrawn == b.redrawn and a.redrawn
    assert_same_gradients(a, b)


def test_numeric_gradient_on_dask_in_process_workers(dask_executor):
    sym = conv_net()
    loc = values_of(sym, 3, data=(1, 2, 5, 5))
    (a, _, ea), (b, _, eb) = serial_and_spread(
        lambda ex: check_numeric_gradient(sym, loc, dtype=np.float64, progress=False, executor=ex), dask_executor
    )
    assert ea is None and eb is None
    assert_same_gradients(a, b)


def test_an_executor_must_submit():
    x = S.Variable("x")
    with pytest.raises(TypeError, match="concurrent.futures.Executor"):
        check_numeric_gradient(S.tanh(x), [np.ones(3)], executor=4)
    with pytest.raises(TypeError, match="concurrent.futures.Executor"):
        gradcheck(S.tanh, (np.ones(3),), executor="pool")


# -- gradcheck ----------------------------------------------------------------------------------------------


def test_gradcheck_on_a_process_pool(pool):
    x = np.random.default_rng(4).uniform(-1, 1, (3, 4))
    assert gradcheck(lambda v: S.tanh(v) * v, (x,), executor=pool) is True
    # a failing Jacobian: the same report (ops named: func builds new symbols on every call)
    (_, _, ea), (_, _, eb) = serial_and_spread(
        lambda ex: gradcheck(
            lambda v: S.sin(S.BlockGrad(v, name="b") * v, name="f"), (x,), progress=False, executor=ex
        ),
        pool,
    )
    assert ea is not None and ea == eb


def test_gradgradcheck_sends_the_gradient_graph(pool):
    x = np.random.default_rng(6).uniform(-1, 1, (2, 3))
    assert gradgradcheck(lambda v: S.sin(v) * v, (x,), executor=pool) is True


def test_gradcheck_on_dask_in_process_workers(dask_executor):
    x = np.random.default_rng(7).uniform(-1, 1, (2, 3))
    (_, _, ea), (_, _, eb) = serial_and_spread(
        lambda ex: gradcheck(
            lambda v: S.exp(S.BlockGrad(v, name="b") * v, name="f"), (x,), progress=False, executor=ex
        ),
        dask_executor,
    )
    assert ea is not None and ea == eb


# -- the sweep itself -------------------------------------------------------------------------------------------


def test_more_probes_than_tasks_come_back_in_order():
    # a thread pool: the tasks interleave, the probes come back in their order
    from symgrad.test_utils.differencer import ElementProbe, sweep
    from symgrad.test_utils.harness import Harness

    x = S.Variable("x")
    sym = S.sum(S.square(x))
    h = Harness.bind(sym, {"x": np.arange(SPREAD_TASKS * 3 + 1, dtype=np.float64)}, {}, ctx=sg.cpu())
    h.base()
    probes = [ElementProbe(h.array("x"), (i,), "x") for i in range(h.array("x").size)]
    with concurrent.futures.ThreadPoolExecutor(3) as ex:
        spread = Spread(ex, h, Recipe(sym, [np.ones(())]))
        got = [(p.index, d) for p, d, _ in sweep(probes, [0.5] * len(probes), None, "central", None, spread)]
    assert [i for i, _ in got] == [p.index for p in probes]
    assert all(d == [-0.5, 0.5] for _, d in got)


# -- symgrad check ---------------------------------------------------------------------------------------------


def test_cli_workers_give_the_serial_report(capsys):
    def run(*extra):
        assert cli.main(["check", "--example", "lenet", "--json", "--no-progress", *extra]) == 0
        return json.loads(capsys.readouterr().out)

    serial, spread = run("--workers", "1"), run("--workers", "2")
    assert spread.pop("executor") == "2 worker processes" and serial.pop("executor") is None
    serial.pop("seconds"), spread.pop("seconds")
    assert serial == spread


def test_cli_uses_every_usable_core_by_default(capsys, monkeypatch):
    from symgrad.test_utils import model_check

    monkeypatch.setattr(model_check, "usable_cores", lambda: 3)
    assert cli.main(["check", "--example", "lenet", "--json", "--no-progress"]) == 0
    expected = "3 worker processes" if model_check.FORKS else None
    assert json.loads(capsys.readouterr().out)["executor"] == expected


@pytest.mark.parametrize("mode", ["fast", "sample", "full"])
def test_check_model_modes_on_a_pool_and_on_forked_workers(pool, mode):
    sym = model_zoo.load_example("mlp")
    rows = [check_model(sym, mode=mode, samples=8, executor=ex).rows for ex in (None, pool)]
    rows.append(check_model(sym, mode=mode, samples=8, workers=2).rows)
    assert rows[0] == rows[1] == rows[2]
    assert all(r["verdict"] in ("pass", "skip") for r in rows[1])


@pytest.mark.parametrize(
    "workers, executor, ctx, match",
    [
        (0, None, None, "workers must be a whole number"),
        (1.5, None, None, "workers must be a whole number"),
        (2, "pool", None, "not both"),
        (2, None, "gpu", "one process"),
    ],
)
def test_check_model_refuses_bad_workers(pool, workers, executor, ctx, match):
    sym = model_zoo.load_example("mlp")
    with pytest.raises(ValueError, match=match):
        check_model(sym, workers=workers, executor=pool if executor else None, ctx=sg.gpu(0) if ctx else None)


def test_cli_workers_must_be_positive(capsys):
    assert cli.main(["check", "--example", "mlp", "--workers", "0"]) == 2
    assert "--workers 0" in capsys.readouterr().err


def test_check_model_localises_and_attributes_on_a_pool_as_serially(pool):
    # a wrong node (tests/planted_network.py's planted_scaled, in a small conv net): the rows (bisected and
    # compared elements) and the faulty node from the pool are the serial run's
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import planted_network

    data = S.Variable("data")
    y = S.Convolution(data, kernel=(3, 3), num_filter=4, name="conv")
    y = S.Custom(S.BatchNorm(y, fix_gamma=False, name="bn"), op_type="planted_scaled", name="planted_fwd")
    y = S.FullyConnected(S.Activation(y, act_type="relu", name="relu"), num_hidden=3, name="fc")
    runs = [{"executor": None}, {"executor": pool}, {"workers": 2}]
    results = [
        check_model(y, shapes={"data": (2, 3, 8, 8)}, dtype="float64", raise_on_failure=False, **kw) for kw in runs
    ]
    assert results[0].rows == results[1].rows == results[2].rows and not results[0].ok
    assert (
        [vars(f) for f in results[0].faults]
        == [vars(f) for f in results[1].faults]
        == [vars(f) for f in results[2].faults]
    )
    assert [f.name for f in results[1].faults] == [planted_network.NODE]


def test_only_the_worst_failing_arguments_are_localised_serially_and_on_a_pool(pool):
    # a wrong op fails every argument upstream of it; localising each costs ~70 partial forwards (7 of them in
    # the planted ResNet-18): the LOCALISE_MAX worst are, the others say so, and the pool picks the same ones
    from symgrad.test_utils import model_check as mc

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import planted_network

    h = S.Variable("data")
    for i in range(3):
        h = S.FullyConnected(h, num_hidden=5, name=f"fc{i}")
    y = S.tanh(S.Custom(h, op_type="planted_scaled", name="planted_fwd"))
    runs = [
        check_model(y, shapes={"data": (2, 5)}, dtype="float64", raise_on_failure=False, executor=ex)
        for ex in (None, pool)
    ]
    assert runs[0].rows == runs[1].rows
    failed = runs[0].failed
    assert len(failed) == 7  # data and three weights and biases
    localised = [r["name"] for r in failed if r["method"].startswith("direction failed; bisected")]
    assert len(localised) == mc.LOCALISE_MAX
    assert all(
        "not localised element by element" in "; ".join(r["notes"]) for r in failed if r["name"] not in localised
    )
    assert [f.name for run in runs for f in run.faults] == [planted_network.NODE] * 2


def _die(_):
    os._exit(3)  # a worker killed mid-task (the OOM killer, a signal)


def test_a_worker_that_dies_is_reported_as_such(monkeypatch):
    from symgrad.test_utils import model_check as mc

    if not mc.FORKS:
        pytest.skip("forked workers are Linux's")  # elsewhere workers are spawned and rebuild the point
    monkeypatch.setattr(mc, "_forked_row", _die)
    with pytest.raises(mc.WorkerDied, match="workers=1"):
        check_model(model_zoo.load_example("mlp"), workers=2)
