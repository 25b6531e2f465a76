"""Vision operators: bad input, MXNet interface details (hidden outputs, parameter order, input names),
adjoint identities and second-order behaviour. The generic checks are the rows of op_db_vision.py."""

import numpy as np
import pytest
from op_db_vision import ref_bilinear_sampler, ref_correlation, ref_im2col, sample_grid
from op_info import bind_grads

import symgrad as sg
from symgrad.base import ParamError, ShapeError, SymgradError
from symgrad.test_utils import check_numeric_gradient

S = sg.sym


def _forward(sym, **arrays):
    exe = sym.bind(sg.cpu(), {n: arrays[n] for n in sym.list_arguments()})
    return exe.forward()


# -- MXNet interface: inputs, visible outputs, parameter order ----------------------------------------------


def test_hidden_outputs_are_not_visible():
    a, b = S.Variable("a"), S.Variable("b")
    assert S.GridGenerator(a, transform_type="warp", name="gg").list_outputs() == ["gg_output"]
    assert S.BilinearSampler(a, b, name="bs").list_outputs() == ["bs_output"]
    st = S.SpatialTransformer(a, b, target_shape=(2, 2), transform_type="affine", sampler_type="bilinear", name="st")
    assert st.list_outputs() == ["st_output"]
    assert st.list_arguments() == ["a", "b"]
    assert S.Correlation(a, b, name="c").list_outputs() == ["c_output"]


def test_required_enum_parameters_as_mxnet():
    # MXNet declares transform_type (GridGenerator, SpatialTransformer) and sampler_type without defaults
    with pytest.raises(ParamError, match=r"transform_type"):
        S.GridGenerator(S.Variable("a"), target_shape=(2, 2))
    with pytest.raises(ParamError, match=r"sampler_type"):
        S.SpatialTransformer(S.Variable("a"), S.Variable("b"), target_shape=(2, 2), transform_type="affine")
    with pytest.raises(ParamError, match=r"'transform_type' must be one of \['affine'\]"):
        S.SpatialTransformer(
            S.Variable("a"), S.Variable("b"), target_shape=(2, 2), transform_type="warp", sampler_type="bilinear"
        )


def test_correlation_positional_parameters_follow_mxnet_order():
    # kernel_size, max_displacement, stride1, stride2, pad_size, is_multiply
    a, b = S.Variable("a"), S.Variable("b")
    c = S.Correlation(a, b, 3, 2, 1, 2, 2)
    p = c._outputs[0][0].params
    assert (p["kernel_size"], p["max_displacement"], p["stride1"], p["stride2"], p["pad_size"]) == (3, 2, 1, 2, 2)


def test_bilinear_resize_like_mode_takes_a_like_input_with_zero_gradient():
    x, like = S.Variable("x"), S.Variable("like")
    r = S._contrib_BilinearResize2D(x, like, mode="like")
    assert r.list_arguments() == ["x", "like"]
    assert S._contrib_BilinearResize2D(x, height=2, width=3).list_arguments() == ["x"]
    rng = np.random.default_rng(0)
    xv, lv = rng.standard_normal((1, 2, 3, 3)), rng.standard_normal((1, 1, 4, 5))
    (out,) = _forward(r, x=xv, like=lv)
    assert out.shape == (1, 2, 4, 5)
    g = bind_grads(r, rng.standard_normal(out.shape), x=xv, like=lv)
    assert not g["like"].any()


def test_contrib_names_are_reachable():
    assert S._contrib_DeformableConvolution is not None
    assert S._contrib_AdaptiveAvgPooling2D is not None


# -- bad input ---------------------------------------------------------------------------------------------


def test_grid_generator_bad_shapes():
    a = S.Variable("a")
    with pytest.raises(ShapeError, match=r"GridGenerator 'g1'.*\(2, 5\).*\(batch, 6\)"):
        S.GridGenerator(a, transform_type="affine", target_shape=(2, 2), name="g1").infer_shape(a=(2, 5))
    with pytest.raises(ShapeError, match=r"GridGenerator 'g2'.*target_shape.*\(0, 0\)"):
        S.GridGenerator(a, transform_type="affine", name="g2").infer_shape(a=(2, 6))
    with pytest.raises(ShapeError, match=r"GridGenerator 'g3'.*\(1, 3, 2, 2\).*\(batch, 2, H, W\)"):
        S.GridGenerator(a, transform_type="warp", name="g3").infer_shape(a=(1, 3, 2, 2))


def test_bilinear_sampler_bad_shapes():
    d, g = S.Variable("d"), S.Variable("g")
    s = S.BilinearSampler(d, g, name="bs1")
    with pytest.raises(ShapeError, match=r"BilinearSampler 'bs1'.*'grid'.*\(1, 3, 2, 2\).*axis 1 must be 2"):
        s.infer_shape(d=(1, 2, 3, 3), g=(1, 3, 2, 2))
    with pytest.raises(ShapeError, match=r"BilinearSampler 'bs1'.*same batch size"):
        s.infer_shape(d=(2, 2, 3, 3), g=(1, 2, 2, 2))
    with pytest.raises(ShapeError, match=r"BilinearSampler 'bs1'.*'data'.*\(2, 3, 3\).*4-d"):
        s.infer_shape(d=(2, 3, 3), g=(2, 2, 2, 2))


def test_correlation_bad_input():
    a, b = S.Variable("a"), S.Variable("b")
    with pytest.raises(ParamError, match=r"Correlation 'c1'.*'kernel_size' must be odd, got 2"):
        S.Correlation(a, b, kernel_size=2, name="c1")
    c = S.Correlation(a, b, name="c2")
    with pytest.raises(ShapeError, match=r"Correlation 'c2'.*'data1' \(1, 2, 4, 4\) and 'data2' \(1, 2, 4, 5\)"):
        c.infer_shape(a=(1, 2, 4, 4), b=(1, 2, 4, 5))
    big = S.Correlation(a, b, max_displacement=3, name="c3")
    with pytest.raises(ShapeError, match=r"Correlation 'c3'.*do not fit"):
        big.infer_shape(a=(1, 2, 4, 4), b=(1, 2, 4, 4))


def test_im2col_col2im_bad_input():
    x = S.Variable("x")
    with pytest.raises(ParamError, match=r"im2col 'i1'.*'stride'=\(1,\).*kernel=\(2, 2\)"):
        S.im2col(x, kernel=(2, 2), stride=(1,), name="i1")
    with pytest.raises(ShapeError, match=r"im2col 'i2'.*\(1, 2, 4\).*needs a 4-d input"):
        S.im2col(x, kernel=(2, 2), name="i2").infer_shape(x=(1, 2, 4))
    c = S.col2im(x, output_size=(3, 3), kernel=(2, 2), name="c1")
    with pytest.raises(ShapeError, match=r"col2im 'c1'.*5 blocks.*gives 4"):
        c.infer_shape(x=(1, 8, 5))
    with pytest.raises(ShapeError, match=r"col2im 'c1'.*axis 1 \(6\).*prod\(kernel\)=4"):
        c.infer_shape(x=(1, 6, 4))
    with pytest.raises(ParamError, match=r"col2im 'c2'.*'output_size'=\(3,\)"):
        S.col2im(x, output_size=(3,), kernel=(2, 2), name="c2")


def test_adaptive_and_resize_bad_input():
    x = S.Variable("x")
    with pytest.raises(ShapeError, match=r"_contrib_AdaptiveAvgPooling2D 'a1'.*\(1, 2, 3\).*4-d"):
        S._contrib_AdaptiveAvgPooling2D(x, output_size=2, name="a1").infer_shape(x=(1, 2, 3))
    with pytest.raises(ParamError, match=r"'odd_scale' needs both 'scale_height' and 'scale_width'"):
        S._contrib_BilinearResize2D(x, mode="odd_scale", scale_height=2.0)
    with pytest.raises(ParamError, match=r"'mode' must be one of"):
        S._contrib_BilinearResize2D(x, mode="bicubic")


def test_deformable_convolution_bad_input():
    d, o, w = S.Variable("d"), S.Variable("o"), S.Variable("w")
    with pytest.raises(ParamError, match=r"'kernel' must be \(h, w\).*got \(3,\)"):
        S._contrib_DeformableConvolution(d, o, w, kernel=(3,), num_filter=2, no_bias=True)
    c = S._contrib_DeformableConvolution(d, o, w, kernel=(2, 2), num_filter=2, no_bias=True, name="dc")
    with pytest.raises(
        ShapeError,
        match=r"DeformableConvolution 'dc'.*'offset' has shape \(1, 4, 3, 3\), expected "
        r"\(1, 8, 3, 3\)",
    ):
        c.infer_shape(d=(1, 2, 4, 4), o=(1, 4, 3, 3))
    dg = S._contrib_DeformableConvolution(
        d, o, w, kernel=(2, 2), num_filter=2, num_deformable_group=3, no_bias=True, name="dg"
    )
    with pytest.raises(ShapeError, match=r"'dg'.*num_deformable_group=3 must divide the 2 input channels"):
        dg.infer_shape(d=(1, 2, 4, 4))
    with pytest.raises(ParamError, match=r"'layout' must be one of \['NCW', 'NCHW', 'NCDHW'\], got 'NHWC'"):
        S._contrib_DeformableConvolution(d, o, w, kernel=(2, 2), num_filter=2, layout="NHWC")
    with pytest.raises(ParamError, match=r"layout='NCW' does not fit a 2-d kernel"):
        S._contrib_DeformableConvolution(d, o, w, kernel=(2, 2), num_filter=2, layout="NCW")


def test_inputs_are_not_modified():
    rng = np.random.default_rng(3)
    d, g = rng.standard_normal((1, 2, 3, 4)), sample_grid(1, 3, 4, 2, 2)(rng)
    d0, g0 = d.copy(), g.copy()
    s = S.BilinearSampler(S.Variable("d"), S.Variable("g"))
    bind_grads(s, rng.standard_normal((1, 2, 2, 2)), d=d, g=g)
    assert np.array_equal(d, d0) and np.array_equal(g, g0)


# -- semantics -----------------------------------------------------------------------------------------------


def test_im2col_and_col2im_are_adjoint():
    rng = np.random.default_rng(1)
    p = dict(kernel=(2, 3), stride=(2, 1), dilate=(1, 2), pad=(1, 1))
    x = rng.standard_normal((2, 3, 4, 6))
    (cols,) = _forward(S.im2col(S.Variable("x"), **p), x=x)
    c = rng.standard_normal(cols.shape)
    (img,) = _forward(S.col2im(S.Variable("c"), output_size=(4, 6), **p), c=c)
    np.testing.assert_allclose((cols * c).sum(), (img * x).sum(), rtol=1e-12)
    np.testing.assert_allclose(cols, ref_im2col(x, (2, 3), (2, 1), (1, 2), (1, 1)), rtol=1e-12)


def test_im2col_matmul_is_convolution():
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((2, 3, 5, 4)), rng.standard_normal((4, 3, 3, 2))
    p = dict(kernel=(3, 2), stride=(2, 1), dilate=(1, 1), pad=(1, 0))
    (cols,) = _forward(S.im2col(S.Variable("x"), **p), x=x)
    (conv,) = _forward(S.Convolution(S.Variable("x"), S.Variable("w"), num_filter=4, no_bias=True, **p), x=x, w=w)
    np.testing.assert_allclose(
        np.einsum("fk,nkl->nfl", w.reshape(4, -1), cols).reshape(conv.shape), conv, rtol=1e-12, atol=1e-12
    )


def test_spatial_transformer_is_grid_generator_then_bilinear_sampler():
    rng = np.random.default_rng(4)
    d = rng.standard_normal((2, 3, 4, 5))
    loc = np.array([[0.8, 0.1, -0.13, -0.2, 0.7, 0.11], [0.6, -0.25, 0.07, 0.15, 0.9, -0.21]])
    dv, lv = S.Variable("d"), S.Variable("loc")
    st = S.SpatialTransformer(dv, lv, target_shape=(3, 6), transform_type="affine", sampler_type="bilinear")
    comp = S.BilinearSampler(dv, S.GridGenerator(lv, transform_type="affine", target_shape=(3, 6)))
    head = rng.standard_normal((2, 3, 3, 6))
    np.testing.assert_allclose(_forward(st, d=d, loc=loc)[0], _forward(comp, d=d, loc=loc)[0], rtol=1e-12)
    g1, g2 = bind_grads(st, head, d=d, loc=loc), bind_grads(comp, head, d=d, loc=loc)
    for n in ("d", "loc"):
        np.testing.assert_allclose(g1[n], g2[n], rtol=1e-10, atol=1e-12)


def test_bilinear_sampler_outside_reads_zero():
    d = np.ones((1, 1, 2, 2))
    grid = np.full((1, 2, 1, 1), -3.0)  # far outside: all four corners read 0
    (out,) = _forward(S.BilinearSampler(S.Variable("d"), S.Variable("g")), d=d, g=grid)
    assert out[0, 0, 0, 0] == 0.0
    grid = np.full((1, 2, 1, 1), -2.0)  # position -0.5 px on both axes: one corner inside, weight 1/4
    (out,) = _forward(S.BilinearSampler(S.Variable("d"), S.Variable("g")), d=d, g=grid)
    np.testing.assert_allclose(out, ref_bilinear_sampler(d, grid))
    np.testing.assert_allclose(out[0, 0, 0, 0], 0.25)


def test_correlation_reference_matches_a_direct_patch_product():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((1, 2, 3, 3)), rng.standard_normal((1, 2, 3, 3))
    (out,) = _forward(S.Correlation(S.Variable("a"), S.Variable("b"), max_displacement=1, pad_size=1), a=a, b=b)
    # displacement (0, 0) at the centre: mean over channels of a * b
    np.testing.assert_allclose(out[0, 4, 1, 1], (a[0, :, 1, 1] * b[0, :, 1, 1]).mean(), rtol=1e-12)
    np.testing.assert_allclose(out, ref_correlation(a, b, pad=1), rtol=1e-12)


def test_deformable_convolution_with_zero_offsets_is_convolution():
    rng = np.random.default_rng(6)
    x, w, b = rng.standard_normal((2, 4, 5, 4)), rng.standard_normal((4, 2, 3, 2)), rng.standard_normal(4)
    p = dict(kernel=(3, 2), stride=(1, 2), dilate=(1, 1), pad=(1, 1), num_filter=4, num_group=2)
    (conv,) = _forward(S.Convolution(S.Variable("x"), S.Variable("w"), S.Variable("b"), **p), x=x, w=w, b=b)
    off = np.zeros((2, 2 * 6 * 2) + conv.shape[2:])
    dc = S._contrib_DeformableConvolution(
        S.Variable("x"), S.Variable("o"), S.Variable("w"), S.Variable("b"), num_deformable_group=2, **p
    )
    np.testing.assert_allclose(_forward(dc, x=x, o=off, w=w, b=b)[0], conv, rtol=1e-12, atol=1e-12)


# -- second order ------------------------------------------------------------------------------------------


def test_correlation_abs_second_order_names_the_fused_backward():
    a, b = S.Variable("a"), S.Variable("b")
    c = S.Correlation(a, b, is_multiply=False)
    (ga,) = sg.grad(c, [a], grad_outputs=[S.Variable("h")])
    with pytest.raises(SymgradError, match=r"_backward_Correlation.*second-order"):
        sg.grad(S.sum(ga), [a])


def test_bilinear_sampler_grid_hessian_has_the_cross_term():
    # out is bilinear in (x, y) within a cell: d2/dx2 = d2/dy2 = 0 but d2/dxdy != 0; proved numerically
    rng = np.random.default_rng(7)
    d = rng.standard_normal((1, 2, 3, 4))
    g = sample_grid(1, 3, 4, 2, 2)(rng)
    dv, gv = S.Variable("d"), S.Variable("g")
    out = S.BilinearSampler(dv, gv)
    (gg,) = sg.grad(S.sum(out * S.Variable("h")), [gv])
    phi = S.sum(gg * S.Variable("v"))
    result = check_numeric_gradient(
        phi,
        {"d": d, "g": g, "h": rng.standard_normal((1, 2, 2, 2)), "v": rng.standard_normal(g.shape)},
        grad_nodes=["g", "d"],
        dtype=np.float64,
        rtol=1e-6,
        atol=1e-8,
        progress=False,
    )
    analytic, _ = result["g"]
    assert not result.excluded and np.abs(analytic).max() > 0  # the cross term is there and checked
