#!/usr/bin/env python
"""The benchmark suite: every workload, symgrad against numpy by hand, MXNet and PyTorch, one table.

    python benchmarks/run.py              # the whole suite (2–5 minutes on 2 cores)
    python benchmarks/run.py --quick      # fewer rounds and calls (about 40 s)
    python benchmarks/run.py --only mlp,chain --threads 1 --json out.json

Each contender runs in its own process (``contenders.py``; symgrad and numpy with this Python, MXNet 1.9.1 and
PyTorch with the Pythons of their own virtual environments, made by ``peers/setup.sh``; a peer that is not
installed is left out). Per workload, every contender builds it and warms up; then in each round every
contender in turn (the order rotates from round to round, one process busy at a time) times a few calls.
A contender's time is the median over rounds of its per-round median call time; a ratio is the median over
rounds of the per-round ratio symgrad / peer (rounds are close in time, so a drift in the machine's load
hits both sides), shown with its range over the rounds. Before timing, the contenders' results are compared
(gradient norms and the like): a mismatch is reported under the table.

Ratios are what counts: absolute times move with the machine's load, which is printed before and after
every workload (``/proc/loadavg``, 1-minute average).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WORKER = HERE / "contenders.py"
CONTENDERS = ("symgrad", "numpy", "mxnet", "torch")
LABELS = {"symgrad": "symgrad", "numpy": "numpy", "mxnet": "MXNet", "torch": "PyTorch"}
PEER_VENVS = {"mxnet": "mxvenv", "torch": "torchvenv"}  # default: beside the checkout (peers/setup.sh)


@dataclass(frozen=True)
class Spec:
    name: str
    title: str
    reps: int  # calls per contender per round (fewer once ``budget`` seconds are spent)
    budget: float
    warmup: int  # calls before the first round (the setup's own call comes on top)
    quick_reps: int
    quick_warmup: int


SPECS = (
    Spec("mlp", "MLP 784-256-256-10, batch 64, fwd+bwd", 200, 0.5, 30, 60, 10),
    Spec("chain", "chain 200 x (tanh, x1.01), 16 floats, fwd+bwd", 300, 0.5, 50, 100, 10),
    Spec("resnet18", "ResNet-18 v1, batch 2, 224x224, fwd+bwd", 2, 0.0, 1, 1, 0),
    Spec("bind1k", "build + bind, chain of 1 000 nodes", 5, 0.5, 1, 2, 0),
    Spec("bind10k", "build + bind, chain of 10 000 nodes", 1, 0.0, 1, 1, 0),
    Spec("densenet", "load + bind DenseNet-121 JSON (1 034 nodes)", 5, 0.5, 1, 2, 0),
    Spec("numcheck", "numeric check conv+tanh+FC, 2x3x8x8 f64, 1 221 params", 1, 0.0, 0, 1, 0),
)


# ----------------------------------------------------------------------------
# workers
# ----------------------------------------------------------------------------


class Worker:
    """One contender's process; requests and replies are JSON lines (see contenders.py)."""

    def __init__(self, contender, python, env, log_dir):
        self.contender = contender
        self.log_path = Path(log_dir) / f"{contender}.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [python, str(WORKER), contender],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
            cwd=REPO,
        )
        self.dead = None  # why the process is gone, once it is
        self.ready = self.ask()

    def ask(self, **request):
        """Send ``request`` (none: just read) and return the reply; {"error": ...} once the process has died."""
        if self.dead is None:
            try:
                if request:
                    self.proc.stdin.write(json.dumps(request) + "\n")
                    self.proc.stdin.flush()
                line = self.proc.stdout.readline()
            except (BrokenPipeError, OSError):
                line = ""
            if line:
                return json.loads(line)
            self.dead = f"the {self.contender} process died; its log ends with:\n" + self.log_tail()
            print(self.dead, file=sys.stderr)
        return {"error": self.dead.splitlines()[0]}

    def log_tail(self, n=15):
        self.log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass
            self.proc.wait(timeout=30)
        self.log.close()


def find_python(contender, args):
    """This Python for symgrad and numpy; a peer's Python from --mxnet/--torch, its env var, or beside the repo."""
    if contender in ("symgrad", "numpy"):
        return sys.executable
    given = getattr(args, contender) or os.environ.get(f"SYMGRAD_BENCH_{contender.upper()}")
    if given:
        return given
    default = REPO.parent / PEER_VENVS[contender] / "bin" / "python"
    return str(default) if default.exists() else None


def probe(contender, python, env):
    """The contender's version line, or None when its framework does not import."""
    if python is None:
        return None
    try:
        out = subprocess.run(
            [python, str(WORKER), "--version", contender],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


# ----------------------------------------------------------------------------
# one workload
# ----------------------------------------------------------------------------


def loadavg():
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return float("nan")


def agree(checks, rtol=1e-3):
    """Keys on which two contenders' check numbers differ by more than ``rtol`` (relative)."""
    bad = []
    names = list(checks)
    for key in sorted({k for c in checks.values() for k in c}):
        have = {n: checks[n][key] for n in names if key in checks[n]}
        if len(have) < 2:
            continue
        ref = next(iter(have.values()))
        if any(abs(v - ref) > rtol * max(abs(ref), 1e-12) for v in have.values()):
            bad.append(f"{key}: " + ", ".join(f"{LABELS[n]} {v:.6g}" for n, v in have.items()))
    return bad


def run_workload(spec, workers, args):
    """Set up every contender, run the alternating rounds, return per-contender round medians and notes."""
    reps = spec.quick_reps if args.quick else spec.reps
    warmup = spec.quick_warmup if args.quick else spec.warmup
    budget = spec.budget / 3 if args.quick else spec.budget
    result = {"name": spec.name, "title": spec.title, "load_before": loadavg(), "rounds": {}, "notes": []}
    active, checks = [], {}
    for w in workers:
        reply = w.ask(op="setup", workload=spec.name, seed=args.seed, warmup=warmup)
        if "error" in reply:
            result["notes"].append(f"{LABELS[w.contender]} failed: {reply['error']}")
        elif "ok" in reply:
            active.append(w)
            checks[w.contender] = reply["check"]
            if reply["note"]:
                result["notes"].append(f"{LABELS[w.contender]}: {reply['note']}")
    result["checks"] = checks
    result["notes"] += [f"results differ: {m}" for m in agree(checks)]
    for r in range(args.rounds):
        k = r % len(active) if active else 0
        for w in active[k:] + active[:k]:  # rotate who goes first
            reply = w.ask(op="round", reps=reps, budget=budget)
            if "error" in reply:
                result["notes"].append(f"{LABELS[w.contender]} failed in round {r}: {reply['error']}")
                active.remove(w)
                continue
            result["rounds"].setdefault(w.contender, []).append(statistics.median(reply["times"]))
    for w in workers:
        w.ask(op="drop")
    result["load_after"] = loadavg()
    return result


# ----------------------------------------------------------------------------
# the table
# ----------------------------------------------------------------------------


def fmt_time(s):
    if s is None:
        return "—"
    if s < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if s < 1:
        return f"{s * 1e3:.3g} ms"
    return f"{s:.3g} s"


def summarize(result):
    """Median time per contender; median and spread over rounds of symgrad / peer.

    The spread is min–max over the rounds, the lowest and the highest left out from 5 rounds on: on a shared
    2-core machine one round in a few catches a load spike (multi-threaded BLAS and OpenMP then wait for a
    descheduled thread: 10-100x), which says nothing about the ratio.
    """
    rounds = result["rounds"]
    med = {c: statistics.median(v) for c, v in rounds.items()}
    ratios = {}
    mine = rounds.get("symgrad")
    for c, theirs in rounds.items():
        if c == "symgrad" or not mine:
            continue
        per_round = sorted(a / b for a, b in zip(mine, theirs))
        middle = per_round[1:-1] if len(per_round) >= 5 else per_round  # a round hit by a load spike: 10-100x
        ratios[c] = (statistics.median(per_round), middle[0], middle[-1])
    return med, ratios


def fmt_ratio(r):
    if r is None:
        return "—"
    mid, lo, hi = r
    return f"**{mid:.2f}** ({lo:.2f}–{hi:.2f})" if hi - lo >= 0.005 else f"**{mid:.2f}**"


def table(results):
    head = [
        "workload",
        "symgrad",
        "numpy",
        "symgrad ÷ numpy",
        "MXNet",
        "symgrad ÷ MXNet",
        "PyTorch",
        "symgrad ÷ PyTorch",
        "load",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for res in results:
        med, ratios = summarize(res)
        cells = [res["title"], fmt_time(med.get("symgrad"))]
        for c in ("numpy", "mxnet", "torch"):
            cells += [fmt_time(med.get(c)), fmt_ratio(ratios.get(c))]
        cells.append(f"{res['load_before']:.2f}→{res['load_after']:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def git_state():
    def git(*a):
        try:
            return subprocess.run(["git", *a], capture_output=True, text=True, cwd=REPO, timeout=20).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    changed = [ln for ln in git("status", "--porcelain", "--untracked-files=no").splitlines() if ln.strip()]
    return commit + (f" + {len(changed)} uncommitted changed files" if changed else "")


def header(args, versions):
    when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    mode = "quick" if args.quick else "full"
    threads = f"{args.threads} thread(s) per contender" if args.threads else "default threads"
    lines = [
        f"symgrad benchmark suite, {when}, commit {git_state()}, {mode} mode ({args.rounds} rounds), {threads}",
        f"machine: {platform.machine()}, {os.cpu_count()} cpus, Python {platform.python_version()}; "
        f"load average (1/5/15 min) at start: {Path('/proc/loadavg').read_text().split()[:3]}",
        "contenders: " + "; ".join(f"{LABELS[c]}: {v}" for c, v in versions.items()),
    ]
    return "\n".join(lines)


# ----------------------------------------------------------------------------


def parse(argv):
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    ap.add_argument("--quick", action="store_true", help="3 rounds, fewer calls (under 2 minutes)")
    ap.add_argument("--rounds", type=int, help="alternating rounds (default 7, quick 3)")
    ap.add_argument("--only", help="comma-separated workloads: " + ",".join(s.name for s in SPECS))
    ap.add_argument("--contenders", default=",".join(CONTENDERS), help="comma-separated (default: all found)")
    ap.add_argument("--mxnet", help="Python of MXNet 1.9.1's venv (default $SYMGRAD_BENCH_MXNET or ../mxvenv)")
    ap.add_argument("--torch", help="Python of PyTorch's venv (default $SYMGRAD_BENCH_TORCH or ../torchvenv)")
    ap.add_argument("--threads", type=int, help="OMP/OpenBLAS/MKL threads of every contender (default: theirs)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the raw round times here")
    args = ap.parse_args(argv)
    args.rounds = args.rounds or (3 if args.quick else 7)
    known = {s.name for s in SPECS}
    args.only = [s.strip() for s in args.only.split(",")] if args.only else [s.name for s in SPECS]
    if set(args.only) - known:
        ap.error(f"unknown workloads {sorted(set(args.only) - known)}; known: {sorted(known)}")
    args.contenders = [c.strip() for c in args.contenders.split(",")]
    if set(args.contenders) - set(CONTENDERS):
        ap.error(f"unknown contenders; known: {CONTENDERS}")
    return args


def worker_env(args):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # a peer's venv must not see this environment's packages
    if args.threads:
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(args.threads)
    return env


def start_workers(args, env, log_dir):
    versions, workers, missing = {}, [], []
    for c in args.contenders:
        python = find_python(c, args)
        version = probe(c, python, env)
        if version is None:
            missing.append(c)
            continue
        worker = Worker(c, python, env, log_dir)
        if worker.dead:
            worker.close()
            missing.append(c)
            continue
        versions[c] = version
        workers.append(worker)
    return versions, workers, missing


def main(argv=None):
    args = parse(argv)
    env = worker_env(args)
    results = []
    with tempfile.TemporaryDirectory(prefix="symgrad-bench-") as log_dir:
        versions, workers, missing = start_workers(args, env, log_dir)
        print(header(args, versions), flush=True)
        if missing:
            print("not installed (run benchmarks/peers/setup.sh): " + ", ".join(LABELS[c] for c in missing))
        try:
            for spec in SPECS:
                if spec.name in args.only:
                    print(f"  {spec.title} ...", file=sys.stderr, flush=True)
                    results.append(run_workload(spec, workers, args))
        finally:
            for w in workers:
                w.close()
    print()
    print(table(results))
    print()
    print(
        f"Times: median over {args.rounds} rounds of each contender's median call; ratios: median (spread: "
        "min–max over the rounds, from 5 rounds on without the lowest and the highest) of symgrad's time / the "
        "peer's in the same round (< 1: symgrad faster); load: 1-minute load average before → after the "
        "workload."
    )
    for res in results:
        for note in res["notes"]:
            print(f"- {res['name']}: {note}")
    if args.json:
        Path(args.json).write_text(json.dumps({"header": header(args, versions), "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
