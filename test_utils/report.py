"""The one error every checker raises, and the text it carries.

A ``GradientCheckError`` is an ``AssertionError`` (so pytest shows it as a failed assertion) whose
message says which argument failed, shows a table of the worst elements, the share of mismatching
elements, the tolerances (and finite-difference step) used and a diagnosis of the likely bug; the
same facts are attributes, for tests and tools.
"""

from __future__ import annotations

__all__ = ["GradientCheckError", "format_table"]


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
        actual, expected: the compared arrays (float64 copies).
        seed: the random seed of the failing test when run under ``with_seed`` (else None).
    """

    def __init__(self, message: str, **facts):
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
        self.diagnosis = facts.pop("diagnosis", None)
        self.actual = facts.pop("actual", None)
        self.expected = facts.pop("expected", None)
        self.seed = facts.pop("seed", None)
        for k, v in facts.items():  # checker-specific extras (grad_req, dtype, ...)
            setattr(self, k, v)
        self._facts = dict(facts)

    def __reduce__(self):  # keep the facts when pickled (pytest-xdist, multiprocessing)
        state = {k: v for k, v in self.__dict__.items() if not k.startswith("_")}
        return (_restore, (type(self), str(self), state))


def _restore(cls, message, state):
    err = cls(message)
    err.__dict__.update(state)
    return err


def _fmt_index(index) -> str:
    return "()" if index == () else str(tuple(int(i) for i in index))


def format_table(rows, names=("actual", "expected")) -> list[str]:
    """Lines of a fixed-width table of ``(index, actual, expected, abs_error, tolerance)`` rows."""
    idx = [_fmt_index(r[0]) for r in rows]
    w = max([len("index")] + [len(s) for s in idx])
    head = f"{'index':>{w}}  {names[0]:>15}  {names[1]:>15}  {'|error|':>10}  {'tolerance':>10}"
    lines = [head]
    for s, (_, a, e, err, tol) in zip(idx, rows):
        lines.append(f"{s:>{w}}  {a:>15.8g}  {e:>15.8g}  {err:>10.3g}  {tol:>10.3g}")
    return lines
