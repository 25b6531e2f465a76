"""The question symgrad was started from (``../shared/reference/004_*``): a PyTorch user's input gradient is
~10x the finite differences, "regardless of the step size". The input's gradient was never zeroed, so ten
training steps accumulated into it. Here the same loop in symgrad (grad_req 'add' on x, SGD on the weights)."""

import numpy as np
import pytest

import symgrad as sg
import symgrad.test_utils as tu

S = sg.sym
D, N, K = 4, 10, 2  # features, samples, classes


def _train(dtype, epochs=10, lr=1e-3):
    """The question's loop: forward, backward, an SGD step on the layer; x's gradient accumulates ('add')."""
    rng = np.random.default_rng(0)
    x, label = S.Variable("x"), S.Variable("label")
    net = S.SoftmaxOutput(S.FullyConnected(x, num_hidden=K, name="fc"), label, name="ce")
    exe = net.simple_bind(
        sg.cpu(),
        x=(N, D),
        label=(N,),
        type_dict={"x": dtype},
        grad_req={"x": "add", "fc_weight": "write", "fc_bias": "write", "label": "null"},
    )
    exe.arg_dict["x"][:] = rng.standard_normal((N, D))
    exe.arg_dict["label"][:] = rng.integers(0, K, N)
    exe.arg_dict["fc_weight"][:] = 0.5 * rng.standard_normal((K, D))
    exe.arg_dict["fc_bias"][:] = 0.0
    exe.grad_dict["x"][:] = 0.0
    for epoch in range(epochs):
        exe.forward(is_train=True)
        exe.backward()
        if epoch < epochs - 1:
            for name in ("fc_weight", "fc_bias"):
                exe.arg_dict[name][:] -= lr * exe.grad_dict[name]
    return exe


def _loss_executor(exe):
    """The cross-entropy SoftmaxOutput differentiates, written out, at the trained weights."""
    x, label = S.Variable("x"), S.Variable("label")
    loss = S.sum(-S.log(S.pick(S.softmax(S.FullyConnected(x, num_hidden=K, name="fc")), label)))
    return loss.bind(sg.cpu(), {k: exe.arg_dict[k].copy() for k in ("x", "label", "fc_weight", "fc_bias")})


def test_the_accumulated_input_gradient_is_named():
    exe = _train(np.float64)
    numeric = tu.numeric_grad(
        _loss_executor(exe), {"x": exe.arg_dict["x"].copy()}, eps=1e-4, dtype=np.float64, progress=False
    )["x"]
    with pytest.raises(tu.GradientCheckError) as info:
        tu.assert_almost_equal(exe.grad_dict["x"], numeric, names=("analytic", "numeric"))
    # before: "no simple pattern ... the ratio analytic/numeric varies from 9.23 to 10.6"
    assert "accumulated over 10 backward calls (grad_req 'add'" in info.value.diagnosis
    # one step (nothing accumulated) agrees
    once = _train(np.float64, epochs=1)
    np.testing.assert_allclose(
        once.grad_dict["x"],
        tu.numeric_grad(
            _loss_executor(once), {"x": once.arg_dict["x"].copy()}, eps=1e-4, dtype=np.float64, progress=False
        )["x"],
        rtol=1e-6,
    )


def test_the_float32_half_says_the_step_is_too_small():
    # the question's steps down to 1e-8 in float32: refused with the reason, not a misleading mismatch
    exe = _loss_executor(_train(np.float32))
    with pytest.raises(ValueError, match="too small for float32"):
        tu.numeric_grad(exe, {"x": exe.arg_dict["x"].copy()}, eps=1e-8, dtype=np.float32, progress=False)


def test_a_drifting_ratio_near_an_integer_is_not_claimed_below_three():
    # a ratio of 1.9 to 2.1 can be a wrong formula as well as two accumulated calls: no claim there
    from symgrad.test_utils.diagnose import diagnose

    e = np.random.default_rng(1).standard_normal(40)
    a = e * np.random.default_rng(2).uniform(1.9, 2.1, 40)
    assert "accumulated" not in (diagnose(a, e) or "")
