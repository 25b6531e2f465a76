"""Whole-model checks (``symgrad.test_utils.check_model`` and ``symgrad check``): no false alarm on correct real
networks, planted bugs caught with the faulty node named, progress to a file, SIGTERM's partial table, spreading.

The real networks are MXNet 1.9.1 exports of Gluon model-zoo nets (``tests/gluon_exports.py``: skipped without
MXNet's venv or the cache) and the zoo symbols committed in ``tests/fixtures/zoo``.
"""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import symgrad as sg
from symgrad import cli
from symgrad.test_utils import GradientCheckError, check_model, differencer
from symgrad.test_utils import decisions as dec
from symgrad.test_utils import model_check as mc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gluon_exports  # noqa: E402
import planted_network  # noqa: E402
from custom_unary import python_relu, register_unary  # noqa: E402

S = sg.sym
ZOO = os.path.join(HERE, "fixtures", "zoo")
PLANTED = os.path.join(HERE, "planted_network.py")


def _resnet18_export():
    sym_path, params_path, _ = gluon_exports.export_path("resnet18_v1")
    return sym_path, params_path


# -- the pinned reference ---------------------------------------------------------------------------------------


def test_pinned_reference_differentiates_the_forwards_piece_across_many_relus():
    # a bias moves every element of a ReLU's input: with inputs near 0, an unpinned difference crosses kinks
    x = S.Variable("x")
    y = S.Activation(S.FullyConnected(x, num_hidden=50, name="fc"), act_type="relu", name="act")
    rng = np.random.default_rng(3)
    values = {
        "x": rng.normal(size=(40, 30)) * 1e-3,
        "fc_weight": rng.normal(size=(50, 30)) * 1e-3,
        "fc_bias": rng.normal(size=50) * 1e-9,
    }
    exe = y.bind(sg.cpu(), {k: v.copy() for k, v in values.items()})
    record = dec.record_decisions(exe, is_train=True)
    pinned, how = dec.pinned_symbol(y, record)
    assert how.pinned == ["act"] and how.complete
    mask = (values["x"] @ values["fc_weight"].T + values["fc_bias"]) > 0  # independent: numpy
    head = rng.normal(size=(40, 50))
    h = 1e-6
    moved = lambda d: {**values, "fc_bias": values["fc_bias"] + d}
    f = lambda sym, d: float(np.sum(head * sym.bind(sg.cpu(), moved(d)).forward()[0]))
    numeric = (f(pinned, h) - f(pinned, -h)) / (2 * h)
    assert np.isclose(numeric, np.sum(head * mask), rtol=1e-6)  # d/db sum(head * relu) on the recorded mask
    unpinned = (f(y, h) - f(y, -h)) / (2 * h)
    assert not np.isclose(unpinned, np.sum(head * mask), rtol=1e-2)  # the kinks crossed: why pinning exists


# -- the Python API ---------------------------------------------------------------------------------------------


@pytest.mark.slow  # a real ResNet-18 export: about a minute
def test_check_model_passes_a_correct_real_network_and_reports_each_argument():
    sym_path, params_path = _resnet18_export()
    res = check_model(sym_path, params_path, shapes={"data": (1, 3, 64, 64)}, seed=1)
    assert res.ok and not res.faults and len(res.rows) == 63
    assert all(r["verdict"] == "pass" and r["method"].startswith("directional") for r in res.rows)
    assert len(res.pinning.pinned) == 19 and res.pinning.complete  # 17 relus, 1 max pool, ... every decision
    assert "every gradient passes: 63 passed, 0 failed" in str(res)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_zoo_nets_pass_in_every_mode(dtype):
    sym = sg.sym.load(os.path.join(ZOO, "resnet18_v2-symbol.json"))
    for mode in ("fast", "sample"):
        res = check_model(sym, shapes={"data": (1, 3, 64, 64)}, dtype=dtype, mode=mode, samples=4, seed=2)
        assert res.ok, str(res)


@pytest.mark.slow  # a real ResNet-18 export: about a minute
@pytest.mark.parametrize("variant", planted_network.BUGGY)
def test_planted_bug_in_resnet18_is_caught_and_its_node_named(variant):
    sym_path, params_path = _resnet18_export()
    with open(sym_path) as f:
        sym = planted_network.spliced_symbol(f.read(), variant)
    with pytest.raises(GradientCheckError) as info:
        check_model(sym, params_path, shapes={"data": (1, 3, 64, 64)}, seed=4)
    res = info.value.result
    assert [(f.name, f.op, f.op_type) for f in res.faults] == [("planted_fwd", "Custom", variant)]
    assert f"node {res.faults[0].position} 'planted_fwd' (Custom op_type '{variant}')" in str(info.value)
    assert res.pinning.opaque == ["planted_fwd"]  # the one node the numeric side cannot pin
    # some arguments upstream of the planted op fail; none downstream of it does
    upstream = set(sym.get_internals()["planted_fwd_output"].list_arguments())
    failed = {r["name"] for r in res.failed}
    assert failed and failed <= upstream


@pytest.mark.slow  # a real ResNet-18 export: about a minute
def test_planted_twin_passes():
    sym_path, params_path = _resnet18_export()
    with open(sym_path) as f:
        sym = planted_network.spliced_symbol(f.read(), "planted_ok")
    res = check_model(sym, params_path, shapes={"data": (1, 3, 64, 64)}, seed=4)
    assert res.ok and not res.faults


@pytest.mark.slow  # a real ResNet-18 export: about a minute
def test_planted_scale_is_diagnosed_on_the_argument_and_the_node():
    sym_path, params_path = _resnet18_export()
    with open(sym_path) as f:
        sym = planted_network.spliced_symbol(f.read(), "planted_scaled")
    res = check_model(sym, params_path, shapes={"data": (1, 3, 64, 64)}, seed=5, raise_on_failure=False)
    assert not res.ok
    assert "1.01 x numeric" in res.faults[0].diagnosis
    gamma = next(r for r in res.rows if r["name"] == "resnetv10_stage1_batchnorm0_gamma")
    assert gamma["verdict"] == "FAIL" and "1.01 x numeric" in gamma["diagnosis"]
    assert gamma["worst"]  # the worst elements, from the bisection's leaf and a sample


def test_bisection_finds_a_single_wrong_element():
    # one element of a 4096-element weight gets a wrong gradient: the directions catch it, the bisection finds it
    class _OneWrong(sg.operator.CustomOp):
        def forward(self, is_train, req, in_data, out_data, aux):
            self.assign(out_data[0], req[0], in_data[0] * 1.0)

        def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
            g = np.array(out_grad[0], copy=True)
            g.reshape(-1)[1234] *= 3.0
            self.assign(in_grad[0], req[0], g)

    register_unary("mc_one_wrong", _OneWrong)
    w = S.Variable("w")
    y = S.tanh(S.Custom(w, op_type="mc_one_wrong", name="wrong"))
    res = check_model(y, {"w": np.random.default_rng(0).normal(size=(64, 64))}, dtype="float64", raise_on_failure=False)
    row = res.rows[0]
    assert row["verdict"] == "FAIL"
    assert row["worst"][0][0] == list(np.unravel_index(1234, (64, 64)))
    assert [f.name for f in res.faults] == ["wrong"]


def test_the_failure_report_names_check_models_seed():
    # check_model draws its values and directions from ``seed``: the last line says so (it used to say "no random
    # seed involved")
    data, values, _ = _steep()
    y = S.Custom(S.FullyConnected(data, num_hidden=3, name="fc"), op_type="mc_steep_scaled", name="steep")
    with pytest.raises(GradientCheckError) as info:
        check_model(y, values, dtype="float64", seed=7, locate=False)
    last = str(info.value).splitlines()[-1].strip()
    assert last.startswith("seed 7 ") and info.value.seed == 7, last


def _steep(scale=1e4, seed=0):
    # tanh(1e4 (W x + b)) with W x + b within 1e-5 of 0: the objective's curvature along any argument is so large
    # that the central difference at the default step errs by up to 70x the float64 tolerance (measured before
    # the step refinement: every argument FAIL in float32 and float64)
    data = S.Variable("data")
    rng = np.random.default_rng(seed)
    x, w = rng.normal(size=(2, 4)), rng.normal(size=(3, 4))
    values = {"data": x, "fc_weight": w, "fc_bias": -(x[0] @ w.T) + 1e-5 * rng.normal(size=3)}
    return data, values, scale


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_steep_correct_model_passes_by_refining_the_step(dtype, seed):
    data, values, scale = _steep(seed=seed)
    y = S.tanh(S.FullyConnected(data, num_hidden=3, name="fc") * scale)
    res = check_model(y, values, dtype=dtype, seed=seed, raise_on_failure=False, locate=False)
    assert [r["verdict"] for r in res.rows] == ["pass"] * 3, res.lines()


class _SteepTanh(sg.operator.CustomOp):
    """tanh(1e4 x) with its derivative 1e4 (1 - y^2) taken 1% too large."""

    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], np.tanh(1e4 * in_data[0]))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        y = np.asarray(out_data[0])
        self.assign(in_grad[0], req[0], 1.01 * 1e4 * (1.0 - y * y) * out_grad[0])


register_unary("mc_steep_scaled", _SteepTanh)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_wrong_gradient_on_a_steep_model_settles_and_fails(dtype):
    # the refined difference settles at once on the wrong rule's error (1% of a gradient of ~1e4)
    data, values, _ = _steep()
    y = S.Custom(S.FullyConnected(data, num_hidden=3, name="fc"), op_type="mc_steep_scaled", name="steep")
    res = check_model(y, values, dtype=dtype, raise_on_failure=False)
    assert [r["verdict"] for r in res.rows] == ["FAIL"] * 3, res.lines()
    assert [f.name for f in res.faults] == ["steep"]


def test_settle_gives_no_verdict_when_rounding_outgrows_the_tolerance_first():
    # tanh(1e6 x) near 0 with a tolerance of 1e-9: the difference is still far from settled when its rounding
    # passes a quarter of the tolerance, so the projection is unsettled (no verdict), not a failure
    x = S.Variable("x")
    y = S.sum(S.tanh(x * 1e6))
    prep = mc.prepare_model(y, {"x": np.array([1e-7, -2e-7, 3e-7])})
    check = mc._ModelCheck(prep, mc._rows(prep, "write"), "float64", sg.cpu(), "fast", 16, 0, 2, False, None, True)
    check.start()
    proj = check.point.settle({"x": np.ones(3)}, 1e-3, 0.0, 1e6, 1e-9)
    assert not proj.settled and proj.step < 1e-3


def test_an_unsettled_argument_is_reported_without_a_verdict(monkeypatch):
    # one refinement only: the steep model's differences cannot settle, and the rows say so instead of FAIL
    monkeypatch.setattr(mc, "MAX_REFINE", 1)
    data, values, scale = _steep()
    y = S.tanh(S.FullyConnected(data, num_hidden=3, name="fc") * scale)
    with pytest.warns(RuntimeWarning, match="unsettled"):
        res = check_model(y, values, dtype="float64", locate=False)
    verdicts = [r["verdict"] for r in res.rows]
    assert "unsettled" in verdicts and "FAIL" not in verdicts and res.ok
    row = next(r for r in res.rows if r["verdict"] == "unsettled")
    assert "did not settle" in row["diagnosis"] and "unsettled (no verdict)" in res.summary()
    assert res.summary().startswith("no gradient fails: ")  # not "every gradient passes": one has no verdict


@pytest.mark.parametrize("mode", ["fast", "sample"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_float32_rounding_beyond_the_measured_cap_is_confirmed_by_emulation(mode, seed):
    # inputs 100 +- 0.01 through a dense layer into a BatchNorm: the float32 forward loses most digits of the
    # batch's variation, so fc_weight's float32 gradient differs from float64's by far more than MEASURED_CAP of
    # the largest gradient (measured before the emulated confirmation: 7 of these 8 runs FAIL fc_weight)
    y = S.FullyConnected(
        S.tanh(S.BatchNorm(S.FullyConnected(S.Variable("data"), num_hidden=6, name="fc"), fix_gamma=False, name="bn")),
        num_hidden=2,
        name="head",
    )
    x = 100 + 0.01 * np.random.default_rng(seed).normal(size=(16, 5))
    res = check_model(y, {"data": x}, dtype="float32", seed=seed, mode=mode, raise_on_failure=False, locate=False)
    assert res.ok, res.lines()


@pytest.mark.slow
def test_mobilenetv2_float32_at_64_passes_where_two_steps_agreed_by_coincidence():
    # float32, seed 1: conv0_weight's aligned difference goes 1.45e6, 1.22e6, 1.79e6, 1.867e6, 1.872e6 as the
    # step shrinks (analytic 1.95e6, float64 backward 1.873e6): the first two agree within the float32 tolerance
    # by chance, and judging there failed a correct model; a failure must now settle twice in a row
    sym_path, params_path, _ = gluon_exports.export_path("mobilenetv2_1.0")
    res = check_model(
        sym_path, params_path, shapes={"data": (1, 3, 64, 64)}, seed=1, raise_on_failure=False, locate=False
    )
    assert res.ok, res.lines()


def test_a_passing_argument_costs_one_forward_difference_per_direction(monkeypatch):
    # the one-sided first try (one partial forward) stands for a correct gradient; its value agrees with the
    # central difference to the curvature term of FORWARD_STEP
    calls = []
    original = differencer.directional
    monkeypatch.setattr(differencer, "directional", lambda *a, **k: calls.append("at_base" in k) or original(*a, **k))
    y = S.FullyConnected(S.tanh(S.FullyConnected(S.Variable("x"), num_hidden=6, name="fc1")), num_hidden=2, name="fc2")
    prep = mc.prepare_model(y, shapes={"x": (4, 5)})
    check = mc._ModelCheck(prep, mc._rows(prep, "write"), "float64", sg.cpu(), "fast", 16, 0, 2, False, None, True)
    check.start()
    r, random_signs = check.point.direction("fc1_weight", 1)
    quick = check.point.project({"fc1_weight": r}, random_signs)
    central = check.point.project({"fc1_weight": r}, random_signs, one_sided=False)
    assert calls == [True, False] and quick.ok and central.ok
    assert abs(quick.numeric - central.numeric) <= 1e-5 * abs(central.numeric)
    assert check_model(y, shapes={"x": (4, 5)}, dtype="float64").ok and calls.count(False) == 1  # none more


def test_grad_req_null_and_add_rows():
    x = S.Variable("x")
    y = S.FullyConnected(x, num_hidden=3, name="fc")
    rng = np.random.default_rng(1)
    res = check_model(y, {"x": rng.normal(size=(4, 5))}, grad_req={"x": "null", "fc_bias": "add"}, seed=3)
    by = {r["name"]: r for r in res.rows}
    assert by["x"]["method"].startswith("buffer unchanged") and by["x"]["verdict"] == "pass"
    assert by["fc_bias"]["grad_req"] == "add" and by["fc_bias"]["verdict"] == "pass"


def test_bad_inputs_are_named():
    x = S.Variable("x")
    with pytest.raises(ValueError, match="mode must be one of"):
        check_model(S.tanh(x), shapes={"x": (2,)}, mode="quick")
    with pytest.raises(ValueError, match="'nope' is not an input"):
        check_model(S.tanh(x), shapes={"nope": (2,)})
    with pytest.raises(ValueError, match="grad_req: 'y' is not an argument"):
        check_model(S.tanh(x), shapes={"x": (2,)}, grad_req={"y": "null"})
    with pytest.raises(TypeError, match="model must be a Symbol"):
        check_model(42)


# -- the command ------------------------------------------------------------------------------------------------


def _symgrad(*argv, **kw):
    return subprocess.run([sys.executable, "-m", "symgrad", *map(str, argv)], capture_output=True, text=True, **kw)


@pytest.mark.slow  # a real ResNet-18 export: about a minute
def test_cli_checks_a_custom_op_model_with_import(tmp_path):
    sym_path, params_path = _resnet18_export()
    spliced = tmp_path / "planted-symbol.json"
    with open(sym_path) as f:
        spliced.write_text(planted_network.splice(f.read(), "planted_at_output"))
    done = _symgrad(
        "check", spliced, "--params", params_path, "--shape", "data=1,3,64,64", "--import", PLANTED, "--json"
    )
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    assert [f["name"] for f in doc["faulty_nodes"]] == ["planted_fwd"]
    assert doc["opaque_nodes"] == ["planted_fwd"]
    # without --import the Custom op is unknown: a usage error naming it (exit 2)
    done = _symgrad("check", spliced, "--params", params_path, "--shape", "data=1,3,64,64")
    assert done.returncode == 2 and "planted_at_output" in done.stderr


def test_cli_unregistered_custom_op_points_at_import(tmp_path):
    # a model file with a Custom node whose op_type nothing registered: exit 2, the op named, --import suggested
    doc = json.loads(S.Custom(S.Variable("x"), op_type="mc_steep_scaled", name="c").tojson())
    doc["nodes"][1]["attrs"]["op_type"] = "never_registered_xyz"
    path = tmp_path / "m-symbol.json"
    path.write_text(json.dumps(doc))
    done = _symgrad("check", path, "--shape", "x=2,3")
    assert done.returncode == 2
    assert "'never_registered_xyz' is not registered" in done.stderr and "--import" in done.stderr, done.stderr


def test_cli_import_errors_are_usage_errors(capsys):
    assert cli.main(["check", "--example", "lenet", "--import", "no_such_module_xyz"]) == 2
    assert "--import no_such_module_xyz" in capsys.readouterr().err
    assert cli.main(["info", "--example", "lenet", "--import", "/nonexistent/file.py"]) == 2


def test_progress_to_a_file_is_lines_with_rate_and_eta(tmp_path, monkeypatch):
    monkeypatch.setattr(differencer, "PROGRESS_EVERY", 0.0)
    log = tmp_path / "progress.txt"
    with open(log, "w") as err:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "import symgrad.test_utils.differencer as m; m.PROGRESS_EVERY = 0;"
                "from symgrad import cli; raise SystemExit(cli.main(['check', '--example', 'lenet', "
                "'--progress']))",
            ],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    assert done.returncode == 0
    lines = log.read_text().splitlines()
    assert "\r" not in log.read_text()
    counted = [ln for ln in lines if " checked, " in ln]
    assert counted and counted[-1].startswith("symgrad check: 18/18 checked")  # 9 arguments x 2 directions
    assert all("/s, " in ln and " left" in ln for ln in counted)


@pytest.mark.parametrize("workers", ["1", "2"])  # this process alone, and sharing with forked workers
def test_sigterm_prints_the_partial_table_and_exits_143(tmp_path, workers):
    sym = sg.sym.load(os.path.join(ZOO, "resnet18_v1-symbol.json"))
    path = tmp_path / "net-symbol.json"
    sym.save(str(path))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "symgrad",
            "check",
            str(path),
            "--shape",
            "data=1,3,64,64",
            "--mode",
            "sample",
            "--samples",
            "4",  # a unit in seconds (the default 256 took a minute before the first progress line), many left
            "--progress",
            "--workers",
            workers,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    seen = ""
    while time.time() < deadline:  # wait until some argument is checked (a progress line), then stop it
        line = proc.stderr.readline()
        seen += line
        if " checked, " in line:
            break
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "PARTIAL (SIGTERM)" in out
    assert "not checked" in out and " pass" in out


def test_a_check_frees_its_executors_when_it_returns(monkeypatch):
    # the executors and plans hold reference cycles: before, each check's arrays (every parameter copy) lived on
    # until a full gc -- +560 MB per ResNet-18 check in a loop, VGG-11 (8.5 GB a check) OOM-killed on the third
    import gc
    import weakref

    points = []
    start = mc._ModelCheck.start

    def spy(self):
        start(self)
        points.append(weakref.ref(self.point))

    monkeypatch.setattr(mc._ModelCheck, "start", spy)
    x = S.Variable("x")
    y = S.tanh(S.FullyConnected(x, num_hidden=4, name="fc"))
    gc.disable()
    try:
        assert check_model(y, shapes={"x": (3, 5)}, dtype="float64").ok
        assert points and points[0]() is None
    finally:
        gc.enable()


@pytest.mark.parametrize("variant", ["planted_ok", "planted_scaled", "planted_sign"])
def test_the_float64_second_opinion_clears_a_correct_rule_and_never_a_wrong_one(variant):
    # a float32 element mismatch within 4x its tolerance is left out only where the rule holds in float64 on
    # float64's own decisions (a wrong rule is wrong there too); a float64 check never asks
    from symgrad.test_utils import model_check as mc

    y = sg.sym.Convolution(sg.sym.Variable("data"), kernel=(3, 3), num_filter=4, name="conv")
    y = sg.sym.Custom(sg.sym.BatchNorm(y, fix_gamma=False, name="bn"), op_type=variant, name=planted_network.NODE)
    y = sg.sym.FullyConnected(sg.sym.Activation(y, act_type="relu", name="relu"), num_hidden=3, name="fc")
    prep = mc.prepare_model(y, None, {"data": (2, 3, 8, 8)}, 0)
    check = mc._ModelCheck(prep, mc._rows(prep, "write"), "float32", sg.cpu(), "sample", 16, 0, 2, False, None, True)
    check.start()
    indices = [(0, 0, 0, 0), (1, 2, 1, 1), (3, 1, 2, 0), (2, 0, 1, 2)]
    agrees = check.point.float64_agrees("conv_weight", indices)
    assert agrees.all() if variant == "planted_ok" else not agrees.any()
    bad, err, allowed = np.ones(4, bool), np.full(4, 2.0), np.ones(4)
    crossed, imprecise = mc._float64_second_opinion(check.point, "conv_weight", indices, bad, err, allowed)
    assert crossed.tolist() == agrees.tolist() and not imprecise.any()
    # beyond ROUNDING_EXPLAINS x the tolerance: no verdict where the rule holds in float64, FAIL where it does not
    crossed, imprecise = mc._float64_second_opinion(check.point, "conv_weight", indices, bad, np.full(4, 5.0), allowed)
    assert not crossed.any() and imprecise.tolist() == agrees.tolist()


# -- an opaque op on exact ties: judged at a point moved off them ------------------------------------------------


register_unary("mc_python_relu", python_relu())
register_unary("mc_python_relu_1pct", python_relu(1.01))


def _zero_border_net(op_type):
    """A zero-biased convolution over an image that is 0 but for its centre, a Python relu, max pooling, a dense
    layer: the convolution's outputs over the border are exactly 0, so moving one border pixel moves several of
    the relu's units off their kink together -- to either side, by the signs of the weights."""
    d = S.Variable("data")
    h = S.Custom(S.Convolution(d, kernel=(3, 3), num_filter=4, pad=(1, 1), name="c1"), op_type=op_type, name="r")
    net = S.FullyConnected(S.Pooling(h, kernel=(2, 2), stride=(2, 2), pool_type="max"), num_hidden=3, name="fc")
    rng = np.random.default_rng(0)
    x = np.zeros((1, 2, 8, 8))
    x[:, :, 2:6, 2:6] = rng.standard_normal((1, 2, 4, 4))
    args = {
        "data": x,
        "c1_weight": rng.standard_normal((4, 2, 3, 3)),
        "c1_bias": np.zeros(4),
        "fc_weight": rng.standard_normal((3, 64)),
        "fc_bias": np.zeros(3),
    }
    return net, args


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", ["fast", "sample"])
def test_a_correct_python_relu_on_exact_ties_passes_at_a_point_moved_off_them(mode, dtype):
    """At the given point the one-sided derivatives of a border pixel need not bracket the backward's value
    (relu'(0) = 0 at every unit), so no difference can judge it: before, the check failed 'data' and 'c1_bias'
    and named the correct relu the faulty node. Now it is judged at a point off the ties, and says so."""
    net, args = _zero_border_net("mc_python_relu")
    given = {k: v.copy() for k, v in args.items()}
    result = check_model(net, args, dtype=dtype, mode=mode, seed=0)
    assert result.ok and not result.faults
    moved = result.header["moved_off_ties"]
    assert moved["nodes"] == ["r"] and "data" in moved["failed_at_given_point"]
    assert "checked at a point moved off exact ties" in str(result)
    assert result.to_dict()["moved_off_ties"]["nodes"] == ["r"]
    for k, v in given.items():  # the user's arrays are not the ones moved
        np.testing.assert_array_equal(args[k], v)


def test_a_wrong_python_relu_on_exact_ties_is_caught_and_named_at_the_moved_point():
    net, args = _zero_border_net("mc_python_relu_1pct")
    with pytest.raises(GradientCheckError) as info:
        check_model(net, args, dtype="float32", seed=0)
    result = info.value.result
    assert result.header["moved_off_ties"]["nodes"] == ["r"]
    assert [f.name for f in result.faults] == ["r"] and "1.01" in str(result.faults[0].diagnosis)


def test_a_failure_away_from_ties_is_not_checked_twice():
    """A generic point (random data, nonzero biases) has no exact ties: a failure is reported as found."""
    net, args = _zero_border_net("mc_python_relu_1pct")
    rng = np.random.default_rng(1)
    args = {k: v + 0.1 * rng.standard_normal(v.shape) for k, v in args.items()}
    result = check_model(net, args, dtype="float64", seed=0, raise_on_failure=False)
    assert not result.ok and "moved_off_ties" not in result.header
    assert [f.name for f in result.faults] == ["r"]


def test_the_html_report_says_the_point_was_moved_off_ties():
    net, args = _zero_border_net("mc_python_relu")
    page = check_model(net, args, dtype="float64", seed=0).to_html()
    assert "checked at a point moved off exact ties" in page and "&#x27;r&#x27;" in page
