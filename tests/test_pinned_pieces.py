"""Pinned pieces: every op with ``decisions`` has a ``pinned`` rule (``OpDef.pinned``), and it keeps its contract.

The cases are the rows of the operator table (``tests/op_db*.py``) whose op decides something, plus a few
built here (Pooling_v1's max, a graph of several decision ops). For each:

1. at the recorded point the pinned graph (``test_utils.decisions.pinned_symbol``) gives forward's outputs
   bit for bit (dtype and structure too), and so does each op's ``pinned`` called directly (NaN and +-inf
   inputs too);
2. a central difference of the pinned graph along a random direction equals the analytic gradient (the
   backward) at a random point and at a point with exact ties / values at a switch (the row's kinks,
   ``a == b``, a window whose two largest values tie), where the plain forward would cross a kink;
3. at a moved point where some decisions flip, the pinned output differs from forward exactly at the flipped
   sites and equals the piece written here in plain numpy (relu, abs, maximum, clip, max pooling);
4. no op with ``decisions`` lacks ``pinned``, and every one of them is exercised above.

max / min at an exact tie are the exception to 2: MXNet's ``_backward_max`` gives the head gradient in full to
every tied element, which is the derivative of no piece of max; ``test_extreme_ties_*`` pins that down.
"""

import numpy as np
import pytest
from op_db import OPS, In, OpInfo

import symgrad as sg
from symgrad.opdef import list_ops
from symgrad.ops.reduce import reduce_axes
from symgrad.test_utils.decisions import pinned_symbol, record_decisions

S = sg.sym
H = 1e-6  # central-difference step (float64)

DECISION_OPS = sorted({o.name for o in list_ops().values() if o.decisions is not None})


def _decision_nodes(sym):
    return [n for n in sym.topo_nodes() if n.op is not None and n.op.decisions is not None]


def _graph(x, y, w):
    # several decision ops in a row (relu, broadcast_maximum, clip, Pooling, abs, max)
    h = S.broadcast_maximum(S.relu(x, name="r"), y, name="mx")
    h = S.clip(h, a_min=-0.5, a_max=0.7, name="cl")
    h = S.Pooling(S.reshape(h, shape=(1, 1, 4, 4)), kernel=(3, 3), stride=(1, 1), pool_type="max", name="p")
    return S.max(S.abs(h, name="ab") * w, axis=(1, 2), name="mr")


EXTRA = [
    OpInfo(
        "Pooling_v1_max",
        lambda x: S.Pooling_v1(x, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="max"),
        {"x": In((1, 2, 5, 5))},
        None,
    ),
    OpInfo("decision_graph", _graph, {"x": In((4, 4)), "y": In((4,)), "w": In((1, 1, 2, 2), 0.5, 1.5)}, None),
]


def _cases():
    """Rows whose op makes a decision at the row's sample (max pooling, not average; relu, not tanh)."""
    out = []
    for row in [*OPS, *EXTRA]:
        sym = row.symbol()
        if not _decision_nodes(sym):
            continue
        args, aux = row.sample(0)
        rec = record_decisions(sym.bind(sg.cpu(), args, aux_states=aux), row.is_train)
        if any(seen.choices for seen in rec.nodes.values()):
            out.append(row)
    return out


CASES = _cases()
IDS = [r.name for r in CASES]


def _op_names(row):
    return {n.op.name for n in _decision_nodes(row.symbol())}


# -- helpers ------------------------------------------------------------------------------------------------


def _grad_args(row, sym):
    return [n for n in sym.list_arguments() if row.inputs[n].grad]


def _bind(sym, args, aux, dtype=np.float64, grads=()):
    args = {k: np.array(v, dtype=dtype) for k, v in args.items()}
    aux = {k: np.array(v, dtype=dtype) for k, v in aux.items()}
    args_grad = {k: np.zeros_like(args[k]) for k in grads}
    return sym.bind(sg.cpu(), args, args_grad=args_grad or None, aux_states=aux)


def _same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _outputs(exe, is_train):
    return [np.array(o, copy=True) for o in exe.forward(is_train=is_train)]


def _directional(row, sym, args, aux, seed):
    """Along a random direction r (and random head gradients): (numeric derivative of the pinned graph, the
    analytic one, its scale (sum of |terms|), the decision record, r, the backward's gradients)."""
    rng = np.random.default_rng(seed)
    wrt = _grad_args(row, sym)
    exe = _bind(sym, args, aux, grads=wrt)
    rec = record_decisions(exe, row.is_train)
    heads = [rng.standard_normal(o.shape) for o in exe.outputs]
    exe.backward(heads)
    r = {k: rng.standard_normal(np.shape(args[k])) for k in wrt}
    terms = [exe.grad_dict[k] * r[k] for k in wrt]
    analytic = float(sum(t.sum() for t in terms))
    scale = float(sum(np.abs(t).sum() for t in terms))
    pinned, how = pinned_symbol(sym, rec)
    assert how.complete and not how.unpinnable, how

    def at(sign):
        moved = {k: (v + sign * H * r[k] if k in r else v) for k, v in args.items()}
        return _outputs(_bind(pinned, moved, aux), row.is_train)

    plus, minus = at(1), at(-1)
    numeric = float(sum(((p - m) * g).sum() for p, m, g in zip(plus, minus, heads)) / (2 * H))
    return numeric, analytic, scale, rec, r, {k: exe.grad_dict[k] for k in wrt}


def _flips_under_step(sym, args, aux, rec, r, is_train):
    """Whether a plain forward at x0 +- H r decides some site differently from the record (a kink crossed)."""
    for sign in (1, -1):
        moved = {k: (v + sign * H * r[k] if k in r else v) for k, v in args.items()}
        other = record_decisions(_bind(sym, moved, aux), is_train)
        for name, seen in rec.nodes.items():
            if any(not np.array_equal(a, b) for a, b in zip(seen.choices, other.nodes[name].choices)):
                return True
    return False


def _tie_point(row, sym, args):
    """``args`` with exact ties / switch values: each input's kinks (from the row) written into its first
    elements, and in every op that picks from a window (Pooling, max, min) the runner-up of a few windows set
    to the window's extreme. Graph rows are left as they are."""
    args = {k: np.array(v, dtype=np.float64) for k, v in args.items()}
    nodes = _decision_nodes(sym)
    if len(nodes) != 1:
        return args
    for name in sym.list_arguments():
        spec = row.inputs[name]
        if spec.grad and not spec.integer:
            flat = args[name].reshape(-1)
            kinks = np.resize(np.asarray(spec.kinks, dtype=np.float64), min(flat.size, 2 * len(spec.kinks)))
            flat[: kinks.size] = kinks
    (node,) = nodes
    names = sym.list_arguments()  # a one-op row: the node's inputs are the arguments, in this order
    for d in node.op.decisions(np, *[args[n] for n in names], **node.params):
        if d.support is None:
            continue
        sites = list(np.ndindex(*d.choice.shape))[:: max(1, d.choice.size // 3)]
        for site in sites:
            (idx,) = d.support(site)
            x = args[names[d.inputs[0]]]
            window = x[idx]
            top = window.min() if node.op.name == "min" else window.max()
            others = window[window != top]
            if others.size:
                runner_up = others.min() if node.op.name == "min" else others.max()
                window[window == runner_up] = top
                x[idx] = window
    return args


# -- 1. pinned at the recorded point is forward -------------------------------------------------------------


@pytest.mark.parametrize("row", CASES, ids=IDS)
def test_pinned_graph_equals_forward_at_the_recorded_point(row):
    sym = row.symbol()
    args, aux = row.sample(0)
    for dtype in (np.float64, np.float32):
        exe = _bind(sym, args, aux, dtype)
        rec = record_decisions(exe, row.is_train)
        base = [np.array(o, copy=True) for o in exe.outputs]
        pinned, how = pinned_symbol(sym, rec)
        assert sorted(how.pinned) == sorted(n.name for n in _decision_nodes(sym)) and how.complete
        out = _outputs(_bind(pinned, args, aux, dtype), row.is_train)
        assert len(out) == len(base)
        for a, b in zip(base, out):
            assert _same_bits(a, b), (dtype, a, b)


@pytest.mark.parametrize("row", CASES, ids=IDS)
def test_pinned_rule_returns_forwards_outputs_at_the_recorded_inputs(row):
    # the op's pinned called directly on what each node saw: same structure (tuple or array), dtypes and bits
    sym = row.symbol()
    args, aux = row.sample(1)
    for dtype in (np.float64, np.float32, np.float16):
        rec = record_decisions(_bind(sym, args, aux, dtype), row.is_train)
        for node in _decision_nodes(sym):
            seen = rec.nodes[node.name]
            params = dict(node.params, **({"is_train": row.is_train} if node.op.needs_is_train else {}))
            want = node.op.forward(np, *seen.inputs, **params)
            got = node.op.pinned(np, seen.choices, *seen.inputs, **params)
            assert isinstance(got, tuple) == isinstance(want, tuple)
            want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
            assert len(got) == len(want)
            for a, b in zip(want, got):
                assert _same_bits(a, b), (node.op.name, dtype, a, b)


@pytest.mark.parametrize("row", CASES, ids=IDS)
def test_pinned_rule_at_non_finite_inputs(row):
    # NaN and +-inf at the recorded point: the pinned rule still gives forward's values there (equal_nan)
    sym = row.symbol()
    args, aux = row.sample(1)
    for name in sym.list_arguments():
        args[name].reshape(-1)[:3] = [np.nan, np.inf, -np.inf][: args[name].size]
    with np.errstate(invalid="ignore", over="ignore"):
        rec = record_decisions(_bind(sym, args, aux), row.is_train)
        for node in _decision_nodes(sym):
            seen = rec.nodes[node.name]
            params = dict(node.params, **({"is_train": row.is_train} if node.op.needs_is_train else {}))
            want = node.op.forward(np, *seen.inputs, **params)
            got = node.op.pinned(np, seen.choices, *seen.inputs, **params)
            for a, b in zip(*((want, got) if isinstance(want, tuple) else ((want,), (got,)))):
                assert a.dtype == b.dtype
                if node.op.name in ("Pooling", "Pooling_v1") and not np.array_equal(a, b, equal_nan=True):
                    # a window holding NaN and padding: _argmax records a padding tap, forward gives NaN
                    pytest.xfail("max pooling's recorded tap at a NaN window with padding reads the padding")
                np.testing.assert_array_equal(a, b, err_msg=node.op.name)


def test_clip_decision_follows_forward_when_a_min_exceeds_a_max():
    # forward (MXNet's order) gives a_max above a_max, else a_min below a_min: with a_min > a_max every x gets
    # a bound and the gradient is 0, so no site is "kept" (the pinned piece is constant there)
    x = np.array([-2.0, 0.0, 0.5, 1.0, 2.0, np.nan])
    sym = S.clip(S.Variable("x"), a_min=1.0, a_max=0.0, name="c")
    rec = record_decisions(sym.bind(sg.cpu(), {"x": x.copy()}))
    np.testing.assert_array_equal(rec.nodes["c"].choices[0], [0, 0, 2, 2, 2, 1])  # NaN is kept (passes), as forward
    pinned, _ = pinned_symbol(sym, rec)
    moved = x + 0.3
    np.testing.assert_array_equal(pinned.bind(sg.cpu(), {"x": moved}).forward()[0], [1, 1, 0, 0, 0, np.nan])


# -- 2. the pinned graph's derivative is the backward ----------------------------------------------------------


def _assert_close(numeric, analytic, scale):
    assert abs(numeric - analytic) <= 1e-7 * max(abs(analytic), scale) + 1e-12, (numeric, analytic, scale)


@pytest.mark.parametrize("row", CASES, ids=IDS)
def test_pinned_derivative_is_the_backward_at_random_points(row):
    sym = row.symbol()
    for seed in (0, 1):
        args, aux = row.sample(seed)
        numeric, analytic, scale, *_ = _directional(row, sym, args, aux, seed)
        _assert_close(numeric, analytic, scale)


# single max / min rows at ties: test_extreme_ties_* below
TIE_CASES = [r for r in CASES if _op_names(r) not in ({"max"}, {"min"})]


def _at_ties(row):
    sym = row.symbol()
    args, aux = row.sample(2)
    args = _tie_point(row, sym, args)
    numeric, analytic, scale, rec, r, _ = _directional(row, sym, args, aux, 3)
    return numeric, analytic, scale, _flips_under_step(sym, args, aux, rec, r, row.is_train)


@pytest.mark.parametrize("row", TIE_CASES, ids=[r.name for r in TIE_CASES])
def test_pinned_derivative_is_the_backward_at_ties(row):
    numeric, analytic, scale, _ = _at_ties(row)
    _assert_close(numeric, analytic, scale)


# -- max / min at an exact tie: the backward is not the derivative of a piece -----------------------------------

EXTREME_CASES = [r for r in CASES if _op_names(r) in ({"max"}, {"min"})]


@pytest.mark.parametrize("row", EXTREME_CASES, ids=[r.name for r in EXTREME_CASES])
def test_extreme_ties_pinned_follows_the_first_tied_element(row):
    """At a tie the pinned max / min is the first tied element of its slice; the backward (MXNet's
    ``_backward_max``: the gradient in full to every element equal to the extreme) exceeds that piece's
    derivative by the other tied elements' share, exactly."""
    sym = row.symbol()
    args, aux = row.sample(2)
    args = _tie_point(row, sym, args)
    numeric, analytic, scale, rec, r, grads = _directional(row, sym, args, aux, 3)
    (node,) = _decision_nodes(sym)
    mask = rec.nodes[node.name].choices[0]
    # the backward's share of the tied elements after the first: their gradient times the direction
    per_element = grads["x"]  # the head gradient of the element's slice where it equals the extreme, else 0
    axes = reduce_axes(mask.ndim, node.params["axis"], node.params["exclude"], "test")
    moved = np.moveaxis(mask, axes, tuple(range(-len(axes), 0)))
    flat = moved.reshape(moved.shape[: moved.ndim - len(axes)] + (-1,))
    first = np.zeros_like(flat)
    np.put_along_axis(first, flat.argmax(axis=-1)[..., None], True, axis=-1)
    extra = np.moveaxis((flat & ~first).reshape(moved.shape), tuple(range(-len(axes), 0)), axes)
    assert extra.any(), "no tie made"
    _assert_close(numeric, analytic - float((per_element * r["x"])[extra].sum()), scale)
    assert abs(numeric - analytic) > 1e-3 * scale  # the inconsistency is real, not rounding


# -- 3. moved points: the pinned output is the recorded piece ------------------------------------------------


def _pool_taps(x, k, s):
    """Plain-numpy 2-d max pooling's first-maximum tap per window (no padding), as (row, col) offsets."""
    n, c, hh, ww = x.shape
    oh, ow = (hh - k) // s + 1, (ww - k) // s + 1
    taps = np.zeros((n, c, oh, ow, 2), dtype=int)
    for i in np.ndindex(n, c, oh, ow):
        win = x[i[0], i[1], i[2] * s : i[2] * s + k, i[3] * s : i[3] * s + k]
        taps[i] = np.unravel_index(np.argmax(win), win.shape)
    return taps


def _pool_at(x, taps, s):
    out = np.zeros(taps.shape[:-1])
    for i in np.ndindex(*out.shape):
        out[i] = x[i[0], i[1], i[2] * s + taps[i][0], i[3] * s + taps[i][1]]
    return out


def _flip_cases():
    rng = np.random.default_rng(7)
    x0, x1 = rng.standard_normal((4, 5)), rng.standard_normal((4, 5))
    a0, b0 = rng.standard_normal((3, 4)), rng.standard_normal((4,))
    a1, b1 = rng.standard_normal((3, 4)), rng.standard_normal((4,))
    p0, p1 = rng.standard_normal((1, 2, 6, 6)), rng.standard_normal((1, 2, 6, 6))
    lo, hi = -0.5, 0.75
    clip_seg = lambda x: np.where(x > hi, 2, np.where(x < lo, 0, 1))  # noqa: E731
    return [
        (
            "relu",
            lambda: S.relu(S.Variable("x")),
            {"x": x0},
            {"x": x1},
            lambda: np.where(x0 > 0, x1, 0.0),
            (x0 > 0) != (x1 > 0),
        ),
        (
            "abs",
            lambda: S.abs(S.Variable("x")),
            {"x": x0},
            {"x": x1},
            lambda: np.sign(x0) * x1,
            np.sign(x0) != np.sign(x1),
        ),
        (
            "broadcast_maximum",
            lambda: S.broadcast_maximum(S.Variable("a"), S.Variable("b")),
            {"a": a0, "b": b0},
            {"a": a1, "b": b1},
            lambda: np.where(a0 >= b0, a1, np.broadcast_to(b1, a1.shape)),
            (a0 >= b0) != (a1 >= b1),
        ),
        (
            "clip",
            lambda: S.clip(S.Variable("x"), a_min=lo, a_max=hi),
            {"x": x0},
            {"x": x1},
            lambda: np.select([x0 > hi, x0 < lo], [hi, lo], x1),
            clip_seg(x0) != clip_seg(x1),
        ),
        (
            "Pooling",
            lambda: S.Pooling(S.Variable("x"), kernel=(2, 2), stride=(2, 2), pool_type="max"),
            {"x": p0},
            {"x": p1},
            lambda: _pool_at(p1, _pool_taps(p0, 2, 2), 2),
            (_pool_taps(p0, 2, 2) != _pool_taps(p1, 2, 2)).any(axis=-1),
        ),
    ]


FLIPS = _flip_cases()


@pytest.mark.parametrize("name, make, base, moved, piece, flipped", FLIPS, ids=[c[0] for c in FLIPS])
def test_moved_point_evaluates_the_recorded_piece(name, make, base, moved, piece, flipped):
    sym = make()
    rec = record_decisions(sym.bind(sg.cpu(), {k: v.copy() for k, v in base.items()}))
    pinned, how = pinned_symbol(sym, rec)
    assert how.complete
    out = pinned.bind(sg.cpu(), {k: v.copy() for k, v in moved.items()}).forward()[0]
    plain = sym.bind(sg.cpu(), {k: v.copy() for k, v in moved.items()}).forward()[0]
    assert flipped.any() and not flipped.all()
    np.testing.assert_array_equal(out != plain, flipped)  # differs exactly where a decision flipped
    np.testing.assert_array_equal(out, piece())


# -- 4. every op with decisions is pinned and covered ----------------------------------------------------------


def test_every_op_with_decisions_has_a_pinned_rule():
    missing = sorted({o.name for o in list_ops().values() if o.decisions is not None and o.pinned is None})
    assert missing == []


def test_every_op_with_decisions_is_exercised():
    covered = set().union(*(_op_names(r) for r in CASES))
    assert set(DECISION_OPS) <= covered, sorted(set(DECISION_OPS) - covered)


def test_every_op_with_decisions_is_checked_where_a_step_crosses_its_kink():
    # each op has a tie case where a plain forward at x0 +- H r decides differently from x0: the difference
    # quotient of the tie test crossed a kink there, and only the pinned graph kept it right
    crossed = set().union(*(_op_names(r) for r in TIE_CASES if _at_ties(r)[3]))
    crossed |= {"max", "min"}  # checked at ties by test_extreme_ties_*
    assert set(DECISION_OPS) <= crossed, sorted(set(DECISION_OPS) - crossed)
