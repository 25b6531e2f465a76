"""Special-point probes: the derived inputs where shipped gradient bugs hide, checked for soundness and agreement.

A test draws standard normal inputs; the bugs that shipped most often show only at points such a draw never hits
(``benchmarks/shipped_bugs``: at a user's draw the checkers caught 39.5% of 43 shipped bugs, at the special points
95%; all 18 "NaN at an exact zero" bugs passed at the user's draw). So besides the user's location a checker
visits a bounded, seeded set of derived points (``points``):

- each float argument zero as a whole, one row of it zero, one row of it constant (zero variance); where that
  makes an element-wise output non-finite (a zero base of a negative power), those elements keep their values;
- each float argument scaled by each of ``FAR`` (magnitudes a standard normal draw never reaches: a wrong branch
  beyond a threshold, an unselected branch that overflows);
- two same-shaped arguments equal (one array fed to two inputs); of different sizes with rows of one length, a
  row shared between them (a pairwise distance at zero);
- an index argument (integers, not differentiated) with every entry repeating the first, and with every other
  entry a padding / ignored value (``PAD_VALUES``).

At a probe the forward must be finite (else the point is skipped: the function is not defined there). Then:

- *soundness*: a NaN or infinite analytic element where the function's one-sided derivatives along that element
  are finite (and do not grow as the step shrinks, as a true singularity's do: sqrt at 0) is a bug;
- *agreement*, where the point is smooth along a random direction (its two one-sided numeric derivatives agree
  within the tolerance): the analytic derivative along it must match them, at two step sizes. A probe that made
  elements equal (zeros, a constant row) is also judged along the direction moving those elements together: it
  keeps the ties, so a max or a sort stays smooth along it, and a backward that hands every tied element the
  whole gradient (a max-pool's k tied maxima passing k times it) shows there. At a kink along
  the direction (relu, ELU, abs at many zeros at once) only soundness is judged: backprop's per-element
  subgradients need not lie between the directional one-sided derivatives of a non-convex function.

Judged on a float64 reference as the checkers' other comparisons are. Cost per probe: one forward and backward in
the dtype under test, a float64 bind, 5 forwards (and 4 per non-finite element examined, at most ``MAX_ELEMENTS``
per argument). On by default where the graph has ``Custom`` nodes (operators symgrad did not write: a user's own);
``probes=True`` asks for them on graphs of symgrad's ops too, ``probes=False`` turns them off.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .buffers import custom_nodes
from .context import to_device, to_numpy
from .frames import hide_from_pytest as _hide_from_pytest
from .report import GradientCheckError

__tracebackhide__ = _hide_from_pytest  # a failed check shows its report, not these frames

#: how far out the "far" probes scale an argument: 10x reaches the regions of a piecewise formula a standard
#: normal draw rarely visits (hardsigmoid below -3), 1000x the ones where an unselected branch overflows (a Gluon
#: ELU's exp(x) of the positive branch: inf * 0 = NaN from x ~ 89 in float32 and ~ 710 in float64)
FAR = (10.0, 1000.0)
#: index values meaning "padding" or "ignored" in the frameworks users port operators from: 0 (PyTorch's usual
#: padding_idx, an ignore_label set to the first class) and -100 (PyTorch's ignore_index default). A probe puts one
#: at every other entry of an index argument; an op that accepts no such value fails its forward there, and the
#: probe is skipped. Not -1 (MXNet's and Chainer's ignore_label default): numpy's indexing wraps it to the last
#: row silently, so an op whose forward indexes with it and whose backward compares with it (correct for every
#: valid label) would be failed for a label it never accepted (measured: both cross-entropy twins of the shipped-
#: bug corpus); -100 wraps only along axes of 100 or more
PAD_VALUES = (0, -100)
#: non-finite analytic elements examined per argument and probe
MAX_ELEMENTS = 4
#: the relative step of the one-sided differences, and the shorter one that confirms
STEP = 1e-5
CONFIRM = 16.0


def wanted(probes, sym) -> bool:
    """``probes`` None: on where the graph has Custom nodes; else as given."""
    return bool(custom_nodes(sym)) if probes is None else bool(probes)


def index_like(v: object) -> bool:
    """An integer array, or a float array holding integers only (MXNet's indices): an index or label input."""
    v = np.asarray(v)
    if v.size < 2 or v.dtype.kind not in "iuf":
        return False
    return v.dtype.kind in "iu" or bool(np.all(np.isfinite(v)) and np.all(v == np.round(v)))


def index_inputs(sym) -> set[str]:
    """The variables of ``sym`` that may hold indices: every op reading them reads them through an input it
    takes no gradient for (``take``'s indices, a label) or is an opaque ``Custom`` op (which declares none). A
    float argument holding integers by chance (a bias initialised to 0) that feeds a convolution is not one."""
    uses: dict[str, list[bool]] = {}
    for data in sym.to_networkx().nodes.values():
        node = data["node"]
        if node.op is None:
            continue
        for (src, _), slot in zip(node.inputs, node.input_names()):
            if src.op is None:
                uses.setdefault(src.name, []).append(node.op.name == "Custom" or slot in tuple(node.op.no_grad_inputs))
    return {name for name, reads in uses.items() if all(reads)}


@dataclass
class Point:
    """A derived point: ``label`` names it in reports, ``values`` are every input there, ``region`` the elements
    it set (``{argument: bool mask}``; empty where it set nothing element-wise) -- made equal, so a direction
    constant over them keeps the ties it made (``_Probe._agree``)."""

    label: str
    values: dict
    region: dict = field(default_factory=dict)
    #: also judged along random directions inside each of the first ``rows`` rows of every float argument
    rows: int = 0


def points(values: dict, names: list, seed: int) -> list:
    """The derived points (``Point``; module docstring), seeded."""
    rng = np.random.default_rng([seed, 7])
    found = [p for k, v in values.items() if k not in names and index_like(v) for p in _index_points(values, k)]
    for k in names:
        found += _float_points(values, k, rng)
    for a in range(len(names)):
        for b in range(a + 1, len(names)):
            found += _pair_points(values, names[a], names[b])
    return found


def _index_points(values, k) -> list:
    """An argument not differentiated that holds integers (indices, labels): every entry repeating the first (a
    gather, an embedding or a pick must add the gradients of repeats: a shipped class of bug is repeats overwritten
    instead of accumulated), and every other entry a padding / ignored value (``PAD_VALUES``: a shipped class is a
    padding row or an ignored label that still receives or sends gradient)."""
    v = np.asarray(values[k])
    first = v.reshape(-1)[0]
    found = [Point(f"every {k} = {first:g} (repeated indices)", {**values, k: np.full_like(v, first)})]
    for pad in PAD_VALUES:
        if v.dtype.kind == "u" and pad < 0:
            continue
        padded = v.copy()
        padded.reshape(-1)[::2] = pad
        # entry i of an index usually goes with row i of the data (a label with its row of logits), or names a
        # row of a table (a padding_idx of 0): rows 0 (padded) and 1 (not) are also judged alone, where an
        # ignored row's stray gradient is not diluted by every other row's (a cross-entropy's 0.15% along a
        # random direction, within gradcheck's rtol=1e-3)
        found.append(Point(f"every other {k} = {pad} (a padding / ignored index value)", {**values, k: padded}, rows=2))
    return found


def _float_points(values, k, rng) -> list:
    """Zeros (the whole argument, one row), one constant row, and far out (``FAR``)."""
    x = np.asarray(values[k])
    if x.size == 0:
        return []
    found = [Point(f"{k} = 0 (every element)", {**values, k: np.zeros_like(x)}, {k: np.ones(x.shape, bool)})]
    if x.ndim >= 1 and x.size > 1:
        i = int(rng.integers(x.shape[0]))
        row = np.zeros(x.shape, bool)
        row[i] = True
        zero, const = x.copy(), x.copy()
        zero[i] = 0
        const[i] = np.asarray(x[i]).reshape(-1)[0]
        where = f"{k}[{i}{', :' * (x.ndim - 1)}]"
        found.append(Point(f"{where} = 0", {**values, k: zero}, {k: row}))
        if x.ndim >= 2:
            found.append(
                Point(f"{where} constant (= {float(const[i].reshape(-1)[0]):.4g})", {**values, k: const}, {k: row})
            )
    found += [Point(f"{k} scaled by {far:g}", {**values, k: (x * far).astype(x.dtype)}) for far in FAR]
    return found


def _pair_points(values, a, b) -> list:
    """Two arguments equal (one array fed to both inputs); of different sizes but rows of one length (a pairwise
    distance's two point sets), the first row of ``b`` equal to the first of ``a``."""
    xa, xb = np.asarray(values[a]), np.asarray(values[b])
    if xa.shape == xb.shape:
        return [Point(f"{b} = {a} (the same values fed to both)", {**values, b: xa.astype(xb.dtype).copy()})]
    if xa.ndim >= 2 and xa.shape[1:] == xb.shape[1:]:
        shared = xb.copy()
        shared[0] = xa[0]
        rest = ", :" * (xa.ndim - 1)
        return [Point(f"{b}[0{rest}] = {a}[0{rest}] (a row shared between them)", {**values, b: shared})]
    return []


def run(
    sym,
    values: dict,
    aux: dict,
    heads: list,
    names: list,
    dtype,
    ctx,
    who: str,
    rtol: float,
    atol: float,
    seed: int = 0,
):
    """Visit every probe point of ``names`` (module docstring); raise ``GradientCheckError`` naming the first
    probe where the analytic gradient is unsound or outside the one-sided derivatives."""
    names = [k for k in names if np.asarray(values[k]).dtype.kind == "f"]
    bound = _Bound(sym, aux, heads, names, dtype, ctx, who)
    atol = max(atol, rtol * _scale_at(bound, values))
    for point in points(values, names, seed):
        _Probe(bound, point, values, rtol, atol, seed).judge()


def _scale_at(bound, values) -> float:
    """The largest analytic gradient element at the given point. Its ``rtol`` share is the probes' absolute
    tolerance floor, as ``atol=None`` is at the given point: a derived point can shrink the gradient far below
    what its forward resolves (a softmax of logits scaled by 1000: a true 1e-225 that a Custom op's
    log(1 + 1e-225) computes as exactly 0), and an error that small is rounding, not a rule."""
    g = _Probe(bound, Point("the given point", values), values, 0.0, 0.0, 0)._analytic()
    finite = [np.abs(v[np.isfinite(v)]) for v in (g or {}).values()]
    return max((float(np.max(v, initial=0.0)) for v in finite), default=0.0)


class _Bound:
    """The two executors every probe of a run shares (a probe changes values, never shapes), bound at the first
    probe and given each next probe's values: the analytic one in the dtype under test, writing gradient buffers,
    and the float64 reference (measured on the shipped-bug corpus's small graphs: binding two executors per probe
    was 40% of what the probes cost)."""

    def __init__(self, sym, aux, heads, names, dtype, ctx, who):
        self.sym, self.aux, self.heads, self.names = sym, aux, heads, names
        self.dt, self.ctx, self.who = np.dtype(dtype), ctx, who
        self._exe = self._harness = None

    def _cast(self, v):
        v = np.asarray(v)
        return v.astype(self.dt) if v.dtype.kind == "f" else v

    def analytic(self, values):
        """``(executor, gradient buffers)`` holding ``values`` (the buffers zeroed, the auxiliary states reset)."""
        if self._exe is None:
            bufs = {k: to_device(np.zeros(np.shape(values[k]), self.dt), self.ctx) for k in self.names}
            self._exe = self.sym.bind(
                self.ctx,
                {k: to_device(self._cast(v), self.ctx) for k, v in values.items()},
                args_grad=bufs,
                grad_req={k: ("write" if k in bufs else "null") for k in values},
                aux_states={k: to_device(self._cast(v), self.ctx) for k, v in self.aux.items()},
            )
            return self._exe, bufs
        exe = self._exe
        for k, v in values.items():
            exe.arg_dict[k][...] = to_device(self._cast(v), self.ctx)
        for k, v in self.aux.items():
            exe.aux_dict[k][...] = to_device(self._cast(v), self.ctx)
        for k in self.names:
            exe.grad_dict[k][...] = 0
        return exe, {k: exe.grad_dict[k] for k in self.names}

    def reference(self, values):
        """``(harness, make_objective)``: the float64 reference holding ``values`` (its next base is taken there)."""
        from .harness import Harness
        from .objectives import projected_objective

        if self._harness is None:
            shapes = self.sym.infer_shape(**{k: np.shape(v) for k, v in values.items()})[1]
            weights = [np.zeros(s) if h is None else np.asarray(h, np.float64) for h, s in zip(self.heads, shapes)]
            ref_sym, _, self._make_objective = projected_objective(self.sym, weights, self.who)
            self._harness = Harness.bind(ref_sym, values, self.aux, ctx=self.ctx, dtype=np.float64, is_train=True)
        else:
            self._harness.set_values(values)
        return self._harness, self._make_objective


class _Probe:
    """One derived point: the analytic gradient in ``dtype``, the float64 reference and the two judgements."""

    def __init__(self, bound, point, given, rtol, atol, seed):
        self.bound, self.values, self.rtol, self.atol = bound, dict(point.values), rtol, atol
        self.sym, self.aux, self.heads, self.names = bound.sym, bound.aux, bound.heads, bound.names
        self.dt, self.ctx, self.who = bound.dt, bound.ctx, bound.who
        self.label, self.region, self.given, self.rows = point.label, point.region, given, point.rows
        self.rng = np.random.default_rng([seed, 11])
        self._measured_noise = None

    def judge(self):
        g = self._analytic()
        if g is None and self._keep_finite():
            g = self._analytic()
        if g is None:
            return  # the function is not finite here: nothing to differentiate
        ref = self._reference()
        if ref is None:
            return
        for k in self.names:
            bad = np.argwhere(~np.isfinite(g[k]))
            for index in bad[:MAX_ELEMENTS]:
                self._unsound(ref, k, tuple(int(i) for i in index), g[k])
        if all(np.all(np.isfinite(g[k])) for k in self.names):
            self._agree(
                ref,
                g,
                {k: self.rng.standard_normal(np.shape(self.values[k])) for k in self.names},
                "a random direction",
            )
            for k, mask in self.region.items():  # moving the elements it made equal together keeps the ties
                sign = 1.0 if self.rng.random() < 0.5 else -1.0
                r = {n: (sign * mask if n == k else np.zeros(np.shape(self.values[n]))) for n in self.names}
                self._agree(ref, g, r, f"the direction moving the elements it set together ({k})", keeps_ties=True)
            for k in self.names:
                x = np.asarray(self.values[k])
                for i in range(min(self.rows, x.shape[0] if x.ndim else 0)):
                    r = {n: np.zeros(np.shape(self.values[n])) for n in self.names}
                    r[k][i] = self.rng.standard_normal(x.shape[1:])
                    self._agree(ref, g, r, f"a random direction inside {k}[{i}{', :' * (x.ndim - 1)}]")

    def _keep_finite(self) -> bool:
        """Where the probe made an element-wise output non-finite (a zero base of a negative power), give those
        elements their values back, once, so that the rest of the probe still tests the zeros the function is
        defined at. Only for an output of the probed argument's shape; True when something was restored."""
        outs = self._forward_outputs()
        restored = False
        for k, mask in self.region.items():
            shape = np.shape(self.values[k])
            bad = [~np.isfinite(o) for o in outs if o.shape == shape]
            if not bad:
                continue
            back = mask & np.logical_or.reduce(bad)
            if back.any() and not back[mask].all():
                x = np.array(self.values[k], copy=True)
                x[back] = np.asarray(self.given[k])[back]
                self.values[k] = x
                self.region = {**self.region, k: mask & ~back}
                self.label += f" (where the function stays finite: {int(back.sum())} element(s) kept)"
                restored = True
        return restored

    # -- the two sides
    def _forward_outputs(self) -> list:
        exe, _ = self.bound.analytic(self.values)
        with np.errstate(all="ignore"):
            try:
                return [np.asarray(to_numpy(o), np.float64) for o in exe.forward(is_train=True)]
            except Exception:  # noqa: BLE001 -- not defined here at all
                return []

    def _analytic(self):
        exe, bufs = self.bound.analytic(self.values)
        with np.errstate(all="ignore"):
            try:
                outs = exe.forward(is_train=True)
            except Exception:  # noqa: BLE001 -- the forward is not defined here (a singular matrix): no probe
                return None
            if not all(np.all(np.isfinite(np.asarray(to_numpy(o), np.float64))) for o in outs):
                return None
            exe.backward(
                [None if h is None else to_device(np.asarray(h).astype(self.dt), self.ctx) for h in self.heads]
            )
        return {k: np.asarray(to_numpy(b), np.float64) for k, b in bufs.items()}

    def _reference(self):
        with np.errstate(all="ignore"):
            harness, make_objective = self.bound.reference(self.values)
            try:
                base = [np.asarray(b, np.float64) for b in harness.base()]
            except Exception:  # noqa: BLE001 -- as in _analytic: not defined here in float64
                return None
            if not all(np.all(np.isfinite(b)) for b in base):
                return None
            objective = make_objective(base)
            f0 = objective(base)[0]
        return harness, (lambda outs: objective(outs)[0]), f0, objective

    @staticmethod
    def _one_sided(ref, r, h):
        """``(D+, D-)``: forward and backward differences of the objective along ``r`` at step ``h``."""
        from .differencer import directional

        harness, scalar, f0, _ = ref
        with np.errstate(all="ignore"):
            plus, _ = directional(harness, r, h, scalar, at_base=f0)
            minus, _ = directional(harness, r, -h, scalar, at_base=f0)
        return plus, minus

    # -- soundness: a non-finite analytic element where the one-sided derivatives are finite
    def _unsound(self, ref, k, index, gk):
        x = np.asarray(self.values[k], np.float64)
        onehot = np.zeros(x.shape)
        onehot[index] = 1.0
        h = STEP * max(abs(float(x[index])), 1.0)
        d1 = self._one_sided(ref, {k: onehot}, h)
        d2 = self._one_sided(ref, {k: onehot}, h / CONFIRM)
        if not all(math.isfinite(d) for d in d1 + d2):
            return
        if max(abs(d) for d in d2) > 2.0 * max(max(abs(d) for d in d1), 1e-300):
            return  # the one-sided derivatives grow as the step shrinks: a true singularity (sqrt at 0)
        where = f"{k}[{', '.join(str(i) for i in index)}]"
        raise GradientCheckError(
            f"{self.who}: at the probe {self.label}, the analytic gradient of {k!r} is {float(gk[index])} at {where}; "
            f"the function is finite there and its one-sided derivatives are {d1[1]:.6g} (left) and {d1[0]:.6g} "
            f"(right)\n  special-point probe (probes=False turns the probes off): a gradient that is not a number "
            "where the function has finite one-sided derivatives is a bug (a 0/0 at an exact zero: a norm, a "
            "standard deviation, a product with a zero factor); the subgradient between them is what a fix returns",
            check=self.who,
            arg_name=k,
            probe=self.label,
            index=index,
            diagnosis="non-finite gradient at a probe "
            "where the function is finite: a 0/0 or inf*0 in the rule at a special point",
        )

    def _verdicts(self, sides, steps, analytic, allowance, noise=0.0):
        """``[(ok, lo, hi, tol)]`` per step, or None at a kink along the direction."""
        verdicts = []
        for (plus, minus), step in zip(sides, steps):
            lo, hi = min(plus, minus), max(plus, minus)
            tol = self.atol + self.rtol * max(abs(plus), abs(minus), abs(analytic)) + allowance + 2.0 * noise / step
            if hi - lo > tol:
                # a kink along r (a zero of relu, ELU, abs at many elements at once): backprop's per-element
                # subgradients need not land between the two directional one-sided derivatives of a function
                # that is neither convex nor concave there, so only soundness is judged at such a probe
                return None
            verdicts.append((lo - tol <= analytic <= hi + tol, lo, hi, tol))
        return verdicts

    def _noise(self, ref) -> float:
        if self._measured_noise is None:
            harness, _, _, objective = ref
            self._measured_noise = harness.evaluation_noise(objective, np.float64, runs=3)
        return self._measured_noise

    def _settles(self, ref, r, h, sides, analytic, bound) -> bool:
        """Whether the central difference, retaken at steps shorter than ``h`` until it settles
        (``differencer.settle``), matches ``analytic``. A far-out probe can put the function's whole turn inside
        both steps: at zero conv weights before a BatchNorm, data scaled by 1000 moves the channel from
        ``var = 0`` to ``var >> eps`` within 1e-6 of the weights, and the quotients read 0.07 and 2.7 at the
        probe's steps while they converge to the backward's 49.03 below 1e-4 (measured). A wrong derivative
        settles at once at its own value."""
        from .differencer import directional, settle

        harness, scalar, _, _ = ref
        with np.errstate(all="ignore"):
            got = settle(
                lambda step: directional(harness, r, step, scalar),
                h,
                0.5 * (sides[0] + sides[1]),
                analytic,
                self.atol + bound,
                self._noise(ref),
                self.rtol,
            )
        return got.settled and got.ok

    # -- agreement: the analytic directional derivative inside the one-sided interval, at two steps
    def _moves_set_kinks(self, ref, r) -> bool:
        """Whether ``r`` moves elements the probe set (``region``) that sit on a kink along their own coordinate
        (one-sided derivatives apart by more than the tolerance; at most ``MAX_ELEMENTS`` per argument looked at).
        A direction through several such kinks at once has one-sided derivatives that can agree by chance while
        backprop's per-element choice lies outside them (measured: a row of x set to 0, the kink of the
        EluGradGrad twin's elu'(x), four elements crossed together): only soundness is judged there, as at a
        kink the direction itself shows."""
        for k, mask in self.region.items():
            x = np.asarray(self.values[k], np.float64)
            for index in np.argwhere(mask & (np.asarray(r[k]) != 0))[:MAX_ELEMENTS]:
                index = tuple(int(i) for i in index)
                onehot = np.zeros(x.shape)
                onehot[index] = 1.0
                plus, minus = self._one_sided(ref, {k: onehot}, STEP * max(abs(float(x[index])), 1.0))
                if math.isfinite(plus) and math.isfinite(minus):
                    if abs(plus - minus) > self.atol + self.rtol * max(abs(plus), abs(minus)):
                        return True
        return False

    def _agree(self, ref, g, r, along_what, keeps_ties=False):
        # each argument moves relative to its own size: a probe that scales one argument by 1000 steps the others
        # by 1e-5 of theirs, not of its (measured: the EluGradGrad twin's x, re-drawn 5e-5 off its kink, was
        # stepped 0.02 and crossed it at three elements at once, whose one-sided slopes then agreed by chance)
        sizes = {k: max(float(np.max(np.abs(np.asarray(self.values[k], np.float64)), initial=0.0)), 1.0) for k in r}
        scale = max(sizes.values(), default=1.0)
        r = {k: v * (sizes[k] / scale) for k, v in r.items()}
        length = math.sqrt(sum(float(np.sum(v * v)) for v in r.values()))
        analytic = float(sum(np.sum(g[k] * r[k]) for k in self.names))
        eps = float(np.finfo(self.dt).eps) if self.dt.kind == "f" else 0.0
        along = float(sum(np.sum(np.abs(g[k] * r[k])) for k in self.names))
        # the rounding of the analytic side, and rtol of what the elements add up to along r (the checkers'
        # atol=None: a share of the gradient's own scale)
        rounding = 16.0 * eps * along + self.rtol * along
        h = STEP * max(scale, 1.0) / max(length, 1.0)
        first = self._one_sided(ref, r, h)
        if not all(math.isfinite(d) for d in first):
            return
        quick = self._verdicts([first], (h,), analytic, rounding)
        if quick is not None and quick[0][0]:
            return  # agrees at the first step without the truncation allowance: the shorter step cannot undo it
        sides = [first, self._one_sided(ref, r, h / CONFIRM)]
        if not all(math.isfinite(d) for pair in sides for d in pair):
            return
        # what the shorter step changed bounds the truncation left (the h^2 term of a central difference, the
        # h term of a one-sided one: a row of zeros in a product moves the objective by h^3)
        trunc = abs(sum(sides[0]) - sum(sides[1])) / 2.0
        verdicts = self._verdicts(sides, (h, h / CONFIRM), analytic, rounding + trunc)
        if verdicts is None or any(ok for ok, *_ in verdicts):
            return
        # failing: allow for the reference's own rounding, measured only now (``Harness.evaluation_noise``: 5
        # float64 forwards with every intermediate value perturbed) -- at a far-out probe a softmax's gradient of
        # 1e-225 sits below what log(1 + 1e-225) can resolve, and the difference reads exactly 0
        verdicts = self._verdicts(sides, (h, h / CONFIRM), analytic, rounding + trunc, self._noise(ref))
        if (
            verdicts is None
            or any(ok for ok, *_ in verdicts)
            or self._settles(ref, r, h / CONFIRM, sides[1], analytic, rounding)
        ):
            return
        if not keeps_ties and self._moves_set_kinks(ref, r):  # the tie-keeping direction crosses none of them
            return
        _, lo, hi, tol = verdicts[-1]
        raise GradientCheckError(
            f"{self.who}: at the probe {self.label}, the analytic derivative along {along_what} is "
            f"{analytic:.10g}, outside the one-sided numeric derivatives [{lo:.10g}, {hi:.10g}] (allowed "
            f"{tol:.3g} beyond; confirmed at a step {CONFIRM:g}x shorter)\n  special-point probe (probes=False "
            "turns the probes off): the gradient is right at the given inputs but wrong here -- a formula wrong "
            "in one region of its inputs, at a tie, at a zero, or when two inputs are the same array",
            check=self.who,
            probe=self.label,
            fast=(analytic, 0.5 * (lo + hi)),
            diagnosis=f"gradient wrong at the probe {self.label} only",
        )
