"""Every checker on a ResNet basic block at 56x56 (``tests/resnet_block.py``): a correct block passes, a wrong
ReLU mask is caught. Chainer's ``check_backward`` steps ``eps=1e-3`` along a direction over all 12 500 inputs,
which crosses ReLU kinks: unpinned it failed the correct block by 3% (seed 0, float32 and float64); its
pinned reference (``decisions.pinned_symbol``) differentiates the forward's own pieces."""

import numpy as np
import pytest
import resnet_block as rb
from custom_unary import register_unary

import symgrad as sg
from symgrad.test_utils import GradientCheckError, check_numeric_gradient
from symgrad.test_utils.chainer_checks import check_backward
from symgrad.test_utils.torch_checks import gradcheck

S = sg.sym

DTYPES = pytest.mark.parametrize("dtype", [np.float32, np.float64])


@DTYPES
@pytest.mark.parametrize("seed", range(3))
def test_check_backward_passes_a_correct_block(seed, dtype):
    rng = np.random.default_rng(seed)
    xs = rb.inputs(rng, dtype)
    np.random.seed(seed)
    head = rng.standard_normal((1, rb.C, 56, 56)).astype(dtype)
    assert check_backward(rb.block, xs, head, progress=False) is None  # a failure raises GradientCheckError


@DTYPES
@pytest.mark.parametrize("seed", range(3))
def test_gradcheck_fast_mode_passes_a_correct_block(seed, dtype):
    np.random.seed(seed)
    assert gradcheck(rb.block, rb.inputs(np.random.default_rng(seed), dtype), fast_mode=True, progress=False)


@pytest.mark.slow
@DTYPES
@pytest.mark.parametrize("seed", range(2))
def test_check_numeric_gradient_passes_a_correct_block(seed, dtype):  # ~1 min: every element of 12 500
    np.random.seed(seed)
    values = dict(zip(rb.NAMES, rb.inputs(np.random.default_rng(seed), dtype)))
    res = check_numeric_gradient(rb.symbol(), values, dtype=dtype, progress=False)
    assert set(res) == set(rb.NAMES) and not any(res.excluded.values())  # every input checked, none left out


class _LateMask(sg.operator.CustomOp):
    """ReLU whose backward passes the gradient only where x > 0.3 (a mask taken from the wrong tensor)."""

    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], np.maximum(in_data[0], 0))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], out_grad[0] * (np.asarray(in_data[0]) > 0.3))


register_unary("block_late_mask", _LateMask)


def _late_mask_block(*args):
    return rb.block(*args, relu=lambda y: S.Custom(y, op_type="block_late_mask"))


@DTYPES
def test_a_wrong_relu_mask_in_the_block_is_caught_by_both_directional_checkers(dtype):
    rng = np.random.default_rng(0)
    xs = rb.inputs(rng, dtype)
    np.random.seed(0)
    with pytest.raises(GradientCheckError):
        check_backward(_late_mask_block, xs, rng.standard_normal((1, rb.C, 56, 56)).astype(dtype), progress=False)
    with pytest.raises(GradientCheckError):
        gradcheck(_late_mask_block, xs, fast_mode=True, progress=False)
