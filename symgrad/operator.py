"""Custom operators written in Python, with MXNet's API (``mx.operator``).

An MXNet user's custom op runs unchanged apart from the import::

    @sg.operator.register("sigmoid2")
    class Sigmoid2Prop(sg.operator.CustomOpProp):
        def create_operator(self, ctx, shapes, dtypes):
            return Sigmoid2()

    y = sg.sym.Custom(x, op_type="sigmoid2")

Arrays handed to ``forward``/``backward`` are numpy arrays on cpu (views of
symgrad's arrays, of a subclass that also answers MXNet's ``asnumpy()``,
``stype == 'default'`` and ``context``; writes go through) and CuPy arrays on
gpu. An exception raised inside a custom op's code surfaces as a
``CustomOpError`` naming the node and its ``op_type`` (the original exception
is its ``__cause__``). Keyword arguments of
``sg.sym.Custom`` reach the prop's constructor as strings, as in MXNet. The
gradient is the hidden node ``_backward_Custom`` calling ``backward``; it has
no gradient of its own, so second order through a custom op is a clear error.

As in MXNet, every executor creates its own operator instances
(``create_operator``, once per input shapes and dtypes), so a stateful operator
(one that keeps a mask from ``forward`` for ``backward``) bound twice, or run
in several threads by several executors, keeps one state per executor.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeAlias, TypeVar

import numpy as np

from .base import ParamError, ShapeError, SymgradError
from .context import Array, Context, array_context, cpu, gpu, to_numpy
from .nd import HostArray as _HostArray
from .nd import device_array_class
from .opdef import REQUIRED, Param
from .opdef import get_op as _get_op
from .opdef import list_ops as _list_ops
from .opdef import register as _register_op
from .symbol import positional_params

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = [
    "CustomOp",
    "CustomOpProp",
    "CustomOpError",
    "register",
    "get_registered",
    "get_all_registered_operators",
    "get_operator_arguments",
    "OperatorArguments",
]


class CustomOpError(SymgradError):
    """An exception raised by a custom op's Python code (``forward``, ``backward``, ``infer_shape``, ...).

    The message names the node and its ``op_type``; the original exception is ``__cause__``. The error is
    also an instance of the original exception's type where Python allows it (``except RuntimeError``
    keeps working), and carries ``symgrad_node`` like every error raised while running a plan.
    """


_ERROR_TYPES: dict = {}


def _custom_op_error_type(original: type) -> type:
    """``CustomOpError`` combined with ``original`` (plain ``CustomOpError`` where the two cannot be combined)."""
    cls = _ERROR_TYPES.get(original)
    if cls is None:
        cls = CustomOpError
        if not issubclass(CustomOpError, original):
            try:
                cls = type(
                    f"CustomOpError[{original.__name__}]",
                    (CustomOpError, original),
                    {"__module__": __name__, "__str__": Exception.__str__},
                )
            except TypeError:  # an exception type with its own instance layout (OSError, SyntaxError...)
                cls = CustomOpError
        _ERROR_TYPES[original] = cls
    return cls


# -- the operator registry, as MXNet's ``mx.operator`` exposes it ---------------------------------------

OperatorArguments = namedtuple("OperatorArguments", ["narg", "names", "types"])
OperatorArguments.__doc__ = "``get_operator_arguments``' answer: argument count, names and type strings (MXNet)."

#: what MXNet calls a variadic op's input list (``add_n(*args)``, ``Concat(*data)``)
_VARIADIC_INPUT = {"add_n": "args", "ElementWiseSum": "args"}


def get_all_registered_operators() -> list[str]:
    """Every registered operator name, aliases included, sorted (``mx.operator.get_all_registered_operators``).

    >>> "FullyConnected" in get_all_registered_operators()
    True
    """
    return sorted(_list_ops())


def get_operator_arguments(op_name: str) -> OperatorArguments:
    """The inputs and parameters of ``op_name`` in the order its creator takes them positionally
    (``mx.operator.get_operator_arguments``): inputs first (type ``'NDArray-or-Symbol'``, or
    ``'NDArray-or-Symbol[]'`` for a variadic op's inputs), then the parameters, typed as MXNet spells them
    (``'int, required'``, ``"float, optional, default=0.5"``, ``"{'always', 'training'},optional, default=..."``).
    An op whose inputs depend on its parameters lists those of its default parameters.

    >>> get_operator_arguments("repeat")
    OperatorArguments(narg=3, names=['data', 'repeats', 'axis'], types=['NDArray-or-Symbol', 'int, required', \
"int or None, optional, default='None'"])
    """
    op = _get_op(op_name)
    if op.variadic or op.extra_params:
        names, types = [_VARIADIC_INPUT.get(op.name, "data")], ["NDArray-or-Symbol[]"]
    else:
        names = _default_inputs(op)
        types = ["NDArray-or-Symbol"] * len(names)
    pnames = (
        positional_params(op)
        if not (op.variadic or op.extra_params)
        else [p for p in op.params if not p.startswith("_")]
    )
    for p in pnames:
        names.append(p)
        types.append(_type_string(op.params[p]))
    return OperatorArguments(len(names), names, types)


def _default_inputs(op) -> list[str]:
    """The input names of ``op``: where they depend on a flag (``no_bias``, ``use_length``), the longest list
    its default parameters or one flipped flag give, as MXNet lists every optional input."""
    params = {k: (None if v.default is REQUIRED else v.default) for k, v in op.params.items()}
    candidates = [params] + [{**params, k: not v} for k, v in params.items() if isinstance(v, bool)]
    best = None
    for p in candidates:
        try:
            names = list(op.list_inputs(p)) + list(op.list_aux(p))
        except Exception:  # inputs that need a required parameter to be named
            continue
        if best is None or len(names) > len(best):
            best = names
    return best if best is not None else ["data"]


_KIND_NAMES = {
    "int": "int",
    "float": "float",
    "bool": "boolean",
    "shape": "Shape(tuple)",
    "axis": "Shape or None",
    "str": "string",
    "floats": "tuple of <float>",
    "any": "string",
}


def _type_string(spec: Param) -> str:
    """MXNet's type string of a parameter: ``'int, required'``, ``"int or None, optional, default='None'"``."""
    default = spec.default
    if spec.choices or spec.kind == "dtype":
        if spec.choices:
            options = sorted(repr(c) for c in spec.choices)
        else:
            options = sorted(
                f"'{name}'" for name in ("float16", "float32", "float64", "uint8", "int8", "int32", "int64", "bool")
            )
        if spec.optional:
            options.insert(0, "None")
        head = "{" + ", ".join(options) + "}"
        if default is REQUIRED:
            return f"{head}, required"
        shown = "None" if default is None else getattr(default, "name", default)
        return f"{head},optional, default='{shown}'"
    kind = _KIND_NAMES.get(spec.kind, "string")
    if spec.optional and spec.kind not in ("axis", "str", "any"):
        kind += " or None"
    if default is REQUIRED:
        return f"{kind}, required"
    if default is None:
        shown = "'None'" if spec.kind == "int" else "None"
    elif isinstance(default, bool):
        shown = str(int(default))
    elif isinstance(default, tuple):
        shown = "[" + ",".join(str(v) for v in default) + "]"
    elif isinstance(default, str):
        shown = f"'{default}'"
    elif isinstance(default, float) and default.is_integer():
        shown = str(int(default))
    else:
        shown = str(default)
    return f"{kind}, optional, default={shown}"


_PROPS: dict[str, type[CustomOpProp]] = {}

#: The shapes of a custom op's inputs, outputs or auxiliary states: one list of dimensions each.
ShapeList: TypeAlias = "Sequence[Sequence[int]]"
#: ``CustomOpProp.infer_shape``'s answer: ``(in_shapes, out_shapes)`` or ``(in_shapes, out_shapes, aux_shapes)``.
InferShapeResult: TypeAlias = "tuple[ShapeList, ShapeList] | tuple[ShapeList, ShapeList, ShapeList]"
#: ``CustomOpProp.infer_type``'s answer: ``(in_types, out_types)`` or ``(in_types, out_types, aux_types)``.
InferTypeResult: TypeAlias = (
    "tuple[Sequence[npt.DTypeLike], Sequence[npt.DTypeLike]]"
    " | tuple[Sequence[npt.DTypeLike], Sequence[npt.DTypeLike], Sequence[npt.DTypeLike]]"
)
_PropT = TypeVar("_PropT", bound="CustomOpProp")


class CustomOp:
    """Base class of a Python operator: override ``forward`` and ``backward``."""

    def __init__(self) -> None:
        pass

    def forward(
        self, is_train: bool, req: list[str], in_data: list[Array], out_data: list[Array], aux: list[Array]
    ) -> None:
        """Fill ``out_data`` from ``in_data`` (use ``self.assign(dst, req[i], src)``)."""

    def backward(
        self,
        req: list[str],
        out_grad: list[Array],
        in_data: list[Array],
        out_data: list[Array],
        in_grad: list[Array],
        aux: list[Array],
    ) -> None:
        """Fill ``in_grad`` (use ``self.assign(in_grad[i], req[i], src)``)."""

    def assign(self, dst: Array, req: str, src: npt.ArrayLike) -> None:
        """Write ``src`` into ``dst`` as ``req`` says: 'write'/'inplace', 'add' or 'null'."""
        if req not in ("write", "inplace", "add", "null"):
            raise ValueError(f"assign: req must be 'write', 'inplace', 'add' or 'null', got {req!r}")
        if req == "null":
            return
        src = _on_device_of(dst, src)
        if req == "add":
            dst[...] += src
        else:
            dst[...] = src


def _on_device_of(dst: Array, src: npt.ArrayLike) -> Array:
    """``src`` where ``dst`` lives: a host value (``sg.nd.array``'s on cpu, as MXNet's ``mx.nd.array`` makes it
    on the default cpu context) copied to ``dst``'s GPU, or a GPU array copied to the host for a host ``dst``."""
    where = array_context(dst)
    if where is None or where.device_type == "cpu":
        return to_numpy(src) if array_context(src) not in (None, cpu()) else src
    with where.device_scope():
        return where.xp.asarray(src)


class CustomOpProp:
    """Describes a custom op: its inputs, outputs, shapes, dtypes and how to create it."""

    def __init__(self, need_top_grad: bool = True) -> None:
        self.need_top_grad_ = need_top_grad

    def infer_shape(self, in_shape: list[list[int]]) -> InferShapeResult:
        """``(input shapes, output shapes, auxiliary shapes)`` from the inputs' shapes (default: every output
        has the first input's shape, no auxiliary states)."""
        return in_shape, (in_shape[0],) * len(self.list_outputs()), ()

    def infer_type(self, in_type: list[type[np.generic]]) -> InferTypeResult:
        """``(input dtypes, output dtypes, auxiliary dtypes)`` from the inputs' dtypes (default: the first
        input's dtype everywhere)."""
        return in_type, [in_type[0]] * len(self.list_outputs()), [in_type[0]] * len(self.list_auxiliary_states())

    def list_outputs(self) -> list[str]:
        """The output names (default ``["output"]``)."""
        return ["output"]

    def list_arguments(self) -> list[str]:
        """The input names, in the order ``sg.sym.Custom``'s inputs feed them (default ``["data"]``)."""
        return ["data"]

    def list_auxiliary_states(self) -> list[str]:
        """The auxiliary state names (default none)."""
        return []

    def declare_backward_dependency(
        self, out_grad: Sequence[int], in_data: Sequence[int], out_data: Sequence[int]
    ) -> list[int]:
        """MXNet's memory hint: the ids of the arrays ``backward`` reads. symgrad does not call it: ``backward``
        always gets ``in_data`` and ``out_data``, and ``out_grad`` unless ``need_top_grad`` is False (a loss)."""
        deps: list[int] = []
        if self.need_top_grad_:
            deps.extend(out_grad)
        deps.extend(in_data)
        deps.extend(out_data)
        return deps

    def create_operator(self, ctx: Context, in_shapes: list[list[int]], in_dtypes: list[type[np.generic]]) -> CustomOp:
        """The ``CustomOp`` instance of one executor, for these input shapes and dtypes (override it)."""
        return CustomOp()


def register(reg_name: str) -> Callable[[type[_PropT]], type[_PropT]]:
    """Class decorator registering a ``CustomOpProp`` subclass under ``reg_name``."""

    def do_register(prop_cls: type[_PropT]) -> type[_PropT]:
        if not (isinstance(prop_cls, type) and issubclass(prop_cls, CustomOpProp)):
            raise TypeError(f"register({reg_name!r}): expected a CustomOpProp subclass, got {prop_cls!r}")
        _PROPS[reg_name] = prop_cls
        return prop_cls

    return do_register


def get_registered(reg_name: str) -> type[CustomOpProp]:
    """The ``CustomOpProp`` subclass registered under ``reg_name`` (``ParamError`` naming the registered ones)."""
    try:
        return _PROPS[reg_name]
    except KeyError:
        known = f"registered: {sorted(_PROPS)}" if _PROPS else "no Custom op is registered"
        raise ParamError(
            f"Custom: op_type {reg_name!r} is not registered; {known} (decorate a CustomOpProp with "
            "@symgrad.operator.register(name) and import its module before loading the model; the symgrad "
            "command imports it with --import MODULE_OR_PATH)"
        ) from None


class _State:
    """The prop of one Custom node and its operator instances (per shapes/dtypes/device)."""

    def __init__(self, op_type, kwargs, name):
        self.op_type = op_type
        self.name = name
        self.prop = get_registered(op_type)(**kwargs)
        self._ops = {}
        #: ``{j: (buffer, req)}`` during one backward: ``in_grad[j]`` is an argument's gradient buffer (set and
        #: cleared by ``Executor.backward``)
        self.grad_targets = {}

    def __repr__(self):  # keeps plan/attr printing readable
        return f"<custom {self.op_type}>"

    def per_executor(self) -> _State:
        """A state sharing this node's prop but with its own operator instances (one per executor)."""
        own = object.__new__(_State)
        own.op_type, own.name, own.prop, own._ops, own.grad_targets = self.op_type, self.name, self.prop, {}, {}
        return own

    def operator(self, xp, in_data):
        ctx = cpu() if xp is np else gpu(int(xp.cuda.Device().id))
        shapes = tuple(tuple(x.shape) for x in in_data)
        dtypes = tuple(np.dtype(x.dtype).name for x in in_data)
        key = (ctx, shapes, dtypes)
        op = self._ops.get(key)
        if op is None:
            op = self.prop.create_operator(ctx, [list(s) for s in shapes], [np.dtype(d).type for d in dtypes])
            self._ops[key] = op
        return op

    def where(self):
        return f"Custom {self.name!r} (op_type {self.op_type!r})"

    def n(self):
        p = self.prop
        return len(p.list_arguments()), len(p.list_outputs()), len(p.list_auxiliary_states())


def _wrap(xp, arrays):
    """A custom op's arrays as views answering the NDArray methods MXNet code calls (``asnumpy()``, ...)."""
    if xp is np:
        return [np.asarray(a).view(_HostArray) for a in arrays]
    cls = device_array_class(xp)
    return [a.view(type=cls) for a in arrays]


def _call(state, what, fn):
    try:
        return fn()
    except Exception as exc:
        msg = f"{state.where()}: error in {what}: {type(exc).__name__}: {exc}"
        new = _custom_op_error_type(type(exc)).__new__(_custom_op_error_type(type(exc)), msg)
        Exception.__init__(new, msg)
        raise new from exc


def _prepare(params, name):
    extra = {k: v for k, v in params.items() if k != "op_type"}
    return {"op_type": params["op_type"], "__state__": _State(params["op_type"], extra, name)}


def _state(params) -> _State:
    return params["__state__"]


def _custom_inputs(params):
    st = _state(params)
    return list(st.prop.list_arguments())


def _custom_aux(params):
    return list(_state(params).prop.list_auxiliary_states())


def _custom_shape(params, in_shapes, out_shapes, where):
    st = _state(params)
    n_in, n_out, n_aux = st.n()
    args = in_shapes[:n_in]
    if any(s is None for s in args[:1]):
        return in_shapes, out_shapes
    try:
        res = st.prop.infer_shape([list(s) if s is not None else [] for s in args])
    except Exception as exc:
        if any(s is None for s in args):
            return in_shapes, out_shapes  # let it retry once more shapes are known
        raise ShapeError(f"{where}: infer_shape of custom op {st.op_type!r} failed: {exc}") from exc
    ins, outs = res[0], res[1]
    aux = res[2] if len(res) > 2 else ()
    if len(ins) != n_in or len(outs) != n_out or len(aux) not in (0, n_aux):
        raise ShapeError(
            f"{where}: infer_shape of custom op {st.op_type!r} returned {len(ins)}/{len(outs)}/{len(aux)} shapes "
            f"for {n_in} arguments, {n_out} outputs, {n_aux} auxiliary states"
        )
    new_in = [tuple(s) if s is not None and len(s) else None for s in ins]
    new_aux = [tuple(s) for s in aux] if aux else list(in_shapes[n_in:])
    return new_in + new_aux, [tuple(s) for s in outs]


def _custom_type(params, in_types, out_types, where):
    st = _state(params)
    n_in, n_out, n_aux = st.n()
    if in_types[0] is None:
        return in_types, out_types
    filled = [np.dtype(t if t is not None else in_types[0]).type for t in in_types[:n_in]]
    res = st.prop.infer_type(filled)
    ins, outs = res[0], res[1]
    aux = res[2] if len(res) > 2 else [in_types[0]] * n_aux
    return [np.dtype(t) for t in list(ins) + list(aux)], [np.dtype(t) for t in outs]


def _custom_fwd(xp, *inputs, is_train, op_type, __state__):
    st = __state__
    n_in, n_out, _ = st.n()
    in_data, aux = _wrap(xp, inputs[:n_in]), _wrap(xp, inputs[n_in:])
    res = _call(st, "infer_shape", lambda: st.prop.infer_shape([list(x.shape) for x in in_data]))
    types = _call(st, "infer_type", lambda: st.prop.infer_type([np.dtype(x.dtype).type for x in in_data]))
    out_data = _wrap(xp, [xp.zeros(tuple(s), dtype=t) for s, t in zip(res[1], types[1])])
    op = _call(st, "create_operator", lambda: st.operator(xp, in_data))
    _call(
        st,
        "forward",
        lambda: op.forward(is_train=is_train, req=["write"] * n_out, in_data=in_data, out_data=out_data, aux=aux),
    )
    outs = tuple(xp.asarray(o) if xp is not np else o.view(np.ndarray) for o in out_data)
    return outs


def _custom_grad(F, n, g):
    st = _state(n.params)
    n_in, n_out, n_aux = st.n()
    reqs = tuple("write" if n.needs[i] else "null" for i in range(n_in))
    ograds = []
    if st.prop.need_top_grad_:
        ograds = [g[k] if g[k] is not None else F.zeros_like(n.outputs[k]) for k in range(n_out)]
    grads = F._backward_Custom(
        *ograds, *n.inputs[:n_in], *n.outputs, *n.inputs[n_in:], __state__=st, reqs=reqs, has_ograd=bool(ograds)
    )
    grads = list(grads)
    return [grads[i] if n.needs[i] else None for i in range(n_in)] + [None] * n_aux


def _custom_bwd(xp, *arrays, num_args, __state__, reqs, has_ograd):
    st = __state__
    n_in, n_out, n_aux = st.n()
    k = 0
    out_grad = []
    if has_ograd:
        out_grad, k = list(arrays[:n_out]), n_out
    in_data = arrays[k : k + n_in]
    out_data = arrays[k + n_in : k + n_in + n_out]
    aux = arrays[k + n_in + n_out :]
    if not has_ograd:
        out_grad = [xp.zeros_like(o) for o in out_data]
    w_in, w_out, w_og, w_aux = (_wrap(xp, a) for a in (in_data, out_data, out_grad, aux))
    # an argument's own gradient buffer and grad_req where the executor hands them over (Executor.backward:
    # dirty, 'write' or 'add', as MXNet's); elsewhere a zeroed buffer to be written
    given = st.grad_targets
    reqs = [given[j][1] if j in given and reqs[j] != "null" else r for j, r in enumerate(reqs)]
    in_grad = _wrap(xp, [given[j][0] if j in given else xp.zeros_like(x) for j, x in enumerate(in_data)])
    op = _call(st, "create_operator", lambda: st.operator(xp, w_in))
    _call(
        st,
        "backward",
        lambda: op.backward(req=list(reqs), out_grad=w_og, in_data=w_in, out_data=w_out, in_grad=in_grad, aux=w_aux),
    )
    return tuple(xp.asarray(gr) if xp is not np else gr.view(np.ndarray) for gr in in_grad)


def _bwd_shape(params, in_shapes, out_shapes, where):
    """Input gradients are shaped (and typed) like the inputs."""
    st = params["__state__"]
    n_in, n_out, _ = st.n()
    k = n_out if params["has_ograd"] else 0
    return in_shapes, list(in_shapes[k : k + n_in])


_register_op(
    "Custom",
    inputs=_custom_inputs,
    aux=_custom_aux,
    params={"op_type": Param("str")},
    extra_params=True,
    prepare=_prepare,
    num_outputs=lambda p: len(_state(p).prop.list_outputs()),
    output_names=lambda p: list(_state(p).prop.list_outputs()),
    forward=_custom_fwd,
    infer_shape=_custom_shape,
    infer_type=_custom_type,
    gradient=_custom_grad,
    needs_is_train=True,
    is_loss=lambda p: not _state(p).prop.need_top_grad_,
    doc="A Python operator registered with @symgrad.operator.register (MXNet's Custom).",
)

_register_op(
    "_backward_Custom",
    variadic="num_args",
    params={
        "num_args": Param("int"),
        "__state__": Param("any"),
        "reqs": Param("any"),
        "has_ograd": Param("bool"),
    },
    num_outputs=lambda p: p["__state__"].n()[0],
    forward=_custom_bwd,
    infer_shape=_bwd_shape,
    infer_type=lambda p, i, o, w: _bwd_shape(p, i, o, w),
    gradient=None,
    grad_undefined_reason="a custom op's backward is Python code (CustomOp.backward) with no gradient rule: "
    "second-order gradients through Custom ops are not defined",
)
