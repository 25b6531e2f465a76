"""MXNet's pre-1.0 operators kept for old model files: ``Convolution_v1`` and ``Pooling_v1``.

Their math is that of today's ``Convolution`` and ``Pooling`` (``Pooling_v1`` lacks the newer parameters
``cudnn_off``, ``p_value``, ``count_include_pad`` (always included) and ``layout``; its average over windows
that overhang the input in ``full`` mode divides by the whole kernel area, which symgrad refuses), so each is a
separate registration -- its own name, written back into symbol JSON -- sharing the current op's rules.
"""

from __future__ import annotations

from dataclasses import fields

from ..base import ParamError
from ..opdef import OpDef, get_op, register
from . import conv, pool  # noqa: F401  (the ops re-used here are registered there)


def _no_full_avg(params, node_name):
    if params["pool_type"] == "avg" and params["pooling_convention"] == "full" and not params["global_pool"]:
        raise ParamError(
            f"Pooling_v1 {node_name!r}: pool_type='avg' with pooling_convention='full' is not "
            "supported: MXNet's legacy kernel divides the windows that overhang the input by the whole "
            "kernel area, which no other pooling does; use Pooling"
        )
    return params


def _like(name: str, current: str, *, keep_params=None, check=None, doc: str, **rules) -> OpDef:
    """Register ``name`` with every rule of ``current``; ``keep_params`` limits the parameter schema (the
    rules still see every parameter, the dropped ones at their defaults); ``rules`` replace some of them."""
    op = get_op(current)
    spec = {f.name: getattr(op, f.name) for f in fields(OpDef) if f.name not in ("name", "doc")}
    if keep_params is not None:
        defaults = {k: p.default for k, p in op.params.items() if k not in keep_params}
        spec["params"] = {k: op.params[k] for k in keep_params}
        prepare = op.prepare

        def fill(params, node_name):
            params = {**params, **defaults}
            if check is not None:
                params = check(params, node_name)
            return prepare(params, node_name) if prepare is not None else params

        spec["prepare"] = fill
    spec.update(rules)
    return register(name, doc=doc, **spec)


_like("Convolution_v1", "Convolution", doc="MXNet's legacy Convolution (the same math as Convolution).")
_like(
    "Pooling_v1",
    "Pooling",
    keep_params=("kernel", "pool_type", "global_pool", "pooling_convention", "stride", "pad"),
    check=_no_full_avg,
    **pool.SINGLE_OUTPUT_RULES,  # MXNet's legacy max pooling has no hidden workspace output
    doc="MXNet's legacy Pooling: Pooling without p_value, count_include_pad (padding counted), layout.",
)
