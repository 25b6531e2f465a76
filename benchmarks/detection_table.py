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

from test_utils import GradientCheckError  # noqa: E402


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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20, help="seeds per (bug, checker) (default 20)")
    parser.add_argument("--width", type=int, default=150, help="characters of the diagnosis shown (default 150)")
    opts = parser.parse_args(argv)
    seeds = list(range(opts.seeds))
    rows = measure(seeds)
    wb = max(len(r[0]) for r in rows)
    wc = max(len(r[1]) for r in rows)
    n = len(seeds)
    print(f"Planted bugs x checkers, {n} seeds each: caught / named / false alarms on the correct op")
    print(f"{'planted bug':<{wb}}  {'checker':<{wc}}  {'caught':>6}  {'named':>6}  {'false':>5}  {'ms':>6}  diagnosis")
    for name, checker, caught, nm, false, diag, ms in rows:
        text = diag if len(diag) <= opts.width else diag[: opts.width - 3] + "..."
        print(f"{name:<{wb}}  {checker:<{wc}}  {caught:>3}/{n:<2}  {nm:>3}/{n:<2}  {false:>5}  {ms:>6.1f}  {text}")
    total = len(rows) * n
    print(f"total: caught {sum(r[2] for r in rows)}/{total}, named {sum(r[3] for r in rows)}/{total}, "
          f"false alarms {sum(r[4] for r in rows)}/{total}")
    return rows


if __name__ == "__main__":
    main()
