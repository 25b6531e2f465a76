"""Whole-model checks on real networks: false alarms on correct models, planted bugs caught, time.

    python benchmarks/model_checks.py false-alarms [--seeds 5] [--out FILE.jsonl]
    python benchmarks/model_checks.py planted [--seeds 100] [--out FILE.jsonl]
    python benchmarks/model_checks.py time [--nets resnet18_v1,densenet121,inceptionv3]
    python benchmarks/model_checks.py block [--seeds 5] [--out FILE.jsonl]
    python benchmarks/model_checks.py table FILE.jsonl [...]

The networks are MXNet 1.9.1 exports of Gluon model-zoo nets (``tests/fixtures/make_gluon_exports.py`` writes
them into a cache outside git, ``tests/gluon_exports.py`` finds it) with their exported parameters, and the
eight zoo symbols committed in ``tests/fixtures/zoo`` (seeded random values). Every run goes through
``symgrad.test_utils.check_model`` as ``symgrad check`` does; each result is one JSON line (appended as it
comes, so a long sweep can be read while it runs and resumed: lines already in ``--out`` are not re-run).

- ``false-alarms``: every net, float32 and float64, ``--seeds`` seeds, modes fast (the default) and sample
  (``--samples`` elements per argument: 16, so that a sweep finishes in hours, not days; each sampled element
  is compared as in a full sample run). A correct model must pass: any FAIL is a false alarm.
- ``planted``: ``tests/planted_network.py``'s softplus CustomOp spliced into resnet18_v1 between a
  BatchNorm and ReLU, correct and with four shipped-style bugs, default settings at 1 x 3 x 64 x 64: caught, and
  the faulty node named ``planted_fwd``?
- ``block``: ``check_numeric_gradient``, ``check_backward`` and ``gradcheck(fast_mode=True)`` at their defaults
  on the correct ResNet basic block of ``tests/resnet_block.py`` (56 x 56), float32 and float64: any failure is
  a false alarm.
- ``time``: the default check of the full-size exports (224 x 224, inceptionv3 299 x 299) in float32.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import gluon_exports  # noqa: E402
import planted_network  # noqa: E402
import resnet_block  # noqa: E402

from symgrad.test_utils import check_model  # noqa: E402

ZOO = os.path.join(HERE, "..", "tests", "fixtures", "zoo")
#: Gluon exports and the input size of the checks (the smallest at which every gradient is nonzero; the nets
#: ending in a fixed-size pooling or dense layer need their full size)
EXPORTS = {
    "resnet18_v1": 64,
    "mobilenetv2_1.0": 64,
    "mobilenet1.0": 64,
    "resnet50_v1": 64,
    "squeezenet1.1": 224,
    "vgg11_bn": 224,
    "densenet121": 224,
    "inceptionv3": 299,
}
ZOO_NETS = {
    "resnet18_v1": 64,
    "resnet18_v2": 64,
    "mobilenet0.25": 64,
    "mobilenetv2_0.25": 64,
    "alexnet": 64,
    "squeezenet1.0": 224,
    "densenet121": 224,
    "inceptionv3": 299,
}
FULL = {"resnet18_v1": 224, "densenet121": 224, "inceptionv3": 299, "mobilenetv2_1.0": 224, "squeezenet1.1": 224}


def _model(source, net):
    if source == "export":
        sym_path, params, _ = gluon_exports.export_path(net)
        return sym_path, params
    return os.path.join(ZOO, f"{net}-symbol.json"), None


def _check(model, params, size, **kw):
    t0 = time.perf_counter()
    res = check_model(model, params, shapes={"data": (1, 3, size, size)}, raise_on_failure=False, **kw)
    return res, time.perf_counter() - t0


def _done(out):
    seen = set()
    if out and os.path.exists(out):
        with open(out) as f:
            for line in f:
                seen.add(json.loads(line)["key"])
    return seen


def _emit(out, doc):
    line = json.dumps(doc)
    print(line, flush=True)
    if out:
        with open(out, "a") as f:
            f.write(line + "\n")


def false_alarms(args):
    seen = _done(args.out)
    jobs = [(src, net, size) for src, nets in (("export", EXPORTS), ("zoo", ZOO_NETS)) for net, size in nets.items()]
    if args.nets:
        jobs = [j for j in jobs if j[1] in args.nets.split(",")]
    jobs.sort(key=lambda j: j[2])  # the small inputs first, every net in the cheap fast mode before sample mode
    for mode in args.modes.split(","):
        for src, net, size in jobs:
            for seed in range(args.seeds):
                for dtype in ("float32", "float64"):
                    key = f"{src}/{net}/{size}/{dtype}/{mode}/{seed}"
                    if key in seen:
                        continue
                    model, params = _model(src, net)
                    res, seconds = _check(
                        model,
                        params,
                        size,
                        dtype=dtype,
                        mode=mode,
                        seed=seed,
                        samples=args.samples,
                        locate=False,
                        workers=args.workers,
                    )
                    _emit(
                        args.out,
                        {
                            "key": key,
                            "source": src,
                            "net": net,
                            "size": size,
                            "dtype": dtype,
                            "mode": mode,
                            "seed": seed,
                            "ok": res.ok,
                            "failed": [r["name"] for r in res.failed],
                            "unsettled": [r["name"] for r in res.rows if r["verdict"] == "unsettled"],
                            "imprecise": [r["name"] for r in res.rows if r["verdict"] == "imprecise"],
                            "arguments": len(res.rows),
                            "seconds": round(seconds, 2),
                        },
                    )


def planted(args):
    seen = _done(args.out)
    sym_path, params, _ = gluon_exports.export_path("resnet18_v1")
    with open(sym_path) as f:
        text = f.read()
    for seed in range(args.seeds):
        for variant in planted_network.VARIANTS:
            key = f"planted/{variant}/{seed}"
            if key in seen:
                continue
            sym = planted_network.spliced_symbol(text, variant)
            t0 = time.perf_counter()
            res = check_model(sym, params, shapes={"data": (1, 3, 64, 64)}, seed=seed, raise_on_failure=False)
            _emit(
                args.out,
                {
                    "key": key,
                    "variant": variant,
                    "seed": seed,
                    "caught": not res.ok,
                    "named": [f.name for f in res.faults],
                    "diagnosis": [f.diagnosis for f in res.faults],
                    "failed": [r["name"] for r in res.failed],
                    "seconds": round(time.perf_counter() - t0, 2),
                },
            )


def block(args):
    import numpy as np

    import symgrad.test_utils as tu
    from symgrad.test_utils.chainer_checks import check_backward
    from symgrad.test_utils.torch_checks import gradcheck

    seen = _done(args.out)
    rb = resnet_block
    checkers = {
        "check_backward": lambda xs, rng, dt: check_backward(
            rb.block, xs, rng.standard_normal((1, rb.C, 56, 56)).astype(dt), progress=False
        ),
        "gradcheck_fast": lambda xs, rng, dt: gradcheck(rb.block, xs, fast_mode=True, progress=False),
        # PyTorch's default, slow mode: the whole 12 544 x 12 500 Jacobian of x (~300 s, ~16 GB at its peak)
        "gradcheck": lambda xs, rng, dt: gradcheck(rb.block, xs, progress=False),
        "check_numeric_gradient": lambda xs, rng, dt: tu.check_numeric_gradient(
            rb.symbol(), dict(zip(rb.NAMES, xs)), dtype=dt, progress=False
        ),
    }
    for seed in range(args.seeds):
        for dt in (np.float32, np.float64):
            for name, run in checkers.items():
                key = f"block/{name}/{np.dtype(dt).name}/{seed}"
                if key in seen:
                    continue
                rng = np.random.default_rng(seed)
                xs = rb.inputs(rng, dt)
                np.random.seed(seed)
                t0 = time.perf_counter()
                try:
                    run(xs, rng, dt)
                    ok, error = True, None
                except tu.GradientCheckError as err:
                    ok, error = False, str(err).split("\n")[0]
                _emit(
                    args.out,
                    {
                        "key": key,
                        "checker": name,
                        "dtype": np.dtype(dt).name,
                        "seed": seed,
                        "ok": ok,
                        "error": error,
                        "seconds": round(time.perf_counter() - t0, 2),
                    },
                )


def timing(args):
    for net in args.nets.split(","):
        model, params = _model("export", net)
        size = FULL[net]
        if args.workers or args.cli:
            _timing_cli(args, net, model, params, size)
            continue
        res, seconds = _check(model, params, size, dtype="float32")
        _emit(
            args.out,
            {
                "key": f"time/{net}/{size}",
                "net": net,
                "size": size,
                "ok": res.ok,
                "arguments": len(res.rows),
                "seconds": round(seconds, 1),
                "threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
            },
        )


def _timing_cli(args, net, model, params, size):
    """The command a user runs, ``symgrad check ...`` (``--workers N`` when given), timed from outside (start-up
    included)."""
    import subprocess

    from symgrad.test_utils.model_check import FORKS, usable_cores

    cmd = ["symgrad", "check", model, "--params", params, "--shape", f"data=1,3,{size},{size}"]
    cmd += ["--workers", str(args.workers)] if args.workers else []
    workers = args.workers or (usable_cores() if FORKS else 1)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    what = f"workers{args.workers}" if args.workers else "cli-default"
    _emit(
        args.out,
        {
            "key": f"time/{net}/{size}/{what}",
            "net": net,
            "size": size,
            "ok": done.returncode == 0,
            "workers": workers,
            "forked": FORKS,
            "seconds": round(seconds, 1),
            "summary": done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-300:],
        },
    )


def _passed_count(summary):
    import re

    found = re.search(r"(\d+) passed, (\d+) failed", summary)
    return int(found.group(1)) + int(found.group(2)) if found else "-"


def _timed_check(r) -> str:
    if "torch" in r:
        return "`torch.autograd.gradcheck(fast_mode=True)`, float64"
    if r["key"].endswith("/cli-default"):
        return f"`symgrad check` (default: {r['workers']} workers forked after phase 0)"
    if "workers" in r:
        return f"`symgrad check --workers {r['workers']}` (spawned workers, each rebuilding phase 0; earlier)"
    return "`check_model`, one process"


def table(args):
    by_key = {}  # a key in several files (a sweep resumed into another) counts once, its last line
    for path in args.files:
        with open(path) as f:
            for line in f:
                row = json.loads(line)
                by_key[row["key"]] = row
    rows = list(by_key.values())
    timed = [r for r in rows if r["key"].startswith("time/")]
    if timed:
        print("| model (float32 unless said) | input | arguments | check | seconds | passed |")
        print("|---|---|---|---|---|---|")
        for r in timed:
            count = r.get("tensors", r.get("arguments")) or _passed_count(r.get("summary", ""))
            seconds = f"{r['seconds']} (median of {', '.join(map(str, r['runs']))})" if "runs" in r else r["seconds"]
            print(f"| {r['net']} | {r['size']}x{r['size']} | {count} | {_timed_check(r)} | {seconds} | {r['ok']} |")
    fa = [r for r in rows if "mode" in r]
    if fa:
        print("| net (source, size) | float32 fast | float32 sample | float64 fast | float64 sample | s per check |")
        print("|---|---|---|---|---|---|")
        groups = {}
        for r in fa:
            groups.setdefault((r["net"], r["source"], r["size"]), []).append(r)
        for (net, src, size), rs in groups.items():
            cells = []
            for dtype in ("float32", "float64"):
                for mode in ("fast", "sample"):
                    sel = [r for r in rs if r["dtype"] == dtype and r["mode"] == mode]
                    vague = sum(bool(r.get("imprecise")) for r in sel)
                    cells.append(
                        (
                            f"{sum(not r['ok'] for r in sel)}/{len(sel)} FAIL"
                            + (f" ({vague} with imprecise args)" if vague else "")
                        )
                        if sel
                        else "-"
                    )
            secs = sorted(r["seconds"] for r in rs if r["mode"] == "fast")
            print(f"| {net} ({src}, {size}) | " + " | ".join(cells) + f" | {secs[len(secs) // 2] if secs else '-'} |")
    bl = [r for r in rows if "checker" in r]
    if bl:
        print("\n| checker on the ResNet block (56x56) | float32 | float64 | median s |")
        print("|---|---|---|---|")
        for name in dict.fromkeys(r["checker"] for r in bl):
            sel = [r for r in bl if r["checker"] == name]
            cells = [
                f"{sum(not r['ok'] for r in sel if r['dtype'] == d)}/{sum(r['dtype'] == d for r in sel)} FAIL"
                for d in ("float32", "float64")
            ]
            secs = sorted(r["seconds"] for r in sel)
            print(f"| {name} | " + " | ".join(cells) + f" | {secs[len(secs) // 2]} |")
    pl = [r for r in rows if "variant" in r]
    if pl:
        print("\n| planted variant | seeds | caught | node named | median s |")
        print("|---|---|---|---|---|")
        for v in planted_network.VARIANTS:
            sel = [r for r in pl if r["variant"] == v]
            if not sel:
                continue
            named = sum(r["named"] == [planted_network.NODE] for r in sel)
            secs = sorted(r["seconds"] for r in sel)
            print(f"| {v} | {len(sel)} | {sum(r['caught'] for r in sel)} | {named} | {secs[len(secs) // 2]} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("false-alarms")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--samples", type=int, default=16)
    p.add_argument("--modes", default="fast,sample")
    p.add_argument("--nets", help="only these nets (comma-separated names)")
    p.add_argument("--workers", type=int, default=1, help="check_model's workers (the rows are the same)")
    p.add_argument("--out")
    p.set_defaults(func=false_alarms)
    p = sub.add_parser("planted")
    p.add_argument("--seeds", type=int, default=100)
    p.add_argument("--out")
    p.set_defaults(func=planted)
    p = sub.add_parser("block")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--out")
    p.set_defaults(func=block)
    p = sub.add_parser("time")
    p.add_argument("--nets", default="resnet18_v1,densenet121,inceptionv3")
    p.add_argument("--workers", type=int, help="time `symgrad check --workers N` instead of the serial check_model")
    p.add_argument("--cli", action="store_true", help="time `symgrad check` with its defaults (every core)")
    p.add_argument("--out")
    p.set_defaults(func=timing)
    p = sub.add_parser("table")
    p.add_argument("files", nargs="+")
    p.set_defaults(func=table)
    args = ap.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
