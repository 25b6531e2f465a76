"""A Python function of Symbols, as the Chainer- and PyTorch-style checkers take it, and its float64 reference.

``FuncGraph`` applies ``func`` to input Variables (``x0``, ``x1``, ... or ``input0``, ...) and holds the
values of every argument, the head gradients and the analytic side (one forward + backward in the dtypes
under test). ``Reference`` binds the same graph on float64 copies as a ``harness.Harness`` and answers
the numeric questions through the one differencer: the derivative along a direction, a Jacobian column
per element, and the per-element view of one input (central differences, kinks, the diagnosis), which
a failing directional or Jacobian check shows as a child report.
"""

from __future__ import annotations

import numbers

import numpy as np

import symgrad as sg
from symgrad.base import SymgradError
from symgrad.context import array_context
from symgrad.symbol import Group, Symbol

from ._inputs import check_finite, check_kind, check_shapes
from .compare import compare
from .context import default_context, to_device, to_numpy
from .differencer import default_steps, directional, gradient, jacobian
from .frames import hide_from_pytest as _hide_from_pytest
from .harness import Harness, analytic_noise, refuse_random_ops
from .mxnet_checks import diagnosis_context
from .numeric import element_kinks
from .objectives import projected_objective
from .report import GradientCheckError
from .scaleout import Recipe, Spread
from .tolerance import violations

__tracebackhide__ = _hide_from_pytest  # a failed check shows its report, not these frames

__all__ = [
    "FuncGraph",
    "Reference",
    "symbols_of",
    "variable_in",
    "param_dict",
    "as_tuple",
    "MAX_LOCALISE",
    "OnlyKinks",
    "only_kinks",
]

#: inputs up to this many elements get a per-element comparison when a projected check fails
MAX_LOCALISE = 5000


def as_tuple(x):
    if isinstance(x, tuple):
        return x
    if isinstance(x, list):
        return tuple(x)
    return (x,)


def symbols_of(out, who):
    """The outputs of ``func`` as a list of single-output Symbols."""
    if isinstance(out, Symbol):
        return [out[i] for i in range(len(out))] if len(out) > 1 else [out]
    if isinstance(out, (list, tuple)) and out and all(isinstance(o, Symbol) for o in out):
        res = []
        for o in out:
            res += symbols_of(o, who)
        return res
    raise TypeError(f"{who}: func must return a Symbol or a tuple of Symbols, got {type(out).__name__}")


def variable_in(outputs, name, who):
    """The Variable named ``name`` inside the graph of ``outputs``."""
    internals = Group(outputs).get_internals()
    try:
        return internals[name]
    except Exception:
        raise ValueError(f"{who}: params names {name!r}, which is not an argument of the graph func built") from None


def param_dict(params, who):
    if params is None or (isinstance(params, (tuple, list)) and len(params) == 0):
        return {}
    if not isinstance(params, dict):
        raise TypeError(
            f"{who}: params must be a dict name -> array (the values of the arguments func creates), "
            f"got {type(params).__name__}"
        )
    return dict(params)


class FuncGraph:
    """``func`` applied to input Variables: argument values, head gradients and the analytic side.

    ``inputs`` is a list of ``(name, value)``; an array becomes a Variable of that name, anything else
    (name None) is passed to ``func`` as it is. ``params`` gives the values of the other arguments (and
    optionally auxiliary states) of the graph ``func`` builds.
    """

    def __init__(self, who, func, inputs, params, allow_params=True):
        self.who = who
        params = param_dict(params, who)
        variables, values = self._variables(inputs)
        self._build(func, variables, inputs)
        self._check_params(params, values, allow_params)
        self.param_names = [n for n in self.arg_names if n in params]
        host = self._host_values(values, params)
        self._shapes(host, params)
        self._types(host, inputs)

    @staticmethod
    def _variables(inputs):
        """``func``'s positional arguments (a Variable per named input) and ``{name: value}`` of the named ones."""
        variables, values = [], {}
        for name, value in inputs:
            if name is None:
                variables.append(value)
                continue
            variables.append(sg.sym.Variable(name))
            values[name] = value
        return variables, values

    def _build(self, func, variables, inputs):
        """Apply ``func`` and name the graph's arguments, auxiliary states and outputs."""
        who = self.who
        if not callable(func):
            raise TypeError(f"{who}: func must be callable, got {type(func).__name__}")
        self.outputs = symbols_of(func(*variables), who)
        self.sym = Group(self.outputs)
        refuse_random_ops(self.sym, who)
        self.input_names = [n for n, _ in inputs if n is not None]
        self.arg_names = self.sym.list_arguments()
        self.aux_names = self.sym.list_auxiliary_states()
        self.out_names = self.sym.list_outputs()

    def _check_params(self, params, values, allow_params):
        """``params`` names only arguments (or auxiliary states) that are not inputs, and every argument ``func``
        created."""
        who = self.who
        created = [n for n in self.arg_names if n not in values]
        clash = [k for k in params if k in values]
        if clash:
            raise ValueError(f"{who}: params names {clash}, which are inputs of func")
        unknown = [k for k in params if k not in self.arg_names and k not in self.aux_names]
        if unknown:
            raise ValueError(
                f"{who}: params names {unknown}, which are not arguments of the graph func built; "
                f"its arguments are {self.arg_names}, its auxiliary states {self.aux_names}"
            )
        missing = [n for n in created if n not in params]
        if missing:
            hint = (
                "pass their values in params (a dict name -> array)"
                if allow_params
                else "pass them as inputs: create the Variables in func from the inputs "
                "(e.g. FullyConnected(x, weight=w, bias=b, ...))"
            )
            raise ValueError(f"{who}: func created arguments {missing} that have no values; {hint}")

    def _host_values(self, values, params):
        """Host copies of every argument's value (inputs, then params), each a real numeric array."""
        who = self.who
        host = {}
        for n in self.arg_names:
            v = values[n] if n in values else params[n]
            if array_context(v) is None and not isinstance(v, (numbers.Number, list)):
                raise TypeError(f"{who}: value of {n!r} must be an array, got {type(v).__name__}")
            host[n] = check_kind(
                np.array(to_numpy(v), copy=True), who, "input" if n in values else "param", n, allow_complex=False
            )
        return host

    def _shapes(self, host, params):
        """Finite values, the output shapes and the auxiliary states (given in params, else zeros)."""
        aux_given = {k: np.array(to_numpy(params[k]), copy=True) for k in self.aux_names if k in params}
        check_finite(host, self.who, "input")
        _, out_shapes, aux_shapes = check_shapes(self.sym, {**host, **aux_given}, self.who)
        self.out_shapes = [tuple(s) for s in out_shapes]
        for n, s in zip(self.aux_names, aux_shapes):
            if n not in aux_given:
                aux_given[n] = np.zeros(s, self._float_dtype(host))
        self.values = host
        self.aux = aux_given

    def _types(self, host, inputs):
        """Output dtypes, loss heads, and the device (that of the first input on one, else the default)."""
        out_types = self.sym.infer_type(**{k: v.dtype for k, v in host.items()})[1] or [None] * len(self.out_shapes)
        self.out_dtypes = [np.dtype(np.float64 if t is None else t) for t in out_types]
        self.loss_heads = [h.loss_head for h in self.sym.heads()]
        where = next((array_context(v) for _, v in inputs if array_context(v) is not None), None)
        self.ctx = where if where is not None and where.device_type != "cpu" else default_context()

    @staticmethod
    def _float_dtype(host):
        floats = [v.dtype for v in host.values() if v.dtype.kind == "f"]
        return np.result_type(*floats) if floats else np.float32

    # -- head gradients ----------------------------------------------------------------------------
    def head_grads(self, y_grad):
        """Chainer's ``y_grad`` as one host array (output dtype) or None (loss head) per output."""
        who, n = self.who, len(self.out_shapes)
        if y_grad is None:
            heads = []
            for k, (s, loss) in enumerate(zip(self.out_shapes, self.loss_heads)):
                if loss:
                    heads.append(None)
                elif int(np.prod(s)) == 1:
                    heads.append(np.ones(s, self.out_dtypes[k]))
                else:
                    shapes = ", ".join(str(x) for x in self.out_shapes)
                    raise ValueError(
                        f"{who}: y_grad can be None only for a loss (outputs of one element or loss "
                        f"heads); output {self.out_names[k]!r} has shape {s} (all outputs: {shapes})"
                    )
            return heads
        gys = list(as_tuple(y_grad))
        if len(gys) != n:
            raise ValueError(f"{who}: y_grad has {len(gys)} arrays for {n} outputs {self.out_names}")
        heads = []
        for k, g in enumerate(gys):
            if g is None:
                heads.append(None if self.loss_heads[k] else np.zeros(self.out_shapes[k], self.out_dtypes[k]))
                continue
            g = check_kind(np.asarray(to_numpy(g)), who, "y_grad for output", self.out_names[k], allow_complex=False)
            if tuple(g.shape) != self.out_shapes[k]:
                raise ValueError(
                    f"{who}: y_grad for output {self.out_names[k]!r} has shape {tuple(g.shape)}, "
                    f"expected {self.out_shapes[k]}"
                )
            check_finite({self.out_names[k]: g}, who, "y_grad for output")
            heads.append(g.astype(self.out_dtypes[k]) if self.out_dtypes[k].kind == "f" else g)
        return heads

    def weights(self, heads):
        """Float64 projection weights of the numeric objective (ignored for loss heads)."""
        return [np.zeros(s) if h is None else h.astype(np.float64) for h, s in zip(heads, self.out_shapes)]

    # -- analytic ----------------------------------------------------------------------------------
    def executor(self, names):
        """The graph bound in the dtypes under test on ``self.ctx``, gradients for ``names``, after one forward."""
        ctx = self.ctx
        args = {k: to_device(v, ctx) for k, v in self.values.items()}
        bufs = {k: to_device(np.zeros_like(self.values[k]), ctx) for k in names}
        exe = self.sym.bind(
            ctx,
            args,
            args_grad=bufs,
            grad_req={k: "write" for k in names},
            aux_states={k: to_device(v, ctx) for k, v in self.aux.items()},
        )
        exe.forward(is_train=True)
        return exe, bufs

    def vjp(self, exe, bufs, heads):
        exe.backward([None if h is None else to_device(h, self.ctx) for h in heads])
        return {k: np.array(to_numpy(b), copy=True) for k, b in bufs.items()}

    def analytic(self, names, heads):
        exe, bufs = self.executor(names)
        return self.vjp(exe, bufs, heads)

    def probe_buffers(self, names, heads, who):
        """``buffers.probe`` of the graph's custom ops: grad_req 'add' and repeated backward calls, against the
        gradients of ``names`` for ``heads`` (None entries: loss heads)."""
        from .buffers import custom_nodes, probe

        if not names or not custom_nodes(self.sym):
            return
        grads = {k: g.astype(np.float64) for k, g in self.analytic(names, heads).items()}
        dtype = max((self.values[n].dtype for n in names), key=lambda d: np.finfo(d).eps)
        probe(self.sym, self.values, self.aux, heads, grads, dtype, self.ctx, who)

    def _custom_zero(self, g) -> bool:
        """Whether ``g`` (a no_grads input's gradient) comes through ``Custom`` ops and is zero at the point: a
        CustomOp always writes every input's gradient (MXNet's ``in_grad``; an index input's is assigned 0), so
        there a zero gradient is Chainer's None. A nonzero one still fails."""
        from .buffers import custom_nodes

        if not custom_nodes(g):
            return False
        exe = g.bind(self.ctx, {a: to_device(self.values[a], self.ctx) for a in g.list_arguments()}, grad_req="null")
        return all(not np.any(np.asarray(to_numpy(o))) for o in exe.forward(is_train=True))

    def probe_points(self, probes, names, heads, who, rtol, atol):
        """``probes.run`` at the graph's values (None: where the graph has Custom nodes)."""
        from . import probes as special

        if names and special.wanted(probes, self.sym):
            special.run(
                self.sym,
                self.values,
                self.aux,
                heads,
                names,
                max((self.values[n].dtype for n in names), key=lambda d: np.finfo(d).eps),
                self.ctx,
                who,
                rtol,
                atol,
            )

    def decisions(self):
        """What the forward in the dtypes under test decides (``decisions.record_decisions``): the pieces a
        pinned ``Reference`` evaluates."""
        from .decisions import record_decisions

        exe, _ = self.executor([])
        return record_decisions(exe, is_train=True)

    def assert_no_gradient(self, names):
        """Inputs with no_grads: symgrad.grad must find no gradient (None) for them."""
        names = [n for n in names if n in self.arg_names]
        if not names:
            return
        var = {n: variable_in(self.outputs, n, self.who) for n in names}
        for n in names:
            try:
                (g,) = sg.grad(self.outputs, [var[n]])
            except SymgradError:
                continue  # no gradient rule on the path: no gradient flows
            if g is None or self._custom_zero(g):
                continue
            msg = (
                f"{self.who}: input {n!r} (no_grads=True, dtype {self.values[n].dtype}) receives a gradient: "
                f"symgrad.grad returns {g.name!r} for it, where Chainer requires the gradient of an integer / "
                "no_grads input to be None; an op on its path is differentiated w.r.t. an index input "
                "(declare it in no_grad_inputs) or the input should not be in no_grads"
            )
            raise GradientCheckError(
                msg,
                check=self.who,
                arg_name=n,
                diagnosis="a gradient where none should flow",
                names=("backward", "expected"),
            )


class Reference:
    """``graph`` bound on host copies in the reference dtype (float64 by default), for finite differences.

    ``ndtype`` None keeps every array's own dtype (no float64 reference). ``weights`` (one float64 array
    per output) define the objective ``sum(w * y)`` (loss heads: their implied loss). ``executor``: a
    ``concurrent.futures.Executor`` over which the Jacobians and per-element views are spread
    (``scaleout.Spread``); directional derivatives (two evaluations) stay here.
    """

    def __init__(self, graph, ndtype, weights, progress=True, executor=None, record=None):
        self.graph = graph
        self.executor = executor
        self.dtype = (
            np.dtype(ndtype)
            if ndtype is not None
            else np.dtype(
                np.result_type(*[v.dtype for v in graph.values.values() if v.dtype.kind == "f"] or [np.float64])
            )
        )
        self.objective_weights = weights
        self.progress = progress
        ref_sym, _, make_objective = projected_objective(graph.sym, weights, graph.who)
        self.pinning = None
        if record is not None:  # evaluated on the pieces the forward under test chose (decisions.pinned_symbol)
            from .decisions import pinned_symbol

            ref_sym, self.pinning = pinned_symbol(ref_sym, record)
        self.ref_sym = ref_sym
        self.harness = Harness.bind(ref_sym, graph.values, graph.aux, ctx=sg.cpu(), dtype=ndtype)
        self.args = {k: self.harness.host(k) for k in graph.values}
        self.harness.assert_deterministic(graph.who, "the forward of func")
        self.base = [np.asarray(b, np.float64) for b in self.harness.base()]
        self.n_out = len(graph.out_shapes)
        self.objective = make_objective(self.base)
        self.magnitude = float(self.objective(self.base)[1])
        self.step_description = f"h = {float(np.cbrt(np.finfo(self.dtype).eps)):.3g} * max(|x|, 1) in {self.dtype.name}"

    def objective_for(self, weights):
        _, _, make = projected_objective(self.graph.sym, weights, self.graph.who)
        return make(self.base)

    def evaluation_noise(self, weights=None) -> float:
        """``Harness.evaluation_noise`` of the objective (``weights``: default the reference's)."""
        return self.harness.evaluation_noise(
            self.objective if weights is None else self.objective_for(weights), self.dtype
        )

    def directional(self, r: dict, eps, weights=None):
        """Derivative of ``delta -> objective(x + delta r)`` at 0 (the inputs of ``r`` move along it), with
        ``weights`` (default: the reference's) projecting the outputs. Returns ``(value, width)``."""
        objective = self.objective if weights is None else self.objective_for(weights)
        return directional(self.harness, r, eps, lambda outs: objective(outs)[0])

    def one_sided(self, r: dict, eps) -> tuple:
        """``(D+, D-)``: the forward and backward differences of the objective along ``r`` at step ``eps``."""
        scalar = lambda outs: self.objective(outs)[0]
        f0 = scalar(self.base)
        plus, _ = directional(self.harness, r, eps, scalar, at_base=f0)
        minus, _ = directional(self.harness, r, -eps, scalar, at_base=f0)
        return plus, minus

    def jacobian(self, name, steps):
        """Numeric Jacobian of every output w.r.t. ``name`` (``differencer.jacobian``)."""
        return jacobian(
            self.harness,
            name,
            steps,
            self.n_out,
            progress=self.progress,
            desc=f"{self.graph.who}: numeric Jacobian of {name!r}",
            spread=self._spread(self.objective_weights, "outputs"),
        )

    def _spread(self, weights, kind="projected"):
        """The ``Spread`` of a sweep on the harness (None without an executor)."""
        if self.executor is None:
            return None
        who = self.graph.who
        return Spread(self.executor, self.harness, Recipe(self.graph.sym, weights, who, kind, self.n_out), who)

    def element_view(self, who, name, analytic, weights, rtol, atol):
        """Per-element central differences of ``sum(weights * y)`` w.r.t. ``name`` against ``analytic``.

        The allowed error is the tolerance model's (rtol, atol, the numeric noise and the analytic side's
        rounding noise in its dtype). Mismatching elements are examined for kinks (``numeric.element_kinks``)
        and the diagnosis gets the same context as the MXNet-style checkers. Returns ``(error, kinks)``: the
        GradientCheckError of the comparison (None when it passes) and the ``Kink`` facts of the mismatching
        elements. Cost: 2 partial forwards per element (6 more per mismatching element examined), plus the
        noise estimates (7 float64 forward and backward passes for a float16/float32 gradient, 1 for float64;
        8 forwards of the reference).
        """
        graph = self.graph
        objective = self.objective_for(weights)
        scalar = lambda outs: objective(outs)[0]
        steps = {name: default_steps(self.args[name], self.dtype)}
        numeric, widths = gradient(
            self.harness,
            [name],
            scalar,
            steps,
            progress=self.progress,
            desc=f"{who}: per-element check of {name!r}",
            spread=self._spread(weights),
        )
        a = analytic.astype(np.float64)
        heads = [None if loss else w.astype(dt) for w, loss, dt in zip(weights, graph.loss_heads, graph.out_dtypes)]
        _, a_noise = analytic_noise(
            graph.sym, graph.values, graph.aux, heads, [name], analytic.dtype, actual={name: analytic}
        )
        f_noise = self.evaluation_noise(weights)
        n_noise = f_noise / widths[name]
        bad, _, allowed = violations(a, numeric[name], rtol, atol, False, n_noise + a_noise[name])
        if not bad.any():
            return None, []
        kinks = element_kinks(self.harness, name, scalar, np.argwhere(bad), steps[name], a, allowed, f_noise=f_noise)

        def context():
            found = diagnosis_context(
                graph.sym,
                graph.ctx,
                graph.values,
                graph.aux,
                heads,
                name,
                graph.out_shapes,
                kinks,
                noise=n_noise + a_noise[name],
            )
            found["other_expected"] = self._others_numeric(name, scalar)
            return found

        try:
            compare(
                a,
                numeric[name],
                rtol,
                atol,
                check=who,
                arg_name=name,
                names=("analytic", "numeric"),
                what=f"analytic gradient of {name!r} does not match the numeric gradient",
                eps=self.step_description,
                noise=n_noise,
                analytic_noise=a_noise[name],
                noise_dtype=analytic.dtype,
                broadcast=False,
                facts={"dtype": analytic.dtype},
                context=context,
            )
        except GradientCheckError as err:
            return err, kinks
        return None, kinks

    def _others_numeric(self, name, scalar) -> list:
        """``[(argument, numeric gradient)]`` of the other float arguments shaped like ``name`` (``diagnose``'s
        ``other_expected``: d/da and d/db swapped), on a failure's diagnosis only: 2 partial forwards per element."""
        like = [
            n
            for n, v in self.args.items()
            if n != name and np.shape(v) == np.shape(self.args[name]) and np.asarray(v).dtype.kind == "f"
        ]
        if not like:
            return []
        numeric, _ = gradient(
            self.harness, like, scalar, {n: default_steps(self.args[n], self.dtype) for n in like}, progress=False
        )
        return [(n, numeric[n]) for n in like]


# == kinks: re-drawn off, or left out ==========================================================================


class OnlyKinks(Exception):
    """Internal signal of a check whose every mismatch sits at a kink with a valid subgradient."""

    def __init__(self, kinks):
        super().__init__(f"{len(kinks)} kink(s)")
        self.kinks = kinks


def only_kinks(element_errors) -> list | None:
    """The kinks when every per-element failure ``(error, kinks)`` consists of valid kinks only, else None."""
    if not element_errors:
        return None
    found = []
    for err, kinks in element_errors:
        if err.pattern != "kink" or not kinks or not all(k.subgradient for k in kinks) or len(kinks) < err.n_mismatch:
            return None
        found += kinks
    return found
