"""OpInfo rows for smaller MXNet operators added with issue 11: cumsum, khatri_rao, _slice_assign(_scalar),
the legacy Crop, _grad_add, _identity_with_attr_like_rhs, amp_cast and amp_multicast. References are plain
numpy written here; the straight-through estimators and gradientmultiplier (whose gradients are not their
derivatives, by definition) are tested in tests/test_ops_misc.py."""

import math

import numpy as np
from op_info import In, OpInfo

import symgrad as sg

S = sg.sym

F16 = {np.float16: (2e-2, 2e-2)}


def _khatri_rao(*mats):
    return np.stack([_kron_all([m[:, j] for m in mats]) for j in range(mats[0].shape[1])], axis=1)


def _kron_all(vectors):
    out = np.ones(1)
    for v in vectors:
        out = np.kron(out, v)
    return out


def _bn_train(x, g, b, mm, mv):
    """Training-mode BatchNorm over axes (0, 2), eps 1e-3."""
    return (x - x.mean((0, 2), keepdims=True)) / np.sqrt(x.var((0, 2), keepdims=True) + 1e-3) * g[None, :, None] \
        + b[None, :, None]


_BN_IN = {"x": In((4, 3, 2)), "g": In((3,), 0.5, 1.5), "b": In((3,))}
_BN_AUX = {"bn_moving_mean": In((3,)), "bn_moving_var": In((3,), 0.5, 1.5)}


def _assign(x, index, value):
    out = x.copy()
    out[index] = value
    return out


OPS = [
    OpInfo("cumsum_axis1", lambda a: S.cumsum(a, axis=1), {"a": In((2, 4))}, lambda a: np.cumsum(a, axis=1),
           fwd_tol=F16),
    OpInfo("cumsum_flat", S.cumsum, {"a": In((2, 3))}, lambda a: np.cumsum(a.ravel()), fwd_tol=F16),
    OpInfo("cumsum_negative_axis", lambda a: S.cumsum(a, axis=-3), {"a": In((3, 2, 2))},
           lambda a: np.cumsum(a, axis=0), fwd_tol=F16),
    OpInfo("khatri_rao_two", S.khatri_rao, {"a": In((2, 3)), "b": In((3, 3))}, _khatri_rao, fwd_tol=F16),
    OpInfo("khatri_rao_three", S.khatri_rao, {"a": In((2, 2)), "b": In((1, 2)), "c": In((3, 2))}, _khatri_rao,
           fwd_tol=F16),
    OpInfo("_slice_assign", lambda a, b: S._slice_assign(a, b, begin=(1, None), end=(3, None), step=(1, 2)),
           {"a": In((4, 3)), "b": In((2, 2))}, lambda a, b: _assign(a, (slice(1, 3), slice(None, None, 2)), b)),
    OpInfo("_crop_assign_negative", lambda a, b: S._crop_assign(a, b, begin=(-2,), end=(None,)),
           {"a": In((3, 2)), "b": In((2, 2))}, lambda a, b: _assign(a, slice(1, 3), b)),
    OpInfo("_slice_assign_scalar", lambda a: S._slice_assign_scalar(a, scalar=0.5, begin=(None, 1), end=(None, 3)),
           {"a": In((2, 4))}, lambda a: _assign(a, (slice(None), slice(1, 3)), 0.5)),
    OpInfo("Crop_h_w_offset", lambda a: S.Crop(a, h_w=(2, 3), offset=(1, 1)), {"a": In((1, 2, 4, 5))},
           lambda a: a[:, :, 1:3, 1:4]),
    OpInfo("Crop_like_center", lambda a, b: S.Crop(a, b, center_crop=True),
           {"a": In((2, 1, 5, 4)), "b": In((1, 1, 2, 1), grad=False)}, lambda a, b: a[:, :, 1:3, 1:2]),
    OpInfo("_rnn_param_concat", lambda a, b: S._rnn_param_concat(a, b, dim=0), {"a": In((3,)), "b": In((2,))},
           lambda a, b: np.concatenate([a, b])),
    OpInfo("_contrib_SyncBatchNorm", lambda x, g, b: S._contrib_SyncBatchNorm(x, g, b, key="k", fix_gamma=False,
                                                                             name="bn"),
           _BN_IN, _bn_train, aux=_BN_AUX, is_train=True, second_order=False, fwd_tol={np.float16: (2e-2, 2e-2)}),
    # relu at exact zeros cannot happen: the normalised values are continuous draws
    OpInfo("_contrib_BatchNormWithReLU", lambda x, g, b: S._contrib_BatchNormWithReLU(x, g, b, fix_gamma=False,
                                                                                      name="bn"),
           _BN_IN, lambda *a: np.maximum(_bn_train(*a), 0), aux=_BN_AUX, is_train=True, second_order=False,
           fwd_tol={np.float16: (2e-2, 2e-2)}),
    OpInfo("_grad_add", S._grad_add, {"a": In((2, 3)), "b": In((2, 3))}, lambda a, b: a + b),
    OpInfo("_identity_with_attr_like_rhs", S._identity_with_attr_like_rhs,
           {"a": In((2, 3)), "b": In((2, 3), grad=False)}, lambda a, b: a),
    OpInfo("amp_multicast_same_dtype", lambda a, b: S.amp_multicast(a, b, num_outputs=2),
           {"a": In((2, 3)), "b": In((3,))}, lambda a, b: (a, b)),
]

OPS += [
    OpInfo("Convolution_v1", lambda x, w, b: S.Convolution_v1(x, w, b, kernel=(2, 2), num_filter=2, pad=(1, 0)),
           {"x": In((1, 2, 3, 3)), "w": In((2, 2, 2, 2)), "b": In((2,))},
           lambda x, w, b: _conv2d(np.pad(x, ((0, 0), (0, 0), (1, 1), (0, 0))), w) + b[None, :, None, None],
           fwd_tol=F16, second_order=False),
    OpInfo("Pooling_v1_avg_pad", lambda x: S.Pooling_v1(x, kernel=(2, 2), pool_type="avg", pad=(1, 1)),
           {"x": In((1, 1, 3, 3))}, lambda x: _avg2x2(np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))), fwd_tol=F16,
           second_order=False),
]


def _conv2d(x, w):
    n, _, h, wd = x.shape
    out = np.zeros((n, w.shape[0], h - w.shape[2] + 1, wd - w.shape[3] + 1))
    for i in range(out.shape[2]):
        for j in range(out.shape[3]):
            out[:, :, i, j] = np.einsum("nchw,ochw->no", x[:, :, i:i + w.shape[2], j:j + w.shape[3]], w)
    return out


def _avg2x2(x):
    return (x[..., :-1, :-1] + x[..., 1:, :-1] + x[..., :-1, 1:] + x[..., 1:, 1:]) / 4


def _dirichlet_logpdf(x, a, is_log):
    """Direct: sum (a_j - 1) log x_j + lgamma(sum a) - sum lgamma(a_j), per vector (alpha per leading index)."""
    lead = a.shape[:-1]
    out = np.zeros(x.shape[:-1])
    for idx in np.ndindex(*x.shape[:-1]):
        av = a[idx[:len(lead)]]
        lp = float(np.sum((av - 1) * np.log(x[idx]))) + math.lgamma(av.sum()) - sum(math.lgamma(v) for v in av)
        out[idx] = lp if is_log else math.exp(lp)
    return out


def _simplex(shape):
    def draw(rng):
        v = rng.uniform(0.2, 1.0, shape)
        return v / v.sum(-1, keepdims=True)
    return draw


OPS += [
    OpInfo("_random_pdf_dirichlet_log", lambda x, a: S._random_pdf_dirichlet(x, a, is_log=True),
           {"x": In((2, 3, 4), sample=_simplex((2, 3, 4))), "a": In((2, 4), 0.5, 2.0)},
           lambda x, a: _dirichlet_logpdf(x, a, True), dtypes=(np.float32, np.float64)),
    OpInfo("_random_pdf_dirichlet_single_vector", S.random_pdf_dirichlet,
           {"x": In((3,), sample=_simplex((3,))), "a": In((3,), 0.5, 2.0)},
           lambda x, a: _dirichlet_logpdf(x[None], a[None], False).reshape(1), dtypes=(np.float32, np.float64)),
]
