"""Generic operator tests driven by the table in ``tests/op_db.py``, proved with symgrad's own checkers.

For every op (as PyTorch's OpInfo tests call ``gradcheck``), so that a broken op fails with the
library's report (worst elements, diagnosis, seed) rather than a bare numpy mismatch:

- forward against the plain-numpy reference in every dtype: ``check_symbolic_forward`` (rows whose
  reference is the training forward, ``is_train=True``: ``assert_almost_equal`` on that forward, since
  ``check_symbolic_forward`` runs the inference forward);
- the float64 symbolic gradient against finite differences: ``check_numeric_gradient`` (loss heads:
  ``check_symbolic_backward`` against their defined gradient ``grad_ref``);
- float32 gradients against the float64 ones: ``check_symbolic_backward``;
- second-order gradients: ``check_numeric_gradient`` of ``phi = sum_n <g_n, v_n>``, the first-order
  gradients ``g_n`` (a symbolic gradient graph with a head-gradient Variable) projected on fixed ``v_n``;
- grad_req add/null from dirty buffers: ``check_symbolic_backward(grad_req=...)``;
- shape and dtype inference against the real output;
- the same rows on gpu(0) against cpu in float64: ``check_consistency`` (gpu-marked: skipped without CuPy).
"""

import numpy as np
import pytest
from op_db import OPS

import symgrad as sg
from symgrad.test_utils import (
    assert_almost_equal,
    check_consistency,
    check_numeric_gradient,
    check_symbolic_backward,
    check_symbolic_forward,
)

S = sg.sym

GRAD_OPS = [o for o in OPS if o.grad]
SECOND_OPS = [o for o in OPS if o.grad and o.second_order and o.grad_ref is None]
NAN_INPUTS = "ignore:invalid value encountered in log:RuntimeWarning"  # log(-1) makes the NaN (see _variables)


def _cast(op, values, dtype):
    """Values in ``dtype``; index inputs the OpInfo marks ``integer`` stay int64."""
    return {
        n: (v.astype(np.int64) if op.inputs.get(n) is not None and op.inputs[n].integer else v.astype(dtype))
        for n, v in values.items()
    }


def _grad_names(op):
    return [n for n, spec in op.inputs.items() if spec.grad]


def _float64_case(op):
    """A row's sample for the float64 gradient tests: its symbol, float64 arguments, aux states, gradient names."""
    values, aux = op.sample()
    return op.symbol(), _cast(op, values, np.float64), aux, _grad_names(op)


def _location(op, sym, args):
    names = sym.list_arguments()
    missing = [n for n in names if n not in args]
    assert not missing, f"{op.name}: inputs {missing} not in the OpInfo"
    return {n: args[n] for n in names}


def _aux(sym, aux):
    return {n: aux[n].copy() for n in sym.list_auxiliary_states()} or None


def _as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _heads(op, sym, args, seed=1):
    """float64 head gradients (standard normal, exact in float32), or None for a loss head (its gradient is
    defined, whatever the head gradient)."""
    if op.grad_ref is not None:
        return None
    rng = np.random.default_rng(seed)
    out_shapes = sym.infer_shape(**{n: v.shape for n, v in args.items()})[1]
    return [rng.standard_normal(s).astype(np.float32).astype(np.float64) for s in out_shapes]


def _variables(op, args):
    """The inputs of ``op.make``, their Variables and the float64 location for finite differences of the op.

    The checkers refuse non-finite arguments, so an input whose sample holds NaN (nansum & co.) enters as
    ``x + log(s)``: ``x`` the sample with NaN -> 0 (checked), ``s`` -1 where the sample is NaN and 1 elsewhere
    (not checked). The op still sees the NaN (log(-1)); the differences of ``x`` there are 0, which is the
    gradient the op must give there (``+`` passes it through unchanged).
    """
    variables = {n: S.Variable(n) for n in op.inputs}
    xs, loc = dict(variables), {}
    for n, v in args.items():
        if v.dtype.kind == "f" and np.isnan(v).any():
            xs[n] = variables[n] + S.log(S.Variable(f"__nan_sign_{n}"))
            loc[n], loc[f"__nan_sign_{n}"] = np.where(np.isnan(v), 0.0, v), np.where(np.isnan(v), -1.0, 1.0)
        else:
            loc[n] = v
    return xs, variables, loc


def _write_gradients(op, sym, args, aux, heads):
    """The float64 gradients of one forward(is_train=True) + backward with grad_req 'write': the reference
    of the float32 and add/null checks (proved against finite differences by the float64 test)."""
    names = _grad_names(op)
    grads = {n: np.zeros_like(args[n]) for n in names}
    exe = sym.bind(
        sg.cpu(),
        _location(op, sym, args),
        args_grad=grads,
        grad_req={n: "write" for n in names},
        aux_states=_aux(sym, aux),
    )
    exe.forward(is_train=True)
    exe.backward(heads)
    return grads


# -- forward, shapes, types ---------------------------------------------------------------------------------


@pytest.mark.parametrize("op", OPS, ids=repr)
def test_forward_matches_numpy_reference(op):
    assert op.ref is not None, f"{op.name} has no reference"
    values, aux = op.sample()
    sym = op.symbol()
    for dtype in op.dtypes:
        args = _cast(op, values, dtype)
        auxd = _cast(op, aux, dtype)
        as64 = {n: (v.astype(np.float64) if v.dtype.kind == "f" else v) for n, v in {**args, **auxd}.items()}
        want = [np.asarray(r) for r in _as_tuple(op.ref(*[as64[n] for n in list(op.inputs) + list(op.aux)]))]
        assert len(sym.list_outputs()) == len(want), (
            f"{op.name}: {len(sym.list_outputs())} outputs, reference gives {len(want)}"
        )
        rtol, atol = op.tol(dtype)
        if op.is_train:  # the reference is the training forward; check_symbolic_forward runs inference
            exe = sym.bind(sg.cpu(), _location(op, sym, args), aux_states=_aux(sym, auxd))
            outs = exe.forward(is_train=True)
            for k, (got, ref) in enumerate(zip(outs, want)):
                assert_almost_equal(
                    got,
                    ref,
                    rtol=rtol,
                    atol=atol,
                    use_broadcast=False,
                    names=(f"{op.name} output {k} ({np.dtype(dtype).name})", "reference"),
                )
        else:
            outs = check_symbolic_forward(
                sym, _location(op, sym, args), want, rtol=rtol, atol=atol, aux_states=_aux(sym, auxd), dtype="asnumpy"
            )
        for k, (got, ref) in enumerate(zip(outs, want)):
            assert got.shape == ref.shape, f"{op.name} output {k} {np.dtype(dtype).name}: {got.shape} vs {ref.shape}"
            if ref.dtype.kind == "f":
                assert got.dtype == dtype, f"{op.name} output {k}: dtype {got.dtype}, expected {np.dtype(dtype)}"


@pytest.mark.parametrize("op", OPS, ids=repr)
def test_inferred_shapes_and_types_match_the_forward(op):
    values, aux = op.sample()
    sym = op.symbol()
    shapes = {n: v.shape for n, v in {**values, **aux}.items()}
    arg_shapes, out_shapes, aux_shapes = sym.infer_shape(**shapes)
    assert arg_shapes is not None, f"{op.name}: infer_shape left something unknown"
    assert arg_shapes == [values[n].shape for n in sym.list_arguments()]
    for dtype in op.dtypes:
        args = _cast(op, values, dtype)
        exe = sym.bind(sg.cpu(), _location(op, sym, args), aux_states=_aux(sym, _cast(op, aux, dtype)))
        outs = exe.forward(is_train=op.is_train)
        assert [o.shape for o in outs] == out_shapes, op.name
        types = {n: v.dtype for n, v in args.items()}
        _, out_types, _ = sym.infer_type(**types)
        assert [np.dtype(t) for t in out_types] == [o.dtype for o in outs], f"{op.name} {np.dtype(dtype).name}"


# -- first-order gradients ----------------------------------------------------------------------------------


@pytest.mark.filterwarnings(NAN_INPUTS)
@pytest.mark.parametrize("op", GRAD_OPS, ids=repr)
def test_gradient_matches_finite_differences_float64(op):
    sym, args, aux, names = _float64_case(op)
    if op.grad_ref is not None:  # a loss head: its gradient is defined, not the derivative of its output
        want = op.grad_ref(*[args[n] for n in op.inputs])
        compared = check_symbolic_backward(
            sym,
            _location(op, sym, args),
            None,
            {n: want[n] for n in names},
            rtol=op.grad_rtol,
            atol=op.grad_atol,
            aux_states=_aux(sym, aux),
            dtype="asnumpy",
        )
    else:
        # the check_numeric_gradient location is cast to float64 whole: index inputs are float here (the ops
        # accept them, as MXNet's); the int64 index path is proved by the float32 and add/null tests below.
        # kinks="error": the table's domains keep inputs off non-differentiable points, so a mismatch at one
        # is a failure, not something to re-draw
        xs, _, loc = _variables(op, args)
        sym = op.make(*xs.values())
        compared = check_numeric_gradient(
            sym,
            _location(op, sym, loc),
            aux_states=_aux(sym, aux),
            grad_nodes=names,
            dtype=np.float64,
            rtol=op.grad_rtol,
            atol=op.grad_atol,
            kinks="error",
            progress=False,
        )
    assert set(names) <= set(compared), (op.name, sorted(compared))  # a mismatch raised; every gradient was compared


@pytest.mark.parametrize("op", [o for o in GRAD_OPS if np.float32 in o.dtypes], ids=repr)
def test_gradient_float32_matches_float64(op):
    values, aux = op.sample()
    sym = op.symbol()
    args64, args32 = _cast(op, values, np.float64), _cast(op, values, np.float32)
    heads = _heads(op, sym, args64)
    g64 = _write_gradients(op, sym, args64, aux, heads)
    heads32 = None if heads is None else [h.astype(np.float32) for h in heads]
    for n in _grad_names(op):  # one call per argument: the absolute tolerance scales with that gradient
        scale = max(1.0, float(np.abs(g64[n]).max()))
        compared = check_symbolic_backward(
            sym,
            _location(op, sym, args32),
            heads32,
            {n: g64[n]},
            rtol=1e-4,
            atol=1e-5 * scale,
            aux_states=_aux(sym, _cast(op, aux, np.float32)),
            dtype="asnumpy",
        )
        assert compared[n].dtype == np.float32, (op.name, n)  # the float32 gradient itself was compared


@pytest.mark.parametrize("op", GRAD_OPS, ids=repr)
def test_grad_req_add_and_null_from_dirty_buffers(op):
    sym, args, aux, names = _float64_case(op)
    heads = _heads(op, sym, args)
    ref = _write_gradients(op, sym, args, aux, heads)
    reqs = {n: ("null" if k == 1 else "add") for k, n in enumerate(names)}
    # 'add': buffer - dirty initial value == the 'write' gradient; 'null': the dirty buffer compared exactly
    compared = check_symbolic_backward(
        sym,
        _location(op, sym, args),
        heads,
        ref,
        rtol=1e-10,
        atol=1e-12,
        aux_states=_aux(sym, aux),
        grad_req=reqs,
        dtype="asnumpy",
    )
    assert set(names) <= set(compared), (op.name, sorted(compared))


# -- second order -------------------------------------------------------------------------------------------


@pytest.mark.filterwarnings(NAN_INPUTS)
@pytest.mark.parametrize("op", SECOND_OPS, ids=repr)
def test_second_order_matches_finite_differences_of_the_gradient(op):
    values, aux = op.sample()
    args = _cast(op, values, np.float64)
    names = _grad_names(op)
    xs, variables, loc = _variables(op, args)
    out = op.make(*xs.values())
    hs = [S.Variable(f"__h{k}") for k in range(len(out))]
    firsts = sg.grad(out, [variables[n] for n in names], grad_outputs=hs)
    out_shapes = out.infer_shape(**{n: v.shape for n, v in loc.items()})[1]
    rng = np.random.default_rng(2)
    feed = {
        **loc,
        **{f"__h{k}": rng.standard_normal(s) for k, s in enumerate(out_shapes)},
        **{f"__v_{n}": rng.standard_normal(args[n].shape) for n in names},
    }
    # phi(x, h) = sum_n <g_n(x, h), v_n>: its gradient in x is the second-order term (a Hessian-vector
    # product); in h it is the Jacobian-vector product J v, which proves the rules' gradients w.r.t. their
    # head gradient too (and keeps the check meaningful for ops whose gradient does not depend on x)
    terms = [S.sum(g * S.Variable(f"__v_{n}")) for n, g in zip(names, firsts) if g is not None]
    assert terms, f"{op.name}: no input has a gradient"
    phi = terms[0]
    for t in terms[1:]:
        phi = phi + t
    wrt = [n for n in phi.list_arguments() if n in names or n.startswith("__h")]
    check_numeric_gradient(
        phi,
        {n: feed[n] for n in phi.list_arguments()},
        aux_states=_aux(phi, aux),
        grad_nodes=wrt,
        dtype=np.float64,
        rtol=1e-5,
        atol=1e-6,
        kinks="error",
        progress=False,
    )


# -- devices ----------------------------------------------------------------------------------------------


def _consistency_entries(op, sym, values, ctxs):
    """``check_consistency`` entries binding the row's shapes in float64 (index inputs int64) on ``ctxs``, or in
    the row's widest dtype where float64 is not among them (the quantize ops take float32 only, as MXNet)."""
    shapes = {n: values[n].shape for n in sym.list_arguments()}
    real = np.float64 if np.float64 in op.dtypes else max(op.dtypes, key=lambda t: np.dtype(t).itemsize)
    types = {n: (np.int64 if op.inputs[n].integer else real) for n in shapes}
    types.update(dict.fromkeys(sym.list_auxiliary_states(), real))
    return [{"ctx": ctx, **shapes, "type_dict": types} for ctx in ctxs]


@pytest.mark.gpu
@pytest.mark.parametrize("op", OPS, ids=repr)
def test_gpu_matches_cpu(op):
    """Every row on gpu(0) (CuPy) agrees with cpu (numpy) in float64: outputs of the inference and training
    forwards, gradients and updated auxiliary states (forwards and gradients use ``xp`` only)."""
    values, aux = op.sample()
    sym = op.symbol()
    names = _grad_names(op) if op.grad else []
    entries = _consistency_entries(op, sym, values, [sg.cpu(0), sg.gpu(0)])
    check_consistency(
        sym,
        entries,
        grad_req={n: ("write" if n in names else "null") for n in sym.list_arguments()},
        arg_params={n: values[n].copy() for n in sym.list_arguments()},
        aux_params={n: aux[n].copy() for n in sym.list_auxiliary_states()},
        rtol=1e-10,
        atol=1e-12,
        equal_nan=True,
    )
    # check_consistency compares values; CuPy's type promotion must also give the dtypes numpy's does
    types = entries[1]["type_dict"]
    exe = sym.simple_bind(
        sg.gpu(0), grad_req="null", type_dict=types, **{n: values[n].shape for n in sym.list_arguments()}
    )
    outs = exe.forward(is_train=op.is_train, **{n: values[n] for n in sym.list_arguments()})
    _, out_types, _ = sym.infer_type(**{n: types[n] for n in sym.list_arguments()})
    assert [o.dtype for o in outs] == [np.dtype(t) for t in out_types], op.name
