"""Package-level API: ``symgrad.test_utils`` import forms, the public names, the issue's quick start."""

import subprocess
import sys

import numpy as np

import symgrad as sg


def test_symgrad_test_utils_imports_in_every_form(tmp_path):
    # a fresh interpreter, so the import machinery itself is exercised (not an already-imported module)
    code = (
        "import symgrad.test_utils as a\n"
        "from symgrad.test_utils import check_numeric_gradient\n"
        "import symgrad.test_utils.numeric as n\n"
        "from symgrad import test_utils as c\n"
        "import symgrad, sys\n"
        "assert a is c is symgrad.test_utils, (a, c)\n"
        "assert n.__name__ == 'symgrad.test_utils.numeric' and a.__spec__.name == 'symgrad.test_utils'\n"
        "assert check_numeric_gradient is a.check_numeric_gradient\n"
        "assert 'test_utils' not in sys.modules\n"
        "try:\n"
        "    import symgrad.test_utils.no_such_module\n"
        "except ModuleNotFoundError as e:\n"
        "    assert 'no_such_module' in str(e)\n"
        "else:\n"
        "    raise AssertionError('imported a module that does not exist')\n"
        "try:\n"
        "    import test_utils\n"
        "except ModuleNotFoundError:\n"
        "    pass\n"
        "else:\n"
        "    raise AssertionError('symgrad installed a top-level test_utils: ' + test_utils.__file__)\n"
        "print('ok')\n"
    )
    # run from an empty folder: the repository root (which holds the folder test_utils/) is not on sys.path
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok"


def test_public_names():
    for name in sg.__all__:
        assert getattr(sg, name) is not None, name
    assert issubclass(sg.SymgradError, ValueError) and sg.MXNetError is sg.SymgradError
    assert issubclass(sg.ParamError, TypeError) and issubclass(sg.ParamError, ValueError)
    assert sg.sym.Variable is sg.Variable and sg.sym.Group is sg.Group


def test_issue_quick_start():
    rng = np.random.default_rng(0)
    x = sg.sym.Variable("x")
    y = sg.sym.FullyConnected(x, num_hidden=4, name="fc")
    loss = sg.sym.MakeLoss(sg.sym.sum(sg.sym.square(y - 1.0)))
    exe = loss.simple_bind(sg.cpu(), grad_req={"x": "null", "fc_weight": "write", "fc_bias": "add"}, x=(8, 3))
    exe.arg_dict["x"][:] = rng.random((8, 3))
    exe.arg_dict["fc_weight"][:] = rng.standard_normal((4, 3))
    exe.arg_dict["fc_bias"][:] = rng.standard_normal(4)
    xv, w, b = (exe.arg_dict[k].astype(np.float64) for k in ("x", "fc_weight", "fc_bias"))
    g = 2 * (xv @ w.T + b - 1.0)  # d sum((x W^T + b - 1)^2) / d y
    for step in range(1, 4):
        exe.forward(is_train=True)
        exe.backward()
        assert isinstance(exe.grad_dict["fc_weight"], np.ndarray) and exe.grad_dict["x"] is None
        np.testing.assert_allclose(exe.grad_dict["fc_weight"], g.T @ xv, rtol=1e-5)
        np.testing.assert_allclose(exe.grad_dict["fc_bias"], step * g.sum(0), rtol=1e-5)  # accumulates


def test_parameter_sets_that_compare_equal_stay_distinct():
    # symbol creation remembers parsed parameter sets per op: values equal in Python (-0.0 == 0.0, 1 == 1.0,
    # True == 1) must still give their own parameters, attributes and results
    x = sg.sym.Variable("x")
    made = [x * -0.0, x * 0.0, x * 1, x * 1.0]
    assert [m.attr("scalar") for m in made] == ["-0.0", "0.0", "1", "1.0"]
    (neg,) = made[0].eval(x=np.array([2.0]))
    (pos,) = made[1].eval(x=np.array([2.0]))
    assert np.signbit(neg[0]) and not np.signbit(pos[0])
    a = sg.sym.sum(x, axis=1, keepdims=True)
    b = sg.sym.sum(x, axis=1, keepdims=1)
    assert a.attr("keepdims") == "True" and b.attr("keepdims") == "1"
