"""Special-point probes: the derived inputs where shipped gradient bugs hide, checked for soundness and agreement.

A test draws standard normal inputs; the bugs that shipped most often show only at points such a draw never hits
(``benchmarks/shipped_bugs``: at a user's draw the checkers caught 39.5% of 43 shipped bugs, at the special points
95%; all 18 "NaN at an exact zero" bugs passed at the user's draw). So besides the user's location a checker
visits a bounded, seeded set of derived points (``points``):

- each float argument zero as a whole, one row of it zero, one row of it constant (zero variance);
- each float argument scaled by ``FAR`` (magnitudes a standard normal draw never reaches: a wrong branch beyond
  a threshold);
- two same-shaped arguments equal (one array fed to two inputs);
- an index argument (integers, not differentiated) with every entry repeating the first.

At a probe the forward must be finite (else the point is skipped: the function is not defined there). Then:

- *soundness*: a NaN or infinite analytic element where the function's one-sided derivatives along that element
  are finite (and do not grow as the step shrinks, as a true singularity's do: sqrt at 0) is a bug;
- *agreement*, where the point is smooth along a random direction (its two one-sided numeric derivatives agree
  within the tolerance): the analytic derivative along it must match them, at two step sizes. At a kink along
  the direction (relu, ELU, abs at many zeros at once) only soundness is judged: backprop's per-element
  subgradients need not lie between the directional one-sided derivatives of a non-convex function.

Judged on a float64 reference as the checkers' other comparisons are. Cost per probe: one forward and backward in
the dtype under test, a float64 bind, 5 forwards (and 4 per non-finite element examined, at most ``MAX_ELEMENTS``
per argument). On by default where the graph has ``Custom`` nodes (operators symgrad did not write: a user's own);
``probes=True`` asks for them on graphs of symgrad's ops too, ``probes=False`` turns them off.
"""

from __future__ import annotations

import math

import numpy as np

from .buffers import custom_nodes
from .context import to_device, to_numpy
from .report import GradientCheckError
from .report import hide_from_pytest as _hide_from_pytest

__tracebackhide__ = _hide_from_pytest  # a failed check shows its report, not these frames

#: how far out the "far" probe scales an argument
FAR = 10.0
#: non-finite analytic elements examined per argument and probe
MAX_ELEMENTS = 4
#: the relative step of the one-sided differences, and the shorter one that confirms
STEP = 1e-5
CONFIRM = 16.0


def wanted(probes, sym) -> bool:
    """``probes`` None: on where the graph has Custom nodes; else as given."""
    return bool(custom_nodes(sym)) if probes is None else bool(probes)


def _index_like(v) -> bool:
    """An integer array, or a float array holding integers only (MXNet's indices): an index or label input."""
    v = np.asarray(v)
    if v.size < 2 or v.dtype.kind not in "iuf":
        return False
    return v.dtype.kind in "iu" or bool(np.all(np.isfinite(v)) and np.all(v == np.round(v)))


def points(values: dict, names: list, seed: int) -> list:
    """``[(label, values)]``: the derived points (module docstring), seeded. Arguments not differentiated that hold
    integers (indices, labels) get a point of their own where every entry repeats the first: a gather, an
    embedding or a pick must then add the gradients of the repeats (a shipped class of bug: repeated indices
    overwritten instead of accumulated)."""
    rng = np.random.default_rng([seed, 7])
    found = []
    for k, v in values.items():
        if k not in names and _index_like(v):
            v = np.asarray(v)
            found.append((f"every {k} = {v.reshape(-1)[0]:g} (repeated indices)",
                          {**values, k: np.full_like(v, v.reshape(-1)[0])}))
    for k in names:
        x = np.asarray(values[k])
        if x.size == 0:
            continue
        found.append((f"{k} = 0 (every element)", {**values, k: np.zeros_like(x)}))
        if x.ndim >= 1 and x.size > 1:
            i = int(rng.integers(x.shape[0]))
            zero, const = x.copy(), x.copy()
            zero[i] = 0
            const[i] = np.asarray(x[i]).reshape(-1)[0]
            where = f"{k}[{i}{', :' * (x.ndim - 1)}]"
            found.append((f"{where} = 0", {**values, k: zero}))
            if x.ndim >= 2:
                found.append((f"{where} constant (= {float(const[i].reshape(-1)[0]):.4g})", {**values, k: const}))
        found.append((f"{k} scaled by {FAR:g}", {**values, k: (x * FAR).astype(x.dtype)}))
    for a in range(len(names)):
        for b in range(a + 1, len(names)):
            xa, xb = np.asarray(values[names[a]]), np.asarray(values[names[b]])
            if xa.shape == xb.shape:
                found.append((f"{names[b]} = {names[a]} (the same values fed to both)",
                              {**values, names[b]: xa.astype(xb.dtype).copy()}))
    return found


def run(sym, values: dict, aux: dict, heads: list, names: list, dtype, ctx, who: str, rtol: float, atol: float,
        seed: int = 0):
    """Visit every probe point of ``names`` (module docstring); raise ``GradientCheckError`` naming the first
    probe where the analytic gradient is unsound or outside the one-sided derivatives."""
    names = [k for k in names if np.asarray(values[k]).dtype.kind == "f"]
    for label, at in points(values, names, seed):
        _Probe(sym, at, aux, heads, names, dtype, ctx, who, rtol, atol, label, seed).judge()


class _Probe:
    """One derived point: the analytic gradient in ``dtype``, the float64 reference and the two judgements."""

    def __init__(self, sym, values, aux, heads, names, dtype, ctx, who, rtol, atol, label, seed):
        self.sym, self.values, self.aux, self.heads, self.names = sym, values, aux, heads, names
        self.dt, self.ctx, self.who, self.rtol, self.atol, self.label = np.dtype(dtype), ctx, who, rtol, atol, label
        self.rng = np.random.default_rng([seed, 11])

    def judge(self):
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
            self._outside(ref, g)

    # -- the two sides
    def _analytic(self):
        cast = {k: (np.asarray(v).astype(self.dt) if np.asarray(v).dtype.kind == "f" else np.asarray(v))
                for k, v in self.values.items()}
        bufs = {k: to_device(np.zeros(cast[k].shape, self.dt), self.ctx) for k in self.names}
        exe = self.sym.bind(self.ctx, {k: to_device(v, self.ctx) for k, v in cast.items()}, args_grad=bufs,
                            grad_req={k: ("write" if k in bufs else "null") for k in cast},
                            aux_states={k: to_device(np.asarray(v).astype(self.dt), self.ctx)
                                        for k, v in self.aux.items()})
        with np.errstate(all="ignore"):
            try:
                outs = exe.forward(is_train=True)
            except Exception:  # noqa: BLE001 -- the forward is not defined here (a singular matrix): no probe
                return None
            if not all(np.all(np.isfinite(np.asarray(to_numpy(o), np.float64))) for o in outs):
                return None
            exe.backward([None if h is None else to_device(np.asarray(h).astype(self.dt), self.ctx)
                          for h in self.heads])
        return {k: np.asarray(to_numpy(b), np.float64) for k, b in bufs.items()}

    def _reference(self):
        from .harness import Harness
        from .numeric import projected_objective

        shapes = self.sym.infer_shape(**{k: np.shape(v) for k, v in self.values.items()})[1]
        weights = [np.zeros(s) if h is None else np.asarray(h, np.float64) for h, s in zip(self.heads, shapes)]
        ref_sym, _, make_objective = projected_objective(self.sym, weights, self.who)
        with np.errstate(all="ignore"):
            harness = Harness.bind(ref_sym, self.values, self.aux, ctx=self.ctx, dtype=np.float64, is_train=True)
            try:
                base = [np.asarray(b, np.float64) for b in harness.base()]
            except Exception:  # noqa: BLE001 -- as in _analytic: not defined here in float64
                return None
            if not all(np.all(np.isfinite(b)) for b in base):
                return None
            objective = make_objective(base)
            f0 = objective(base)[0]
        return harness, (lambda outs: objective(outs)[0]), f0

    @staticmethod
    def _one_sided(ref, r, h):
        """``(D+, D-)``: forward and backward differences of the objective along ``r`` at step ``h``."""
        from .differencer import directional

        harness, scalar, f0 = ref
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
            check=self.who, arg_name=k, probe=self.label, index=index, diagnosis="non-finite gradient at a probe "
            "where the function is finite: a 0/0 or inf*0 in the rule at a special point")

    # -- agreement: the analytic directional derivative inside the one-sided interval, at two steps
    def _outside(self, ref, g):
        r = {k: self.rng.standard_normal(np.shape(self.values[k])) for k in self.names}
        length = math.sqrt(sum(float(np.sum(v * v)) for v in r.values()))
        scale = max(float(np.max(np.abs(np.asarray(self.values[k], np.float64)), initial=0.0)) for k in self.names)
        analytic = float(sum(np.sum(g[k] * r[k]) for k in self.names))
        eps = float(np.finfo(self.dt).eps) if self.dt.kind == "f" else 0.0
        along = float(sum(np.sum(np.abs(g[k] * r[k])) for k in self.names))
        # the rounding of the analytic side, and rtol of what the elements add up to along r (the checkers'
        # atol=None: a share of the gradient's own scale)
        rounding = 16.0 * eps * along + self.rtol * along
        h = STEP * max(scale, 1.0) / max(length, 1.0)
        sides = [self._one_sided(ref, r, step) for step in (h, h / CONFIRM)]
        if not all(math.isfinite(d) for pair in sides for d in pair):
            return
        # what the shorter step changed bounds the truncation left (the h^2 term of a central difference, the
        # h term of a one-sided one: a row of zeros in a product moves the objective by h^3)
        trunc = abs(sum(sides[0]) - sum(sides[1])) / 2.0
        verdicts = []
        for plus, minus in sides:
            lo, hi = min(plus, minus), max(plus, minus)
            tol = self.atol + self.rtol * max(abs(plus), abs(minus), abs(analytic)) + rounding + trunc
            if hi - lo > tol:
                # a kink along r (a zero of relu, ELU, abs at many elements at once): backprop's per-element
                # subgradients need not land between the two directional one-sided derivatives of a function
                # that is neither convex nor concave there, so only soundness is judged at such a probe
                return
            verdicts.append((lo - tol <= analytic <= hi + tol, lo, hi, tol))
        if any(ok for ok, *_ in verdicts):
            return
        _, lo, hi, tol = verdicts[-1]
        raise GradientCheckError(
            f"{self.who}: at the probe {self.label}, the analytic derivative along a random direction is "
            f"{analytic:.10g}, outside the one-sided numeric derivatives [{lo:.10g}, {hi:.10g}] (allowed "
            f"{tol:.3g} beyond; confirmed at a step {CONFIRM:g}x shorter)\n  special-point probe (probes=False "
            "turns the probes off): the gradient is right at the given inputs but wrong here -- a formula wrong "
            "in one region of its inputs, at a tie, at a zero, or when two inputs are the same array",
            check=self.who, probe=self.label, fast=(analytic, 0.5 * (lo + hi)),
            diagnosis=f"gradient wrong at the probe {self.label} only")
