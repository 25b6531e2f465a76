#!/usr/bin/env python
"""Speed-up of ``symgrad check --mode sample`` on ResNet-18 spread over worker processes (``--workers N``).

    python benchmarks/bench_scale_out.py [--size 32] [--samples 16] [--workers 2] [--rounds 3]

Writes the ImageNet ResNet-18 of ``bench_resnet18.py`` (11.7 M parameters, 62 checked arguments) as a symbol
JSON file and runs ``symgrad check FILE --mode sample --samples K --json`` on a ``1 x 3 x S x S`` input, serially
and with ``--workers N`` (each worker's BLAS gets ``cores / N`` threads), each in its own process, alternating,
``--rounds`` times; the same pair again with one BLAS thread everywhere (``OPENBLAS_NUM_THREADS=1``, the parent's
analytic pass included) separates what the processes gain from what BLAS threads cost on a busy machine (on this
2-core machine OpenBLAS's two threads made the serial check up to ~5x slower than one thread under load).
Reports the medians of the check's own seconds (the JSON's ``seconds``: from the first analytic pass to the
verdicts, the workers' start and their binds of the graph included) and of the whole command, the speed-up (the
median over rounds of the serial run's seconds over the contender's in the same round), and whether every
argument's row (indices, errors, verdicts) is the same with and without workers. The load average is printed per
run: the speed-up is bounded by the idle cores, not by the number of workers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))


def write_model(path):
    import inspect

    from bench_resnet18 import resnet18

    import symgrad as sg

    # resnet18(S) builds from a symbol namespace (symgrad's or MXNet's); older versions took none
    sym = resnet18(sg.sym) if "S" in inspect.signature(resnet18).parameters else resnet18()
    Path(path).write_text(sym.tojson(), encoding="utf-8")


#: contender -> (workers, extra environment)
def contenders(workers):
    one = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    return {
        "serial": (1, {}),
        f"--workers {workers}": (workers, {}),
        "serial, 1 BLAS thread": (1, one),
        f"--workers {workers}, 1 BLAS thread": (workers, one),
    }


def run_check(model, size, samples, workers, env=None):
    """``(check seconds, command seconds, JSON report)`` of one ``symgrad check`` process."""
    cmd = [
        sys.executable,
        "-m",
        "symgrad",
        "check",
        model,
        "--shape",
        f"data=1,3,{size},{size}",
        "--shape",
        "softmax_label=1",
        "--mode",
        "sample",
        "--samples",
        str(samples),
        "--json",
        "--no-progress",
    ]
    if workers > 1:
        cmd += ["--workers", str(workers)]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE.parent, env={**os.environ, **(env or {})})
    wall = time.perf_counter() - t0
    if res.returncode not in (0, 1):
        raise SystemExit(f"symgrad check failed ({res.returncode}):\n{res.stderr[-3000:]}")
    doc = json.loads(res.stdout)
    return doc["seconds"], wall, doc


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=32, help="input height and width (default 32)")
    p.add_argument("--samples", type=int, default=16, help="elements per argument (default 16)")
    p.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    args = p.parse_args(argv)

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "resnet18.json")
        write_model(model)
        runs = contenders(args.workers)
        times = {name: [] for name in runs}
        reports = {}
        for r in range(args.rounds):
            order = list(runs) if r % 2 == 0 else list(reversed(runs))
            for name in order:
                workers, env = runs[name]
                check_s, wall_s, doc = run_check(model, args.size, args.samples, workers, env)
                times[name].append((check_s, wall_s))
                reports.setdefault(name, doc["arguments"])
                print(
                    f"  round {r + 1}: {name:<22} check {check_s:7.2f} s  command {wall_s:7.2f} s  "
                    f"(load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
    load_after = os.getloadavg()
    same = all(rep == reports["serial"] for rep in reports.values())
    med = {n: (statistics.median(c for c, _ in t), statistics.median(x for _, x in t)) for n, t in times.items()}
    n_args = sum(r["verdict"] != "skip" for r in reports["serial"])
    print(
        f"\nResNet-18 v1, input 1x3x{args.size}x{args.size}, symgrad check --mode sample --samples {args.samples} "
        f"({n_args} arguments), medians of {args.rounds} alternating rounds"
    )
    # the speed-up of each round (its serial run's check seconds / the contender's, run next to it), then the
    # median over the rounds: the load of a shared machine moves both runs of a round alike
    print(f"{'contender':<32}{'check s':>10}{'command s':>12}{'speed-up':>10}  (median over rounds of serial / own)")
    for name in runs:
        base = "serial, 1 BLAS thread" if "1 BLAS" in name else "serial"
        ratio = statistics.median(b[0] / t[0] for b, t in zip(times[base], times[name]))
        print(f"{name:<32}{med[name][0]:>10.2f}{med[name][1]:>12.2f}{ratio:>10.2f}")
    print(f"identical reports (every argument's indices, errors, verdicts): {same}")
    print(f"load average before {load_before[0]:.2f} / after {load_after[0]:.2f} on {os.cpu_count()} cores")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
