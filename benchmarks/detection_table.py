#!/usr/bin/env python
"""Detection table: planted gradient bugs x checkers -> caught? named? and the diagnosis.

The planted bugs are the custom ops of ``tests/test_planted_bugs.py`` (one table drives both the
tests and this script): scaled by 1.5, doubled, sign flipped, zero, transposed weight gradient,
product-rule term missing, one slice instead of the sum over a broadcast axis, a mean instead of that
sum, one element of 1 000 off by 25%, a 1% error. Each runs through every checker over ``--seeds``
seeds (fresh inputs, projection weights and directions); the correct version of each op runs too (a
failure there is a false alarm).

Columns: ``caught`` = seeds whose check raised ``GradientCheckError``; ``named`` = seeds whose
diagnosis has the expected pattern and words; ``false`` = seeds where the correct op failed.

    python benchmarks/detection_table.py            # 20 seeds (about half a minute on 2 cores)
    python benchmarks/detection_table.py --seeds 5 --width 100
    python benchmarks/detection_table.py --seeds 5 --part issue8   # only the planted bugs of issue 8

Issue 8 (``measure_issue8``, bugs of ``tests/checker_cases.py``, float32 inputs, default settings): a 1% error in a
softmax and in a row-logsumexp gradient, and an error confined to one element of an argument whose true gradient
is zero (``softmax(x + s)`` w.r.t. ``s``, 1% of the row's summed |gradient| added to ``s[7]``), through every
first-order checker. check_numeric_gradient and gradcheck compare every element (target: every seed caught and
named); check_backward and fast-mode gradcheck compare one random direction (their detection rate is stated).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout, installed or not
sys.path.insert(0, str(ROOT / "tests"))

import test_planted_bugs as planted  # noqa: E402

from symgrad.test_utils import GradientCheckError  # noqa: E402


def _named(bug, err) -> bool:
    if err.diagnosis is None or bug.words not in err.diagnosis or err.pattern != bug.pattern:
        return False
    if bug.factor is not None and (err.factor is None or abs(err.factor - bug.factor) > 1e-3 * abs(bug.factor) + 1e-6):
        return False
    return "text" not in bug.more or bug.more["text"] in err.diagnosis


def measure(seeds, checkers=None):
    """``[(bug, checker, caught, named, false_alarms, first diagnosis, ms per check)]``."""
    rows = []
    for bug in planted.BUGS:
        for checker in checkers or planted.CHECKERS:
            caught = named = false = 0
            first = None
            tic = time.perf_counter()
            for seed in seeds:
                np.random.seed(seed)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    try:
                        planted._run(checker, bug, planted=True)
                    except GradientCheckError as err:
                        caught += 1
                        named += _named(bug, err)
                        first = first or err.diagnosis
                    np.random.seed(seed)
                    try:
                        planted._run(checker, bug, planted=False)
                    except GradientCheckError:
                        false += 1
            ms = 1e3 * (time.perf_counter() - tic) / (2 * len(seeds))
            rows.append((bug.name, checker, caught, named, false, first or "-", ms))
    return rows


#: issue 8's checkers: kind "full" compares every element, "directional" one random direction
ISSUE8_CHECKERS = {
    "check_numeric_gradient": "full",
    "gradcheck": "full",
    "check_backward": "directional",
    "gradcheck(fast_mode)": "directional",
}


def _issue8_bugs():
    import checker_cases as cc

    def pct(name, make, shape):
        def inputs(rng):
            return (rng.standard_normal(shape).astype(np.float32),)

        return (
            f"1% error in {name} (float32)",
            make,
            inputs,
            lambda err: err.pattern == "small" and err.factor is not None and abs(err.factor - 1.01) < 1e-3,
        )

    def shift_inputs(rng):
        x = rng.standard_normal((24, 5)).astype(np.float32)
        return x, (3.0 * rng.standard_normal((24, 1))).astype(np.float32)

    def shift_named(err):
        return err.pattern == "confined" and err.indices == [(cc.SHIFT_BUG_ROW, 0)] and (err.arg_name or "")[-1:] == "1"

    return [
        pct("softmax", lambda k: cc.softmax_op(k), (3, 5)),
        pct("logsumexp", lambda k: cc.logsumexp_op(k), (3, 16)),
        ("1 element of a zero gradient (float32)", lambda k: cc.shift_softmax_op(k != 1.0), shift_inputs, shift_named),
    ]


def measure_issue8(seeds):
    """``[(bug, checker, kind, caught, named, false_alarms, first diagnosis, ms per check)]`` for issue 8's bugs."""
    import contextlib
    import io

    import checker_cases as cc

    import symgrad.test_utils as tu

    rows = []
    for bug, make, inputs, named_ok in _issue8_bugs():
        for checker, kind in ISSUE8_CHECKERS.items():
            caught = named = false = 0
            first = None
            tic = time.perf_counter()
            for seed in seeds:
                xs = inputs(np.random.default_rng(seed))
                for k in (1.01, 1.0):
                    try:
                        with contextlib.redirect_stderr(io.StringIO()):
                            tu.with_seed(seed)(cc.run_checker)(checker, make(k), xs)
                    except GradientCheckError as err:
                        if k == 1.0:
                            false += 1
                            continue
                        caught += 1
                        named += bool(named_ok(err))
                        first = first or err.diagnosis
            ms = 1e3 * (time.perf_counter() - tic) / (2 * len(seeds))
            rows.append((bug, checker, kind, caught, named, false, first or "-", ms))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20, help="seeds per (bug, checker) (default 20)")
    parser.add_argument("--width", type=int, default=150, help="characters of the diagnosis shown (default 150)")
    parser.add_argument(
        "--part",
        choices=("all", "planted", "issue8"),
        default="all",
        help="the planted bugs of tests/test_planted_bugs.py, those of issue 8, or both (default)",
    )
    opts = parser.parse_args(argv)
    seeds = list(range(opts.seeds))
    n = len(seeds)
    if opts.part in ("all", "issue8"):
        extra = measure_issue8(seeds)
        wb = max(len(r[0]) for r in extra)
        print(f"Issue 8 planted bugs, float32, {n} seeds each: caught / named / false alarms on the correct op")
        print(
            f"{'planted bug':<{wb}}  {'checker':<22}  {'kind':<11}  {'caught':>6}  {'named':>6}  {'false':>5}  "
            f"{'ms':>6}  diagnosis"
        )
        for name, checker, kind, caught, nm, false, diag, ms in extra:
            text = diag if len(diag) <= opts.width else diag[: opts.width - 3] + "..."
            print(
                f"{name:<{wb}}  {checker:<22}  {kind:<11}  {caught:>3}/{n:<2}  {nm:>3}/{n:<2}  {false:>5}  "
                f"{ms:>6.1f}  {text}"
            )
        for kind in ("full", "directional"):
            sel = [r for r in extra if r[2] == kind]
            print(
                f"  {kind}: caught {sum(r[3] for r in sel)}/{len(sel) * n}, named {sum(r[4] for r in sel)}/"
                f"{len(sel) * n}, false alarms {sum(r[5] for r in sel)}/{len(sel) * n}"
            )
        if opts.part == "issue8":
            return extra
        print()
    rows = measure(seeds)
    wb = max(len(r[0]) for r in rows)
    wc = max(len(r[1]) for r in rows)
    print(f"Planted bugs x checkers, {n} seeds each: caught / named / false alarms on the correct op")
    print(f"{'planted bug':<{wb}}  {'checker':<{wc}}  {'caught':>6}  {'named':>6}  {'false':>5}  {'ms':>6}  diagnosis")
    for name, checker, caught, nm, false, diag, ms in rows:
        text = diag if len(diag) <= opts.width else diag[: opts.width - 3] + "..."
        print(f"{name:<{wb}}  {checker:<{wc}}  {caught:>3}/{n:<2}  {nm:>3}/{n:<2}  {false:>5}  {ms:>6.1f}  {text}")
    total = len(rows) * n
    print(
        f"total: caught {sum(r[2] for r in rows)}/{total}, named {sum(r[3] for r in rows)}/{total}, "
        f"false alarms {sum(r[4] for r in rows)}/{total}"
    )
    return rows


if __name__ == "__main__":
    main()
