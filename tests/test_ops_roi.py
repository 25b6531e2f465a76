"""Op-specific tests for the ROI operators (symgrad/ops/roi.py) that the OpInfo table cannot express:
ROIPooling's hidden argmax output, gradients for rois (none, zeros as MXNet), RROIAlign's undefined
gradient, Proposal's zero gradient, bad input. Expected values are hand-written numpy."""

import numpy as np
import pytest

import symgrad as sg
from symgrad.base import ParamError, ShapeError, SymgradError
from symgrad.ops import get_op

S = sg.sym

D, R = S.Variable("data"), S.Variable("rois")


def test_roipooling_maxidx_holds_flat_indices_and_minus_one():
    x = np.arange(2 * 1 * 3 * 4, dtype=np.float64).reshape(2, 1, 3, 4)
    rois = np.array([[1, 0, 0, 1, 1], [0, 2, 1, 3, 2], [3, 0, 0, 1, 1]], dtype=np.float64)
    out, idx = get_op("ROIPooling").forward(np, x, rois, pooled_size=(1, 1), spatial_scale=1.0)
    # ROI 0: image 1 rows 0-1 cols 0-1 -> max at (1, 0, 1, 1); ROI 1: image 0 rows 1-2 cols 2-3;
    # ROI 2: batch index 3 of 2 -> 0 and no argmax
    assert idx.dtype == np.int32
    np.testing.assert_array_equal(idx.ravel(), [12 + 1 * 4 + 1, 2 * 4 + 3, -1])
    np.testing.assert_array_equal(out.ravel(), [x[1, 0, 1, 1], x[0, 0, 2, 3], 0.0])


def test_roipooling_rounds_halves_away_from_zero():
    x = np.random.default_rng(0).permutation(36).astype(np.float64).reshape(1, 1, 6, 6)
    # x1 = 2.5 rounds to 3 (numpy's round would give 2): the single bin covers columns 3-4
    rois = np.array([[0, 2.5, 0, 4, 5]], dtype=np.float64)
    out, _ = get_op("ROIPooling").forward(np, x, rois, pooled_size=(1, 1), spatial_scale=1.0)
    assert out[0, 0, 0, 0] == x[0, 0, :, 3:5].max()


@pytest.mark.parametrize(
    "make",
    [
        lambda: S.ROIPooling(D, R, pooled_size=(2, 2), spatial_scale=1.0),
        lambda: S._contrib_ROIAlign(D, R, pooled_size=(2, 2), spatial_scale=1.0),
        lambda: S._contrib_PSROIPooling(D, R, spatial_scale=1.0, output_dim=1, pooled_size=2),
    ],
)
def test_rois_get_a_zero_gradient(make):
    x = np.random.default_rng(1).uniform(-1, 1, (1, 4, 5, 5))
    rois = np.array([[0, 0.5, 0.5, 3.5, 4.0]])
    grads = {"data": np.zeros_like(x), "rois": np.full_like(rois, 3.0)}
    sym = make()
    exe = sym.bind(sg.cpu(), {"data": x, "rois": rois}, args_grad=grads)
    (y,) = exe.forward(is_train=True)
    exe.backward([np.ones_like(y)])
    np.testing.assert_array_equal(grads["rois"], 0.0)  # MXNet writes zeros for rois
    assert np.abs(grads["data"]).sum() > 0


def test_rroialign_has_no_gradient_as_mxnet():
    sym = S._contrib_RROIAlign(D, R, pooled_size=(2, 2), spatial_scale=1.0)
    with pytest.raises(SymgradError, match="_contrib_RROIAlign.*not supported"):
        sym.simple_bind(sg.cpu(), data=(1, 1, 4, 4), rois=(1, 6), grad_req={"data": "write", "rois": "null"})


def test_rroialign_angle_zero_matches_roialign_on_the_same_box():
    x = np.random.default_rng(2).uniform(-1, 1, (1, 2, 6, 6))
    box = np.array([[0, 1.0, 1.5, 4.0, 5.5]])
    rbox = np.array([[0, 2.5, 3.5, 3.0, 4.0, 0.0]])  # centre (2.5, 3.5), 3 x 4
    a = get_op("_contrib_ROIAlign").forward(
        np, x, box, pooled_size=(2, 2), spatial_scale=1.0, sample_ratio=2, position_sensitive=False, aligned=False
    )
    b = get_op("_contrib_RROIAlign").forward(np, x, rbox, pooled_size=(2, 2), spatial_scale=1.0, sampling_ratio=2)
    np.testing.assert_allclose(a, b, rtol=1e-12)


def _rpn_args(n=1, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "c": rng.uniform(0, 1, (n, 4, 3, 3)),
        "b": rng.normal(0, 0.3, (n, 8, 3, 3)),
        "i": np.tile([[12.0, 12.0, 1.0]], (n, 1)),
    }


RPN = dict(
    scales=(2.0, 4.0), ratios=(1.0,), feature_stride=4, rpn_pre_nms_top_n=8, rpn_post_nms_top_n=4, rpn_min_size=2
)


@pytest.mark.parametrize("op", ["_contrib_Proposal", "_contrib_MultiProposal"])
def test_proposal_gradient_is_zero_as_mxnet(op):
    args = _rpn_args()
    sym = getattr(S, op)(S.Variable("c"), S.Variable("b"), S.Variable("i"), output_score=True, **RPN)
    grads = {n: np.full_like(v, 5.0) for n, v in args.items()}
    exe = sym.bind(sg.cpu(), args, args_grad=grads)
    outs = exe.forward(is_train=True)
    exe.backward([np.ones_like(o) for o in outs])
    for g in grads.values():  # MXNet's backward writes zeros: no gradient through the proposals
        np.testing.assert_array_equal(g, 0.0)


def test_multiproposal_of_one_image_is_proposal():
    args = _rpn_args()
    vs = (S.Variable("c"), S.Variable("b"), S.Variable("i"))
    a = S._contrib_Proposal(*vs, output_score=True, **RPN).bind(sg.cpu(), args).forward()
    b = S._contrib_MultiProposal(*vs, output_score=True, **RPN).bind(sg.cpu(), args).forward()
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)


def test_proposal_rows_cycle_when_nms_keeps_fewer():
    args = _rpn_args()
    sym = S._contrib_Proposal(
        S.Variable("c"), S.Variable("b"), S.Variable("i"), **{**RPN, "threshold": 0.0, "rpn_post_nms_top_n": 5}
    )
    (out,) = sym.bind(sg.cpu(), args).forward()
    # threshold 0 suppresses every box that overlaps a kept one: the few kept rows repeat cyclically
    k = next(i for i in range(1, 5) if np.array_equal(out[i], out[0]))
    np.testing.assert_array_equal(out[k:], out[: 5 - k])


def test_roi_bad_input():
    with pytest.raises(ParamError, match="spatial_scale"):
        S.ROIPooling(D, R, pooled_size=(2, 2), spatial_scale=2.0)
    with pytest.raises(ParamError, match="pooled_size"):
        S._contrib_ROIAlign(D, R, pooled_size=(2,), spatial_scale=1.0)
    with pytest.raises(ShapeError, match="rois"):
        S.ROIPooling(D, R, pooled_size=(2, 2), spatial_scale=1.0).infer_shape(data=(1, 2, 4, 4), rois=(3, 4))
    with pytest.raises(ShapeError, match="4-d"):
        S.ROIPooling(D, R, pooled_size=(2, 2), spatial_scale=1.0).infer_shape(data=(2, 4, 4), rois=(3, 5))
    with pytest.raises(ShapeError, match="rois"):
        S._contrib_RROIAlign(D, R, pooled_size=(2, 2), spatial_scale=1.0).infer_shape(data=(1, 2, 4, 4), rois=(3, 5))
    with pytest.raises(ShapeError, match="divisible"):
        S._contrib_ROIAlign(D, R, pooled_size=(2, 2), spatial_scale=1.0, position_sensitive=True).infer_shape(
            data=(1, 6, 4, 4), rois=(1, 5)
        )
    with pytest.raises(ShapeError, match="output_dim"):
        S._contrib_PSROIPooling(D, R, spatial_scale=1.0, output_dim=2, pooled_size=2).infer_shape(
            data=(1, 6, 4, 4), rois=(1, 5)
        )
    op = get_op("ROIPooling")  # the dtype rule itself: rois must have the data's dtype (as MXNet)
    with pytest.raises(TypeError, match="rois"):
        op.infer_type({}, [np.dtype(np.float64), np.dtype(np.float32)], [None, None], "ROIPooling 'r'")
    assert op.infer_type({}, [np.dtype(np.float32), None], [None, None], "r")[1] == [np.float32, np.int32]


def test_roialign_aligned_needs_a_positive_box():
    x = np.zeros((1, 1, 4, 4))
    with pytest.raises(ValueError, match="positive width"):
        get_op("_contrib_ROIAlign").forward(
            np,
            x,
            np.array([[0, 2.0, 2.0, 2.0, 3.0]]),
            pooled_size=(1, 1),
            spatial_scale=1.0,
            sample_ratio=-1,
            position_sensitive=False,
            aligned=True,
        )


def test_proposal_bad_input():
    vs = (S.Variable("c"), S.Variable("b"), S.Variable("i"))
    with pytest.raises(ShapeError, match="one image"):
        S._contrib_Proposal(*vs, **RPN).infer_shape(c=(2, 4, 3, 3))
    with pytest.raises(ShapeError, match="anchors"):
        S._contrib_MultiProposal(*vs, **RPN).infer_shape(c=(1, 6, 3, 3))
    with pytest.raises(ShapeError, match="bbox_pred"):
        S._contrib_MultiProposal(*vs, **RPN).infer_shape(c=(1, 4, 3, 3), b=(1, 4, 3, 3))
    with pytest.raises(ParamError, match="scales"):
        S._contrib_Proposal(*vs, scales="abc")
    shapes = S._contrib_MultiProposal(*vs, **RPN).infer_shape(c=(3, 4, 3, 3))
    assert shapes[0] == [(3, 4, 3, 3), (3, 8, 3, 3), (3, 3)] and shapes[1] == [(12, 5)]
