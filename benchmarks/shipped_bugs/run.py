"""Run symgrad's three checker styles, at default settings, over the shipped-bugs corpus (``corpus.py``).

For every entry, seed, dtype (float32, float64), variant (buggy, correct twin), checker and point (user draw,
special point) one JSON line is appended to ``--out``; a table is printed at the end::

    python benchmarks/shipped_bugs/run.py --seeds 10 --out /tmp/shipped.jsonl

Checkers (defaults everywhere):

- ``check_numeric_gradient(sym, location, dtype=dtype, progress=False)``; index inputs are left out with
  ``grad_nodes=[float inputs]``;
- ``check_backward(f, xs, y_grad, progress=False)`` with ``y_grad`` standard normal of the output's shape; index
  inputs are passed as int32 arrays (Chainer's labels), which ``no_grads`` leaves out by default (a Custom op
  writes them a zero gradient, which counts as Chainer's None);
- ``gradcheck(f, xs, progress=False)``; index inputs are passed as int64 arrays (PyTorch's LongTensor), which
  gradcheck does not differentiate.

A check *catches* when it raises ``GradientCheckError``; any other exception is recorded in ``error``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from collections import defaultdict

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import corpus  # noqa: E402

import symgrad as sg  # noqa: E402
import symgrad.test_utils as tu  # noqa: E402

CHECKERS = ("check_numeric_gradient", "check_backward", "gradcheck")
DTYPES = (np.float32, np.float64)


def draw(entry, point, seed, dtype):
    """The inputs (in ``entry.args`` order, as a dict) and a standard-normal head gradient of the output's shape."""
    rng = np.random.default_rng(seed)
    loc = (entry.inputs if point == "user" else entry.special)(rng, dtype)
    loc = {a: np.asarray(loc[a], dtype=dtype) for a in entry.args}
    out_shape = symbol(entry, entry.correct).infer_shape(**{k: v.shape for k, v in loc.items()})[1][0]
    y_grad = rng.standard_normal(out_shape).astype(dtype)
    return loc, y_grad


def symbol(entry, op_type):
    return sg.sym.Custom(*[sg.sym.Variable(a) for a in entry.args], op_type=op_type, name="op")


def run_check(entry, op_type, checker, dtype, loc, y_grad, seed):
    """Run one check: returns (caught, error, diagnosis)."""

    def func(*xs):
        return sg.sym.Custom(*xs, op_type=op_type)

    xs = tuple(loc[a] for a in entry.args)
    np.random.seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if checker == "check_numeric_gradient":
                kw = {"grad_nodes": list(entry.float_args)} if entry.index_args else {}
                tu.check_numeric_gradient(symbol(entry, op_type), loc, dtype=dtype, progress=False, **kw)
            elif checker == "check_backward":
                xs = tuple(x.astype(np.int32) if a in entry.index_args else x for a, x in zip(entry.args, xs))
                tu.check_backward(func, xs, y_grad, progress=False)
            else:
                xs = tuple(x.astype(np.int64) if a in entry.index_args else x for a, x in zip(entry.args, xs))
                tu.gradcheck(func, xs, progress=False)
        except tu.GradientCheckError as err:
            return True, str(err).splitlines()[0], err.diagnosis
        except Exception as err:  # noqa: BLE001 -- recorded, never stops the run
            return False, f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}", None
    return False, None, None


def probe_cost(entries, seeds):
    """Seconds of ``check_numeric_gradient`` (float64, default settings) on each correct twin with ``probes=False``
    and with the default (on: the graphs hold Custom ops), taken one after the other per check so that a loaded
    machine slows both alike; prints the totals and their ratio."""
    spent = {False: 0.0, None: 0.0}
    for e in entries:
        for seed in range(seeds):
            loc, _ = draw(e, "user", seed, np.float64)
            kw = {"grad_nodes": list(e.float_args)} if e.index_args else {}
            for probes in (False, None):
                np.random.seed(seed)
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    tu.check_numeric_gradient(
                        symbol(e, e.correct), loc, dtype=np.float64, progress=False, probes=probes, **kw
                    )
                spent[probes] += time.perf_counter() - t0
    print(
        f"{len(entries)} correct twins x {seeds} seeds, check_numeric_gradient float64: probes off "
        f"{spent[False]:.1f} s, on {spent[None]:.1f} s: {spent[None] / spent[False]:.2f}x"
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--out", default=None, help="JSONL file (appended)")
    ap.add_argument("--points", choices=("user", "special", "both"), default="both")
    ap.add_argument("--only", default=None, help="comma-separated entry ids (default: all)")
    ap.add_argument("--checkers", default=",".join(CHECKERS), help="comma-separated (default: all three)")
    ap.add_argument(
        "--cost",
        action="store_true",
        help="only measure what the probes cost: check_numeric_gradient (float64) on every correct twin "
        "at a user's draw, probes off and on, interleaved",
    )
    args = ap.parse_args(argv)

    points = ("user", "special") if args.points == "both" else (args.points,)
    entries = corpus.CORPUS
    if args.only:
        wanted = set(args.only.split(","))
        entries = [e for e in entries if e.id in wanted]
    if args.cost:
        probe_cost(entries, args.seeds)
        return
    rows = []
    out = open(args.out, "a") if args.out else None
    t_all = time.time()
    try:
        for k, e in enumerate(entries):
            t_e = time.time()
            for seed in range(args.seeds):
                for dtype in DTYPES:
                    for point in points:
                        loc, y_grad = draw(e, point, seed, dtype)
                        for variant, op_type in (("buggy", e.buggy), ("correct", e.correct)):
                            for checker in args.checkers.split(","):
                                t0 = time.time()
                                caught, error, diag = run_check(e, op_type, checker, dtype, loc, y_grad, seed)
                                row = {
                                    "id": e.id,
                                    "bug_class": e.bug_class,
                                    "variant": variant,
                                    "checker": checker,
                                    "dtype": np.dtype(dtype).name,
                                    "seed": seed,
                                    "point": point,
                                    "caught": caught,
                                    "error": error,
                                    "diagnosis": diag,
                                    "seconds": round(time.time() - t0, 4),
                                }
                                rows.append(row)
                                if out:
                                    out.write(json.dumps(row) + "\n")
                                    out.flush()
            print(f"[{k + 1}/{len(entries)}] {e.id} {time.time() - t_e:.1f}s", file=sys.stderr, flush=True)
    finally:
        if out:
            out.close()
    print(table(rows, points))
    print(f"total {time.time() - t_all:.0f}s, {len(rows)} checks")
    return rows


def _pct(a, b):
    return f"{100.0 * a / b:5.1f}%" if b else "   n/a"


def table(rows, points=("user", "special")):
    """Catch % of buggy entries per checker, dtype and point; false alarms and errors on correct twins; per bug class
    (any checker) catch %; the entries no checker catches at user points."""
    lines = []
    ran = [r for r in rows if not (r["error"] or "").startswith("skipped:")]
    entries = sorted({r["id"] for r in rows})
    lines.append(f"{len(entries)} entries, seeds {sorted({r['seed'] for r in rows})}")
    lines.append("")
    lines.append(
        "checker                 dtype    point    buggy caught (n)      twin false alarms  errors b/t  skipped"
    )
    for checker in CHECKERS:
        for dt in ("float32", "float64"):
            for p in points:
                sel = [r for r in ran if r["checker"] == checker and r["dtype"] == dt and r["point"] == p]
                b = [r for r in sel if r["variant"] == "buggy"]
                c = [r for r in sel if r["variant"] == "correct"]
                nb = sum(r["caught"] for r in b)
                fa = sum(r["caught"] for r in c)
                eb = sum(bool(r["error"]) and not r["caught"] for r in b)
                ec = sum(bool(r["error"]) and not r["caught"] for r in c)
                sk = len(
                    {
                        r["id"]
                        for r in rows
                        if r["checker"] == checker
                        and r["dtype"] == dt
                        and r["point"] == p
                        and (r["error"] or "").startswith("skipped:")
                    }
                )
                lines.append(
                    f"{checker:23s} {dt:8s} {p:8s} {_pct(nb, len(b))} ({nb:4d}/{len(b):4d})   "
                    f"{fa:4d}/{len(c):4d}          {eb:3d}/{ec:<3d}     {sk} entries"
                )
    lines.append("")
    lines.append("per bug class, buggy caught by ANY checker (per entry x seed x dtype):")
    lines.append("bug_class                    entries  " + "  ".join(f"{p:>8s}" for p in points))
    classes = sorted({r["bug_class"] for r in rows})
    for bc in classes:
        cells = []
        ids = {r["id"] for r in rows if r["bug_class"] == bc}
        for p in points:
            groups = defaultdict(bool)
            for r in ran:
                if r["bug_class"] == bc and r["point"] == p and r["variant"] == "buggy":
                    groups[(r["id"], r["seed"], r["dtype"])] |= bool(r["caught"])
            cells.append(_pct(sum(groups.values()), len(groups)))
        lines.append(f"{bc:28s} {len(ids):7d}  " + "  ".join(f"{c:>8s}" for c in cells))
    for p in points:
        never = sorted(
            i
            for i in entries
            if not any(r["caught"] for r in ran if r["id"] == i and r["point"] == p and r["variant"] == "buggy")
        )
        lines.append("")
        lines.append(f"buggy entries NO checker catches at {p} points ({len(never)}): " + (", ".join(never) or "-"))
    fa = sorted(
        {(r["id"], r["checker"], r["dtype"], r["point"]) for r in ran if r["variant"] == "correct" and r["caught"]}
    )
    lines.append("")
    lines.append(f"false alarms on correct twins ({len(fa)} id/checker/dtype/point combos):")
    for f in fa:
        lines.append("  " + " ".join(f))
    errs = sorted(
        {(r["id"], r["variant"], r["checker"], r["error"][:100]) for r in ran if r["error"] and not r["caught"]}
    )
    lines.append(f"errors (not GradientCheckError) ({len(errs)} distinct):")
    for e in errs:
        lines.append("  " + " | ".join(e))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
