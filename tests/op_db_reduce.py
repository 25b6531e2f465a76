"""OpInfo rows for the reductions (symgrad/ops/reduce.py): sum, mean, prod, the nan-reductions, max/min,
norm, argmax/argmin and cumsum.

MXNet output shapes: a full reduction gives (1,), keepdims keeps every axis as 1,
exclude reduces the axes NOT listed. References are plain numpy written here.
Inputs for max/min are tie-free (ties are tested separately), for prod away from 0.
"""

import numpy as np
from op_info import In, OpInfo

import symgrad as sg

S = sg.sym
X3 = (2, 3, 2)
F16 = {np.float16: (2e-2, 2e-2)}


def _full(v):
    """numpy's () for a full reduction is MXNet's (1,)."""
    v = np.asarray(v)
    return v.reshape(1) if v.ndim == 0 else v


def _distinct(shape, low=-1.0, high=1.0):
    """Values at least 0.05 apart from each other (no ties for max/min/argmax)."""

    def draw(r):
        n = int(np.prod(shape))
        grid = np.linspace(low, high, n) + r.uniform(-0.01, 0.01, n)
        return r.permutation(grid).reshape(shape)

    return In(shape, sample=draw)


def _signed_away(shape, low=0.5, high=1.5):
    return In(shape, sample=lambda r: r.choice([-1.0, 1.0], shape) * r.uniform(low, high, shape))


def _with_nan(shape, low=-1.0, high=1.0):
    def draw(r):
        x = r.uniform(low, high, shape)
        x.reshape(-1)[[1, 4]] = np.nan
        return x

    return In(shape, sample=draw)


def _nanprod(x, axis=None, keepdims=False):
    return np.prod(np.where(np.isnan(x), 1.0, x), axis=axis, keepdims=keepdims)


OPS = [
    # -- sum / mean variants ------------------------------------------------------------------
    OpInfo("sum", S.sum, {"x": In((2, 3, 2))}, lambda x: _full(x.sum())),
    OpInfo("sum_axis", lambda x: S.sum(x, axis=1), {"x": In((2, 3, 2))}, lambda x: x.sum(1)),
    OpInfo(
        "sum_keepdims_exclude",
        lambda x: S.sum(x, axis=1, keepdims=True, exclude=True),
        {"x": In((2, 3, 2))},
        lambda x: x.sum(axis=(0, 2), keepdims=True),
    ),
    OpInfo("mean", lambda x: S.mean(x, axis=(0, 2)), {"x": In((2, 3, 2))}, lambda x: x.mean(axis=(0, 2))),
    OpInfo("sum_axis_alias", lambda x: S.sum_axis(x, axis=(0, 2)), {"x": In(X3)}, lambda x: x.sum(axis=(0, 2))),
    OpInfo(
        "sum_negative_axis_keepdims",
        lambda x: S.sum(x, axis=-1, keepdims=True),
        {"x": In(X3)},
        lambda x: x.sum(axis=-1, keepdims=True),
    ),
    OpInfo("sum_all_axes_listed", lambda x: S.sum(x, axis=(0, 1, 2)), {"x": In(X3)}, lambda x: _full(x.sum())),
    OpInfo("sum_keepdims_full", lambda x: S.sum(x, keepdims=True), {"x": In(X3)}, lambda x: x.sum(keepdims=True)),
    OpInfo("sum_exclude", lambda x: S.sum(x, axis=(0, 2), exclude=True), {"x": In(X3)}, lambda x: x.sum(axis=1)),
    # exclude with no axis given still reduces everything (MXNet)
    OpInfo("sum_exclude_no_axis", lambda x: S.sum(x, exclude=True), {"x": In(X3)}, lambda x: _full(x.sum())),
    OpInfo("mean_full", S.mean, {"x": In(X3)}, lambda x: _full(x.mean())),
    OpInfo(
        "mean_keepdims_exclude",
        lambda x: S.mean(x, axis=0, keepdims=True, exclude=True),
        {"x": In(X3)},
        lambda x: x.mean(axis=(1, 2), keepdims=True),
    ),
    OpInfo("nansum", lambda x: S.nansum(x, axis=1), {"x": _with_nan((2, 3))}, lambda x: np.nansum(x, axis=1)),
    OpInfo("nansum_full", S.nansum, {"x": _with_nan(X3)}, lambda x: _full(np.nansum(x))),
    # -- prod ------------------------------------------------------------------------------------
    OpInfo("prod", S.prod, {"x": _signed_away((2, 3))}, lambda x: _full(x.prod())),
    OpInfo("prod_axis", lambda x: S.prod(x, axis=1), {"x": _signed_away(X3)}, lambda x: x.prod(axis=1)),
    OpInfo(
        "prod_keepdims_exclude",
        lambda x: S.prod(x, axis=1, keepdims=True, exclude=True),
        {"x": _signed_away(X3)},
        lambda x: x.prod(axis=(0, 2), keepdims=True),
    ),
    OpInfo(
        "nanprod", lambda x: S.nanprod(x, axis=0), {"x": _with_nan((2, 3), 0.5, 1.5)}, lambda x: _nanprod(x, axis=0)
    ),
    OpInfo("nanprod_full", S.nanprod, {"x": _with_nan((2, 3), 0.5, 1.5)}, lambda x: _full(_nanprod(x))),
    # -- max / min --------------------------------------------------------------------------------
    OpInfo("max", S.max, {"x": _distinct(X3)}, lambda x: _full(x.max())),
    OpInfo("max_axis", lambda x: S.max(x, axis=1), {"x": _distinct(X3)}, lambda x: x.max(axis=1)),
    OpInfo(
        "max_axis_alias",
        lambda x: S.max_axis(x, axis=(0, 2), keepdims=True),
        {"x": _distinct(X3)},
        lambda x: x.max(axis=(0, 2), keepdims=True),
    ),
    OpInfo("max_exclude", lambda x: S.max(x, axis=0, exclude=True), {"x": _distinct(X3)}, lambda x: x.max(axis=(1, 2))),
    OpInfo("min", S.min, {"x": _distinct(X3)}, lambda x: _full(x.min())),
    OpInfo("min_axis", lambda x: S.min(x, axis=-1), {"x": _distinct(X3)}, lambda x: x.min(axis=-1)),
    OpInfo(
        "min_axis_alias",
        lambda x: S.min_axis(x, axis=0, keepdims=True),
        {"x": _distinct(X3)},
        lambda x: x.min(axis=0, keepdims=True),
    ),
    # -- norm --------------------------------------------------------------------------------------
    OpInfo("norm", S.norm, {"x": In(X3)}, lambda x: _full(np.sqrt((x * x).sum()))),
    OpInfo("norm_axis", lambda x: S.norm(x, axis=1), {"x": In(X3)}, lambda x: np.sqrt((x * x).sum(axis=1))),
    OpInfo(
        "norm_axes_keepdims",
        lambda x: S.norm(x, axis=(0, 2), keepdims=True),
        {"x": In(X3)},
        lambda x: np.sqrt((x * x).sum(axis=(0, 2), keepdims=True)),
    ),
    OpInfo("norm_ord1", lambda x: S.norm(x, ord=1), {"x": In(X3, away=0.05)}, lambda x: _full(np.abs(x).sum())),
    OpInfo(
        "norm_ord1_axis",
        lambda x: S.norm(x, ord=1, axis=-1, keepdims=True),
        {"x": In(X3, away=0.05)},
        lambda x: np.abs(x).sum(axis=-1, keepdims=True),
    ),
    OpInfo(
        "norm_out_dtype",
        lambda x: S.norm(x, axis=0, out_dtype="float64"),
        {"x": In((3, 2))},
        lambda x: np.sqrt((x * x).sum(axis=0)),
        dtypes=(np.float64,),
    ),
    # -- arg search (no gradient) ---------------------------------------------------------------------
    OpInfo(
        "argmax",
        lambda x: S.argmax(x, axis=1),
        {"x": _distinct(X3)},
        lambda x: x.argmax(axis=1).astype(float),
        grad=False,
    ),
    OpInfo("argmax_flat", S.argmax, {"x": _distinct((2, 3))}, lambda x: _full(x.argmax()).astype(float), grad=False),
    OpInfo(
        "argmax_keepdims",
        lambda x: S.argmax(x, axis=-1, keepdims=True),
        {"x": _distinct(X3)},
        lambda x: x.argmax(axis=-1)[..., None].astype(float),
        grad=False,
    ),
    OpInfo(
        "argmin",
        lambda x: S.argmin(x, axis=0),
        {"x": _distinct(X3)},
        lambda x: x.argmin(axis=0).astype(float),
        grad=False,
    ),
    OpInfo(
        "argmin_flat_keepdims",
        lambda x: S.argmin(x, keepdims=True),
        {"x": _distinct((2, 3))},
        lambda x: np.full((1, 1), x.argmin(), dtype=float),
        grad=False,
    ),
    OpInfo(
        "argmax_channel", S.argmax_channel, {"x": _distinct(X3)}, lambda x: x.argmax(axis=1).astype(float), grad=False
    ),
    # -- cumsum: float16 sums of a few terms ------------------------------------------------------
    OpInfo(
        "cumsum_axis1", lambda a: S.cumsum(a, axis=1), {"a": In((2, 4))}, lambda a: np.cumsum(a, axis=1), fwd_tol=F16
    ),
    OpInfo("cumsum_flat", S.cumsum, {"a": In((2, 3))}, lambda a: np.cumsum(a.ravel()), fwd_tol=F16),
    OpInfo(
        "cumsum_negative_axis",
        lambda a: S.cumsum(a, axis=-3),
        {"a": In((3, 2, 2))},
        lambda a: np.cumsum(a, axis=0),
        fwd_tol=F16,
    ),
]
