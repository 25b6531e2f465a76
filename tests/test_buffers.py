"""Every checker runs a graph's custom ops with grad_req 'add' on a random buffer and twice in a row
(``test_utils.buffers``), and names the buffer bug MXNet custom ops shipped with."""

import numpy as np
import pytest
from custom_unary import register_unary

import symgrad as sg
import symgrad.test_utils as tu

S = sg.sym


class _Scale(sg.operator.CustomOp):
    """y = 3x, with the backward written correctly or with one of the shipped buffer bugs."""

    def __init__(self, how):
        self.how, self.kept = how, None

    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], 3 * in_data[0])

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        g = 3 * out_grad[0]
        if self.how == "assign":
            self.assign(in_grad[0], req[0], g)
        elif self.how == "overwrite":  # '=' where req is 'add'
            in_grad[0][:] = g
        elif self.how == "stale":  # '+=' where req is 'write'
            in_grad[0][:] += g
        elif self.how == "kept":  # a gradient of its own, never reset between calls
            self.kept = g if self.kept is None else self.kept + g
            self.assign(in_grad[0], req[0], self.kept)


for _how in ("assign", "overwrite", "stale", "kept"):
    register_unary(f"buffers_{_how}", lambda how=_how: _Scale(how))

FOUND = {
    "overwrite": "ignores req='add'",
    "stale": "reads a stale buffer: it adds into a gradient buffer it should overwrite",
    "kept": "accumulates across backward calls",
}
X = np.random.default_rng(3).random((3, 4))


def _symbol(how):
    return S.Custom(S.Variable("x"), op_type=f"buffers_{how}", name="c")


CHECKERS = {
    "check_numeric_gradient": lambda how, dt: tu.check_numeric_gradient(
        _symbol(how), {"x": X}, dtype=dt, progress=False
    ),
    "check_symbolic_backward": lambda how, dt: tu.check_symbolic_backward(
        _symbol(how), {"x": X}, [np.ones((3, 4))], {"x": np.full((3, 4), 3.0)}, dtype=dt
    ),
    "check_backward": lambda how, dt: tu.check_backward(
        lambda x: S.Custom(x, op_type=f"buffers_{how}"), X.astype(dt), np.ones((3, 4), dt), progress=False
    ),
    "gradcheck": lambda how, dt: tu.gradcheck(
        lambda x: S.Custom(x, op_type=f"buffers_{how}"), (X.astype(dt),), progress=False
    ),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("checker", sorted(CHECKERS))
def test_a_custom_op_that_honours_req_passes_every_checker(checker, dtype):
    result = CHECKERS[checker]("assign", dtype)  # a failure raises GradientCheckError
    # each checker's own return on success: MXNet's the gradients, Chainer's None, PyTorch's True
    assert (
        result is None
        if checker == "check_backward"
        else result is True
        if checker == "gradcheck"
        else set(result) == {"x"}
    )


@pytest.mark.parametrize("how", sorted(FOUND))
@pytest.mark.parametrize("checker", sorted(CHECKERS))
def test_every_checker_names_the_buffer_bug(checker, how):
    with pytest.raises(tu.GradientCheckError) as info:
        CHECKERS[checker](how, np.float64)
    text = str(info.value)
    if checker == "gradcheck" and how in ("stale", "kept"):
        # PyTorch's own reentrancy check (backward twice, same buffers) sees these first
        assert "not reentrant" in text or FOUND[how] in text
    else:
        assert FOUND[how] in text, text


def test_the_probe_names_the_fitting_bug_in_the_error_facts():
    with pytest.raises(tu.GradientCheckError) as info:
        tu.check_numeric_gradient(_symbol("overwrite"), {"x": X}, dtype=np.float64, progress=False)
    assert info.value.grad_req == "add"
    assert "ignores req='add'" in info.value.buffer_bug


def test_graphs_without_custom_ops_are_not_probed(monkeypatch):
    from symgrad.test_utils import buffers

    calls = []
    monkeypatch.setattr(buffers, "_backward_twice", lambda *a: calls.append(a))
    tu.check_numeric_gradient(S.tanh(S.Variable("x")), {"x": X}, dtype=np.float64, progress=False)
    assert calls == []
