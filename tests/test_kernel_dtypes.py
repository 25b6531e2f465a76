"""The plan's kernels hold for the inferred dtypes only (a scalar op's constant is a 0-d array of its input's
dtype, a fused backward skips the cast), so every value must have at run time the dtype inference gave it.

For every gradient row of the operator table, in each of its float dtypes: bind, trace the forward and the
backward value by value (``Executor.set_value_hook``, which runs the same kernels) and compare each value's
dtype with the plan's inferred one -- the forward graph's and the gradient graph's alike.
"""

import numpy as np
import pytest
from op_db import OPS

import symgrad as sg

GRAD_OPS = [o for o in OPS if o.grad]


def _cast(op, values, dtype):
    return {
        n: (v.astype(np.int64) if op.inputs.get(n) is not None and op.inputs[n].integer else v.astype(dtype))
        for n, v in values.items()
    }


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("op", GRAD_OPS, ids=repr)
def test_every_value_has_its_inferred_dtype(op):
    values, aux = op.sample()
    sym = op.symbol()
    grads = [n for n, spec in op.inputs.items() if spec.grad]
    for dtype in op.dtypes:
        args = _cast(op, values, dtype)
        location = {n: args[n] for n in sym.list_arguments()}
        exe = sym.bind(
            sg.cpu(),
            location,
            args_grad={n: np.zeros_like(location[n]) for n in grads},
            grad_req={n: ("write" if n in grads else "null") for n in location},
            aux_states={n: aux[n].astype(dtype) for n in sym.list_auxiliary_states()} or None,
        )
        inferred = exe.plan.value_types
        wrong = []

        def check(node, k, value, phase):
            want = inferred.get((node.id, k))
            if want is not None and np.dtype(value.dtype) != want:
                wrong.append(
                    f"{phase} {node.op_name} {node.name!r} output {k}: {np.dtype(value.dtype)}, inferred {want}"
                )
            return value

        exe.set_value_hook(check)
        outs = exe.forward(is_train=True)
        exe.backward([np.ones(o.shape, o.dtype) for o in outs])
        checked = sum(1 for ins in exe.plan.backward_instrs if ins.kernel is not None)
        assert not wrong, f"{op.name} ({np.dtype(dtype).name}): " + "; ".join(wrong[:5])
        assert inferred, f"{op.name}: no dtypes were inferred, so no kernel was chosen ({checked})"
