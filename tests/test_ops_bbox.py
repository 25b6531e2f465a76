"""box_iou, bipartite_matching, box_encode and box_decode against numpy written here (box_nms is a row of
tests/op_db_bbox.py; all five are replayed against MXNet in tests/fixtures/mxnet_cases/bbox.json)."""

import numpy as np
import pytest

import symgrad as sg
from symgrad.base import SymgradError
from symgrad.test_utils import check_symbolic_forward

S = sg.sym


def test_box_iou_against_areas_by_hand():
    lhs = np.array([[0.0, 0.0, 2.0, 2.0], [1.0, 1.0, 3.0, 2.0]])
    rhs = np.array([[1.0, 0.0, 2.0, 1.0], [5.0, 5.0, 6.0, 6.0], [0.0, 0.0, 2.0, 2.0]])
    # intersections: box0 & r0 = 1 (areas 4, 1), box1 & r0 = 0, box1 & r2 = 1 x 1 (areas 2, 4)
    want = np.array([[1 / 4, 0.0, 1.0], [0.0, 0.0, 1 / 5]])
    (iou,) = check_symbolic_forward(
        S._contrib_box_iou(S.Variable("a"), S.Variable("b")), {"a": lhs, "b": rhs}, [want], dtype=np.float64
    )
    assert iou.shape == (2, 3)
    center = np.array([[1.0, 1.0, 2.0, 2.0]])  # the same box as lhs[0]
    check_symbolic_forward(
        S._contrib_box_iou(S.Variable("a"), S.Variable("b"), format="center"),
        {"a": center, "b": center},
        [np.ones((1, 1))],
        dtype=np.float64,
    )


def test_bipartite_matching_is_greedy_in_score_order():
    scores = np.array([[0.5, 0.6], [0.1, 0.4], [0.9, 0.2]])
    # 0.9 matches (2, 0); 0.6 matches (0, 1); 0.5 and 0.4 hit taken rows/columns; 0.2 and 0.1 too
    rows, cols = [o for o in S._contrib_bipartite_matching(S.Variable("s"), threshold=0.3).eval(s=scores)]
    np.testing.assert_array_equal(rows, [1, -1, 0])
    np.testing.assert_array_equal(cols, [2, 0])
    rows, _ = S._contrib_bipartite_matching(S.Variable("s"), threshold=0.7).eval(s=scores)
    np.testing.assert_array_equal(rows, [-1, -1, 0])  # stops at the first score below the threshold


def test_box_encode_and_decode_invert_each_other():
    anchors = np.array([[[0.0, 0.0, 1.0, 1.0], [0.5, 0.5, 1.5, 2.5]]])
    refs = np.array([[[0.2, 0.1, 1.2, 0.9]]])
    stds = np.array([0.1, 0.1, 0.2, 0.2])
    enc = S._contrib_box_encode(*[S.Variable(n) for n in ("s", "m", "a", "r", "mu", "sd")])
    targets, masks = enc.eval(s=np.array([[1.0, 0.0]]), m=np.zeros((1, 2)), a=anchors, r=refs, mu=np.zeros(4), sd=stds)
    # anchor 0 (center (0.5, 0.5), 1 x 1) towards ref (center (0.7, 0.5), 1 x 0.8)
    np.testing.assert_allclose(targets[0, 0], [0.2 / 0.1, 0.0, 0.0, np.log(0.8) / 0.2], atol=1e-12)
    np.testing.assert_array_equal(targets[0, 1], 0.0)
    np.testing.assert_array_equal(masks, [[[1, 1, 1, 1], [0, 0, 0, 0]]])
    dec = S._contrib_box_decode(
        S.Variable("t"), S.Variable("a"), std0=0.1, std1=0.1, std2=0.2, std3=0.2, format="corner"
    )
    (boxes,) = dec.eval(t=targets[:, :1], a=anchors[:, :1])
    np.testing.assert_allclose(boxes[0, 0], refs[0, 0], rtol=1e-6)  # float32 std parameters


@pytest.mark.parametrize("op", ["_contrib_box_iou", "_contrib_box_decode"])
def test_box_ops_with_zero_gradients_in_mxnet_refuse_to_differentiate(op):
    a, b = S.Variable("a"), S.Variable("b")
    with pytest.raises(SymgradError, match="zero, which is not its derivative"):
        getattr(S, op)(a, b).simple_bind(sg.cpu(), a=(1, 2, 4), b=(1, 2, 4))


def test_bipartite_matching_gradient_is_zero():
    exe = S._contrib_bipartite_matching(S.Variable("s"), threshold=0.1).simple_bind(sg.cpu(), s=(2, 3))
    exe.forward(is_train=True, s=np.arange(6.0).reshape(2, 3) / 6)
    exe.backward([np.ones((2,)), np.ones((3,))])
    np.testing.assert_array_equal(exe.grad_dict["s"], 0.0)


def test_multibox_prior_anchor_layout():
    # a 2 x 3 map, sizes (0.5, 0.2), ratios (1, 4): per cell (0.5, r1), (0.2, r1), (0.5, r4)
    prior = S._contrib_MultiBoxPrior(S.Variable("d"), sizes=(0.5, 0.2), ratios=(1, 4))
    (anchors,) = prior.eval(d=np.zeros((1, 1, 2, 3)))
    assert anchors.shape == (1, 2 * 3 * 3, 4)
    want = []
    for r in range(2):
        for c in range(3):
            cy, cx = (r + 0.5) / 2, (c + 0.5) / 3
            for size, ratio in ((0.5, 1.0), (0.2, 1.0), (0.5, 2.0)):  # sqrt of the ratio
                hw, hh = size * 2 / 3 * ratio / 2, size / ratio / 2
                want.append([cx - hw, cy - hh, cx + hw, cy + hh])
    np.testing.assert_allclose(anchors[0], want, rtol=1e-6, atol=1e-7)


def test_blockgrad_makes_an_op_without_gradient_usable_in_a_differentiated_graph():
    # the refusal's advice: the op behind BlockGrad needs no gradient rule; a's gradient is the other path's
    a, b = S.Variable("a"), S.Variable("b")
    loss = S.sum(S._contrib_box_iou(S.BlockGrad(a), b)) + S.sum(a * a)
    exe = loss.simple_bind(sg.cpu(), a=(2, 4), b=(3, 4), grad_req={"a": "write", "b": "null"})
    boxes = np.array([[0.0, 0.0, 1.0, 1.0], [0.5, 0.5, 2.0, 2.0]])
    exe.forward(is_train=True, a=boxes, b=np.tile([[0.0, 0.0, 1.0, 1.0]], (3, 1)))
    exe.backward(np.ones(1))
    np.testing.assert_allclose(exe.grad_dict["a"], 2 * boxes)
