"""The random image augmentations (symgrad/ops/image.py): what they draw, that sg.random.seed fixes it, that
their gradients follow the draw, and that the numeric checkers refuse them. The deterministic image ops are
rows of tests/op_db_image.py."""

import numpy as np
import pytest

import symgrad as sg
from symgrad.test_utils import check_numeric_gradient

S = sg.sym
IMG = np.arange(24.0).reshape(2, 4, 3)


def _runs(sym, n, head=None):
    exe = sym.simple_bind(sg.cpu(), x=IMG.shape, type_dict={"x": np.float64})
    head = np.arange(IMG.size, dtype=np.float64).reshape(IMG.shape) + 1 if head is None else head
    for _ in range(n):
        (out,) = exe.forward(is_train=True, x=IMG)
        exe.backward(head)
        yield out.copy(), exe.grad_dict["x"].copy(), head


@pytest.mark.parametrize(("op", "axis"), [("_image_random_flip_left_right", 1), ("_image_random_flip_top_bottom", 0)])
def test_random_flip_flips_half_the_time_and_its_gradient_follows(op, axis):
    sg.random.seed(3)
    flips = 0
    for out, grad, head in _runs(getattr(S, op)(S.Variable("x")), 200):
        flipped = np.array_equal(out, np.flip(IMG, axis))
        assert flipped or np.array_equal(out, IMG)
        np.testing.assert_array_equal(grad, np.flip(head, axis) if flipped else head)
        flips += flipped
    assert 70 <= flips <= 130  # Binomial(200, 1/2): 6 standard deviations


def test_random_brightness_scales_by_one_drawn_factor_and_so_does_its_gradient():
    sg.random.seed(0)
    factors = []
    for out, grad, head in _runs(S._image_random_brightness(S.Variable("x"), min_factor=0.5, max_factor=1.5), 50):
        alpha = out[0, 0, 1] / IMG[0, 0, 1]
        np.testing.assert_allclose(out, alpha * IMG, rtol=1e-12)
        np.testing.assert_allclose(grad, alpha * head, rtol=1e-12)
        factors.append(alpha)
    assert 0.5 <= min(factors) and max(factors) < 1.5 and np.std(factors) > 0.2


def test_random_lighting_adds_a_drawn_offset_per_channel():
    sg.random.seed(1)
    offsets = []
    for out, grad, head in _runs(S._image_random_lighting(S.Variable("x"), alpha_std=0.1), 30):
        offset = (out - IMG)[0, 0]
        np.testing.assert_allclose(out - IMG, np.broadcast_to(offset, IMG.shape), atol=1e-12)
        np.testing.assert_array_equal(grad, head)
        offsets.append(offset)
    assert np.std(offsets, axis=0).min() > 0


def test_seed_fixes_the_draws():
    sym = S._image_random_brightness(S.Variable("x"), min_factor=0.0, max_factor=2.0)
    draws = []
    for _ in range(2):
        sg.random.seed(11)
        draws.append([out for out, _, _ in _runs(sym, 3)])
    for a, b in zip(*draws):
        np.testing.assert_array_equal(a, b)


def test_numeric_checkers_refuse_random_image_ops():
    with pytest.raises(ValueError, match="_image_random_flip_left_right"):
        check_numeric_gradient(S._image_random_flip_left_right(S.Variable("x")), {"x": IMG}, dtype=np.float64)


LUMA = np.array([0.299, 0.587, 0.114], np.float32).astype(np.float64)


@pytest.mark.parametrize("op", ["_image_random_contrast", "_image_random_saturation"])
def test_contrast_and_saturation_blend_with_luminance_and_differentiate_it(op):
    # min_factor == max_factor pins the drawn factor; the grey is the image's mean luminance (contrast) or each
    # pixel's (saturation: MXNet 1.9.1 sums only the blue term there, a bug symgrad does not copy)
    from symgrad.test_utils import check_symbolic_backward, check_symbolic_forward

    img = np.random.default_rng(0).uniform(0, 255, (2, 3, 3))
    head = np.random.default_rng(1).standard_normal(img.shape)
    alpha = float(np.float32(0.7))
    sym = getattr(S, op)(S.Variable("x"), min_factor=0.7, max_factor=0.7)
    grey = (img * LUMA).sum(-1, keepdims=True)
    if op == "_image_random_contrast":
        want, grad = alpha * img + (1 - alpha) * grey.mean(), alpha * head + (1 - alpha) * head.sum() / 6 * LUMA
    else:
        want = alpha * img + (1 - alpha) * grey
        grad = alpha * head + (1 - alpha) * head.sum(-1, keepdims=True) * LUMA
    check_symbolic_forward(sym, {"x": img}, [want], dtype=np.float64)
    grads = check_symbolic_backward(sym, {"x": img}, [head], {"x": grad}, dtype=np.float64)
    assert not np.allclose(grads["x"], alpha * head)  # the grey term's gradient is there
