"""symgrad's operator set against MXNet 1.9.1's registry (tests/fixtures/mxnet_operators.json, recorded by
tests/fixtures/make_mxnet_oplist.py).

- every MXNet operator is registered in symgrad or has a reason in tests/mxnet_missing_ops.py, and no reason is
  kept for an operator symgrad registers (so the README's count and the list of what is missing stay true);
- the operators symgrad registers take MXNet's parameter names in MXNet's order (users pass them
  positionally after the inputs: ``repeat(x, 2)``);
- the README's operator counts are the registry's.
"""

import json
import re
from pathlib import Path

import pytest
from mxnet_missing_ops import GROUPS, OPS

import symgrad.operator  # noqa: F401  (registers Custom)
from symgrad.opdef import list_ops

MXNET = json.loads((Path(__file__).parent / "fixtures" / "mxnet_operators.json").read_text())["operators"]
# the operators symgrad ships (other test modules register test-only ops into the same registry)
REGISTERED = {name: op for name, op in list_ops().items() if op.forward.__module__.startswith("symgrad.")}

# Where MXNet's listing is not what its parser reads: _linspace is listed with _arange's fields (step, repeat,
# infer_range), but MXNet 1.9.1 parses LinspaceParam (``mx.sym.linspace(0, 1, 5, step=1)`` fails with "Cannot
# find argument 'step'")
PARSED = {name: ["start", "stop", "num", "endpoint", "ctx", "dtype"] for name in ("_linspace", "_npi_linspace")}


def _reason(name):
    if name in OPS:
        return OPS[name]
    return next((why for pattern, why in GROUPS.items() if re.search(pattern, name)), None)


def test_every_mxnet_operator_is_registered_or_has_a_reason():
    unexplained = sorted(n for n in MXNET if n not in REGISTERED and _reason(n) is None)
    assert not unexplained, f"{len(unexplained)} MXNet operators neither registered nor explained: {unexplained}"


def test_no_reason_is_kept_for_a_registered_operator():
    stale = sorted(n for n in OPS if n in REGISTERED)
    assert not stale, f"tests/mxnet_missing_ops.py explains operators symgrad registers: {stale}"
    unknown = sorted(n for n in OPS if n not in MXNET)
    assert not unknown, f"tests/mxnet_missing_ops.py lists names MXNet 1.9.1 does not register: {unknown}"


@pytest.mark.parametrize("name", sorted(n for n in REGISTERED if n in MXNET), ids=str)
def test_parameters_in_mxnet_order(name):
    op = REGISTERED[name]
    ours = list(op.params)
    listed = PARSED.get(name) or MXNET[name]["names"]
    theirs = [a for a in listed if a in op.params]
    assert [p for p in ours if p in theirs] == theirs, f"{name}: parameters in order {ours}, MXNet's order {listed}"
    # inputs are typed "NDArray-or-Symbol", "Symbol", "Symbol[]" or "NDArray-or-Symbol[]" by MXNet
    types = dict(zip(MXNET[name]["names"], MXNET[name]["types"]))
    missing = [
        a
        for a in listed
        if "Symbol" not in types.get(a, "") and "NDArray" not in types.get(a, "") and a not in op.params
    ]
    assert not missing, f"{name}: MXNet parameters symgrad does not accept: {missing}"


def _group_count(pattern):
    return sum(
        1
        for n in MXNET
        if n not in REGISTERED
        and n not in OPS
        and re.search(pattern, n)
        and next(p for p in GROUPS if re.search(p, n)) == pattern
    )


def test_readme_states_the_operator_set_as_it_is():
    text = " ".join((Path(__file__).parent.parent / "README.md").read_text().split())
    definitions = {id(op) for op in REGISTERED.values()}
    mxnet_named = {id(op) for name, op in REGISTERED.items() if name in MXNET}
    said = {
        "operators": (r"\*\*(\d+) operators registered under", len(definitions)),
        "names": (r"registered under (\d+) names\*\*", len(REGISTERED)),
        "mxnet names": (r"(\d+) of those names are among", sum(name in MXNET for name in REGISTERED)),
        "mxnet total": (r"among the ([\d ]+) that MXNet 1.9.1 registers", len(MXNET)),
        "hidden": (r"; (\d+) operators are symgrad's own hidden", len(definitions - mxnet_named)),
        "single missing": (r"symbolic 1.x API except (\d+),", len([n for n in OPS if n not in REGISTERED])),
        "backward kernels": (r"MXNet's (\d+) hand-written backward kernels", _group_count(list(GROUPS)[0])),
        "numpy front end": (r"the (\d+) operators of the NumPy front end", _group_count(list(GROUPS)[1])),
        "sparse": (r"(\d+) sparse operators", _group_count(list(GROUPS)[2])),
    }
    for what, (pattern, count) in said.items():
        found = re.search(pattern, text)
        assert found, f"README: no sentence matching {pattern!r} ({what})"
        stated = int(found.group(1).replace(" ", ""))
        assert stated == count, f"README says {stated} {what}, the registry has {count}"
