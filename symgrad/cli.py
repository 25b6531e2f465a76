"""The ``symgrad`` command: check a model's gradients, summarise it, draw it.

Usage::

    symgrad check MODEL.json [--params FILE] [--shape NAME=D1,D2,...]... [--dtype float32] [--mode sample]
                  [--workers N | --scheduler ADDRESS] [--json] [--html REPORT.html]
    symgrad check --example lenet
    symgrad info MODEL.json [--params FILE] [--shape NAME=D1,D2,...]...
    symgrad plot MODEL.json -o FILE.(svg|png|pdf|dot) [--shape NAME=D1,D2,...]... [--collapse] [--wrap N]

``python -m symgrad`` is the same command; without arguments it runs ``symgrad check --example lenet``.
Exit codes: 0 every gradient passes (or info/plot succeeded), 1 some gradient fails, 2 an error (bad
arguments, unreadable files, shapes that do not infer), reported in one line on stderr (``--debug``: after
the traceback, still exit code 2).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys

__all__ = ["main", "CLIError", "MODES", "DEFAULT_SAMPLES", "import_modules"]

from .test_utils.model_check import DEFAULT_SAMPLES, MODES, ModelInputError, infer_shapes, prepare_model
from .test_utils.report import few

DTYPES = ("float16", "float32", "float64")
GRAD_REQS = ("write", "add", "null")
WHO = "symgrad check"
#: exit codes of an interrupted check (the shell's 128 + signal number)
EXIT_SIGINT, EXIT_SIGTERM = 130, 143


class CLIError(Exception):
    """A user error: one line on stderr, exit code 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but an error is one line on stderr (exit 2) instead of the usage and a line."""

    def error(self, message):
        raise CLIError(f"{message} (see '{self.prog} --help')")


# == the model: load, shapes, values ==========================================================================


def load_model(path=None, example=None):
    """``(symbol, label)`` of a JSON file or a shipped example."""
    from . import model_zoo
    from .serialization import load

    if example is not None:
        if example not in model_zoo.EXAMPLES:
            raise CLIError(f"unknown example {example!r}; the shipped examples are {', '.join(model_zoo.EXAMPLES)}")
        path = model_zoo.example_path(example)
        return load(path), f"example {example!r} ({path})"
    if path is None:
        raise CLIError("give a MODEL.json file or --example NAME")
    if not os.path.exists(path):
        raise CLIError(f"{path}: no such file")
    if os.path.isdir(path):
        raise CLIError(f"{path}: is a directory, not a symbol JSON file")
    return load(path), path


def parse_shapes(items) -> dict:
    """``["data=2,3,4", ...]`` -> ``{"data": (2, 3, 4)}``."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items or ():
        name, sep, dims = item.partition("=")
        name, dims = name.strip(), dims.strip().strip("()[]")
        parts = [d.strip() for d in re.split(r"[,x]", dims)] if dims else []
        try:
            shape = tuple(int(d) for d in parts)
        except ValueError:
            shape = None
        if not sep or not name or shape is None or any(d < 0 for d in shape):
            raise CLIError(
                f"--shape {item!r}: expected NAME=D1,D2,... with non-negative integer dimensions "
                "(e.g. --shape data=2,3,32,32)"
            )
        if name in shapes:
            raise CLIError(
                f"--shape {item!r}: the shape of {name!r} is given twice ({name}={','.join(map(str, shapes[name]))})"
            )
        shapes[name] = shape
    return shapes


def _seed(text: str) -> int:
    """``--seed``'s type: a non-negative integer (argparse names the option in its error)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {text!r}")
    return value


def parse_grad_req(items, arg_names) -> dict:
    """``["write", "fc1_bias=null"]`` -> ``{argument: req}`` for every argument."""
    default, per_arg = "write", {}
    for item in items or ():
        name, sep, req = item.partition("=")
        if not sep:
            name, req = None, item
        req = req.strip()
        if req not in GRAD_REQS:
            raise CLIError(f"--grad-req {item!r}: the request must be one of {', '.join(GRAD_REQS)}")
        if name is None:
            default = req
        elif name.strip() not in arg_names:
            raise CLIError(
                f"--grad-req {item!r}: {name.strip()!r} is not an argument of the model (arguments: {few(arg_names)})"
            )
        else:
            per_arg[name.strip()] = req
    return {n: per_arg.get(n, default) for n in arg_names}


# == commands ====================================================================================================


def _context(text):
    from .context import cpu, gpu

    t = text.strip().lower()
    if t == "cpu":
        return cpu()
    if t.startswith("gpu"):
        _, _, idx = t.partition(":")
        try:
            return gpu(int(idx or 0))
        except ValueError:
            pass
    raise CLIError(f"--ctx {text!r}: expected cpu or gpu:N")


def _load_params(path):
    from .serialization import load_params

    if not os.path.exists(path):
        raise CLIError(f"--params {path}: no such file")
    return load_params(path)


def _open_executor(args, stack):
    """``(executor, description)`` of ``--scheduler ADDRESS`` (a Dask cluster), closed with ``stack``; ``(None,
    None)``: none (``--workers``: local processes, ``_workers``)."""
    if args.scheduler is not None:
        try:
            from distributed import Client
        except ImportError:
            raise CLIError("--scheduler needs Dask's distributed package: pip install 'dask[distributed]'") from None
        client = stack.enter_context(Client(args.scheduler))
        return client.get_executor(), f"Dask scheduler {args.scheduler}"
    return None, None


def _workers(args, ctx) -> int:
    """``--workers N``; by default every usable core where the workers are forked after the analytic pass (Linux:
    nothing is rebuilt), else one process, as on a GPU."""
    from .test_utils.model_check import FORKS, usable_cores

    if args.workers is None:
        return usable_cores() if FORKS and args.scheduler is None and ctx.device_type == "cpu" else 1
    if args.workers < 1:
        raise CLIError(f"--workers {args.workers}: must be at least 1")
    return args.workers


def import_modules(items) -> list:
    """Import each ``--import`` item: a dotted module name, or the path of a ``.py`` file (run as a module named
    after the file), so that the ``Custom`` ops it registers are known before the model loads."""
    import importlib

    from .test_utils.model_check import load_module_file

    done = []
    for item in items or ():
        if item.endswith(".py") or os.sep in item or "/" in item:
            if not os.path.isfile(item):
                raise CLIError(f"--import {item}: no such file")
            try:
                load_module_file(item)
            except Exception as exc:
                raise CLIError(f"--import {item}: {type(exc).__name__}: {_one_line(exc)}") from None
        else:
            try:
                importlib.import_module(item)
            except ImportError as exc:
                raise CLIError(f"--import {item}: {_one_line(exc)}") from None
        done.append(item)
    return done


def _one_line(exc) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _on_sigterm(stack):
    import signal

    from .test_utils.model_check import CheckInterrupted

    def handler(signum, frame):  # raised where the check is: it keeps its rows and returns them marked partial
        raise CheckInterrupted("SIGTERM")

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread (tests calling main() from a thread)
        return
    stack.callback(signal.signal, signal.SIGTERM, previous)


def cmd_check(args) -> int:
    with contextlib.ExitStack() as stack:
        return _check(args, stack)


def _check(args, stack) -> int:
    from .test_utils.model_check import check_model

    import_modules(args.imports)
    ctx = _check_args(args)
    _html_target(args.html)
    prep, reqs = _check_model_input(args)
    executor, spread_text = _open_executor(args, stack)
    workers = _workers(args, ctx)
    if workers > 1:
        spread_text = f"{workers} worker processes"
    if not args.json:
        _print_header(args, prep, ctx, spread_text)
    progress = (sys.stderr.isatty() and not args.json) if args.progress is None else args.progress
    _on_sigterm(stack)
    result = check_model(
        prep,
        dtype=args.dtype,
        mode=args.mode,
        samples=args.samples,
        seed=args.seed,
        grad_req=reqs,
        ctx=ctx,
        executor=executor,
        workers=workers,
        progress=progress,
        raise_on_failure=False,
        keep_partial=True,
    )
    result.header.update(ctx=str(ctx), samples=args.samples if args.mode == "sample" else None, executor=spread_text)
    result.header["command"] = _command_line(args)
    _print_result(args, result)
    if args.html:
        _write_html(args, result)
    if result.partial:
        return EXIT_SIGTERM if result.interrupted == "SIGTERM" else EXIT_SIGINT
    return 0 if result.ok else 1


def _check_args(args):
    """The context of ``--ctx``, with the model (``--example``'s default when no file is given) and ``--samples``
    (its default) checked and filled in."""
    from . import model_zoo

    if args.model is not None and args.example is not None:
        raise CLIError("give either MODEL.json or --example NAME, not both")
    if args.model is None and args.example is None:
        args.example = model_zoo.DEFAULT_EXAMPLE
    ctx = _context(args.ctx)
    if args.samples is None:
        args.samples = model_zoo.EXAMPLE_SAMPLES.get(args.example, DEFAULT_SAMPLES)
    if args.samples < 1:
        raise CLIError(f"--samples {args.samples}: must be at least 1")
    return ctx


def _check_model_input(args):
    """``(prepared model, grad_req per argument)``: the symbol, its values (``--params``, random for the rest)
    and shapes."""
    sym, label = load_model(args.model, args.example)
    params = _load_params(args.params) if args.params else None
    prep = prepare_model(sym, params, parse_shapes(args.shape), args.seed)
    prep.label = label
    return prep, parse_grad_req(args.grad_req, list(prep.args))


def _html_target(path) -> None:
    """``--html FILE``: refused before the check when it cannot be written there (a folder, a missing folder)."""
    if path is None:
        return
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise CLIError(f"--html {path}: is a directory, give a file name (e.g. report.html)")
    if not os.path.isdir(folder):
        raise CLIError(f"--html {path}: no such directory {folder}")


def _write_html(args, result) -> None:
    try:
        result.to_html(args.html)
    except OSError as exc:
        raise CLIError(f"--html {args.html}: {exc.strerror or _one_line(exc)}") from None
    print(f"wrote {args.html}", file=sys.stderr if args.json else sys.stdout)


def _command_line(args) -> str:
    """The ``symgrad check`` line that repeats this check (same model, values, dtype, mode, seed and requests;
    the workers change nothing in the result and are left out)."""
    import shlex

    line = ["symgrad", "check"] + ([args.model] if args.model is not None else ["--example", args.example])
    line += [f"--import={m}" for m in args.imports or ()]
    line += [f"--params={args.params}"] if args.params else []
    line += [f"--shape={s}" for s in args.shape or ()]
    line += [f"--dtype={args.dtype}", f"--mode={args.mode}", f"--seed={args.seed}"]
    line += [f"--samples={args.samples}"] if args.mode == "sample" else []
    line += [f"--grad-req={r}" for r in args.grad_req or ()]
    line += [f"--ctx={args.ctx}"] if args.ctx != "cpu" else []
    return shlex.join(line)


def _print_result(args, result) -> None:
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print()
        for line in result.lines():
            print(line)
    sys.stdout.flush()


def _print_header(args, prep, ctx, spread_text):
    mode_text = {
        "fast": "fast (random directions per argument, bisected where one fails)",
        "sample": f"sample (up to {args.samples} random elements per argument, smaller arguments whole)",
        "full": "full (every element)",
    }[args.mode]
    n_aux = len(prep.aux)
    print(f"symgrad check: {prep.label}")
    print(
        f"  {len(prep.args)} arguments, {n_aux} auxiliary states, outputs "
        f"{', '.join('x'.join(map(str, s)) for s in prep.out_shapes)}; dtype {args.dtype}; mode {mode_text}; "
        f"seed {args.seed}; {ctx}"
    )
    given = set(prep.given)
    random_names = [k for k in list(prep.args) + list(prep.aux) if k not in given]
    if random_names:
        print(
            f"  random values (seed {args.seed}) for {len(random_names)} of {len(prep.args) + n_aux} inputs"
            + (f" ({len(given)} from {args.params})" if args.params else "")
        )
    if prep.ignored:
        print(
            f"  note: {len(prep.ignored)} entries of {args.params} are not inputs of the model: {few(prep.ignored, 4)}"
        )
    if prep.dropouts:
        print(f"  note: Dropout checked as identity (p=0) for a deterministic forward: {few(prep.dropouts, 4)}")
    if spread_text:
        print(f"  arguments spread over {spread_text}")
    sys.stdout.flush()


def cmd_info(args) -> int:
    import_modules(args.imports)
    sym, _ = load_model(args.model, args.example)
    if args.line_length < 40:
        raise CLIError(f"--line-length {args.line_length}: must be at least 40")
    known, ignored = _param_shapes(sym, args.params) if args.params else ({}, [])
    shape = _shape_dict(sym, parse_shapes(args.shape), known)
    if shape is None:
        _summary_without_shapes(sym, args)
    else:
        from . import viz

        viz.print_summary(sym, shape=shape, line_length=args.line_length)
    if ignored:
        print(f"note: {len(ignored)} entries of {args.params} are not inputs of the model: {few(ignored, 4)}")
    return 0


def _param_shapes(sym, path):
    """``({input: shape}, [entries that are not inputs])`` of the arrays of a ``--params`` file."""
    arg_params, aux_params = _load_params(path)
    inputs = set(sym.list_arguments()) | set(sym.list_auxiliary_states())
    arrays = {**arg_params, **aux_params}
    known = {name: tuple(a.shape) for name, a in arrays.items() if name in inputs}
    return known, sorted(name for name in arrays if name not in inputs)


def _summary_without_shapes(sym, args):
    """The table without shapes, its parameter total (which needs them) replaced by what gives them."""
    import io

    from . import viz

    table = io.StringIO()
    with contextlib.redirect_stdout(table):
        viz.print_summary(sym, shape=None, line_length=args.line_length)
    for line in table.getvalue().splitlines():
        if line.startswith("Total params:") and "unknown" in line:
            line = "Total params: unknown (the parameters' shapes are needed, see below)"
        print(line)
    print(f"shapes unknown: {_shapes_hint(sym, args.model)}")


def _shapes_hint(sym, model) -> str:
    """Which options give the shapes ``info`` lacks: ``--shape`` for the data inputs, ``--params`` for the
    parameters (a checkpoint beside ``MODEL-symbol.json`` named)."""
    data = _data_inputs(sym)
    example = " ".join(f"--shape {n}=D1,D2,..." for n in data[:2]) or "--shape NAME=D1,D2,..."
    params = "--params FILE"
    if model and model.endswith("-symbol.json"):
        import glob

        found = sorted(glob.glob(glob.escape(model[: -len("-symbol.json")]) + "-[0-9][0-9][0-9][0-9].params"))
        params = f"--params {found[-1]}" if found else "--params MODEL-0000.params"
    return (
        f"give the input shapes with {example} for the output shapes and every parameter count (the file's "
        f"__shape__ attributes do not fix them); add {params} to take the parameters' shapes from a checkpoint"
    )


def _data_inputs(sym) -> list:
    """The arguments that are neither learned parameters (weight, bias, ... slots) nor labels/indices."""
    from .viz import PARAM_SLOTS

    uses: dict = {}
    for entry in sym.to_networkx().nodes.values():
        node = entry["node"]
        for (src, _), slot in zip(node.inputs, node.input_names() if node.op is not None else ()):
            if src.op is None:
                index = slot in tuple(node.op.no_grad_inputs)
                uses.setdefault(src.name, []).append(slot in PARAM_SLOTS or index)
    return [n for n in sym.list_arguments() if n in uses and not all(uses[n])]


def _shape_dict(sym, shapes, known=None):
    """The input shapes for info/plot: the ``--shape`` values over the ``--params`` arrays' ``known`` shapes
    (which together must make every shape infer), ``{}`` when the file's ``__shape__`` attributes alone do,
    None when no shape is given and they do not (the table/drawing then goes without shapes)."""
    try:
        infer_shapes(sym, shapes, known)  # an unknown input, or shapes that do not infer
    except ModelInputError as exc:
        if shapes:
            raise
        if known:
            raise CLIError(f"{exc} (--params gives only the parameters' shapes)") from None
        return None
    return {**(known or {}), **shapes}


def cmd_plot(args) -> int:
    from . import viz

    out = args.output
    base, ext = os.path.splitext(out)
    fmt = ext.lower().lstrip(".")
    if fmt not in viz.FORMATS:
        raise CLIError(f"-o {out}: the file name must end in one of {', '.join('.' + f for f in viz.FORMATS)}")
    import_modules(args.imports)
    sym, _ = load_model(args.model, args.example)
    shape = _shape_dict(sym, parse_shapes(args.shape))
    title = args.title or os.path.basename(base)
    if args.wrap is not None and args.wrap < 0:
        raise CLIError(f"--wrap {args.wrap}: give the ops per column (0: one column)")
    layout = {"cluster": args.cluster, "wrap": args.wrap, "collapse": args.collapse}
    try:
        dot = viz.plot_network(
            sym, shape=shape, title=title, save_format=fmt, hide_weights=not args.show_weights, **layout
        )
    except ImportError as exc:
        raise CLIError(str(exc)) from None
    try:
        viz.render(dot, out)
    except (RuntimeError, OSError) as exc:
        raise CLIError(_one_line(exc)) from None
    print(f"wrote {out}")
    if fmt == "png":
        _png_hint(viz.png_size(out), out)
    return 0


#: a PNG larger than this many pixels on a side gets a hint (graphviz shrinks bitmaps to 32 767 at most)
PNG_HINT_PX = 10_000


def _png_hint(size, out) -> None:
    width, height = size
    if max(width, height) > PNG_HINT_PX:
        print(
            f"note: {out} is {width} x {height} pixels, too large to read: draw the blocks as single boxes "
            "(--collapse), fewer ops per column (--wrap N), or write .svg, which a browser zooms",
            file=sys.stderr,
        )


def build_parser() -> argparse.ArgumentParser:
    from . import __version__, model_zoo

    parser = _Parser(
        prog="symgrad",
        description="Check a model's gradients numerically, summarise it, draw it.",
        epilog="Without a command, runs 'symgrad check --example "
        f"{model_zoo.DEFAULT_EXAMPLE}'. Exit codes: 0 ok, 1 a gradient fails, 2 an error.",
    )
    parser.add_argument(
        "--version", action="version", version=f"symgrad {__version__}", help="print the version and exit"
    )
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def common(p, what):
        p.add_argument("model", nargs="?", metavar="MODEL.json", help=f"the symbol JSON file to {what}")
        p.add_argument(
            "--example",
            metavar="NAME",
            choices=list(model_zoo.EXAMPLES),
            help=f"a model shipped with symgrad instead of a file: {', '.join(model_zoo.EXAMPLES)}",
        )
        p.add_argument(
            "--shape",
            action="append",
            metavar="NAME=D1,D2,...",
            help="the shape of an input (repeatable); default: the file's __shape__ attributes",
        )
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show the traceback of an error")
        p.add_argument(
            "--import",
            dest="imports",
            action="append",
            metavar="MODULE_OR_PATH",
            help="import a module (dotted name or a .py file) before loading, e.g. one that registers "
            "the model's Custom ops (repeatable)",
        )

    check = sub.add_parser(
        "check",
        help="check every argument's gradient against finite differences",
        description="Load the model, fill missing arguments with seeded random values (labels "
        "and indices as valid integers), run forward/backward and check every "
        "argument's gradient numerically. Exit code 0 only when every gradient "
        "passes.",
    )
    common(check, "check")
    check.add_argument(
        "--params",
        metavar="FILE",
        help="an MXNet .params (or .npz) file with argument "
        "('arg:NAME') and auxiliary ('aux:NAME') values; the others are random",
    )
    check.add_argument(
        "--dtype",
        choices=DTYPES,
        default="float32",
        help="the dtype under test (default float32); the numeric reference is always float64",
    )
    check.add_argument(
        "--grad-req",
        action="append",
        metavar="REQ|NAME=REQ",
        help="write (default), add or null, for every argument or for NAME (repeatable)",
    )
    check.add_argument(
        "--mode",
        choices=MODES,
        default="fast",
        help="fast (default): random directional "
        "derivatives per argument on the forward's pinned pieces, bisected to the worst elements where "
        "one fails; sample: --samples random elements per argument, small arguments whole; full: "
        "every element",
    )
    check.add_argument(
        "--samples",
        type=int,
        default=None,
        metavar="N",
        help=f"elements per argument in sample mode (default {DEFAULT_SAMPLES}; "
        f"{', '.join(f'{k}: {v}' for k, v in model_zoo.EXAMPLE_SAMPLES.items())})",
    )
    check.add_argument("--seed", type=_seed, default=0, help="seed of the random values and draws (default 0)")
    check.add_argument("--ctx", default="cpu", metavar="cpu|gpu:N", help="device (default cpu)")
    check.add_argument("--json", action="store_true", help="print the report as JSON (for CI)")
    check.add_argument(
        "--html",
        metavar="FILE",
        help="also write the report as one self-contained HTML page (charts, the faulty node on the graph), "
        "whatever the verdict",
    )
    check.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress on long work: a bar on a terminal, else a line every few seconds (default: "
        "when stderr is a terminal)",
    )
    spread = check.add_mutually_exclusive_group()
    spread.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="share the arguments between N local processes (default: one per usable core on "
        "Linux, forked after the analytic pass; 1 elsewhere); the results are those of one process",
    )
    spread.add_argument(
        "--scheduler",
        default=None,
        metavar="ADDRESS",
        help="spread the finite differences over a Dask cluster (e.g. tcp://host:8786; needs "
        "dask[distributed] here and on the workers, with symgrad installed there)",
    )
    check.set_defaults(func=cmd_check)

    info = sub.add_parser(
        "info",
        help="a layer table: op, output shape, parameter count, totals",
        description="Print an MXNet print_summary-style table of the model.",
    )
    common(info, "summarise")
    info.add_argument(
        "--params",
        metavar="FILE",
        help="an MXNet .params (or .npz) checkpoint whose arrays give the parameters' shapes (e.g. a Gluon "
        "export's MODEL-0000.params); the data's shape still comes from --shape or __shape__",
    )
    info.add_argument("--line-length", type=int, default=120, metavar="N", help="width of the table (default 120)")
    info.set_defaults(func=cmd_info)

    plot = sub.add_parser(
        "plot",
        help="draw the graph with graphviz (svg, png, pdf or dot)",
        description="Draw the graph (MXNet plot_network look). '.dot' needs only the graphviz "
        "Python package; the other formats need graphviz's 'dot' program. A large graph (a Gluon "
        "DenseNet-121) is wrapped into side-by-side columns with a frame per block; --collapse draws each "
        "block as one box.",
    )
    common(plot, "draw")
    plot.add_argument("-o", "--output", required=True, metavar="FILE", help="FILE.svg, .png, .pdf or .dot")
    plot.add_argument("--title", help="the graph's title (default: the output file's name)")
    plot.add_argument("--show-weights", action="store_true", help="draw weight/bias/BatchNorm parameter inputs")
    from .viz import LARGE_GRAPH

    plot.add_argument(
        "--collapse",
        action="store_true",
        help="draw each block of a Gluon export (the ops sharing a name prefix, e.g. densenet0_stage1) as one box",
    )
    plot.add_argument(
        "--cluster",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="frame the ops of each block, labelled with its name prefix (default: for graphs of more than "
        f"{LARGE_GRAPH} ops)",
    )
    plot.add_argument(
        "--wrap",
        type=int,
        default=None,
        metavar="N",
        help="wrap long chains into side-by-side columns of at most N ops (0: one column, MXNet's layout; "
        f"default: automatic for graphs of more than {LARGE_GRAPH} ops)",
    )
    plot.set_defaults(func=cmd_plot)
    return parser


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        parser = build_parser()
        if not [a for a in argv if a != "--debug"]:
            argv = argv + ["check"]  # the default: check the default example
        args = parser.parse_args(argv)
        if args.command is None:
            raise CLIError("a command is needed: check, info or plot (see 'symgrad --help')")
        if getattr(args, "model", None) is None and getattr(args, "example", None) is None and args.command != "check":
            raise CLIError(f"{args.command}: give a MODEL.json file or --example NAME")
        return args.func(args)
    except SystemExit as exc:  # --help / --version
        return int(exc.code or 0)
    except KeyboardInterrupt as stop:
        print("symgrad: interrupted", file=sys.stderr)
        return EXIT_SIGTERM if str(stop) == "SIGTERM" else EXIT_SIGINT
    except Exception as exc:
        if debug:  # the traceback, and still exit 2: 1 is a failing gradient's
            import traceback

            traceback.print_exc()
        print(f"symgrad: error: {_error_text(exc, debug)}", file=sys.stderr)
        return 2


def _error_text(exc, debug=False) -> str:
    if isinstance(exc, CLIError):
        return str(exc)
    text = _one_line(exc)
    clean = (OSError, ValueError, KeyError, NotImplementedError, ImportError)
    if isinstance(exc, clean) or type(exc).__module__.startswith("symgrad"):
        return text
    return f"{type(exc).__name__}: {text}" + ("" if debug else " (run with --debug for the traceback)")
