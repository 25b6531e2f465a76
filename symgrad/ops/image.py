"""Image operators of MXNet's ``mx.sym.image`` namespace (``_image_*``): layout conversion, per-channel
normalisation, flips, crop, resize and PCA lighting on (H, W, C) / (N, H, W, C) images.

MXNet registers most of these with the gradient ``_copy`` (the head gradient passed through unchanged),
which is not their derivative (a flip's gradient is the flipped head gradient; ``to_tensor`` even changes
the shape). symgrad gives each its true gradient, so they can sit inside a checked graph; they are
linear in the image, so their gradients are themselves linear ops of this family and twice
differentiable (the second derivative is zero).

The random augmentations (``_image_random_*``) are not here: their gradients in MXNet are ``_copy`` of
a randomly transformed image.
"""

from __future__ import annotations

import math

import numpy as np

from ..base import ParamError, ShapeError
from ..opdef import Param, adjoint_shape, output_like, register, wait_for_first_input

# -- shared shape rules --------------------------------------------------------------------------------


def _hwc(shape, where, channels=None):
    """(H, W, C) of an (H, W, C) or (N, H, W, C) image shape, with MXNet's checks."""
    if len(shape) not in (3, 4):
        raise ShapeError(f"{where}: input 'data' must be (H, W, C) or (N, H, W, C), got {tuple(shape)}")
    h, w, c = shape[-3:]
    if channels is not None and c not in channels:
        raise ShapeError(
            f"{where}: input 'data' must have {' or '.join(map(str, channels))} channels "
            f"(last axis), got {tuple(shape)}"
        )
    return h, w, c


# -- to_tensor --------------------------------------------------------------------------------------------


def _to_tensor_perm(ndim):
    return (2, 0, 1) if ndim == 3 else (0, 3, 1, 2)


@wait_for_first_input
def _to_tensor_shape(params, in_shapes, out_shapes, where):
    x = in_shapes[0]
    _hwc(x, where)
    return in_shapes, [tuple(x[i] for i in _to_tensor_perm(len(x)))]


def _from_tensor_fwd(xp, g, like):
    perm = (1, 2, 0) if g.ndim == 3 else (0, 2, 3, 1)
    return (xp.transpose(g, perm) / g.dtype.type(255.0)).astype(like.dtype)


register(
    "_image_to_tensor",
    aliases=("_npx__image_to_tensor",),
    forward=lambda xp, x: (xp.transpose(x, _to_tensor_perm(x.ndim)).astype(np.float32)) / np.float32(255.0),
    infer_shape=_to_tensor_shape,
    infer_type=lambda params, it, ot, where: (it, [np.dtype(np.float32)]),
    # y = transpose(x, perm) / 255 (float32): dx = transpose(g, perm^-1) / 255 in x's dtype
    gradient=lambda F, n, g: [F._image_to_tensor_adjoint(g[0], n.inputs[0])],
    doc="(H, W, C) or (N, H, W, C) image in [0, 255] -> float32 (C, H, W) or (N, C, H, W) in [0, 1].",
)

register(
    "_image_to_tensor_adjoint",
    inputs=("ograd", "data"),
    forward=_from_tensor_fwd,
    infer_shape=output_like(1),
    infer_type=output_like(1),
    no_grad_inputs=("data",),
    # linear in g; its adjoint is to_tensor again (in g's dtype)
    gradient=lambda F, n, g: [F._cast_like(F._image_to_tensor(g[0]), n.inputs[0]), None],
    doc="_image_to_tensor's gradient: transpose back to (.., H, W, C) and divide by 255 (hidden).",
)


# -- normalize ---------------------------------------------------------------------------------------------


def _channel_axis(ndim):
    return 0 if ndim == 3 else 1


@wait_for_first_input
def _normalize_shape(params, in_shapes, out_shapes, where):
    x = in_shapes[0]
    if len(x) not in (3, 4):
        raise ShapeError(f"{where}: input 'data' must be (C, H, W) or (N, C, H, W), got {tuple(x)}")
    c = x[_channel_axis(len(x))]
    if c not in (1, 3):
        raise ShapeError(f"{where}: the channel axis of 'data' must have 1 or 3 elements, got {tuple(x)}")
    for k in ("mean", "std"):
        if len(params[k]) not in (1, c):
            raise ShapeError(
                f"{where}: parameter {k!r} must have 1 or {c} elements for input {tuple(x)}, got {params[k]}"
            )
    return in_shapes, [tuple(x)]


def _per_channel(xp, values, ndim, c, dtype):
    # MXNet keeps mean/std as float32 tuples; one value applies to every channel
    v = np.asarray(values, dtype=np.float32)[:c] if len(values) > 1 else np.full(c, values[0], np.float32)
    shape = (c, 1, 1) if ndim == 3 else (1, c, 1, 1)
    return xp.asarray(v.astype(dtype).reshape(shape))


def _normalize_fwd(xp, x, mean, std):
    c = x.shape[_channel_axis(x.ndim)]
    return ((x - _per_channel(xp, mean, x.ndim, c, x.dtype)) / _per_channel(xp, std, x.ndim, c, x.dtype)).astype(
        x.dtype, copy=False
    )


register(
    "_image_normalize",
    aliases=("_npx__image_normalize",),
    params={"mean": Param("floats", (0.0, 0.0, 0.0, 0.0)), "std": Param("floats", (1.0, 1.0, 1.0, 1.0))},
    forward=_normalize_fwd,
    infer_shape=_normalize_shape,
    # y_c = (x_c - m_c) / s_c: dx_c = g_c / s_c, which is normalize(g) with mean 0
    gradient=lambda F, n, g: [F._image_normalize(g[0], mean=(0.0,), std=n.params["std"])],
    doc="Per-channel (x - mean) / std of a (C, H, W) or (N, C, H, W) tensor.",
)


# -- flips, crop, lighting ---------------------------------------------------------------------------------


def _image_shape(params, in_shapes, out_shapes, where):
    x = in_shapes[0] if in_shapes[0] is not None else out_shapes[0]
    if x is None:
        return in_shapes, out_shapes
    _hwc(x, where)
    return [tuple(x)], [tuple(x)]


def _register_flip(name, axis_from_end, what):
    # a flip is a permutation P with P^T = P: dx = flip(g)
    register(
        name,
        aliases=(f"_npx_{name}",),
        forward=lambda xp, x: xp.flip(x, axis=x.ndim - axis_from_end).copy(),
        infer_shape=_image_shape,
        gradient=lambda F, n, g: [getattr(F, name)(g[0])],
        doc=f"Flip an (H, W, C) or (N, H, W, C) image {what}.",
    )


_register_flip("_image_flip_left_right", 2, "left to right (the W axis)")
_register_flip("_image_flip_top_bottom", 3, "top to bottom (the H axis)")


def _crop_window(params, shape, where):
    h, w, _ = _hwc(shape, where, channels=(1, 3))
    x, y, width, height = (params[k] for k in ("x", "y", "width", "height"))
    if width <= 0 or height <= 0:
        raise ParamError(f"{where}: parameters 'width' and 'height' must be > 0, got {width} and {height}")
    if x < 0 or y < 0 or x + width > w or y + height > h:
        raise ShapeError(
            f"{where}: the window x={x}, y={y}, width={width}, height={height} does not fit an "
            f"image of height {h} and width {w} (input shape {tuple(shape)})"
        )


@wait_for_first_input
def _crop_shape(params, in_shapes, out_shapes, where):
    x = in_shapes[0]
    _crop_window(params, x, where)
    return in_shapes, [tuple(x[:-3]) + (params["height"], params["width"], x[-1])]


def _crop_fwd(xp, img, x, y, width, height):
    return img[..., y : y + height, x : x + width, :].copy()


def _crop_adjoint_fwd(xp, g, like, x, y, width, height):
    out = xp.zeros(like.shape, dtype=g.dtype)
    out[..., y : y + height, x : x + width, :] = g
    return out


_CROP_PARAMS = {"x": Param("int"), "y": Param("int"), "width": Param("int"), "height": Param("int")}

register(
    "_image_crop",
    aliases=("_npx__image_crop",),
    params=_CROP_PARAMS,
    forward=_crop_fwd,
    infer_shape=_crop_shape,
    # y = x[.., y:y+h, x:x+w, :]: dx is g written into zeros of x's shape at that window
    gradient=lambda F, n, g: [F._image_crop_adjoint(g[0], n.inputs[0], **n.params)],
    doc="Crop the window [y, y+height) x [x, x+width) of an (H, W, C) or (N, H, W, C) image.",
)

register(
    "_image_crop_adjoint",
    inputs=("ograd", "data"),
    params=_CROP_PARAMS,
    forward=_crop_adjoint_fwd,
    infer_shape=output_like(1),
    infer_type=output_like(0),
    no_grad_inputs=("data",),
    # linear in g; its adjoint reads the window back: the crop
    gradient=lambda F, n, g: [F._image_crop(g[0], **n.params), None],
    doc="_image_crop's gradient: zeros shaped like ``data`` with ``ograd`` in the window (hidden).",
)


# eigenvectors of ImageNet's RGB covariance scaled by their eigenvalues (AlexNet's PCA lighting), as MXNet
_EIG = np.array(
    [
        [55.46 * -0.5675, 4.794 * 0.7192, 1.148 * 0.4009],
        [55.46 * -0.5808, 4.794 * -0.0045, 1.148 * -0.8140],
        [55.46 * -0.5836, 4.794 * -0.6948, 1.148 * 0.4203],
    ],
    dtype=np.float32,
)


def _check_hwc(x, where):
    if len(x) != 3:
        raise ShapeError(f"{where}: input 'data' must be an (H, W, C) image, got {tuple(x)}")


@wait_for_first_input
def _lighting_shape(params, in_shapes, out_shapes, where):
    x = in_shapes[0]
    _check_hwc(x, where)
    if len(params["alpha"]) != 3:
        raise ParamError(f"{where}: parameter 'alpha' must have 3 values (R, G, B), got {params['alpha']}")
    return in_shapes, [tuple(x)]


def _lighting_fwd(xp, x, alpha):
    if x.shape[-1] == 1:  # MXNet leaves grey images unchanged
        return x.copy()
    # the offsets in float32, as MXNet; the sum in the image's dtype (MXNet 1.9.1 adds in float32 even for
    # float64 images, which makes a float64 result a step function of x at float32 resolution)
    offset = (_EIG * np.asarray(alpha, dtype=np.float32)).sum(axis=1, dtype=np.float32)
    return (x + xp.asarray(offset.astype(x.dtype))).astype(x.dtype, copy=False)


register(
    "_image_adjust_lighting",
    aliases=("_npx__image_adjust_lighting",),
    params={"alpha": Param("floats")},
    forward=_lighting_fwd,
    infer_shape=_lighting_shape,
    gradient=lambda F, n, g: [F.identity(g[0])],  # y = x + a constant offset per channel (rounded to float32)
    doc="AlexNet-style PCA lighting: add eig @ alpha to the R, G, B channels of an (H, W, 3) image.",
)


# -- resize ---------------------------------------------------------------------------------------------
# A resize is linear: y[.., i, j, c] = sum_{p, q} Rh[i, p] Rw[j, q] x[.., p, q, c] with interpolation matrices
# built from the sizes alone, so its gradient is the adjoint dx = Rh^T g Rw (``_image_resize_adjoint``),
# whose own gradient is the resize again.


def _resize_hw(params, h, w, where):
    size, keep = params["size"], params["keep_ratio"]
    if len(size) not in (1, 2) or any(s <= 0 for s in size):
        raise ParamError(f"{where}: parameter 'size' must be (size,) or (width, height) of positive ints, got {size}")
    if len(size) == 2:
        return size[1], size[0]
    if not keep:
        return size[0], size[0]
    if h > w:  # the short edge becomes size (integer arithmetic, as MXNet)
        return h * size[0] // w, size[0]
    return size[0], w * size[0] // h


def _interp_matrix(n_out, n_in, interp):
    """OpenCV's 1-D interpolation weights (cv::resize on float images): INTER_NEAREST reads
    floor(i * n_in / n_out); INTER_LINEAR samples at (i + 0.5) * n_in / n_out - 0.5, clamped to the edges."""
    m = np.zeros((n_out, n_in))
    scale = n_in / n_out
    for i in range(n_out):
        if interp == 0:
            m[i, min(int(math.floor(i * scale)), n_in - 1)] = 1.0
            continue
        f = (i + 0.5) * scale - 0.5
        s = math.floor(f)
        f -= s
        if s < 0:
            s, f = 0, 0.0
        if s >= n_in - 1:
            s, f = n_in - 1, 0.0
        m[i, s] += 1.0 - f
        m[i, min(s + 1, n_in - 1)] += f
    return m


def _resize_apply(xp, x, rows, cols):
    rh, rw = (xp.asarray(m.astype(x.dtype)) for m in (rows, cols))
    return xp.einsum("ip,...pqc,jq->...ijc", rh, x, rw).astype(x.dtype, copy=False)


def _resize_prepare(params, node):
    if params["interp"] not in (0, 1):
        raise ParamError(
            f"_image_resize {node!r}: parameter 'interp' must be 0 (nearest) or 1 (bilinear), "
            f"got {params['interp']}; OpenCV's area, cubic and Lanczos modes are not implemented"
        )
    return params


@wait_for_first_input
def _resize_shape(params, in_shapes, out_shapes, where):
    x = in_shapes[0]
    h, w, c = _hwc(x, where)
    oh, ow = _resize_hw(params, h, w, where)
    return in_shapes, [tuple(x[:-3]) + (oh, ow, c)]


def _resize_fwd(xp, x, size, keep_ratio, interp):
    h, w = x.shape[-3:-1]
    oh, ow = _resize_hw({"size": size, "keep_ratio": keep_ratio}, h, w, "_image_resize")
    return _resize_apply(xp, x, _interp_matrix(oh, h, interp), _interp_matrix(ow, w, interp))


_RESIZE_PARAMS = {"size": Param("shape", ()), "keep_ratio": Param("bool", False), "interp": Param("int", 1)}

register(
    "_image_resize",
    aliases=("_npx__image_resize",),
    params=_RESIZE_PARAMS,
    prepare=_resize_prepare,
    forward=_resize_fwd,
    infer_shape=_resize_shape,
    gradient=lambda F, n, g: [F._image_resize_adjoint(g[0], n.inputs[0], **n.params)],
    doc="Resize an (H, W, C) or (N, H, W, C) image to size (width, height), or its edges (short edge with "
    "keep_ratio) to size; interp 0 nearest, 1 bilinear (OpenCV's sampling).",
)


def _adjoint_fwd(xp, g, like, size, keep_ratio, interp):
    h, w = like.shape[-3:-1]
    oh, ow = g.shape[-3:-1]
    return _resize_apply(xp, g, _interp_matrix(oh, h, interp).T, _interp_matrix(ow, w, interp).T)


register(
    "_image_resize_adjoint",
    inputs=("ograd", "data"),
    params=_RESIZE_PARAMS,
    forward=_adjoint_fwd,
    infer_shape=output_like(1),
    infer_type=output_like(0),
    no_grad_inputs=("data",),
    # linear in g with the transposed matrices: its adjoint is the resize
    gradient=lambda F, n, g: [F._image_resize(g[0], **n.params), None],
    doc="_image_resize's gradient: Rh^T g Rw, shaped like ``data`` (hidden).",
)


# -- random augmentations -----------------------------------------------------------------------------------
# One random choice per call (MXNet draws once for the whole image), from symgrad's seeded generator
# (``sg.random.seed``); the choice is kept as a hidden output so the gradient is the derivative of what the
# forward did (MXNet's gradient of these ops is ``_copy``): a flip's is the same flip of the head gradient,
# a brightness factor's the head gradient times the factor, a lighting offset's the head gradient itself.
# ``is_random``: the numeric checkers refuse them (their output changes from run to run).


def _flip_if_fwd(xp, g, flag, axis_from_end):
    return xp.flip(g, axis=g.ndim - axis_from_end).copy() if float(flag.reshape(-1)[0]) else g.copy()


register(
    "_image_flip_if",
    inputs=("data", "flag"),
    params={"axis_from_end": Param("int")},
    forward=_flip_if_fwd,
    infer_shape=output_like(0),
    infer_type=output_like(0),
    no_grad_inputs=("flag",),
    # a flip or the identity, chosen by flag: symmetric permutations, each its own adjoint
    gradient=lambda F, n, g: [F._image_flip_if(g[0], n.inputs[1], **n.params), None],
    doc="Flip ``data`` along axis ndim - axis_from_end when ``flag`` is nonzero (hidden).",
)


def _register_random_flip(name, axis_from_end, what):
    def forward(xp, x):
        from .random import generator

        flip = generator(xp).uniform(()) >= 0.5  # MXNet: bernoulli(0.5) true keeps the image
        flag = xp.full((1,), 1.0 if flip else 0.0, dtype=x.dtype)
        return (xp.flip(x, axis=x.ndim - axis_from_end).copy() if flip else x.copy()), flag

    register(
        name,
        aliases=(f"_npx_{name}",),
        num_outputs=2,
        num_visible=1,
        output_names=("output", "flag"),
        forward=forward,
        infer_shape=lambda params, in_shapes, out_shapes, where: (
            _image_shape(params, in_shapes, out_shapes[:1], where)[0],
            [in_shapes[0], (1,)] if in_shapes[0] is not None else out_shapes,
        ),
        infer_type=lambda params, in_types, out_types, where: (in_types, [in_types[0], in_types[0]]),
        gradient=lambda F, n, g: [F._image_flip_if(g[0], n.outputs[1], axis_from_end=axis_from_end)],
        is_random=True,
        doc=f"Flip an image {what} with probability 1/2.",
    )


_register_random_flip("_image_random_flip_left_right", 2, "left to right")
_register_random_flip("_image_random_flip_top_bottom", 3, "top to bottom")


def _draw_factor(xp, x, min_factor, max_factor):
    """The random enhancements' factor, as a (1,) array in ``x``'s dtype: MXNet draws a float32 factor in
    [min_factor, max_factor)."""
    from .random import generator

    alpha = np.float32(min_factor + (max_factor - min_factor) * float(generator(xp).uniform(())))
    return xp.full((1,), alpha, dtype=x.dtype)


def _brightness_fwd(xp, x, min_factor, max_factor):
    factor = _draw_factor(xp, x, min_factor, max_factor)
    return (x * factor).astype(x.dtype, copy=False), factor


def _enhance_prepare(params, node):
    lo, hi = params["min_factor"], params["max_factor"]
    if lo < 0 or hi < lo:
        raise ParamError(f"_image_random_brightness {node!r}: need 0 <= min_factor <= max_factor, got {lo}, {hi}")
    return params


register(
    "_image_random_brightness",
    aliases=("_npx__image_random_brightness",),
    params={"min_factor": Param("float"), "max_factor": Param("float")},
    prepare=_enhance_prepare,
    num_outputs=2,
    num_visible=1,
    output_names=("output", "factor"),
    forward=_brightness_fwd,
    infer_shape=lambda params, in_shapes, out_shapes, where: (
        in_shapes,
        [_image_shape(params, in_shapes, out_shapes[:1], where)[1][0], (1,)],
    ),
    infer_type=lambda params, in_types, out_types, where: (in_types, [in_types[0], in_types[0]]),
    # y = alpha x with the drawn alpha: dx = alpha g
    gradient=lambda F, n, g: [F.broadcast_mul(g[0], n.outputs[1])],
    is_random=True,
    doc="Scale an image by a factor drawn uniformly from [min_factor, max_factor).",
)


def _random_lighting_fwd(xp, x, alpha_std):
    from .random import generator

    alpha = (np.float32(alpha_std) * generator(xp).normal((3,)).astype(np.float32)).tolist()
    return _lighting_fwd(xp, x, alpha)


register(
    "_image_random_lighting",
    aliases=("_npx__image_random_lighting",),
    params={"alpha_std": Param("float", 0.05)},
    forward=_random_lighting_fwd,
    infer_shape=lambda params, in_shapes, out_shapes, where: _lighting_shape(
        {"alpha": (0.0, 0.0, 0.0)}, in_shapes, out_shapes, where
    ),
    gradient=lambda F, n, g: [F.identity(g[0])],  # y = x + a drawn constant offset per channel
    is_random=True,
    doc="AlexNet PCA lighting with alphas drawn from N(0, alpha_std^2).",
)


# -- contrast and saturation -------------------------------------------------------------------------------
# Both blend the image with a grey version of itself: y = alpha x + (1 - alpha) grey. Contrast's grey is the
# mean luminance of the whole image (one number), saturation's the luminance of each pixel. Luminance is
# 0.299 R + 0.587 G + 0.114 B (a one-channel image is its own luminance). MXNet's saturation sums only the
# blue term (``gray = input * coef`` instead of ``+=`` in 1.9.1's AdjustSaturationImpl); symgrad uses the
# luminance it documents. Luminance is linear, so each grey op's gradient is its adjoint (below), and back.

_LUMA = (0.299, 0.587, 0.114)


def _luma_weights(xp, channels, dtype):
    return xp.asarray(np.asarray(_LUMA if channels == 3 else (1.0,) * channels, dtype=np.float32).astype(dtype))


@wait_for_first_input
def _grey_shape(params, in_shapes, out_shapes, where):
    """An (H, W, C) image -> (H, W, 1) luminance, or (1,) its mean."""
    x = in_shapes[0]
    _check_hwc(x, where)
    return in_shapes, [(1,) if params["mean"] else tuple(x[:-1]) + (1,)]


def _grey_fwd(xp, x, mean):
    grey = (x * _luma_weights(xp, x.shape[-1], x.dtype)).sum(axis=-1, keepdims=True)
    return grey.mean(keepdims=True).reshape(1) if mean else grey


def _grey_adjoint_fwd(xp, g, like, mean):
    w = _luma_weights(xp, like.shape[-1], g.dtype)
    if mean:  # d/dx of mean(grey) spreads g / (H W) over the pixels, times each channel's weight
        return xp.broadcast_to(g.reshape(()) / g.dtype.type(like.shape[0] * like.shape[1]) * w, like.shape).copy()
    return (g * w).astype(g.dtype, copy=False)


register(
    "_image_grey",
    params={"mean": Param("bool", False)},
    forward=_grey_fwd,
    infer_shape=_grey_shape,
    gradient=lambda F, n, g: [F._image_grey_adjoint(g[0], n.inputs[0], **n.params)],
    doc="Luminance of an (H, W, C) image per pixel, or its mean over the image (hidden).",
)
register(
    "_image_grey_adjoint",
    inputs=("ograd", "data"),
    params={"mean": Param("bool", False)},
    forward=_grey_adjoint_fwd,
    infer_shape=adjoint_shape("_image_grey", (1,), like=1),
    infer_type=output_like(0),
    no_grad_inputs=("data",),
    gradient=lambda F, n, g: [F._image_grey(g[0], **n.params), None],
    doc="_image_grey's gradient: the head gradient spread over the channels by their luminance weights (hidden).",
)


def _blend_fwd(mean):
    def forward(xp, x, min_factor, max_factor):
        factor = _draw_factor(xp, x, min_factor, max_factor)
        grey = _grey_fwd(xp, x, mean)
        return (x * factor + grey * (1 - factor)).astype(x.dtype, copy=False), factor

    return forward


def _blend_grad(mean):
    def gradient(F, n, g):
        # y = alpha x + (1 - alpha) grey(x): dx = alpha g + grey^T((1 - alpha) g summed onto grey's shape)
        x, alpha = n.inputs[0], n.outputs[1]
        rest = F.broadcast_mul(g[0], F._rminus_scalar(alpha, scalar=1.0))
        onto = F.sum(rest) if mean else F.sum(rest, axis=-1, keepdims=True)
        return [F.broadcast_mul(g[0], alpha) + F._image_grey_adjoint(onto, x, mean=mean)]

    return gradient


for _name, _mean, _what in (
    ("_image_random_contrast", True, "the image's mean luminance"),
    ("_image_random_saturation", False, "each pixel's luminance"),
):
    register(
        _name,
        aliases=(f"_npx_{_name}",),
        params={"min_factor": Param("float"), "max_factor": Param("float")},
        prepare=_enhance_prepare,
        num_outputs=2,
        num_visible=1,
        output_names=("output", "factor"),
        forward=_blend_fwd(_mean),
        infer_shape=lambda params, in_shapes, out_shapes, where: (
            in_shapes,
            [
                None
                if in_shapes[0] is None
                else _lighting_shape({"alpha": (0, 0, 0)}, in_shapes, out_shapes[:1], where)[1][0],
                (1,),
            ],
        ),
        infer_type=lambda params, in_types, out_types, where: (in_types, [in_types[0], in_types[0]]),
        gradient=_blend_grad(_mean),
        is_random=True,
        doc=f"Blend an (H, W, C) image with {_what} by a factor drawn from [min_factor, max_factor).",
    )
