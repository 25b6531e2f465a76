"""The ``symgrad`` command: ``symgrad check`` proves a shipped example model's gradients.

``python -m symgrad`` runs ``symgrad check`` on the default model.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

__all__ = ["main"]


def _check(args) -> int:
    import test_utils as tu

    from . import model_zoo

    names = list(model_zoo.MODELS) if args.model == "all" else [args.model]
    failed = 0
    for name in names:
        sym = model_zoo.MODELS[name]()
        location, aux = model_zoo.example_inputs(sym, model_zoo.DATA_SHAPES[name], seed=args.seed)
        grad_nodes = [n for n in sym.list_arguments() if not n.endswith("_label")]
        for dtype in args.dtype:
            t0 = time.perf_counter()
            try:
                tu.check_numeric_gradient(sym, location, aux_states=aux or None, grad_nodes=grad_nodes,
                                          dtype=np.dtype(dtype).type)
            except AssertionError as exc:
                failed += 1
                print(f"FAIL  {name:8s} {dtype:8s} gradient check failed\n{exc}")
                continue
            ms = (time.perf_counter() - t0) * 1e3
            print(f"ok    {name:8s} {dtype:8s} {len(grad_nodes)} arguments, analytic == numeric ({ms:.0f} ms)")
    print(f"{len(names) * len(args.dtype) - failed} passed, {failed} failed")
    return 1 if failed else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="symgrad", description=__doc__)
    sub = parser.add_subparsers(dest="command")
    check = sub.add_parser("check", help="gradient-check a shipped example model against finite differences")
    check.add_argument("--model", default="all", choices=["all", "mlp", "bn_mlp"])
    check.add_argument("--dtype", nargs="+", default=["float32", "float64"], choices=["float32", "float64"])
    check.add_argument("--seed", type=int, default=0)
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv = ["check"] + argv  # the default command
    args = parser.parse_args(argv)
    return _check(args)
