"""The operator table (PyTorch OpInfo style) that drives ``tests/test_ops.py``.

Each ``OpInfo`` says how to build the op from input Variables, how to sample
inputs (with a domain: positive for log, away from kinks for relu/abs/max),
a plain-numpy reference written here, the dtypes and tolerances. The generic
tests prove every row with symgrad's own checkers: forward against the
reference in every dtype, the symbolic gradient against float64 finite
differences, float32 against float64 gradients, second-order gradients where
the rule is differentiable, grad_req add/null, shape inference, and cpu
against gpu(0) (skipped without CuPy).

Family tables live in ``tests/op_db_<family>.py``, one per operator family module
``symgrad/ops/<family>.py``, each holding the rows of the ops that module registers (numpy references
used by several tables are in ``tests/np_refs.py``); they are concatenated into ``OPS``.
"""

from op_info import FLOATS, FWD_TOL, In, OpInfo

__all__ = ["OPS", "In", "OpInfo", "FLOATS", "FWD_TOL"]


def _load_families():
    import importlib
    import pkgutil
    from pathlib import Path

    ops = []
    here = Path(__file__).parent
    for mod in sorted(pkgutil.iter_modules([str(here)]), key=lambda m: m.name):
        if mod.name.startswith("op_db_"):
            ops.extend(importlib.import_module(mod.name).OPS)
    names = [o.name for o in ops]
    dup = {n for n in names if names.count(n) > 1}
    assert not dup, f"duplicate OpInfo names: {dup}"
    return ops


OPS = _load_families()
