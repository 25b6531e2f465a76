"""OpInfo rows for box_nms (symgrad/ops/bbox.py); its decisions (which boxes survive) are fixed by boxes whose
scores are distinct and whose overlaps are far from the threshold, so finite differences see one branch. The
reference is a plain greedy NMS written here. The other box ops have no gradient (tests/test_ops_bbox.py)."""

import numpy as np
from op_info import In, OpInfo

import symgrad as sg

S = sg.sym

# [class id, score, xmin, ymin, xmax, ymax]: box 1 overlaps box 0 (IoU 0.68 > 0.5) and is suppressed,
# box 3 has a lower score than box 2 and overlaps it by ~0.1 (kept), box 4 is below valid_thresh=0.1
_ROWS = np.array(
    [
        [0, 0.9, 0.10, 0.10, 0.50, 0.50],
        [0, 0.8, 0.12, 0.14, 0.52, 0.50],
        [1, 0.7, 0.60, 0.60, 0.90, 0.95],
        [1, 0.6, 0.80, 0.80, 1.10, 1.20],
        [0, 0.05, 0.0, 0.0, 0.3, 0.3],
    ]
)


def _sample(rng):
    return np.stack([_ROWS, _ROWS[::-1]]) + rng.uniform(-0.005, 0.005, (2,) + _ROWS.shape) * [0, 1, 1, 1, 1, 1]


def _iou(a, b):
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if inter > 0 else 0.0


def _nms(x, thresh=0.5, valid=0.0, use_id=False, to_center=False):
    out = -np.ones_like(x)
    for b, rows in enumerate(x):
        order = sorted((i for i in range(len(rows)) if rows[i, 1] > valid), key=lambda i: -rows[i, 1])
        kept = []
        for i in order:
            if all((use_id and rows[k, 0] != rows[i, 0]) or _iou(rows[k, 2:], rows[i, 2:]) <= thresh for k in kept):
                kept.append(i)
        out[b, : len(kept)] = rows[kept]
        if to_center:
            c = out[b, : len(kept), 2:].copy()
            out[b, : len(kept), 2:] = np.stack(
                [(c[:, 0] + c[:, 2]) / 2, (c[:, 1] + c[:, 3]) / 2, c[:, 2] - c[:, 0], c[:, 3] - c[:, 1]], axis=-1
            )
    return out


OPS = [
    OpInfo(
        "_contrib_box_nms",
        lambda d: S._contrib_box_nms(d, valid_thresh=0.1),
        {"d": In((2, 5, 6), sample=_sample)},
        lambda d: _nms(d, valid=0.1),
        dtypes=(np.float32, np.float64),
        second_order=False,
    ),
    # the class ids enter unperturbed (a discrete input): Concat(ids, the rest)
    OpInfo(
        "_contrib_box_nms_per_class_to_center",
        lambda ids, rest: S._contrib_box_nms(
            S.Concat(ids, rest, dim=2), id_index=0, overlap_thresh=0.05, out_format="center"
        ),
        {
            "ids": In((2, 5, 1), sample=lambda rng: _sample(rng)[..., :1], grad=False),
            "rest": In((2, 5, 5), sample=lambda rng: _sample(rng)[..., 1:]),
        },
        lambda ids, rest: _nms(np.concatenate([ids, rest], axis=2), thresh=0.05, use_id=True, to_center=True),
        dtypes=(np.float32, np.float64),
        second_order=False,
    ),
]
