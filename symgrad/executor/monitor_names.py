"""The names MXNet 1.9.1's executor monitor gives operator inputs (``set_monitor_callback(..., monitor_all=True)``).

MXNet reports input ``i`` of a node as ``<node>_<name>``, where ``name`` comes from the op's ``FListInputNames``;
an op that registers none gets ``input<i>`` (``Activation`` -> ``act_input0``, ``relu`` -> ``relu0_input0``),
and the backward ops of the unary math functions are registered as binary ops (``lhs``, ``rhs``). The lists
below were recorded from MXNet itself (``tests/fixtures/make_mxnet_monitor_names.py``; checked against the
recording by ``tests/test_executor_mxnet.py``); every other op's inputs keep symgrad's argument names, which are
MXNet's ``FListInputNames`` for the ops recorded.
"""

from __future__ import annotations

from ..graph import Node

__all__ = ["monitor_input_names"]

#: ops MXNet registers without ``FListInputNames``: their inputs are ``input0``, ``input1``, ...
POSITIONAL = frozenset(
    {
        "Activation",
        "BlockGrad",
        "Cast",
        "Flatten",
        "Reshape",
        "SoftmaxActivation",
        "_contrib_AdaptiveAvgPooling2D",
        "_contrib_arange_like",
        "_contrib_bipartite_matching",
        "_contrib_box_nms",
        "_contrib_div_sqrt_dim",
        "_contrib_gradientmultiplier",
        "_contrib_round_ste",
        "_contrib_sign_ste",
        "_copy",
        "_div_scalar",
        "_equal_scalar",
        "_greater_equal_scalar",
        "_greater_scalar",
        "_hypot_scalar",
        "_image_adjust_lighting",
        "_image_crop",
        "_image_flip_left_right",
        "_image_flip_top_bottom",
        "_image_random_flip_left_right",
        "_image_random_flip_top_bottom",
        "_image_random_lighting",
        "_image_resize",
        "_lesser_equal_scalar",
        "_lesser_scalar",
        "_logical_and_scalar",
        "_logical_or_scalar",
        "_logical_xor_scalar",
        "_maximum_scalar",
        "_minimum_scalar",
        "_minus_scalar",
        "_mod_scalar",
        "_mul_scalar",
        "_not_equal_scalar",
        "_plus_scalar",
        "_power_scalar",
        "_random_exponential_like",
        "_random_gamma_like",
        "_random_generalized_negative_binomial_like",
        "_random_negative_binomial_like",
        "_random_normal_like",
        "_random_poisson_like",
        "_random_uniform_like",
        "_rdiv_scalar",
        "_rminus_scalar",
        "_rmod_scalar",
        "_rpower_scalar",
        "_sample_multinomial",
        "_shuffle",
        "_slice_assign_scalar",
        "abs",
        "amp_cast",
        "arccos",
        "arccosh",
        "arcsin",
        "arcsinh",
        "arctan",
        "arctanh",
        "argmax",
        "argmax_channel",
        "argmin",
        "argsort",
        "broadcast_axis",
        "broadcast_to",
        "cbrt",
        "ceil",
        "clip",
        "cos",
        "cosh",
        "degrees",
        "erf",
        "erfinv",
        "exp",
        "expand_dims",
        "expm1",
        "fix",
        "floor",
        "gamma",
        "gammaln",
        "hard_sigmoid",
        "log",
        "log10",
        "log1p",
        "log2",
        "logical_not",
        "make_loss",
        "max",
        "mean",
        "min",
        "nanprod",
        "nansum",
        "negative",
        "norm",
        "ones_like",
        "prod",
        "radians",
        "rcbrt",
        "reciprocal",
        "relu",
        "rint",
        "round",
        "rsqrt",
        "shape_array",
        "sigmoid",
        "sign",
        "sin",
        "sinh",
        "size_array",
        "slice",
        "slice_axis",
        "smooth_l1",
        "softmin",
        "softsign",
        "sort",
        "sqrt",
        "square",
        "sum",
        "tan",
        "tanh",
        "topk",
        "transpose",
        "trunc",
        "zeros_like",
    }
)

#: backward ops MXNet registers as binary elementwise ops: the monitor calls their first two inputs lhs, rhs
LHS_RHS = frozenset(
    {
        "_backward_arccos",
        "_backward_arccosh",
        "_backward_arcsin",
        "_backward_arcsinh",
        "_backward_arctan",
        "_backward_arctanh",
        "_backward_cbrt",
        "_backward_cos",
        "_backward_cosh",
        "_backward_erf",
        "_backward_erfinv",
        "_backward_expm1",
        "_backward_gamma",
        "_backward_gammaln",
        "_backward_log",
        "_backward_log10",
        "_backward_log1p",
        "_backward_log2",
        "_backward_rcbrt",
        "_backward_reciprocal",
        "_backward_relu",
        "_backward_rsqrt",
        "_backward_sigmoid",
        "_backward_sin",
        "_backward_sinh",
        "_backward_softsign",
        "_backward_sqrt",
        "_backward_tan",
        "_backward_tanh",
    }
)

#: ops whose inputs MXNet numbers ``arg0``, ``arg1``... (a variadic registration) where symgrad names them
VARIADIC = frozenset({"Crop"})
#: ops whose inputs MXNet names ``data_0``, ``data_1``...
DATA_NUMBERED = frozenset({"amp_multicast"})


def monitor_input_names(node: Node) -> list[str]:
    """What follows ``<node>_`` in the monitor's name of each input of ``node``, as MXNet spells it."""
    names = node.input_names()
    name = node.op.name if node.op is not None else ""
    if name in POSITIONAL:
        return [f"input{i}" for i in range(len(node.inputs))]
    if name in VARIADIC:
        return [f"arg{i}" for i in range(len(node.inputs))]
    if name in DATA_NUMBERED:
        return [f"data_{i}" for i in range(len(node.inputs))]
    if name in LHS_RHS:
        return ["lhs", "rhs", *names[2:]]
    return names
