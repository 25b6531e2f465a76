"""Whether a graph's custom ops honour grad_req and the gradient buffer MXNet hands them.

MXNet gives ``CustomOp.backward`` the argument's own gradient buffer and its ``req``: 'write' on a buffer that
is *not* zeroed, 'add' on one holding earlier gradients. An op must apply ``req`` itself
(``self.assign(in_grad[i], req[i], g)``). Three such bugs shipped again and again:

- *ignores req='add'*: ``in_grad[0][:] = g`` overwrites what the buffer held (gradient accumulation across
  micro-batches silently keeps the last one only);
- *reads a stale buffer*: ``in_grad[0][:] += g`` under 'write' adds to whatever the buffer held;
- *accumulates across calls*: the op keeps a gradient of its own between backward calls and never resets it.

symgrad's executor hands an op the buffer exactly where MXNet's does (``Executor.backward``), so these bugs show
the way they would under MXNet. A single checker pass cannot see the last two when its buffers happen to be
clean and it calls backward once, so every checker of a graph with ``Custom`` nodes also runs ``probe``: the
backward twice in a row with grad_req 'add' on a random buffer ``B`` (expected ``B + 2g``) and twice with
'write' on a random buffer (expected ``g``), where ``g`` is the gradient the checker's own pass computed. Graphs
without ``Custom`` nodes skip it: symgrad's own ops never see a buffer (the executor applies ``req``).
Cost: 2 binds, 4 forwards and 4 backwards in the dtype under test.
"""

from __future__ import annotations

import json

import numpy as np

from symgrad.serialization import tojson

from .compare import compare
from .context import to_device, to_numpy
from .frames import hide_from_pytest as _hide_from_pytest

__tracebackhide__ = _hide_from_pytest  # a failed check shows its report, not these frames

CALLS = 2
#: what each buffer holds after ``CALLS`` backward calls under each req, by model: ``(B, g) -> array``
_MODELS = {
    "add": {
        "honours req": lambda b, g: b + CALLS * g,
        "ignores req='add': it overwrites the gradient buffer instead of adding to it "
        "(MXNet: self.assign(in_grad[i], req[i], ...) adds where req is 'add')": lambda b, g: g,
        f"accumulates across backward calls: {CALLS} calls added {CALLS * (CALLS + 1) // 2}x the gradient "
        "(a gradient kept between calls and never reset)": lambda b, g: b + CALLS * (CALLS + 1) // 2 * g,
    },
    "write": {
        "honours req": lambda b, g: g,
        "reads a stale buffer: it adds into a gradient buffer it should overwrite (grad_req 'write': MXNet "
        "does not zero the buffer first; self.assign(in_grad[i], req[i], ...) writes)": lambda b, g: b + CALLS * g,
        f"accumulates across backward calls: the last of {CALLS} calls gave {CALLS}x the gradient (a gradient "
        "kept between calls and never reset)": lambda b, g: CALLS * g,
    },
}

_PATTERNS = [("ignores", "overwritten_buffer"), ("reads a stale", "stale_buffer"), ("accumulates", "kept_gradient")]


def custom_nodes(sym) -> list[str]:
    """Names of the ``Custom`` nodes of ``sym``."""
    return [n["name"] for n in json.loads(tojson(sym, warn=False))["nodes"] if n.get("op") == "Custom"]


def probe(sym, values: dict, aux: dict, heads: list, gradients: dict, dtype, ctx, who: str, noise=None):
    """Raise ``GradientCheckError`` when a backward with grad_req 'add' or repeated calls disagrees with
    ``gradients`` (``{name: the gradient in float64}``, as the checker's own pass computed it) beyond rounding;
    the message names the bug the buffer's contents fit (module docstring). ``noise``: ``{name: rounding noise
    of the gradient}`` (optional). Nothing is done for a graph without ``Custom`` nodes."""
    if not gradients or not custom_nodes(sym):
        return
    dt = np.dtype(dtype)
    rng = np.random.default_rng(20)
    initial = {k: rng.standard_normal(np.shape(g)).astype(dt) for k, g in sorted(gradients.items())}
    for req in ("add", "write"):
        got = _backward_twice(sym, values, aux, heads, initial, req, ctx)
        for k, g in gradients.items():
            _judge(k, got[k], initial[k].astype(np.float64), g, req, dt, who, None if noise is None else noise[k])


def _backward_twice(sym, values, aux, heads, initial, req, ctx) -> dict:
    bufs = {k: to_device(v.copy(), ctx) for k, v in initial.items()}
    exe = sym.bind(
        ctx,
        {k: to_device(np.array(v, copy=True), ctx) for k, v in values.items()},
        args_grad=bufs,
        grad_req={k: (req if k in bufs else "null") for k in values},
        aux_states={k: to_device(np.array(v, copy=True), ctx) for k, v in aux.items()},
    )
    for _ in range(CALLS):
        exe.forward(is_train=True)
        exe.backward([None if h is None else to_device(h, ctx) for h in heads])
    return {k: np.asarray(to_numpy(b), np.float64) for k, b in bufs.items()}


def _judge(name, got, b, g, req, dt, who, noise):
    """Compare the buffer with what honouring ``req`` gives; name the model the buffer fits when it does not."""
    from .tolerance import get_rtol

    eps = float(np.finfo(dt).eps) if dt.kind == "f" else 0.0
    # each call rounds its gradient and the buffer's update once: 4 eps of what was added, with margin
    allowed = 8.0 * eps * (np.abs(b) + CALLS * np.abs(g)) + (0.0 if noise is None else CALLS * noise)
    rtol = float(get_rtol(None, dt))
    models = _MODELS[req]
    fits = [
        what
        for what, model in models.items()
        if np.all(np.abs(got - model(b, g)) <= allowed + rtol * np.abs(model(b, g)))
    ]
    if "honours req" in fits:
        return
    guess = fits[0] if fits else None
    # the pattern (``diagnose.PATTERNS``) of the bug the buffer fits, by the model's first words
    pattern = next((p for start, p in _PATTERNS if guess and guess.startswith(start)), None)
    headline = f"gradient of {name!r} after {CALLS} backward calls with grad_req {req!r} on a random buffer: " + (
        f"the op {guess}" if guess else f"the buffer is not what grad_req {req!r} gives"
    )
    compare(
        got,
        models["honours req"](b, g),
        rtol,
        0.0,
        check=who,
        arg_name=name,
        what=headline,
        names=("buffer", "expected"),
        noise=allowed,
        extra_lines=[
            f"expected: {'initial buffer + ' if req == 'add' else ''}{CALLS if req == 'add' else 1} x "
            "the gradient of the checker's own backward"
        ],
        facts={"grad_req": req, "buffer_bug": guess},
        context={"buffer_fit": pattern},
    )
