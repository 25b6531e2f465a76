"""Generic operator tests driven by the table in ``tests/op_db.py``.

For every op: forward against the plain-numpy reference in every dtype; the
symbolic gradient against float64 central differences (loss heads: against
their defined gradient); float32 gradients against the proven float64 ones;
second-order gradients against finite differences of the first; grad_req
add/null from dirty buffers; shape and dtype inference against the real output.
"""

import numpy as np
import pytest
from op_db import OPS

import symgrad as sg

S = sg.sym

GRAD_OPS = [o for o in OPS if o.grad]
SECOND_OPS = [o for o in OPS if o.grad and o.second_order and o.grad_ref is None]


def _cast(op, values, dtype):
    return {n: (v.astype(np.int64) if op.inputs.get(n) is not None and op.inputs[n].integer else v.astype(dtype))
            for n, v in values.items()}


def _grad_names(op):
    return [n for n, spec in op.inputs.items() if spec.grad]


def _bind(op, sym, args, aux, grads=None, req="write"):
    names = sym.list_arguments()
    missing = [n for n in names if n not in args]
    assert not missing, f"{op.name}: inputs {missing} not in the OpInfo"
    return sym.bind(sg.cpu(), {n: args[n] for n in names}, args_grad=grads, grad_req=req,
                    aux_states={n: aux[n].copy() for n in sym.list_auxiliary_states()} or None)


def _as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _heads(outs, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(o.shape).astype(o.dtype) for o in outs]


def _analytic(op, sym, args, aux, heads=None):
    names = _grad_names(op)
    grads = {n: np.zeros_like(args[n]) for n in names}
    exe = _bind(op, sym, args, aux, grads, {n: "write" for n in names})
    outs = exe.forward(is_train=True)
    if heads is None:
        heads = _heads(outs)
    exe.backward(None if op.grad_ref is not None else heads)
    return grads, outs, heads


def _numeric(op, sym, args, aux, heads):
    """Central differences of sum_k <out_k, h_k> w.r.t. every gradient input, re-running only
    the instructions downstream of the perturbed input."""
    exe = _bind(op, sym, args, aux)
    exe.forward_all(is_train=True)
    result = {}
    for n in _grad_names(op):
        x = exe.arg_dict[n]
        g = np.zeros_like(x)
        for i in np.ndindex(x.shape):
            orig = x[i]
            h = 1e-6 * max(1.0, abs(orig))
            x[i] = orig + h
            fp = sum(float((o * w).sum()) for o, w in zip(exe.rerun_downstream([n]), heads))
            x[i] = orig - h
            fm = sum(float((o * w).sum()) for o, w in zip(exe.rerun_downstream([n]), heads))
            x[i] = orig
            g[i] = (fp - fm) / (2 * h)
        result[n] = g
    return result


@pytest.mark.parametrize("op", OPS, ids=repr)
def test_forward_matches_numpy_reference(op):
    if op.ref is None:
        pytest.fail(f"{op.name} has no reference")
    values, aux = op.sample()
    sym = op.symbol()
    for dtype in op.dtypes:
        args = _cast(op, values, dtype)
        auxd = _cast(op, aux, dtype)
        outs = _bind(op, sym, args, auxd).forward(is_train=op.is_train)
        as64 = {n: (v.astype(np.float64) if v.dtype.kind == "f" else v) for n, v in {**args, **auxd}.items()}
        want = _as_tuple(op.ref(*[as64[n] for n in list(op.inputs) + list(op.aux)]))
        assert len(outs) == len(want), f"{op.name}: {len(outs)} outputs, reference gives {len(want)}"
        rtol, atol = op.tol(dtype)
        for k, (got, ref) in enumerate(zip(outs, want)):
            ref = np.asarray(ref)
            assert got.shape == ref.shape, f"{op.name} output {k} {np.dtype(dtype).name}: {got.shape} vs {ref.shape}"
            if ref.dtype.kind == "f":
                assert got.dtype == dtype, f"{op.name} output {k}: dtype {got.dtype}, expected {np.dtype(dtype)}"
            np.testing.assert_allclose(got.astype(np.float64), ref, rtol=rtol, atol=atol,
                                       err_msg=f"{op.name} output {k} in {np.dtype(dtype).name}")


@pytest.mark.parametrize("op", GRAD_OPS, ids=repr)
def test_gradient_matches_finite_differences_float64(op):
    values, aux = op.sample()
    sym = op.symbol()
    args = _cast(op, values, np.float64)
    grads, outs, heads = _analytic(op, sym, args, aux)
    if op.grad_ref is not None:  # a loss head: its gradient is defined, not the derivative of its output
        want = op.grad_ref(*[args[n] for n in op.inputs])
    else:
        want = _numeric(op, sym, args, aux, heads)
    for n in _grad_names(op):
        np.testing.assert_allclose(grads[n], want[n], rtol=op.grad_rtol, atol=op.grad_atol,
                                   err_msg=f"{op.name}: d/d{n}")


@pytest.mark.parametrize("op", [o for o in GRAD_OPS if np.float32 in o.dtypes], ids=repr)
def test_gradient_float32_matches_float64(op):
    values, aux = op.sample()
    sym = op.symbol()
    g64, outs, heads = _analytic(op, sym, _cast(op, values, np.float64), aux)
    g32, _, _ = _analytic(op, sym, _cast(op, values, np.float32), _cast(op, aux, np.float32),
                          [h.astype(np.float32) for h in heads])
    for n in _grad_names(op):
        assert g32[n].dtype == np.float32
        scale = max(1.0, float(np.abs(g64[n]).max()))
        np.testing.assert_allclose(g32[n], g64[n], rtol=1e-4, atol=1e-5 * scale, err_msg=f"{op.name}: d/d{n}")


@pytest.mark.parametrize("op", SECOND_OPS, ids=repr)
def test_second_order_matches_finite_differences_of_the_gradient(op):
    values, aux = op.sample()
    args = _cast(op, values, np.float64)
    names = _grad_names(op)
    xs = {n: S.Variable(n) for n in op.inputs}
    out = op.make(*xs.values())
    hs = [S.Variable(f"__h{k}") for k in range(len(out))]
    firsts = sg.grad(out, [xs[n] for n in names], grad_outputs=hs)
    rng = np.random.default_rng(2)
    shapes = dict(zip(out.list_arguments(), out.infer_shape(**{n: v.shape for n, v in args.items()})[0]))
    out_shapes = out.infer_shape(**{n: v.shape for n, v in args.items()})[1]
    hv = {f"__h{k}": rng.standard_normal(s) for k, s in enumerate(out_shapes)}
    vs = {n: rng.standard_normal(shapes[n]) for n in names}
    connected = [(n, g) for n, g in zip(names, firsts) if g is not None]
    # phi(x) = sum_n <g_n(x), v_n>; its gradient is the second-order term we check
    phi = None
    vvars = {n: S.Variable(f"__v_{n}") for n, _ in connected}
    for n, g in connected:
        term = S.sum(g * vvars[n])
        phi = term if phi is None else phi + term
    if phi is None:
        pytest.skip(f"{op.name}: no input has a gradient")
    feed = {**args, **hv, **{f"__v_{n}": vs[n] for n, _ in connected}}
    second = sg.grad(phi, [xs[n] for n in names])
    for n, g2 in zip(names, second):
        if g2 is None:
            got = np.zeros_like(args[n])
        else:
            got = g2.bind(sg.cpu(), {k: feed[k] for k in g2.list_arguments()},
                          aux_states={k: aux[k] for k in g2.list_auxiliary_states()} or None
                          ).forward(is_train=True)[0]
        if n not in phi.list_arguments():  # the gradient does not depend on n at all
            np.testing.assert_array_equal(got, 0.0, err_msg=f"{op.name}: second order d/d{n}")
            continue
        exe = phi.bind(sg.cpu(), {k: feed[k].copy() for k in phi.list_arguments()},
                       aux_states={k: aux[k] for k in phi.list_auxiliary_states()} or None)
        exe.forward_all(is_train=True)
        x = exe.arg_dict[n]
        want = np.zeros_like(x)
        for i in np.ndindex(x.shape):
            orig = x[i]
            h = 1e-5 * max(1.0, abs(orig))
            x[i] = orig + h
            fp = float(exe.rerun_downstream([n])[0].sum())
            x[i] = orig - h
            fm = float(exe.rerun_downstream([n])[0].sum())
            x[i] = orig
            want[i] = (fp - fm) / (2 * h)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"{op.name}: second order d/d{n}")


@pytest.mark.parametrize("op", GRAD_OPS, ids=repr)
def test_grad_req_add_and_null_from_dirty_buffers(op):
    values, aux = op.sample()
    sym = op.symbol()
    args = _cast(op, values, np.float64)
    names = _grad_names(op)
    ref, outs, heads = _analytic(op, sym, args, aux)
    rng = np.random.default_rng(3)
    dirty = {n: rng.standard_normal(args[n].shape) for n in names}
    bufs = {n: d.copy() for n, d in dirty.items()}
    reqs = {n: ("null" if k == 1 else "add") for k, n in enumerate(names)}
    exe = _bind(op, sym, args, aux, bufs, reqs)
    exe.forward(is_train=True)
    exe.backward(None if op.grad_ref is not None else heads)
    exe.backward(None if op.grad_ref is not None else heads)
    for n in names:
        if reqs[n] == "null":
            np.testing.assert_array_equal(bufs[n], dirty[n], err_msg=f"{op.name}: null buffer for {n} touched")
        else:
            np.testing.assert_allclose(bufs[n], dirty[n] + 2 * ref[n], rtol=1e-10, atol=1e-12,
                                       err_msg=f"{op.name}: add for {n}")


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
        outs = _bind(op, sym, args, _cast(op, aux, dtype)).forward(is_train=op.is_train)
        assert [o.shape for o in outs] == out_shapes, op.name
        types = {n: v.dtype for n, v in args.items()}
        _, out_types, _ = sym.infer_type(**types)
        assert [np.dtype(t) for t in out_types] == [o.dtype for o in outs], f"{op.name} {np.dtype(dtype).name}"
