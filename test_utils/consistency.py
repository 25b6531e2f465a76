"""MXNet's ``check_consistency``: one symbol on several devices and dtypes must agree.

Every entry of ``ctx_list`` binds the symbol with ``simple_bind`` (its device, argument shapes and
``type_dict``), gets the same random argument values (cast to its dtypes), runs ``forward(is_train=False)``,
then ``forward(is_train=True)`` and ``backward`` with the same random head gradients. Outputs, gradients
and updated auxiliary states of every entry are compared with those of the most precise entry (or the
caller's ``ground_truth``) at the tolerance of the less precise dtype of the two, through the one
comparison path (``compare``): a failure is a ``GradientCheckError`` naming the entry (device and dtype)
and the output, argument or auxiliary state that differs, with the worst elements and a diagnosis.

When a comparison between the most precise entry and an entry of another dtype or device fails, the
failure may come from a few elementwise *decisions* (a ReLU input within rounding of 0, a max-pool near
tie) that the two entries took differently: a flipped relu mask moves a whole gradient row. The most
precise entry is then re-run with the other entry's decisions pinned by value (``test_utils.decisions``):
if every output, gradient and auxiliary state then agrees, the check passes with a
``DecisionFlipWarning`` listing the flips; otherwise the failure stands, compared with the pinned run
(so its diagnosis is about what is left), and its message lists the flips.

Cost: one simple_bind, two forward passes and one backward pass per entry; a failing entry of another
dtype or device costs two more forward passes of it and of the most precise entry, and one backward.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from symgrad.context import Context
from symgrad.symbol import Symbol

from ._inputs import (
    GradReqLike,
    check_dtype,
    check_flag,
    check_kind,
    check_number,
    check_stypes,
    check_tolerances,
    normalize_grad_req,
)
from .compare import compare
from .context import to_device, to_numpy
from .decisions import DecisionFlipWarning, format_flips, pin_decisions, record_decisions
from .frames import hide_from_pytest as _hide_from_pytest
from .harness import RoundingEmulator, refuse_random_ops
from .mxnet_checks import raise_first
from .report import GradientCheckError
from .seed import seeded_check
from .tolerance import Tolerance, get_tols

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

__tracebackhide__ = _hide_from_pytest  # a failed check shows its report, not these frames

__all__ = ["check_consistency", "DecisionFlipWarning"]

_WHO = "check_consistency"


def _smaller_dtype(dt1, dt2) -> np.dtype:
    """The less precise of two dtypes (fewer bytes; MXNet's ``smaller_dtype``)."""
    dt1, dt2 = np.dtype(dt1), np.dtype(dt2)
    return dt1 if dt1.itemsize < dt2.itemsize else dt2


def _precision(dt) -> tuple:
    """Sort key of an entry's primary dtype: floats by size above everything else."""
    dt = np.dtype(dt)
    return (dt.kind in "fc", dt.itemsize)


def _host(x) -> np.ndarray:
    return np.array(to_numpy(x), copy=True)


def _with_note(exc: BaseException, note: str) -> None:
    if hasattr(exc, "add_note"):  # Python 3.11+
        exc.add_note(note)


class _Entry:
    """One ``ctx_list`` item: its executor and its description."""

    def __init__(self, index, spec, sym, grad_req):
        if not isinstance(spec, dict):
            raise TypeError(
                f"{_WHO}: ctx_list[{index}] must be a dict such as {{'ctx': sg.cpu(), 'data': (2, 3), "
                f"'type_dict': {{'data': np.float16}}}}, got {type(spec).__name__}"
            )
        spec = dict(spec)
        if "ctx" not in spec:
            raise ValueError(f"{_WHO}: ctx_list[{index}] has no 'ctx' key (keys {sorted(spec)})")
        ctx = spec.pop("ctx")
        if not isinstance(ctx, Context):
            raise TypeError(
                f"{_WHO}: ctx_list[{index}]['ctx'] must be a Context such as sg.cpu(0) or sg.gpu(0), got {ctx!r}"
            )
        type_dict = dict(spec.pop("type_dict", None) or {})
        check_stypes(spec.pop("stype_dict", None), _WHO, f"ctx_list[{index}]['stype_dict']")
        for name, shape in spec.items():
            if not (isinstance(shape, (tuple, list)) and all(isinstance(d, (int, np.integer)) for d in shape)):
                raise TypeError(f"{_WHO}: ctx_list[{index}][{name!r}] must be a shape (a tuple of ints), got {shape!r}")
        self.index, self.ctx, self.type_dict = index, ctx, type_dict
        self.out_names = sym.list_outputs()
        try:
            self.exe = sym.simple_bind(ctx, grad_req=grad_req, type_dict=type_dict, **spec)
        except Exception as exc:
            _with_note(exc, f"{_WHO}: while binding ctx_list[{index}] ({ctx}, type_dict {type_dict})")
            raise
        self.dtype = None  # the dtype of output 0 (MXNet's "precision" of an entry), known after forward

    @property
    def label(self) -> str:
        """Short column label, e.g. ``#2 cpu0 float16``."""
        return f"#{self.index} {self.ctx.device_type}{self.ctx.device_id} {self.dtype.name}"

    @property
    def desc(self) -> str:
        return f"entry {self.index} ({self.ctx}, {self.dtype.name})"

    def set_inputs(self, arg_params, aux_params):
        for name, arr in self.exe.arg_dict.items():
            arr[...] = to_device(np.broadcast_to(arg_params[name], arr.shape), self.ctx, arr.dtype)
        for name, arr in self.exe.aux_dict.items():
            arr[...] = to_device(np.broadcast_to(aux_params[name], arr.shape), self.ctx, arr.dtype)
        for arr in self.exe.grad_arrays:
            if arr is not None:
                arr[...] = 0

    def forward(self, is_train) -> dict:
        outs = self.exe.forward(is_train=is_train)
        if self.dtype is None:
            self.dtype = np.dtype(outs[0].dtype)
        return dict(zip(self.out_names, (_host(o) for o in outs)))


def _check_symbols(sym, n):
    if isinstance(sym, Symbol):
        return [sym] * n
    if not isinstance(sym, (list, tuple)) or not all(isinstance(s, Symbol) for s in sym):
        raise TypeError(
            f"{_WHO}: sym must be a Symbol or a list of Symbols (one per ctx_list entry), got {type(sym).__name__}"
        )
    if len(sym) != n:
        raise ValueError(f"{_WHO}: {len(sym)} symbols for {n} ctx_list entries; give one symbol per entry")
    args, outs = sym[0].list_arguments(), sym[0].list_outputs()
    for i, s in enumerate(sym[1:], 1):
        if s.list_arguments() != args:
            raise ValueError(f"{_WHO}: symbol {i} has arguments {s.list_arguments()}, symbol 0 has {args}")
        if s.list_outputs() != outs:
            raise ValueError(f"{_WHO}: symbol {i} has outputs {s.list_outputs()}, symbol 0 has {outs}")
    return list(sym)


def _check_params(given, names, shapes, what, noun):
    """Validate a caller's ``arg_params``/``aux_params`` dict: known names, values that broadcast."""
    if given is None:
        return {}
    if not isinstance(given, dict):
        raise TypeError(f"{_WHO}: {what} must be a dict name -> array, got {type(given).__name__}")
    unknown = [k for k in given if k not in names]
    if unknown:
        raise ValueError(
            f"{_WHO}: {what} names {unknown}, which are not {noun}s of the symbol; its {noun}s are {list(names)}"
        )
    for k, v in given.items():
        if not isinstance(v, (int, float)):  # MXNet's aux default is the number 0
            check_kind(np.asarray(to_numpy(v)), _WHO, what, k, allow_complex=False)
        shape = np.shape(to_numpy(v))
        try:
            np.broadcast_to(np.empty(shape), shapes[k])
        except ValueError:
            raise ValueError(f"{_WHO}: {what}[{k!r}] has shape {shape}, expected {shapes[k]}") from None
    return given


def _random(shape, scale, use_uniform, rand_type):
    if use_uniform:
        return np.random.uniform(low=-0.92 * scale, high=0.92 * scale, size=shape).astype(rand_type)
    return np.random.normal(size=shape, scale=scale).astype(rand_type)


def _inputs_seed(*arrays: dict) -> int:
    """A seed derived from the input values: the same inputs give the same head gradients (so a ground truth
    from an earlier call stays valid, as with MXNet's output-valued head gradients)."""
    digest = hashlib.sha256()
    for d in arrays:
        for name in sorted(d):
            digest.update(name.encode())
            digest.update(np.ascontiguousarray(d[name], dtype=np.float64).tobytes())
    return int.from_bytes(digest.digest()[:8], "little")


def _loss_heads(sym):
    """Outputs whose backward ignores the head gradient (SoftmaxOutput, MakeLoss, need_top_grad=False)."""
    return [head.loss_head for head in sym.heads()]


def _ground_truth(ground_truth, required, optional):
    if not isinstance(ground_truth, dict):
        raise TypeError(
            f"{_WHO}: ground_truth must be a dict name -> array (as returned by check_consistency), "
            f"got {type(ground_truth).__name__}"
        )
    missing = [k for k in required if k not in ground_truth]
    if missing:
        raise ValueError(
            f"{_WHO}: ground_truth has no array for {missing}; it needs every output and every "
            f"gradient whose grad_req is not 'null': {list(required)}"
        )
    unknown = [k for k in ground_truth if k not in required and k not in optional]
    if unknown:
        raise ValueError(
            f"{_WHO}: ground_truth names {unknown}, which are neither outputs, gradients with a "
            f"grad_req other than 'null' nor auxiliary states: {list(required) + list(optional)}"
        )
    return {k: _host(v) for k, v in ground_truth.items()}


@seeded_check
def check_consistency(
    sym: Symbol | Sequence[Symbol],
    ctx_list: Sequence[Mapping[str, Any]],
    scale: float = 1.0,
    grad_req: GradReqLike = "write",
    arg_params: dict[str, Any] | None = None,
    aux_params: dict[str, Any] | None = None,
    rtol: Tolerance = None,
    atol: Tolerance = None,
    raise_on_err: bool = True,
    ground_truth: dict[str, Any] | None = None,
    equal_nan: bool = False,
    use_uniform: bool = False,
    rand_type: DTypeLike = np.float64,
) -> dict[str, Any]:
    """Check that a symbol gives the same outputs and gradients on every device and dtype (MXNet 1.9).

    Method:
        Every entry of ``ctx_list`` is bound with ``simple_bind`` and gets the same random argument values
        (cast to its dtypes); ``forward(is_train=False)``, then ``forward(is_train=True)`` and ``backward``
        with the same random head gradients. Outputs, gradients and updated auxiliary states of each entry
        are compared with those of the most precise entry (or ``ground_truth``): no finite differences, the
        entries check each other. A failure between entries of different dtypes or devices is looked at
        again with the most precise entry re-run on the other entry's elementwise decisions (ReLU masks,
        max-pool choices) pinned by value: if everything then agrees, the difference was flipped decisions
        near a tie, and the check passes with a ``DecisionFlipWarning`` listing them.

    Cost:
        Per entry one ``simple_bind``, two forward passes and one backward pass; per entry less precise
        than the reference, the rounding-noise estimate of each phase (7 float64 evaluations, forward and
        backward for the training phase). A failing entry of another dtype or device costs two more forward
        passes of it and of the most precise entry, and one backward.

    Tolerance:
        Per element ``|entry - reference| <= atol + rtol * |reference| + rounding noise``. ``None`` takes the
        table entry of the less precise side (a side's dtype: the smaller of the array's dtype and its
        entry's output dtype), so float32 against float64 is judged at float32's rtol 1e-4, atol 1e-3; a
        number is used as is, a ``{dtype: tol}`` dict overrides the table. The rounding noise is that of the
        less precise entry's outputs and gradients, emulated on the float64 graph (none for auxiliary
        states, none between entries of one dtype).

    Args:
        sym: a Symbol, or a list of Symbols (one per entry) with the same arguments and outputs.
        ctx_list: a list of dicts ``{"ctx": sg.cpu(0) | sg.gpu(0), <argument name>: shape, ...,
            "type_dict": {name: dtype}}``, each bound with ``simple_bind`` (at least two entries, or one
            with ``ground_truth``).
        scale: standard deviation of the random normal arguments (half-width / 0.92 of uniform ones).
        grad_req: 'write' / 'add' / 'null', a list in argument order or a dict name -> req (absent: 'null').
            All 'null' skips the training pass.
        arg_params: ``{name: array}`` values of some arguments; the others are drawn in sorted name order
            and, as in MXNet, added to this dict.
        aux_params: ``{name: array}`` values of auxiliary states (default 0, as MXNet), also filled in.
        rtol, atol: None (the tables), a number or ``{dtype: tol}``; the tolerance of a pair is the looser
            of the two sides' dtypes, where a side's dtype is the smaller of the array's dtype and its
            entry's output dtype (so a float32 BatchNorm gamma gradient of a float16 entry gets float16's
            tolerance, as MXNet).
        raise_on_err: False prints each failure report and carries on.
        ground_truth: ``{name: array}`` to compare every entry with (e.g. a previous call's result) instead
            of the most precise entry; it needs every output and every computed gradient.
        equal_nan: NaN == NaN.
        use_uniform: uniform instead of normal random arguments.
        rand_type: dtype the random arguments are drawn in before each entry casts them.

    Returns:
        The ground truth: ``ground_truth`` when given, else the most precise entry's (the first entry
        whose output 0 has the widest float dtype) outputs of ``forward(is_train=True)``, gradients
        (grad_req not 'null') and auxiliary states after that forward, as host numpy arrays by name
        (after ``forward(is_train=False)`` only when every grad_req is 'null').

    Raises:
        GradientCheckError: an entry differs; the message names the entry (device, dtype), the output,
            argument or auxiliary state, the reference entry and the dtype whose tolerance applied. When the
            entry's dtype or device differs from the most precise entry's and some decisions (relu masks,
            max-pool choices) flipped between the two, the comparison is with the most precise entry re-run
            with those decisions pinned, the message lists the flips and ``err.flips`` holds them.
        ValueError / TypeError: malformed ``ctx_list``, symbols, params or ground truth.

    Warns:
        DecisionFlipWarning: such an entry differed only through flipped decisions (pinning them made every
            output, gradient and auxiliary state agree); the check passes. ``warning.flips`` lists them.

    Differences from MXNet: the head gradients of ``backward`` are standard-normal arrays rounded to
    float16 (so every entry holds exactly the same values), drawn from a generator seeded by the input
    values (the same inputs give the same head gradients, so a returned ground truth can be reused; numpy's
    global RNG is not consumed), rather than entry 0's outputs cast to the least precise dtype; loss heads
    (SoftmaxOutput, MakeLoss) get none; auxiliary states updated by the training forward (BatchNorm's
    moving mean/var) are compared and returned too; every failure is collected before the first is
    raised (the others are listed in a note and in ``err.others``); with ``ground_truth`` every entry is
    compared with it (MXNet skips the most precise one), and the inference pass is compared with the
    most precise entry (a ground truth from a training pass does not hold the inference outputs of
    BatchNorm & co.) unless every grad_req is 'null'.

    >>> import numpy as np, symgrad as sg
    >>> sym = sg.sym.FullyConnected(sg.sym.Variable("x"), num_hidden=3, name="fc")
    >>> ctx_list = [{"ctx": sg.cpu(0), "x": (2, 4), "type_dict": {"x": np.float64}},
    ...             {"ctx": sg.cpu(0), "x": (2, 4), "type_dict": {"x": np.float32}}]
    >>> sorted(check_consistency(sym, ctx_list))
    ['fc_bias', 'fc_output', 'fc_weight', 'x']
    """
    scale = check_number(scale, _WHO, "scale")
    use_uniform = check_flag(use_uniform, _WHO, "use_uniform")
    rand_type = check_dtype(rand_type, _WHO, name="rand_type")
    run = _Consistency(sym, ctx_list, grad_req, rtol, atol, raise_on_err, ground_truth, equal_nan)
    run.inputs(arg_params, aux_params, scale, use_uniform, rand_type)
    run.inference()
    if not run.training:
        run.settle(None)
        return ground_truth if ground_truth is not None else run.truth_without_training()
    results = run.train()
    run.settle(results)
    return ground_truth if ground_truth is not None else results[run.ref.index]


_TRAIN_PHASE = "forward(is_train=True) + backward with the same random head gradients"


class _Consistency:
    """One ``check_consistency`` call in named phases: validate (``__init__``), ``inputs``, ``inference``,
    ``train``, then ``settle`` (decision flips explained, failures printed or raised); ``compare`` is the
    comparison of one entry's values with the reference, shared by every phase."""

    # -- phase 1: validate -------------------------------------------------------------------------------
    def __init__(
        self,
        sym: Symbol | Sequence[Symbol],
        ctx_list: Sequence[Mapping[str, Any]],
        grad_req: GradReqLike,
        rtol: Tolerance,
        atol: Tolerance,
        raise_on_err: bool,
        ground_truth: dict[str, Any] | None,
        equal_nan: bool,
    ) -> None:
        if not isinstance(ctx_list, (list, tuple)):
            raise TypeError(f"{_WHO}: ctx_list must be a list of dicts, got {type(ctx_list).__name__}")
        if len(ctx_list) < (1 if ground_truth is not None else 2):
            raise ValueError(
                f"{_WHO}: ctx_list has {len(ctx_list)} entries; comparing needs at least two (or one "
                "and a ground_truth)"
            )
        check_tolerances(rtol, atol, _WHO)
        raise_on_err = check_flag(raise_on_err, _WHO, "raise_on_err")
        equal_nan = check_flag(equal_nan, _WHO, "equal_nan")
        self.syms = _check_symbols(sym, len(ctx_list))
        refuse_random_ops(self.syms, _WHO)
        self.arg_names, self.out_names = self.syms[0].list_arguments(), self.syms[0].list_outputs()
        self.aux_names = self.syms[0].list_auxiliary_states()
        self.reqs = normalize_grad_req(grad_req, self.arg_names, _WHO)
        self.entries = [_Entry(i, spec, s, grad_req) for i, (spec, s) in enumerate(zip(ctx_list, self.syms))]
        self.rtol, self.atol, self.raise_on_err, self.equal_nan = rtol, atol, raise_on_err, equal_nan
        self.training = any(r != "null" for r in self.reqs.values())
        self.grad_names = [k for k in self.arg_names if self.reqs[k] != "null"]
        self.ground_truth = ground_truth
        self.gt: dict[str, np.ndarray] | None = None
        if ground_truth is not None:
            self.gt = _ground_truth(
                ground_truth, self.out_names + (self.grad_names if self.training else []), self.aux_names
            )
        self.errors: dict = {}  # entry index -> its GradientCheckErrors, settled at the end
        self._noise: dict = {}  # (entry index, phase) -> {name: estimated rounding noise in the entry's dtype}
        self.heads: list[np.ndarray | None] | None = None  # the head gradients of the training pass
        self.out_kinds = dict.fromkeys(self.out_names, "output")
        self.kinds = {
            **self.out_kinds,
            **dict.fromkeys(self.grad_names, "gradient"),
            **dict.fromkeys(self.aux_names, "auxiliary state"),
        }
        self._same_shapes()

    def _same_shapes(self):
        first = self.entries[0].exe
        self.arg_shapes = {k: tuple(a.shape) for k, a in first.arg_dict.items()}
        self.aux_shapes = {k: tuple(a.shape) for k, a in first.aux_dict.items()}
        for e in self.entries[1:]:
            for what, shapes, arrays in (
                ("argument", self.arg_shapes, e.exe.arg_dict),
                ("auxiliary state", self.aux_shapes, e.exe.aux_dict),
            ):
                for k, a in arrays.items():
                    if tuple(a.shape) != shapes[k]:
                        raise ValueError(
                            f"{_WHO}: {what} {k!r} has shape {tuple(a.shape)} in ctx_list[{e.index}] "
                            f"but {shapes[k]} in ctx_list[0]; every entry must bind the same shapes"
                        )

    # -- phase 2: the same inputs everywhere ----------------------------------------------------------------
    def inputs(self, arg_params, aux_params, scale, use_uniform, rand_type):
        """MXNet fills the caller's dicts in place: random arguments in sorted name order, aux states 0."""
        arg_params = _check_params(arg_params, self.arg_names, self.arg_shapes, "arg_params", "argument")
        aux_params = _check_params(aux_params, self.aux_names, self.aux_shapes, "aux_params", "auxiliary state")
        for name in sorted(self.arg_shapes):
            if name not in arg_params:
                arg_params[name] = _random(self.arg_shapes[name], scale, use_uniform, rand_type)
        for name in self.aux_names:
            aux_params.setdefault(name, 0)
        self.host_args = {k: np.asarray(to_numpy(v)) for k, v in arg_params.items()}
        self.host_aux = {k: np.asarray(to_numpy(v)) for k, v in aux_params.items()}
        for e in self.entries:
            e.set_inputs(self.host_args, self.host_aux)

    # -- phase 3: inference, compared with the most precise entry (or the ground truth without training) ----
    def inference(self):
        self.infer_outs = [e.forward(is_train=False) for e in self.entries]
        self.ref = max(self.entries, key=lambda e: _precision(e.dtype))  # the first of the most precise
        for e, outs in zip(self.entries, self.infer_outs):
            if self.gt is not None and not self.training:
                self.compare(e, outs, None, self.gt, "forward(is_train=False)", self.out_kinds)
            elif e is not self.ref:
                self.compare(
                    e, outs, self.ref, self.infer_outs[self.ref.index], "forward(is_train=False)", self.out_kinds
                )

    def truth_without_training(self) -> dict:
        ref = self.ref
        return {**self.infer_outs[ref.index], **{k: _host(a) for k, a in ref.exe.aux_dict.items()}}

    # -- phase 4: training -----------------------------------------------------------------------------
    def train(self) -> list:
        """Forward in training and backward with the same random head gradients everywhere, rounded to float16
        so that every dtype holds them exactly (whatever the entries, so a ground truth from another call stays
        comparable). Returns each entry's outputs, gradients and auxiliary states."""
        train_outs = [e.forward(is_train=True) for e in self.entries]
        head_rng = np.random.default_rng(_inputs_seed(self.host_args, self.host_aux))
        self.heads = [
            None if loss else head_rng.standard_normal(train_outs[0][name].shape).astype(np.float16)
            for name, loss in zip(self.out_names, _loss_heads(self.syms[0]))
        ]
        results = []
        for e, outs in zip(self.entries, train_outs):
            _backward(e.exe, self.heads, e.ctx)
            grads = {k: _host(e.exe.grad_dict[k]) for k in self.grad_names}
            aux = {k: _host(a) for k, a in e.exe.aux_dict.items()}
            results.append({**outs, **grads, **aux})
        for e, values in zip(self.entries, results):
            if self.gt is not None:
                self.compare(e, values, None, self.gt, _TRAIN_PHASE, self.kinds)
            elif e is not self.ref:
                self.compare(e, values, self.ref, results[self.ref.index], _TRAIN_PHASE, self.kinds)
        return results

    # -- comparison ---------------------------------------------------------------------------------------
    def compare(self, e, values, ref_entry, ref_values, phase, kinds, sink=None, flips=None):
        """Compare ``values`` of entry ``e`` with ``ref_values`` (of ``ref_entry``; None: the ground truth);
        failures go to ``sink`` (default: the errors of ``e``). ``flips``: the decision flips pinned in
        ``ref_values`` (a re-check), listed in the report."""
        if ref_entry is None:
            ref_desc, ref_label, reference = "the ground truth", "ground truth", "ground_truth"
        else:
            ref_desc, ref_label, reference = f"{ref_entry.desc}, the most precise", ref_entry.label, ref_entry.index
        if flips:
            ref_desc += f", re-run with {e.desc}'s decisions pinned"
        sink = self.errors.setdefault(e.index, []) if sink is None else sink
        for name, got in values.items():
            if name not in ref_values:
                continue
            want = ref_values[name]
            tol_a = _smaller_dtype(got.dtype, e.dtype)
            tol_b = _smaller_dtype(want.dtype, want.dtype if ref_entry is None else ref_entry.dtype)
            rt, at = get_tols(np.empty(0, tol_a), np.empty(0, tol_b), self.rtol, self.atol)
            looser = _smaller_dtype(tol_a, tol_b)
            kind = kinds[name]
            facts = {
                "entry": e.index,
                "ctx": e.ctx,
                "dtype": np.dtype(got.dtype),
                "entry_dtype": e.dtype,
                "reference": reference,
                "phase": phase,
                "kind": kind,
            }
            if kind == "gradient":
                facts["grad_req"] = self.reqs[name]
            if flips:
                facts["flips"] = flips
            what = f"{'gradient of' if kind == 'gradient' else kind} {name!r}"
            noise = self.rounding_noise(e, ref_entry, phase).get(name)
            try:
                compare(
                    got,
                    want,
                    rt,
                    at,
                    check=_WHO,
                    arg_name=name,
                    names=(e.label, ref_label),
                    what=f"{what} on {e.desc} differs from {ref_desc}",
                    analytic_noise=noise,
                    noise_dtype=e.dtype if noise is not None else None,
                    equal_nan=self.equal_nan,
                    broadcast=False,
                    facts=facts,
                    extra_lines=[
                        f"compared after {phase}, at the tolerance of {looser.name} (the less precise "
                        "dtype of the pair)",
                        *_flip_lines(ref_entry, e, flips),
                    ],
                )
            except GradientCheckError as err:
                sink.append(err)

    def rounding_noise(self, e, ref_entry, phase) -> dict:
        """``{name: noise}`` of entry ``e``'s outputs and gradients when it is less precise than ``ref_entry``:
        the rounding its dtype commits, emulated on the float64 graph (``harness.RoundingEmulator``), so that a
        float32 entry is allowed the accumulation noise a correct float32 computation has -- the tolerance model
        of every other checker -- on top of the dtype's rtol/atol. Empty otherwise, and for auxiliary states."""
        if (
            ref_entry is None
            or np.dtype(e.dtype).kind != "f"
            or np.dtype(e.dtype).itemsize >= np.dtype(ref_entry.dtype).itemsize
        ):
            return {}
        key = (e.index, phase)
        if key not in self._noise:
            train = phase == _TRAIN_PHASE
            values = {k: np.asarray(to_numpy(v)) for k, v in self.host_args.items()}
            values = {k: v.astype(e.exe.arg_dict[k].dtype) for k, v in values.items()}
            aux = {
                k: np.broadcast_to(np.asarray(to_numpy(v), np.float64), e.exe.aux_dict[k].shape)
                for k, v in self.host_aux.items()
            }
            emulator = RoundingEmulator(
                self.syms[e.index], values, aux, self.grad_names if train else [], e.dtype, is_train=train, outputs=True
            )
            _, (noise,) = emulator.noise([self.heads] if train else [])
            self._noise[key] = noise
        return self._noise[key]

    # -- phase 5: settle -----------------------------------------------------------------------------------
    def settle(self, train_values):
        """Explain failures between entries of different dtypes or devices by decision flips, then report."""
        failures = []
        ref = getattr(self, "ref", None)
        for e in self.entries:
            errs = self.errors.get(e.index)
            if errs and self.gt is None and e is not ref and (e.dtype != ref.dtype or e.ctx != ref.ctx):
                errs = self._recheck(e, errs, train_values)
            for err in errs or ():
                if self.raise_on_err:
                    failures.append(err)
                else:
                    what = f"{'gradient of' if err.kind == 'gradient' else err.kind} {err.arg_name!r}"
                    print(f"{_WHO}: {what} on {e.desc} is inconsistent (raise_on_err=False, continuing):")
                    print(err)
        raise_first(failures)

    def _recheck(self, e, errs, train_values):
        """``e``'s failures against the most precise entry re-run with ``e``'s decisions pinned: none (then
        warn) when the flips explain every difference; the original ones when nothing flipped."""
        ref = self.ref
        flips, pinned_infer, pinned_train = _pinned_reference(
            e, ref, self.host_args, self.host_aux, self.heads, self.grad_names
        )
        if not flips:
            return errs
        sink = []
        self.compare(
            e, self.infer_outs[e.index], ref, pinned_infer, "forward(is_train=False)", self.out_kinds, sink, flips
        )
        if train_values is not None:
            self.compare(e, train_values[e.index], ref, pinned_train, _TRAIN_PHASE, self.kinds, sink, flips)
        if not sink:
            # stacklevel 5: _recheck <- settle <- check_consistency <- seeded_check's wrapper <- the caller
            warnings.warn(
                DecisionFlipWarning(
                    "\n".join(
                        [
                            f"{_WHO}: not an error: {len(flips)} decision(s) flipped between {e.desc} and {ref.desc} "
                            f"({_legend(ref, e)}); with them pinned, {e.desc} agrees with it in every output, "
                            "gradient and auxiliary state:",
                            *format_flips(flips),
                        ]
                    ),
                    flips,
                ),
                stacklevel=5,
            )
        return sink


def _flip_lines(ref, e, flips):
    """Report lines of a comparison with ``ref`` re-run with ``e``'s decisions pinned (none without flips)."""
    if not flips:
        return []
    return [
        f"{ref.desc} was re-run with {len(flips)} decision(s) pinned to {e.desc}'s, so that the two differ only "
        f"by rounding ({_legend(ref, e)}):",
        *format_flips(flips),
    ]


def _legend(ref, e):
    """How a flip line reads: ``relu 'r'[0, 3]: True -> False, decided on 3e-08 vs -2e-08``."""
    a, b = f"#{ref.index}", f"#{e.index}"
    return f"op node[index]: {a}'s choice -> {b}'s, decided on {a}'s value vs {b}'s"


def _backward(exe, heads, ctx):
    """``exe.backward`` with the float16 head gradients on ``ctx`` in the dtype of each output."""
    exe.backward([None if h is None else to_device(h, ctx, exe.outputs[k].dtype) for k, h in enumerate(heads)])


def _pinned_reference(e, ref, host_args, host_aux, heads, grad_names):
    """The most precise entry ``ref`` re-run with entry ``e``'s decisions pinned by value.

    Both entries start again from the call's inputs (the training pass moved BatchNorm's running
    statistics); ``e`` runs its inference and training forward recording its decision ops' inputs, then
    ``ref`` runs the same passes pinned to them and, when ``heads`` is given (training), its backward,
    which reads the pinned values. Returns ``(flips, inference outputs, training values or None)``.
    """
    e.set_inputs(host_args, host_aux)
    records = [record_decisions(e.exe, is_train=False)]
    if heads is not None:
        records.append(record_decisions(e.exe, is_train=True))
    ref.set_inputs(host_args, host_aux)
    flips = pin_decisions(ref.exe, records[0])
    infer = dict(zip(ref.out_names, (_host(o) for o in ref.exe.outputs)))
    if heads is None:
        return flips, infer, None
    flips += pin_decisions(ref.exe, records[1])
    outs = dict(zip(ref.out_names, (_host(o) for o in ref.exe.outputs)))
    _backward(ref.exe, heads, ref.ctx)
    grads = {k: _host(ref.exe.grad_dict[k]) for k in grad_names}
    aux = {k: _host(a) for k, a in ref.exe.aux_dict.items()}
    return flips, infer, {**outs, **grads, **aux}
