"""The one error every checker raises, and the text it carries.

A ``GradientCheckError`` is an ``AssertionError`` (so pytest shows it as a failed assertion) whose
message says which argument failed, shows a table of the worst elements, the share of mismatching
elements, the tolerances (and finite-difference step) used, a diagnosis of the likely bug and, last,
the seed with a one-line reproduction; the same facts are attributes, for tests and tools.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .frames import hide_from_pytest
from .seed import REPRODUCE_MARK, current_seed, reproduction, reproduction_line

__all__ = [
    "few",
    "Report",
    "GradientCheckError",
    "NondifferentiableError",
    "format_table",
    "Kink",
    "NondifferentiablePointWarning",
    "format_index",
    "with_reproduction",
]


def few(names, k=8) -> str:
    """Up to ``k`` names, then how many there are in all (every report's short list: text, CLI and HTML)."""
    names = list(names)
    return ", ".join(map(str, names[:k])) + (f", ... ({len(names)} in all)" if len(names) > k else "")


class NondifferentiablePointWarning(UserWarning):
    """A checker met non-differentiable points (relu/abs at 0, max ties) and re-drew or excluded them."""


@dataclass(frozen=True)
class Kink:
    """An element where the one-sided derivatives of the checked objective differ (a non-differentiable point).

    Attributes:
        arg: the argument.
        index: the element (a tuple).
        value: its value.
        left, right: one-sided difference quotients ``(f(x) - f(x-h)) / h`` and ``(f(x+h) - f(x)) / h``.
        analytic: the analytic derivative there (None when unknown).
        subgradient: True when ``analytic`` lies between ``left`` and ``right`` (up to the tolerance).
    """

    arg: str
    index: tuple
    value: float
    left: float
    right: float
    analytic: float | None = None
    subgradient: bool = True

    def describe(self, arg: str | None = None) -> str:
        name = self.arg if arg is None else arg
        return (
            f"non-differentiable point at {name}[{format_index(self.index)}] = {self.value:.6g} (left derivative "
            f"{self.left:.6g}, right derivative {self.right:.6g}"
            + ("" if self.analytic is None else f", analytic {self.analytic:.6g}")
            + ")"
        )

    def __str__(self):
        return self.describe()


def format_index(index: Iterable[Any]) -> str:
    """``(1, 2)`` as ``"1, 2"``, ``(3,)`` as ``"3"``."""
    return ", ".join(str(int(i)) for i in index)


@dataclass
class Report:
    """What a failed check found, as structure; ``render`` is the one place it becomes text.

    Attributes:
        check: the checker's name (first word of the headline).
        headline: what failed, e.g. ``"analytic gradient of 'x' does not match the numeric gradient"``.
        summary: lines right under the headline (mismatch share and tolerances, directional values).
        context: lines on the setting (dtypes, grad_req, step, excluded elements).
        rows: the worst elements ``(index, actual, expected, |error|, tolerance)``; ``names`` label them.
        diagnosis: one line naming the likely bug (``diagnose``), or None.
        children: ``(caption, Report)`` pairs: reports this one builds on (per input, per element), rendered
            under their caption without their own headline.
        notes: closing lines (other failing arguments, hints).
    """

    check: str
    headline: str
    summary: list = field(default_factory=list)
    context: list = field(default_factory=list)
    rows: list = field(default_factory=list)
    names: tuple = ("actual", "expected")
    diagnosis: object = None
    children: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    def body(self) -> list[str]:
        """Every line but the headline, indented by two spaces."""
        lines = [f"  {line}" for line in self.summary + self.context]
        if self.rows:
            lines.append(f"  worst {len(self.rows)} element{'s' if len(self.rows) != 1 else ''}:")
            lines += [f"    {line}" for line in format_table(self.rows, self.names)]
        if self.diagnosis:
            lines.append(f"  diagnosis: {self.diagnosis}")
        for caption, child in self.children:
            lines.append(f"  {caption}")
            lines += [f"  {line}" for line in child.body()]
        lines += [f"  {line}" for line in self.notes]
        return lines

    def render(self) -> str:
        return "\n".join([f"{self.check}: {self.headline}"] + self.body())


class GradientCheckError(AssertionError):
    """A checker found values that differ from the expected (or numeric) ones.

    Attributes:
        check: name of the checker (``"check_numeric_gradient"``, ``"assert_almost_equal"``, ...).
        arg_name: the argument (or output) whose values are wrong; None for plain array comparisons.
        index: index of the worst element (a tuple), None when shapes differ.
        worst: rows ``(index, actual, expected, abs_error, tolerance)``, worst first.
        mismatch_fraction: share of elements outside the tolerance (0..1).
        n_mismatch, size: number of mismatching elements and of all elements.
        rtol, atol: tolerances used; ``eps``: finite-difference step description (or None).
        names: labels of the two arrays, e.g. ``("analytic", "numeric")``.
        diagnosis: one-line guess at the bug (see ``test_utils.diagnose``), or None.
        pattern: short name of the diagnosed pattern (``diagnose.PATTERNS``: "doubled", "sign", "missing",
            "scaled", "small", "transposed", "broadcast", "confined", "kink", "spread", ...), or None.
        factor: the constant ``k`` of ``actual = k x expected`` when that pattern fits, else None.
        indices: the elements the diagnosis points at (confined errors, kinks), else ``[]``.
        kinks: ``Kink`` facts of mismatching elements at non-differentiable points, else ``[]``.
        diagnosis_facts: every fact of the diagnosis as a dict.
        actual, expected: the compared arrays (float64 copies).
        seed: the seed that reproduces the failure: the test's (``with_seed``, the ``rng`` fixture) or the
            one the checker seeded its random draws with (``seed.check_seed``); None for a check that
            draws no random numbers outside a seeded test.
        reproduce: the one-line shell command that re-runs the failing test (or script) with that seed,
            also the last line of the message (``seed 1234 -- reproduce: SYMGRAD_TEST_SEED=1234 python -m
            pytest 'tests/test_x.py::test_y'``).
    """

    hides_checker_frames = True  # frames.hide_from_pytest: pytest shows the report, not symgrad's frames

    def __init__(self, message: str | Report, **facts: Any) -> None:
        self.report = message if isinstance(message, Report) else None
        if self.report is not None:
            message = self.report.render()
        seed = facts.get("seed", None)
        seed = current_seed() if seed is None else seed
        facts["seed"] = seed
        message = with_reproduction(message, seed)
        self.reproduce = facts.pop("reproduce", None) or reproduction(seed)
        super().__init__(message)
        self.check = facts.pop("check", None)
        self.arg_name = facts.pop("arg_name", None)
        self.index = facts.pop("index", None)
        self.worst = facts.pop("worst", [])
        self.mismatch_fraction = facts.pop("mismatch_fraction", None)
        self.n_mismatch = facts.pop("n_mismatch", None)
        self.size = facts.pop("size", None)
        self.rtol = facts.pop("rtol", None)
        self.atol = facts.pop("atol", None)
        self.eps = facts.pop("eps", None)
        self.names = facts.pop("names", ("actual", "expected"))
        diag = facts.pop("diagnosis", None)
        self.diagnosis = None if diag is None else str(diag)
        self.diagnosis_facts = dict(getattr(diag, "facts", None) or {})
        self.pattern = facts.pop("pattern", getattr(diag, "pattern", None))
        self.factor = facts.pop("factor", getattr(diag, "factor", None))
        self.indices = facts.pop("indices", self.diagnosis_facts.get("indices", []))
        self.kinks = facts.pop("kinks", self.diagnosis_facts.get("kinks", []))
        self.actual = facts.pop("actual", None)
        self.expected = facts.pop("expected", None)
        self.seed = facts.pop("seed", None)
        for k, v in facts.items():  # checker-specific extras (grad_req, dtype, ...)
            setattr(self, k, v)
        self._facts = dict(facts)

    def facts(self) -> dict[str, Any]:
        """Every public attribute (the facts a composite report takes over from the report it builds on)."""
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_") and k not in ("report", "reproduce")}

    def __reduce__(self) -> tuple[Any, ...]:  # keep the facts when pickled (pytest-xdist, multiprocessing)
        state = {k: v for k, v in self.__dict__.items() if not k.startswith("_")}
        return (_restore, (type(self), str(self), state))


__tracebackhide__ = hide_from_pytest


class NondifferentiableError(ValueError):
    """The function is not differentiable at the sampled point (Chainer's ``NondifferentiableError``).

    Raised by ``numerical_grad`` / ``check_backward`` with ``detect_nondifferentiable=True`` when the
    one-sided derivatives around the point differ (a kink: relu/abs at 0, max ties) or the outputs change
    finiteness. A ``ValueError``: the point, not the gradient, is wrong for the check; pick another input.

    Attributes:
        arg_name: the input (``"x0"``, ``"inputs[1]"``) whose perturbation crossed the kink, or
            ``"direction"`` when only the random direction is known.
        index: the element of that input, or None.
        value: the input value at that element, or None.
        output_index, output_element: the output and its element whose one-sided derivatives differ.
        eps: the sampling half-width.
        offsets: the perturbations actually applied (input units), ``0`` included.
        samples: the output element's value at each offset (same order).
        left, right: the one-sided derivatives at the smaller step.
        residual, threshold: the jump ``right - left`` and the least jump that counts as a kink.
        nonfinite: True when finiteness changed between the samples.
        seed, reproduce: the seed of the check and the one-line reproduction (the message's last line).
    """

    arg_name: str | None
    index: tuple[int, ...] | None
    value: float | None
    output_index: int | None
    output_element: tuple[int, ...] | None
    eps: float | None
    left: float | None
    right: float | None
    residual: float | None
    threshold: float | None

    def __init__(self, message: str, **facts: Any) -> None:
        from .seed import current_seed as _seed

        self.seed = _seed()
        self.reproduce = reproduction(self.seed)
        super().__init__(with_reproduction(message, self.seed))
        for k in (
            "arg_name",
            "index",
            "value",
            "output_index",
            "output_element",
            "eps",
            "left",
            "right",
            "residual",
            "threshold",
        ):
            setattr(self, k, facts.pop(k, None))
        self.offsets = facts.pop("offsets", ())
        self.samples = facts.pop("samples", ())
        self.nonfinite = facts.pop("nonfinite", False)
        for k, v in facts.items():
            setattr(self, k, v)


def with_reproduction(message: object, seed: int | None) -> str:
    """``message`` ending with one line ``seed N -- reproduce: <command>`` (any older such line removed, so a
    report quoting another report's text keeps only its own)."""
    kept = [line for line in str(message).split("\n") if REPRODUCE_MARK not in line]
    return "\n".join(kept + [f"  {reproduction_line(seed)}"])


def _restore(cls, message, state):
    err = cls.__new__(cls)
    AssertionError.__init__(err, message)  # the message already ends with its reproduction line
    err.__dict__.update(state)
    return err


def _fmt_index(index) -> str:
    return "()" if index == () else str(tuple(int(i) for i in index))


def format_table(rows, names=("actual", "expected")) -> list[str]:
    """Lines of a fixed-width table of ``(index, actual, expected, abs_error, tolerance)`` rows."""
    idx = [_fmt_index(r[0]) for r in rows]
    w = max([len("index")] + [len(s) for s in idx])
    wa, we = max(15, len(names[0])), max(15, len(names[1]))
    head = f"{'index':>{w}}  {names[0]:>{wa}}  {names[1]:>{we}}  {'|error|':>10}  {'tolerance':>10}"
    lines = [head]
    for s, (_, a, e, err, tol) in zip(idx, rows):
        lines.append(f"{s:>{w}}  {a:>{wa}.8g}  {e:>{we}.8g}  {err:>10.3g}  {tol:>10.3g}")
    return lines
