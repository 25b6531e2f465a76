"""Replay operator cases recorded with real MXNet 1.9.1 (tests/fixtures/make_mxnet_cases.py).

Each case is loaded from MXNet's *own* symbol JSON with symgrad's loader (so the op name, its parameter
strings and its input wiring are MXNet's), bound to the recorded inputs, run forward in inference and
training mode and backward with the recorded head gradients; outputs, input gradients and auxiliary
states must match what MXNet computed. Families: ``tests/fixtures/mxnet_cases/*.json``.
"""

import json
from pathlib import Path

import numpy as np
import pytest

import symgrad as sg

HERE = Path(__file__).parent / "fixtures" / "mxnet_cases"
# float64 cases prove the math; float32 ones differ by summation order only
TOL = {"float64": (1e-9, 1e-11), "float32": (1e-4, 1e-5)}


def _cases():
    out = []
    for path in sorted(HERE.glob("*.json")):
        family = path.stem
        for name in json.loads(path.read_text())["cases"]:
            out.append(pytest.param(family, name, id=f"{family}/{name}"))
    return out


_LOADED = {}


def _family(family):
    if family not in _LOADED:
        _LOADED[family] = (json.loads((HERE / f"{family}.json").read_text())["cases"], np.load(HERE / f"{family}.npz"))
    return _LOADED[family]


@pytest.mark.parametrize(("family", "name"), _cases())
def test_matches_mxnet(family, name):
    cases, arrays = _family(family)
    meta = cases[name]

    def get(kind, key):
        return arrays[f"{name}/{kind}/{key}"]

    def close(got, kind, key, what):
        rtol, atol = TOL[meta["dtype"]]
        rtol, atol = meta["rtol"] or rtol, meta["atol"] or atol
        np.testing.assert_allclose(got, get(kind, key), rtol=rtol, atol=atol, err_msg=f"{family}/{name}: {what}")

    sym = sg.sym.load_json(meta["json"])
    assert sym.list_arguments() == meta["args"]
    assert sym.list_auxiliary_states() == meta["aux"]
    assert sym.list_outputs() == meta["outputs"]
    args = {n: get("arg", n).copy() for n in meta["args"]}
    aux = {n: get("aux", n).copy() for n in meta["aux"]}
    reqs = meta["grad_req"]
    grads = {n: np.zeros_like(a) for n, a in args.items() if reqs[n] != "null"}
    exe = sym.bind(sg.cpu(), args, args_grad=grads, grad_req=reqs, aux_states=aux or None)
    for k, o in enumerate(exe.forward(is_train=False)):
        close(o, "infer_out", k, f"inference output {k}")
    outs = exe.forward(is_train=True)
    for k, o in enumerate(outs):
        assert o.dtype == get("out", k).dtype, f"{family}/{name}: output {k} dtype {o.dtype}"
        close(o, "out", k, f"training output {k}")
    if meta["heads"] == "skip":
        return
    exe.backward([get("head", k) for k in range(len(outs))] if meta["heads"] == "random" else None)
    for n, g in grads.items():
        close(g, "grad", n, f"gradient of {n}")
    for n in meta["aux"]:
        close(exe.aux_dict[n], "aux_after", n, f"auxiliary state {n} after a training step")
