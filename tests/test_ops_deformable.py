"""Op-specific tests for _contrib_ModulatedDeformableConvolution (symgrad/ops/vision.py) and
_contrib_DeformablePSROIPooling (symgrad/ops/roi.py) that the OpInfo table cannot express: MXNet's
interface (arguments, hidden top_count, parameter order), bad input, and semantic identities. The
generic checks (forward, gradients to second order, dtypes) are the rows in tests/op_db_vision.py and
tests/op_db_roi.py."""

import numpy as np
import pytest
from op_db_roi import ref_deformable_psroi
from op_info import bind_grads

import symgrad as sg
from symgrad.base import ParamError, ShapeError
from symgrad.ops import get_op

S = sg.sym
V = S.Variable


def _forward(sym, **args):
    return sym.bind(sg.cpu(), args).forward()


def _params(sym, names):
    """The parsed values of the parameters of ``sym``'s op named in ``names`` (space-separated), in that order."""
    p = sym._outputs[0][0].params
    return tuple(p[n] for n in names.split())


# -- MXNet interface -------------------------------------------------------------------------------------------


def test_arguments_and_visible_outputs_as_mxnet():
    m = S._contrib_ModulatedDeformableConvolution(
        V("d"), V("o"), V("m"), V("w"), V("b"), kernel=(2, 2), num_filter=2, name="mdc"
    )
    assert m.list_arguments() == ["d", "o", "m", "w", "b"]
    assert m.list_outputs() == ["mdc_output"]
    nb = S._contrib_ModulatedDeformableConvolution(kernel=(2, 2), num_filter=2, no_bias=True, name="nb")
    assert nb.list_arguments() == ["nb_data", "nb_offset", "nb_mask", "nb_weight"]
    p = S._contrib_DeformablePSROIPooling(spatial_scale=1.0, output_dim=1, group_size=1, pooled_size=2, name="p")
    assert p.list_arguments() == ["p_data", "p_rois", "p_trans"]
    assert p.list_outputs() == ["p_output"]  # top_count is hidden (NumVisibleOutputs 1)
    q = S._contrib_DeformablePSROIPooling(
        spatial_scale=1.0, output_dim=1, group_size=1, pooled_size=2, no_trans=True, name="q"
    )
    assert q.list_arguments() == ["q_data", "q_rois"]
    assert get_op("_contrib_DeformablePSROIPooling").list_output_names({}, visible_only=False) == [
        "output",
        "top_count",
    ]


def test_positional_parameters_follow_mxnet_order():
    # kernel, stride, dilate, pad, num_filter, num_group, num_deformable_group, workspace, no_bias, im2col_step
    m = S._contrib_ModulatedDeformableConvolution(
        V("d"), V("o"), V("m"), V("w"), V("b"), (3, 3), (2, 2), (1, 1), (1, 1), 4, 2, 2, 512, False, 8
    )
    names = "kernel stride pad num_filter num_group num_deformable_group workspace no_bias im2col_step"
    assert _params(m, names) == ((3, 3), (2, 2), (1, 1), 4, 2, 2, 512, False, 8)
    # spatial_scale, output_dim, group_size, pooled_size, part_size, sample_per_part, trans_std, no_trans
    q = S._contrib_DeformablePSROIPooling(V("d"), V("r"), V("t"), 0.5, 3, 2, 4, 2, 3, 0.1)
    names = "spatial_scale output_dim group_size pooled_size part_size sample_per_part trans_std no_trans"
    assert _params(q, names) == (0.5, 3, 2, 4, 2, 3, 0.1, False)


def test_required_parameters_as_mxnet():
    # MXNet declares group_size and pooled_size of DeformablePSROIPooling without defaults
    with pytest.raises(ParamError, match=r"group_size"):
        S._contrib_DeformablePSROIPooling(V("d"), V("r"), V("t"), spatial_scale=1.0, output_dim=1, pooled_size=2)
    with pytest.raises(ParamError, match=r"num_filter"):
        S._contrib_ModulatedDeformableConvolution(V("d"), V("o"), V("m"), V("w"), V("b"), kernel=(2, 2))


# -- bad input -------------------------------------------------------------------------------------------------


def test_modulated_deformable_convolution_bad_input():
    d, o, m, w = V("d"), V("o"), V("m"), V("w")
    with pytest.raises(ParamError, match=r"'kernel' must be \(h, w\).*got \(3,\)"):
        S._contrib_ModulatedDeformableConvolution(d, o, m, w, kernel=(3,), num_filter=2, no_bias=True)
    with pytest.raises(ParamError, match=r"'im2col_step' must be >= 1, got 0"):
        S._contrib_ModulatedDeformableConvolution(d, o, m, w, kernel=(2, 2), num_filter=2, no_bias=True, im2col_step=0)
    c = S._contrib_ModulatedDeformableConvolution(d, o, m, w, kernel=(2, 2), num_filter=2, no_bias=True, name="mc")
    with pytest.raises(
        ShapeError,
        match=r"ModulatedDeformableConvolution 'mc'.*'mask' has shape \(1, 8, 3, 3\), "
        r"expected \(1, 4, 3, 3\)",
    ):
        c.infer_shape(d=(1, 2, 4, 4), m=(1, 8, 3, 3))
    with pytest.raises(ShapeError, match=r"'mc'.*'offset' has shape \(1, 4, 3, 3\), expected \(1, 8, 3, 3\)"):
        c.infer_shape(d=(1, 2, 4, 4), o=(1, 4, 3, 3))
    dg = S._contrib_ModulatedDeformableConvolution(
        d, o, m, w, kernel=(2, 2), num_filter=3, num_deformable_group=2, no_bias=True, name="dg"
    )
    with pytest.raises(ShapeError, match=r"'dg'.*num_deformable_group=2 must divide num_filter=3"):
        dg.infer_shape(d=(1, 2, 4, 4))
    st = S._contrib_ModulatedDeformableConvolution(
        d, o, m, w, kernel=(2, 2), num_filter=2, no_bias=True, im2col_step=2, name="st"
    )
    with pytest.raises(ShapeError, match=r"'st'.*batch size 3 .*im2col_step=2"):
        st.infer_shape(d=(3, 2, 4, 4))
    with pytest.raises(TypeError, match=r"'mask'"):
        c.infer_type(d=np.float64, o=np.float64, m=np.int32)


def test_deformable_psroipooling_bad_input():
    d, r, t = V("d"), V("r"), V("t")
    p = dict(spatial_scale=1.0, output_dim=2, group_size=2, pooled_size=2)
    s = S._contrib_DeformablePSROIPooling(d, r, t, name="dp", **p)
    bad_shapes = [  # (data, rois, trans) shapes -> the message
        ((1, 7, 4, 4), (2, 5), (2, 2, 2, 2), r"data has 7 channels; output_dim \* group_size\^2 = 2 \* 2\^2 = 8"),
        (
            (1, 8, 4, 4),
            (2, 5),
            (2, 2, 3, 3),
            r"'trans' has shape \(2, 2, 3, 3\); expected \(num_rois, 2 \* num_classes, part_size, part_size\) "
            r"with part_size 2",
        ),
        ((1, 8, 4, 4), (2, 5), (3, 2, 2, 2), r"'trans' has shape \(3, 2, 2, 2\); its first axis must be the 2 ROIs"),
        ((1, 8, 4, 4), (2, 5), (2, 6, 2, 2), r"'trans' \(2, 6, 2, 2\) has 3 classes, which must divide output_dim=2"),
        ((1, 8, 4, 4), (2, 4), (2, 2, 2, 2), r"'rois' has shape \(2, 4\)"),
    ]
    for data, rois, trans, message in bad_shapes:
        with pytest.raises(ShapeError, match=r"'dp'.*" + message):
            s.infer_shape(d=data, r=rois, t=trans)
    with pytest.raises(ParamError, match=r"'trans_std' must be in \[0, 1\]"):
        S._contrib_DeformablePSROIPooling(d, r, t, trans_std=1.5, **p)
    with pytest.raises(ParamError, match=r"'sample_per_part' must be >= 1, got 0"):
        S._contrib_DeformablePSROIPooling(d, r, t, sample_per_part=0, **p)
    with pytest.raises(ParamError, match=r"'spatial_scale' must be in \[0, 1\]"):
        S._contrib_DeformablePSROIPooling(d, r, t, **{**p, "spatial_scale": 2.0})
    bad = np.array([[2, 0, 0, 3, 3]], dtype=np.float64)
    with pytest.raises(ValueError, match=r"batch index 2, outside \[0, 1\)"):
        _forward(S._contrib_DeformablePSROIPooling(d, r, no_trans=True, **p), d=np.zeros((1, 8, 4, 4)), r=bad)


# -- semantics -------------------------------------------------------------------------------------------------


def test_modulated_with_unit_mask_inside_the_image_is_deformable_convolution():
    # the two ops differ only at the border (zero padding vs. DCNv1's clamped last row) and by the mask
    rng = np.random.default_rng(1)
    x, w, b = rng.standard_normal((2, 4, 7, 7)), rng.standard_normal((2, 2, 2, 2)), rng.standard_normal(2)
    p = dict(kernel=(2, 2), num_filter=2, num_group=2, num_deformable_group=2, stride=(2, 2))
    off = rng.uniform(0.1, 0.9, (2, 16, 3, 3))  # every sample stays inside [0, 6): off the last row
    mdc = S._contrib_ModulatedDeformableConvolution(V("x"), V("o"), V("m"), V("w"), V("b"), **p)
    dc = S._contrib_DeformableConvolution(V("x"), V("o"), V("w"), V("b"), **p)
    (got,) = _forward(mdc, x=x, o=off, m=np.ones((2, 8, 3, 3)), w=w, b=b)
    (want,) = _forward(dc, x=x, o=off, w=w, b=b)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    # the mask scales each tap: a mask of 0.5 everywhere halves the bias-free output
    (half,) = _forward(mdc, x=x, o=off, m=np.full((2, 8, 3, 3), 0.5), w=w, b=np.zeros(2))
    np.testing.assert_allclose(half, 0.5 * (want - b[None, :, None, None]), rtol=1e-12, atol=1e-12)


def test_modulated_sample_fades_to_zero_beyond_the_border():
    # one pixel, kernel 1x1: out = mask * x * max(0, 1 - |dy|) * max(0, 1 - |dx|) for the offset (dy, dx)
    x = np.array([[[[2.0]]]])
    s = S._contrib_ModulatedDeformableConvolution(
        V("x"), V("o"), V("m"), V("w"), kernel=(1, 1), num_filter=1, no_bias=True
    )
    for dy, dx in ((0.25, 0.0), (-0.5, 0.5), (0.0, -0.75), (-1.0, 0.0), (1.2, 0.1)):
        (y,) = _forward(s, x=x, o=np.array([[[[dy]], [[dx]]]]), m=np.array([[[[0.5]]]]), w=np.ones((1, 1, 1, 1)))
        assert y[0, 0, 0, 0] == pytest.approx(0.5 * 2.0 * max(0, 1 - abs(dy)) * max(0, 1 - abs(dx)), abs=1e-15)


def test_deformable_psroipooling_zero_trans_is_no_trans_and_top_count_counts_samples():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 8, 5, 6))
    rois = np.array([[0, 1.0, 0.6, 9.0, 7.2], [1, -3.0, 2.0, 2.0, 5.0], [1, 30.0, 30.0, 32.0, 33.0]])
    p = dict(spatial_scale=0.5, output_dim=2, group_size=2, pooled_size=2, sample_per_part=2, trans_std=0.3)
    op = get_op("_contrib_DeformablePSROIPooling")
    out, count = op.forward(np, x, rois, np.zeros((3, 2, 2, 2)), **p, part_size=0, no_trans=False)
    out_nt, count_nt = op.forward(np, x, rois, **p, part_size=0, no_trans=True)
    np.testing.assert_array_equal(out, out_nt)
    np.testing.assert_array_equal(count, count_nt)
    np.testing.assert_allclose(out, ref_deformable_psroi(x, rois, None, 0.5, 2, 2, 2, 0, 2), rtol=1e-12, atol=1e-14)
    # ROI 0 lies inside: 4 samples per bin; ROI 1 reaches left of the map: some skipped; ROI 2 is outside: 0
    assert count.dtype == x.dtype
    assert (count[0] == 4).all() and count[1].min() < 4 < count[1].max() + 1 and (count[2] == 0).all()
    assert (out[2] == 0).all()


def test_deformable_psroipooling_gradients_rois_zero_and_trans_std_zero():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 4, 5, 5))
    rois = np.array([[0, 0.5, 0.5, 3.5, 4.0], [0, 1.0, 1.0, 4.0, 3.0]])
    t = rng.uniform(-1, 1, (2, 2, 2, 2))
    p = dict(spatial_scale=1.0, output_dim=1, group_size=2, pooled_size=2, sample_per_part=2)
    head = rng.standard_normal((2, 1, 2, 2))
    g = bind_grads(
        S._contrib_DeformablePSROIPooling(V("x"), V("r"), V("t"), trans_std=0.2, **p), head, x=x, r=rois, t=t
    )
    np.testing.assert_array_equal(g["r"], 0.0)  # MXNet writes zeros for rois
    assert np.abs(g["x"]).sum() > 0 and np.abs(g["t"]).sum() > 0
    g0 = bind_grads(
        S._contrib_DeformablePSROIPooling(V("x"), V("r"), V("t"), trans_std=0.0, **p), head, x=x, r=rois, t=t
    )
    np.testing.assert_array_equal(g0["t"], 0.0)  # trans is scaled by trans_std: no effect, no gradient


def test_inputs_are_not_modified():
    rng = np.random.default_rng(4)
    args = {
        "x": rng.standard_normal((1, 2, 4, 4)),
        "o": rng.uniform(-1, 1, (1, 8, 3, 3)),
        "m": rng.uniform(0, 1, (1, 4, 3, 3)),
        "w": rng.standard_normal((2, 2, 2, 2)),
    }
    before = {n: a.copy() for n, a in args.items()}
    s = S._contrib_ModulatedDeformableConvolution(*[V(n) for n in args], kernel=(2, 2), num_filter=2, no_bias=True)
    bind_grads(s, rng.standard_normal((1, 2, 3, 3)), **args)
    assert all(np.array_equal(args[n], before[n]) for n in args)
    pargs = {
        "x": rng.standard_normal((1, 4, 4, 4)),
        "r": np.array([[0, 0.0, 0.0, 3.0, 3.0]]),
        "t": rng.uniform(-1, 1, (1, 2, 2, 2)),
    }
    before = {n: a.copy() for n, a in pargs.items()}
    s = S._contrib_DeformablePSROIPooling(
        *[V(n) for n in pargs], spatial_scale=1.0, output_dim=1, group_size=2, pooled_size=2, trans_std=0.1
    )
    bind_grads(s, rng.standard_normal((1, 1, 2, 2)), **pargs)
    assert all(np.array_equal(pargs[n], before[n]) for n in pargs)


def test_third_order_closes_on_the_hidden_ops():
    # the hidden sampling ops differentiate into each other: a third derivative in the offsets builds and runs
    x, o, m, w = V("x"), V("o"), V("m"), V("w")
    out = S._contrib_ModulatedDeformableConvolution(x, o, m, w, kernel=(1, 1), num_filter=1, no_bias=True)
    (g1,) = sg.grad(S.sum(out * V("h")), [o])
    (g2,) = sg.grad(S.sum(g1 * V("v")), [o])
    (g3,) = sg.grad(S.sum(g2 * V("u")), [m])
    rng = np.random.default_rng(5)
    feed = {
        "x": rng.standard_normal((1, 1, 3, 3)),
        "o": rng.uniform(0.2, 0.8, (1, 2, 3, 3)),
        "m": rng.uniform(0, 1, (1, 1, 3, 3)),
        "w": rng.standard_normal((1, 1, 1, 1)),
        "h": rng.standard_normal((1, 1, 3, 3)),
        "v": rng.standard_normal((1, 2, 3, 3)),
        "u": rng.standard_normal((1, 2, 3, 3)),
    }
    (got,) = g3.bind(sg.cpu(), {n: feed[n] for n in g3.list_arguments()}).forward()
    assert got.shape == (1, 1, 3, 3) and np.isfinite(got).all() and np.abs(got).sum() > 0
