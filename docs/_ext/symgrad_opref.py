"""The operator reference, generated from symgrad's op registry (``symgrad.opdef.list_ops``).

One entry per registered name, grouped by family (the module that registers it: ``symgrad/ops/<family>.py``,
``symgrad/operator.py``, ``symgrad/control_flow.py``). Where each field comes from:

- name, aliases, parameters (kind, default, required, choices), input / auxiliary / output names, the visible
  output count, ``no_grad_inputs``, ``is_loss``, ``is_random``, ``decisions`` / ``pinned``: the ``OpDef`` and
  its ``Param`` schema. Inputs and outputs that depend on parameters are found by evaluating the OpDef's rules
  at its defaults and at each one-parameter change of a ``bool`` or a choice parameter.
- which inputs receive a gradient and whether second order works: the gradient the rule *builds*. The op is
  applied to Variables and differentiated with ``symgrad.grad``; an input whose gradient is None receives
  none. A gradient written with ``F`` ops is itself a graph of ops with gradient rules, so it differentiates
  again; a fused backward (``_backward_BatchNorm``) whose OpDef has no gradient rule does not. Second order
  works exactly when no op of the built gradient lacks a rule (``tests/test_docs_operators.py`` compares
  this with ``symgrad.grad`` of the gradient for every entry and with numeric second-order checks).
- accepted dtypes: the op's own dtype rule (``OpDef.infer_type``, ``same_type`` when None) probed with each
  dtype symgrad names (``symgrad.opdef.DTYPE_TO_MX``'s float and integer types present in numpy).
- derivation: the comments (and docstrings) at the gradient rule's source: above and inside its definition,
  of the ``F``-taking helpers it calls, and of the forward kernel of the fused ``_backward_*`` op it emits;
  for a rule a registration helper made (``adjoint_pair``), first the comments at the helper's call that
  names the op.

Everything above is plain Python importable without Sphinx (``tests/test_docs_operators.py`` calls it); the
Sphinx part (``setup``) writes ``docs/operators/_generated/<family>.rst`` and ``names.inc`` at
``builder-inited`` (a git-ignored folder) and adds the ``operator`` directive and the ``:op:`` role. Files
rather than a directive that nested-parses generated text: Sphinx reads a file again only when its content
changed (a file is rewritten only then), so a rebuild after a change to one family reads one page, and the
rst a page came from can be read on disk.
"""

from __future__ import annotations

import ast
import dis
import functools
import importlib
import inspect
import io
import json
import os
import re
import textwrap
import tokenize
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import symgrad as sg
from symgrad.opdef import BUILTIN_OPS, REQUIRED, OpDef, list_ops, param_to_str, same_type

#: the dtypes probed against each op's dtype rule
PROBED_DTYPES = ("float16", "float32", "float64", "uint8", "int8", "int32", "int64", "bool")
ANCHOR_PREFIX = "op-"
REPO = Path(sg.__file__).resolve().parents[1]


def anchor(name: str) -> str:
    """The HTML id (URL fragment) of a registered name's entry: ``op-`` and the name, case kept
    (``op-Cast`` and ``op-cast`` are two names)."""
    return ANCHOR_PREFIX + name


# -- the registry ---------------------------------------------------------------------------------------


def registered_ops() -> dict[str, OpDef]:
    """Every name symgrad itself registers (aliases included) and its OpDef; ops that a test or a user
    registers into the same registry (a forward defined outside symgrad) are left out."""
    return dict(_symgrad_ops(len(list_ops())))


@functools.cache
def _symgrad_ops(size: int) -> dict[str, OpDef]:
    """``registered_ops`` for a registry of ``size`` names (registrations are never undone)."""
    del size
    return {name: op for name, op in list_ops().items() if op.forward.__module__.startswith("symgrad.")}


def canonical_ops() -> dict[str, OpDef]:
    """``{op.name: op}`` for each distinct OpDef, in registration order."""
    out: dict[str, OpDef] = {}
    for op in registered_ops().values():
        out.setdefault(op.name, op)
    return out


def aliases_of(op: OpDef) -> list[str]:
    """The other names ``op`` is registered under, in registration order."""
    return [name for name, o in _symgrad_ops(len(list_ops())).items() if o is op and name != op.name]


@functools.cache
def family_modules() -> list[str]:
    """The modules whose import registers symgrad's ops: each ``symgrad.ops.<family>`` and the other
    ``BUILTIN_OPS`` entries (``symgrad.operator``, ``symgrad.control_flow``)."""
    mods = []
    for name in BUILTIN_OPS:
        module = importlib.import_module(name)
        if hasattr(module, "__path__"):  # the package of op families
            mods += sorted(
                f"{name}.{m.stem}" for m in Path(module.__file__).parent.glob("*.py") if not m.stem.startswith("_")
            )
        else:
            mods.append(name)
    return mods


def family_name(module: str) -> str:
    """``symgrad.ops.nn`` -> ``nn``; ``symgrad.control_flow`` -> ``control_flow``."""
    return module.rsplit(".", 1)[-1]


@functools.cache
def _registering_calls(module: str) -> frozenset:
    """The names a module registers by literal: the first argument of a call to ``register`` or to a function
    the module defines (``_unary("exp", ...)``, ``_like("Pooling_v1", ...)``), and its ``aliases``."""
    tree = _tree(_source_path(importlib.import_module(module)))
    local = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)} | {"register"}
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in local:
            if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                names.add(node.args[0].value)
    return frozenset(names)


def family_of(op: OpDef) -> str:
    """The module that registers ``op``: its forward's module, unless another family module registers the
    name by literal while the forward's does not (``Pooling_v1``: ``ops/legacy.py`` re-registers
    ``Pooling``'s rules)."""
    home = op.forward.__module__
    if op.name not in _registering_calls(home):
        others = [m for m in family_modules() if m != home and op.name in _registering_calls(m)]
        if len(others) == 1:
            return others[0]
    return home


# -- parameters -----------------------------------------------------------------------------------------


@dataclass
class ParamInfo:
    """One parameter as the reference shows it."""

    name: str
    kind: str
    required: bool
    default: str  # Python literal of the default ("" when required)
    optional: bool  # None accepted
    choices: tuple | None
    doc: str


def shown_value(value) -> str:
    """A parameter value as a Python literal a caller would write (dtypes as their name)."""
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        return repr(param_to_str(value))
    return repr(value)


def params_of(op: OpDef) -> list[ParamInfo]:
    out = []
    for name, spec in op.params.items():
        required = spec.default is REQUIRED
        out.append(
            ParamInfo(
                name=name,
                kind=spec.kind,
                required=required,
                default="" if required else shown_value(spec.default),
                optional=spec.optional,
                choices=spec.choices,
                doc=spec.doc,
            )
        )
    return out


# -- evaluating the rules at sample parameters ------------------------------------------------------------

# values for required parameters, by kind: two sets, tried in turn (some rules refuse a 1-d kernel, equal
# bounds ``low == high`` or an empty shape); ints count up so that ``index < num_args`` and ``low < high``
_SAMPLE_ONE = {"int": 1, "float": 1.0, "bool": False, "str": "", "shape": (1,), "axis": 0, "floats": (1.0,)}
_SAMPLE_TWO = {"float": 1.0, "bool": False, "str": "", "shape": (2, 2), "axis": 0, "floats": (1.0, 1.0)}


def _sample_params(op: OpDef, attempt: int) -> dict:
    """Parameter values that the op's rules accept, with every non-required parameter at its default:
    ``attempt`` 0 and 1 fill required ones only, 2 also fills shape/axis parameters left empty or None."""
    params: dict[str, Any] = {}
    count = 0
    for name, spec in op.params.items():
        fill = spec.default is REQUIRED or (
            attempt == 2 and spec.kind in ("shape", "axis") and spec.default in ((), None)
        )
        if not fill:
            continue
        count += 1
        if op.variadic == name:
            value: Any = 2
        elif spec.choices:
            value = spec.choices[0]
        elif spec.kind == "dtype":
            value = "float32"
        elif spec.kind == "any":
            value = (0,) if attempt == 0 else (0, 0)
        elif spec.kind == "int":
            value = 1 if attempt == 0 else count + 1
        elif spec.kind == "shape" and attempt == 2 and spec.default is not REQUIRED:
            value = (2, 2)
        else:
            value = (_SAMPLE_ONE if attempt == 0 else _SAMPLE_TWO)[spec.kind]
        params[name] = value
    return params


@dataclass
class Evaluation:
    """The op's rules evaluated at one parameter set."""

    params: dict  # as given to the op (non-default values only)
    inputs: list[str]
    aux: list[str]
    outputs: list[str]  # visible
    hidden: list[str]  # outputs past the visible ones
    grad_inputs: list[str] | None = None  # inputs the built gradient reaches (None: not built)
    grad_error: str = ""  # why the first-order gradient could not be built
    opaque: list[str] = field(default_factory=list)  # ops of the gradient without a gradient rule
    gradient_ops: list[str] = field(default_factory=list)
    setting: str = ""  # for a variant: the parameter it changes, as shown in the reference


def _message(exc: BaseException) -> str:
    return str(exc).split("\n")[0]


def _own_names(fn):
    """Run ``fn`` under a fresh ``NameManager``: building the reference's sample ops must not move the automatic
    names (``_sample_multinomial0``) of the process it runs in (a test building them in-process did)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with sg.NameManager():
            return fn(*args, **kwargs)

    return wrapper


@_own_names
def evaluate(name: str, op: OpDef, params: dict) -> Evaluation:
    """Build ``op(Variables..., **params)`` and its gradient w.r.t. every argument; raises what the op's own
    rules raise for parameters they refuse (a required kernel, an empty shape)."""
    full = op.parse_params(dict(params), name)
    inputs, aux = op.list_inputs(full), op.list_aux(full)
    names = op.list_output_names(full, visible_only=False)
    n_visible = op.n_visible(full)
    variables = [sg.sym.Variable(f"in{k}_{n}") for k, n in enumerate(inputs)]
    states = [sg.sym.Variable(f"aux{k}_{n}") for k, n in enumerate(aux)]
    y = getattr(sg.sym, name)(*variables, *states, **params)
    ev = Evaluation(dict(params), inputs, aux, names[:n_visible], names[n_visible:])
    if not variables:
        return ev
    if op.gradient is None:
        ev.grad_error = op.grad_undefined_reason or f"{op.name} has no gradient rule"
        return ev
    grads = sg.grad(y, variables)  # a rule refusing these sample values raises: the caller tries others
    ev.grad_inputs = [n for n, g in zip(inputs, grads) if g is not None]
    built = [g for g in grads if g is not None]
    if built:
        nodes = json.loads(sg.sym.Group(built).tojson())["nodes"]
        ops = list_ops()
        ev.gradient_ops = sorted({nd["op"] for nd in nodes if nd["op"] != "null"})
        ev.opaque = [o for o in ev.gradient_ops if ops[o].gradient is None]
    return ev


@_own_names
def second_order_by_grad(ev: Evaluation, name: str, op: OpDef) -> str | None:
    """symgrad's own answer for ``ev``'s parameters: None when ``symgrad.grad`` of the first-order gradients
    builds, else its error message. (The reference uses the rule on ``Evaluation.opaque``; the tests hold it
    to this.)"""
    full = op.parse_params(dict(ev.params), name)
    variables = [sg.sym.Variable(f"in{k}_{n}") for k, n in enumerate(op.list_inputs(full))]
    states = [sg.sym.Variable(f"aux{k}_{n}") for k, n in enumerate(op.list_aux(full))]
    y = getattr(sg.sym, name)(*variables, *states, **ev.params)
    built = [g for g in sg.grad(y, variables) if g is not None]
    total = sg.sym.sum(built[0])
    for g in built[1:]:
        total = total + sg.sym.sum(g)
    try:
        sg.grad(total, variables)
    except sg.SymgradError as exc:
        return _message(exc)
    return None


def _variants(op: OpDef, base: dict) -> Iterable[tuple[str, dict]]:
    """``(setting, params)`` for each one-parameter change from ``base``: each other choice of a choice
    parameter, the other value of each bool parameter."""
    for pname, spec in op.params.items():
        current = base.get(pname, spec.default)
        if spec.kind == "bool" and spec.default is not REQUIRED:
            yield f"{pname}={shown_value(not current)}", {**base, pname: not current}
        elif spec.choices:
            for choice in spec.choices:
                if choice != current:
                    yield f"{pname}={shown_value(choice)}", {**base, pname: choice}


def _companions(op: OpDef, params: dict) -> dict:
    """Values for the parameters left at None that a setting may need (``pool_type='lp'`` needs
    ``p_value``): 2 for ints, 1.0 for floats, ``(2, 2)`` for shapes."""
    fill = {"int": 2, "float": 1.0, "shape": (2, 2), "axis": 0, "floats": (1.0,)}
    return {
        k: fill[spec.kind]
        for k, spec in op.params.items()
        if spec.default is None and k not in params and spec.kind in fill
    }


@dataclass
class Analysis:
    """An op evaluated at sample parameters and at each one-parameter variant."""

    base: Evaluation | None
    variants: list[Evaluation]
    error: str = ""  # why no parameter set could be evaluated


def analyse(op: OpDef) -> Analysis:
    errors = []
    for attempt in range(3):
        params = _sample_params(op, attempt)
        try:
            base = evaluate(op.name, op, params)
        except Exception as exc:  # noqa: BLE001  (a rule refusing these sample values: try the next set)
            errors.append(_message(exc))
            continue
        if not base.inputs and callable(op.inputs) and op.gradient is not None:
            errors.append("no inputs at these parameters")  # a loop without its subgraph: not the op
            continue
        variants = []
        for setting, p in _variants(op, params):
            extra = _companions(op, p)
            for trial in (p, {**p, **extra}) if extra else (p,):
                try:
                    ev = evaluate(op.name, op, trial)
                except Exception:  # noqa: BLE001, S112  (a combination the op refuses has no entry)
                    continue
                ev.setting = _lit(setting)
                if trial is not p:
                    ev.setting += " (and " + ", ".join(_lit(f"{k}={shown_value(v)}") for k, v in extra.items()) + ")"
                variants.append(ev)
                break
        return Analysis(base, variants)
    return Analysis(None, [], errors[-1])


@functools.cache
def analysis_of(name: str) -> Analysis:
    return analyse(registered_ops()[name])


# -- dtypes ---------------------------------------------------------------------------------------------


def accepted_dtypes(op: OpDef, params: dict) -> tuple[str, list[str]] | None:
    """``(what was probed, accepted dtypes)``: the dtype of input 0 for ops with inputs (the others left
    unknown), else the ``dtype`` parameter; None when neither applies or the rule needs more."""
    full = op.parse_params(dict(params), op.name)
    n_in = len(op.list_inputs(full)) + len(op.list_aux(full))
    n_out = op.n_outputs(full)
    rule = op.infer_type or same_type
    accepted = []
    if n_in:
        what = "input"
        for dt in PROBED_DTYPES:
            try:
                rule(full, [np.dtype(dt)] + [None] * (n_in - 1), [None] * n_out, op.name)
            except (TypeError, ValueError, sg.SymgradError):
                continue
            except Exception:  # noqa: BLE001  (a rule that needs the other dtypes too: not determined)
                return None
            accepted.append(dt)
    elif "dtype" in op.params and op.params["dtype"].kind == "dtype":
        what = "dtype parameter"
        for dt in PROBED_DTYPES:
            try:
                p = op.parse_params({**params, "dtype": dt}, op.name)
                rule(p, [], [None] * n_out, op.name)
            except (TypeError, ValueError, sg.SymgradError):
                continue
            except Exception:  # noqa: BLE001
                return None
            accepted.append(dt)
    else:
        return None
    return what, accepted


# -- source comments ------------------------------------------------------------------------------------


def _source_path(obj) -> Path:
    return Path(inspect.getsourcefile(obj) or "")


@functools.cache
def _source_text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


@functools.cache
def _lines(path: Path) -> list[str]:
    return _source_text(path).splitlines()


def _segment(path: Path, node: ast.AST) -> str:
    """The source text of ``node``, its first line padded to its column (``ast.get_source_segment`` splits
    the whole file on each call)."""
    lines = _lines(path)[node.lineno - 1 : node.end_lineno]  # type: ignore[attr-defined]
    if not lines:
        return ""
    first, last = node.col_offset, node.end_col_offset  # type: ignore[attr-defined]  (UTF-8 byte offsets)
    head, tail = lines[0].encode(), lines[-1].encode()
    if len(lines) == 1:
        return " " * first + head[first:last].decode()
    return "\n".join([" " * first + head[first:].decode(), *lines[1:-1], tail[:last].decode()])


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(_source_text(path))


@functools.cache
def _comments(path: Path) -> dict[int, tuple[str, bool]]:
    """``{line: (comment text, whether the line holds nothing else)}`` of a source file."""
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(_source_text(path)).readline):
        if tok.type == tokenize.COMMENT:
            alone = not tok.line[: tok.start[1]].strip()
            out[tok.start[0]] = (tok.string.lstrip("#").strip(), alone)
    return out


_RULE_LINE = re.compile(r"^[-=#\s]*$|^--.*-{4,}$")  # section rulers ("----", "-- powers -------")
_NOQA = re.compile(r"^(noqa|type:|pragma)")


def _keep(comment: str) -> bool:
    return bool(comment) and not _RULE_LINE.match(comment) and not _NOQA.match(comment)


def _block_above(path: Path, line: int) -> tuple[int, list[str]]:
    """The run of comment-only lines directly above ``line`` (no blank line between): (its first line, the
    comments)."""
    comments = _comments(path)
    k = line - 1
    got: list[str] = []
    while k >= 1 and k in comments and comments[k][1]:
        got.append(comments[k][0])
        k -= 1
    return k + 1, [c for c in reversed(got) if _keep(c)]


def _inside(path: Path, first: int, last: int) -> list[str]:
    comments = _comments(path)
    return [comments[k][0] for k in range(first, last + 1) if k in comments and _keep(comments[k][0])]


@functools.cache
def _index(path: Path) -> tuple[dict[int, ast.AST], dict[int, list]]:
    """``(parent of each node by id, the def and lambda nodes by the line their code object starts on)``."""
    parents: dict[int, ast.AST] = {}
    defs: dict[int, list] = {}
    for node in ast.walk(_tree(path)):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defs.setdefault(min([node.lineno] + [d.lineno for d in node.decorator_list]), []).append(node)
        elif isinstance(node, ast.Lambda):
            defs.setdefault(node.lineno, []).append(node)
    return parents, defs


def _parents(path: Path) -> dict[int, ast.AST]:
    return _index(path)[0]


def _definitions(path: Path) -> dict[int, list]:
    return _index(path)[1]


def _definition(fn) -> ast.AST | None:
    """The ``def`` or ``lambda`` node of a function (a lambda among several on its line by the columns of
    its first instruction)."""
    code = fn.__code__
    candidates = _definitions(_source_path(fn)).get(code.co_firstlineno, [])
    if fn.__name__ != "<lambda>":
        return next((n for n in candidates if getattr(n, "name", None) == fn.__name__), None)
    lambdas = [n for n in candidates if isinstance(n, ast.Lambda)]
    if len(lambdas) > 1:
        pos = next(
            ((ln, c0) for ln, _, c0, c1 in code.co_positions() if ln and c0 is not None and c1 and c1 > c0), None
        )
        if pos is not None:
            inside = [
                n
                for n in lambdas
                if (n.body.lineno, n.body.col_offset) <= pos <= (n.body.end_lineno or 0, n.body.end_col_offset or 0)
            ]
            lambdas = inside or lambdas
    return lambdas[0] if len(lambdas) == 1 else None


def _statement(path: Path, node: ast.AST) -> ast.stmt:
    parents = _parents(path)
    while not isinstance(node, ast.stmt):
        node = parents[id(node)]
    return node


@dataclass
class SourceNote:
    """Comments and docstring found at one function's source."""

    where: str  # "symgrad/ops/nn.py, line 12 (_act_grad)"
    lines: list[str]

    def text(self) -> str:
        return "\n".join(self.lines)


def _where(fn, line: int) -> str:
    path = _source_path(fn)
    try:
        rel = path.relative_to(REPO)
    except ValueError:
        rel = Path(path.name)
    label = fn.__name__ if fn.__name__ != "<lambda>" else "lambda"
    return f"{rel.as_posix()}, line {line} ({label})"


def _siblings_above(path: Path, stmt: ast.stmt) -> ast.stmt | None:
    """The first statement of the run of comment-less one-line statements right above ``stmt`` whose head
    has a comment block (``log10``'s registration under ``# (log2 x)' = ...; (log10 x)' = ...`` and
    ``log2``'s)."""
    parent = _parents(path).get(id(stmt))
    body = getattr(parent, "body", None)
    if not isinstance(body, list) or stmt not in body:
        return None
    k = body.index(stmt)
    while k > 0:
        prev, cur = body[k - 1], body[k]
        if (prev.end_lineno or 0) != cur.lineno - 1 or _inside(path, prev.lineno, prev.end_lineno or prev.lineno):
            return None
        if _block_above(path, prev.lineno)[1]:
            return prev
        k -= 1
    return None


def source_note(fn, inner: bool = True, doc: bool = True) -> SourceNote | None:
    """The comments of ``fn``'s definition: the block above it, its docstring and (``inner``) the comments
    inside; for a lambda inside a larger statement (a ``register(...)`` call), also the block above that
    statement."""
    node = _definition(fn)
    if node is None:
        return None
    path = _source_path(fn)
    lines: list[str] = []
    if isinstance(node, ast.Lambda):
        stmt = _statement(path, node)
        if stmt.lineno != node.lineno:
            lines += _block_above(path, stmt.lineno)[1]
        lines += _block_above(path, node.lineno)[1]
        lines += _inside(path, node.lineno, node.end_lineno or node.lineno)
        if not lines and stmt.lineno == node.lineno:
            head = _siblings_above(path, stmt)
            if head is not None:
                lines += _block_above(path, head.lineno)[1]
        factory = _enclosing_def(path, node)
        if not lines and factory is not None:  # a bare lambda a helper registers: the helper's own words
            lines += _block_above(path, min([factory.lineno] + [d.lineno for d in factory.decorator_list]))[1]
            lines += (ast.get_docstring(factory) or "").splitlines()
        return SourceNote(_where(fn, node.lineno), lines)
    assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    factory = _enclosing_def(path, node)
    if factory is not None:  # a rule a factory made (``_valatt_grad(parts)``): the factory's own words first
        lines += _block_above(path, min([factory.lineno] + [d.lineno for d in factory.decorator_list]))[1]
        lines += (ast.get_docstring(factory) or "").splitlines()
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    lines += _block_above(path, first)[1]
    docstring = ast.get_docstring(node) if doc else None
    if docstring:
        lines += docstring.splitlines()
    if inner:
        lines += _inside(path, node.lineno, node.end_lineno or node.lineno)
    return SourceNote(_where(fn, node.lineno), lines)


def _enclosing_def(path: Path, node: ast.AST) -> ast.FunctionDef | None:
    parents = _parents(path)
    up = parents.get(id(node))
    while up is not None and not isinstance(up, ast.FunctionDef):
        up = parents.get(id(up))
    return up


def source_code(fn, max_lines: int = 30) -> SourceNote | None:
    """The source of ``fn``'s definition (a lambda's expression), for a rule without a comment."""
    node = _definition(fn)
    if node is None:
        return None
    path = _source_path(fn)
    segment = _segment(path, node)
    lines = textwrap.dedent(segment).splitlines()
    if len(lines) > max_lines:
        lines = lines[:max_lines] + [f"... ({len(lines) - max_lines} more lines)"]
    return SourceNote(_where(fn, node.lineno), lines)


def _is_machinery(fn) -> bool:
    """A closure made by a registration helper (``_unary.<locals>.rule``): its code is shared by many ops,
    the op's own rule is among its closure's values."""
    return "<locals>" in fn.__qualname__


def _literal_names(call: ast.Call) -> set[str]:
    """The strings a call passes by position, alone or in a tuple or list (``adjoint_pair(("a", "b"), ...)``)."""
    found = set()
    for arg in call.args:
        for item in arg.elts if isinstance(arg, (ast.Tuple, ast.List)) else [arg]:
            if isinstance(item, ast.Constant) and isinstance(item.value, str):
                found.add(item.value)
    return found


@functools.cache
def _module_calls(module: str) -> dict[str, list[ast.stmt]]:
    """``{name: module-level call statements passing it by literal}`` of a family module."""
    out: dict[str, list[ast.stmt]] = {}
    for stmt in _tree(_source_path(importlib.import_module(module))).body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            for name in _literal_names(stmt.value):
                out.setdefault(name, []).append(stmt)
    return out


def call_site_note(op: OpDef) -> SourceNote | None:
    """For a rule a registration helper made (``adjoint_pair``'s ``_adjoint_of``), the comments at the helper's
    call that names the op: the block above the call statement and the comments inside it, where the op's own
    derivation is written (the helper's comment is about every op it registers)."""
    for module in dict.fromkeys([family_of(op), op.forward.__module__]):
        path = _source_path(importlib.import_module(module))
        for name in [op.name, *aliases_of(op)]:
            for stmt in _module_calls(module).get(name, []):
                lines = _block_above(path, stmt.lineno)[1] + _inside(path, stmt.lineno, stmt.end_lineno or stmt.lineno)
                if lines:
                    func = stmt.value.func  # type: ignore[attr-defined]
                    label = getattr(func, "id", None) or getattr(func, "attr", "call")
                    rel = path.relative_to(REPO).as_posix()
                    return SourceNote(f"{rel}, line {stmt.lineno} ({label} call)", lines)
    return None


def _user_functions(fn, ops: dict, seen: set, depth: int = 0) -> list:
    """The functions written for this op behind ``fn``: ``fn`` itself, or through a helper's closure the
    functions and op names it holds (a fused ``_backward_X`` op's rule is followed to its expansion)."""
    if not callable(fn) or not hasattr(fn, "__code__") or id(fn) in seen or depth > 4:
        return []
    seen.add(id(fn))
    if not _is_machinery(fn):
        return [fn]
    found: list = []
    for cell in fn.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(value, str) and value in ops and ops[value].gradient is not None:
            found += _user_functions(ops[value].gradient, ops, seen, depth + 1)
        elif inspect.isfunction(value):
            found += _user_functions(value, ops, seen, depth + 1)
    return found or [fn]  # a rule made by a factory for this op (``softmax``'s): its own comments


def _loaded_names(code) -> tuple[set, set]:
    """(global names, attribute names) that ``code`` and the code nested in it load."""
    globals_, attrs = set(), set()
    stack = [code]
    while stack:
        c = stack.pop()
        for ins in dis.get_instructions(c):
            if ins.opname == "LOAD_GLOBAL":
                globals_.add(ins.argval)
            elif ins.opname in ("LOAD_ATTR", "LOAD_METHOD"):
                attrs.add(ins.argval)
        stack += [k for k in c.co_consts if inspect.iscode(k)]
    return globals_, attrs


_GRADIENT_HELPER = re.compile(r"grad|vjp|adjoint", re.IGNORECASE)


def _gradient_helper(fn) -> bool:
    """A function a gradient rule calls to build its symbols: it takes ``F`` first, or its name says it
    computes gradients (``matmul_grads``)."""
    return inspect.isfunction(fn) and (
        fn.__code__.co_varnames[:1] == ("F",) or bool(_GRADIENT_HELPER.search(fn.__name__))
    )


def derivation(op: OpDef) -> list[SourceNote]:
    """The derivation of ``op``'s gradient as its source comments say it (see the module docstring)."""
    if op.gradient is None:
        return []
    ops = list_ops()
    notes: list[SourceNote] = []
    done: set = set()

    def add(fn, inner: bool = True) -> None:
        if id(fn) in done:
            return
        done.add(id(fn))
        note = source_note(fn, inner)
        if note is not None and note.lines:
            notes.append(note)

    rules = _user_functions(op.gradient, ops, set())
    for fn in rules:
        add(fn)
    if not notes:  # no comment at the rule: its code is the derivation
        for fn in rules:
            code = source_code(fn)
            if code is not None:
                code.where += ": no comment; the rule's code"
                notes.append(code)
    # a rule a registration helper made: the op's own words are at the helper's call, first
    call = call_site_note(op) if any(_is_machinery(fn) for fn in rules) else None
    if call is not None:
        notes.insert(0, call)
    # helpers the rules call with F (``affine_norm_vjp``, ``normalize_vjp``), one level down and two
    modules = set(family_modules())
    helpers = list(rules)
    for _ in range(2):
        found = []
        for fn in helpers:
            names, _ = _loaded_names(fn.__code__)
            for n in sorted(names):
                target = fn.__globals__.get(n)
                if _gradient_helper(target) and id(target) not in done and target.__module__ in modules:
                    add(target)
                    found.append(target)
        helpers = found
    # the forward kernel of a fused backward the rule emits: where its VJP is derived
    for fn in rules:
        _, attrs = _loaded_names(fn.__code__)
        for a in sorted(attrs):
            if a.startswith("_backward_") and a in ops and ops[a].forward.__module__.startswith("symgrad."):
                for kernel in _user_functions(ops[a].forward, ops, set()):
                    add(kernel, inner=False)  # a kernel's inner comments are about arrays, not the math
    return notes


def decision_note(op: OpDef) -> list[SourceNote]:
    """The source of the op's ``decisions`` rule (comments and, for a lambda, its expression)."""
    if op.decisions is None:
        return []
    notes = []
    for fn in _user_functions(op.decisions, list_ops(), set()):
        note = source_note(fn, inner=False, doc=False)  # the code shown below holds the rest
        code = source_code(fn, max_lines=12)
        if note is None or code is None:
            continue
        notes.append(SourceNote(note.where, note.lines + ([""] if note.lines else []) + code.lines))
    return notes


def opaque_by_code(op: OpDef) -> list[str]:
    """The ops without a gradient rule that the gradient rule's code names as ``F.<op>`` (the rule as written,
    for ops that cannot be built at sample parameters, such as ``Custom``)."""
    if op.gradient is None:
        return []
    ops = list_ops()
    found = set()
    for fn in _user_functions(op.gradient, ops, set()):
        found |= {a for a in _loaded_names(fn.__code__)[1] if a in ops and ops[a].gradient is None}
    return sorted(found)


# -- rendering ------------------------------------------------------------------------------------------

_KINDS = {
    "int": "int",
    "float": "float",
    "bool": "bool",
    "str": "str",
    "shape": "shape (tuple of ints)",
    "axis": "int or tuple of ints",
    "floats": "tuple of floats",
    "dtype": "dtype",
    "any": "any",
}


def _lit(text: str) -> str:
    """``text`` as an inline literal (backquotes cannot occur in op and parameter names)."""
    return f"``{text}``"


def _names(names: Iterable[str]) -> str:
    return ", ".join(_lit(n) for n in names) or "none"


def _escape(text: str) -> str:
    """Plain text for rst: ``*``, ``|``, ``_`` and backslashes escaped outside the ``literal`` spans an op's
    doc may hold."""
    parts = re.split(r"(``[^`]+``)", text)
    return "".join(p if p.startswith("``") else re.sub(r"([\\*|_`])", r"\\\1", p) for p in parts)


def signature(name: str, op: OpDef, an: Analysis) -> str:
    """``name(inputs..., params...)`` with defaults, as the symbol API takes them."""
    inputs = list(an.base.inputs) + list(an.base.aux) if an.base else _static_inputs(op)
    if op.variadic:
        inputs = ["*args"]
    parts = inputs + [
        p if op.params[p].default is REQUIRED else f"{p}={shown_value(op.params[p].default)}" for p in op.params
    ]
    return f"{name}({', '.join(parts)})"


def _static_inputs(op: OpDef) -> list[str]:
    names = op.fixed_input_names()
    return list(names) if names is not None else []


def _vary(an: Analysis, value: Callable[[Evaluation], Any]) -> list[tuple[str, Any]]:
    """``(setting, value)`` for each variant where ``value`` differs from the base's."""
    assert an.base is not None
    base = value(an.base)
    out = []
    for ev in an.variants:
        v = value(ev)
        if v != base:
            out.append((ev.setting, v))
    return out


def _conditional(names_base: list[str], an: Analysis, pick: Callable[[Evaluation], list[str]]) -> str:
    """Names listed at the base parameters, each annotated with the settings that drop it, then the names
    only some settings add."""
    assert an.base is not None
    dropped: dict[str, list[str]] = {}
    added: dict[str, list[str]] = {}
    for setting, names in _vary(an, pick):
        for n in names_base:
            if n not in names:
                dropped.setdefault(n, []).append(setting)
        for n in names:
            if n not in names_base:
                added.setdefault(n, []).append(setting)
    parts = [_lit(n) + (f" (not with {', '.join(dropped[n])})" if n in dropped else "") for n in names_base]
    parts += [f"{_lit(n)} (with {', '.join(s)})" for n, s in added.items()]
    return ", ".join(parts) or "none"


def _names_at(op: OpDef, params: dict, outputs: bool) -> tuple:
    full = op.parse_params(dict(params), op.name)
    return tuple(op.list_output_names(full, visible_only=False) if outputs else op.list_inputs(full))


def _outputs_field(ev: Evaluation, an: Analysis) -> str:
    """The visible outputs, then the hidden ones, each with the settings that move it across or drop it."""

    def annotated(names: list[str], mine: Callable, other: Callable, there: str) -> list[str]:
        out = []
        for n in names:
            moved = [e.setting for e in an.variants if n in other(e)]
            gone = [e.setting for e in an.variants if n not in mine(e) and n not in other(e)]
            notes = ([f"{there} with {', '.join(moved)}"] if moved else []) + (
                [f"not with {', '.join(gone)}"] if gone else []
            )
            out.append(_lit(n) + (f" ({'; '.join(notes)})" if notes else ""))
        return out

    visible = annotated(ev.outputs, lambda e: e.outputs, lambda e: e.hidden, "hidden")
    hidden = annotated(ev.hidden, lambda e: e.hidden, lambda e: e.outputs, "visible")
    known = set(ev.outputs) | set(ev.hidden)
    extra: dict[str, list[str]] = {}
    for e in an.variants:
        for n in e.outputs + e.hidden:
            if n not in known:
                extra.setdefault(n, []).append(e.setting)
    text = ", ".join(visible) or "none"
    if hidden:
        text += "; hidden (kept for the backward, not among the symbol's outputs): " + ", ".join(hidden)
    if extra:
        text += "; " + ", ".join(f"{_lit(n)} (with {', '.join(s)})" for n, s in extra.items())
    return text


def _sample_note(op: OpDef, an: Analysis, outputs: bool = False) -> str:
    """Where the input (or output) names depend on an int parameter (``num_args``, ``num_outputs``): the
    sample values they are shown for."""
    if an.base is None:
        return ""
    base = an.base.params
    shown = {}
    for k, v in base.items():
        if op.params[k].kind != "int":
            continue
        try:
            moved = _names_at(op, {**base, k: v + 1}, outputs)
        except Exception:  # noqa: BLE001  (a value the op refuses: the names do not move with it here)
            continue
        if moved != _names_at(op, base, outputs):
            shown[k] = v
    if not shown:
        return ""
    return (
        " (they depend on the parameters; shown for "
        + ", ".join(_lit(f"{k}={shown_value(v)}") for k, v in shown.items())
        + ")"
    )


def _not_evaluated(an: Analysis) -> str:
    """Why the op could not be built at sample parameters, for the reader."""
    m = re.fullmatch(r"'(\w+)'", an.error)
    if m:  # a KeyError: a node attribute the op's creator attaches (a loop's subgraphs, a custom op's state)
        return f"its nodes carry {_lit(m.group(1))}, which only its own front end creates"
    return "its own front end builds its nodes; at sample parameters: " + _escape(an.error)


def _gradient_field(op: OpDef, an: Analysis) -> str:
    ev = an.base
    if op.gradient is None:
        return "none: " + _escape(op.grad_undefined_reason or "the op has no gradient rule") + "."
    if ev is None:
        return "defined by its rule (the op was not evaluated here: " + _not_evaluated(an) + ")."
    if not ev.inputs:
        return "none: the op has no inputs."
    if ev.grad_error:
        return "none: " + _escape(ev.grad_error) + "."
    assert ev.grad_inputs is not None
    text = "reaches " + _names(ev.grad_inputs) if ev.grad_inputs else "no input (every input's gradient is None)"
    rest = [n for n in ev.inputs if n not in ev.grad_inputs]
    if rest:
        declared = [n for n in rest if n in op.no_grad_inputs]
        other = [n for n in rest if n not in op.no_grad_inputs]
        if declared:
            text += "; none for " + _names(declared) + " (declared in " + _lit("no_grad_inputs") + ")"
        if other:
            text += "; none for " + _names(other) + " (the rule returns None)"
    if ev.aux:
        text += "; auxiliary states are never differentiated"
    for setting, names in _vary(an, lambda e: e.grad_inputs):
        if names is not None:
            text += f"; with {setting}: reaches {_names(names)}"
    return text + "."


def second_order(op: OpDef, an: Analysis) -> tuple[str, str]:
    """``(verdict, explanation)``: verdict ``yes``, ``no``, ``partly`` (some parameter settings), or
    ``n/a`` (no first-order gradient)."""

    def why(opaque: list[str]) -> str:
        ops = list_ops()
        reasons = [
            f"{_lit(o)}, which has no gradient rule"
            + (f" ({_escape(ops[o].grad_undefined_reason)})" if ops[o].grad_undefined_reason else "")
            for o in opaque
        ]
        return "; ".join(reasons)

    ev = an.base
    if op.gradient is None or (ev is not None and (not ev.inputs or ev.grad_error or not ev.grad_inputs)):
        return "n/a", "no first-order gradient."
    if ev is None:
        opaque = opaque_by_code(op)
        if opaque:
            return "no", "the rule emits " + why(opaque) + "."
        return "yes", "the rule is written with ops that have gradient rules."
    settings = [(s, o) for s, o in _vary(an, lambda e: e.opaque) if _variant_has_grad(an, s)]
    if ev.opaque:
        text = "the gradient goes through " + why(ev.opaque)
        fine = [s for s, o in settings if not o]
        if fine:
            return "partly", text + "; it works with " + ", ".join(fine) + "."
        return "no", text + "."
    used = ev.gradient_ops
    text = (
        "the gradient is built from "
        + _names(used[:12])
        + (", ..." if len(used) > 12 else "")
        + ", each with a gradient rule"
    )
    broken = [(s, o) for s, o in settings if o]
    if broken:
        return "partly", text + "; not with " + "; ".join(f"{s}: it goes through {why(o)}" for s, o in broken) + "."
    return "yes", text + "."


def _variant_has_grad(an: Analysis, setting: str) -> bool:
    """Whether the variant named ``setting`` built a first-order gradient."""
    assert an.base is not None
    for ev in an.variants:
        if ev.setting == setting:
            return bool(ev.grad_inputs)
    return False


def _dtype_field(op: OpDef, an: Analysis) -> str:
    if an.base is None:
        return "set by the node (not evaluated here: " + _not_evaluated(an) + ")."
    got = accepted_dtypes(op, an.base.params)
    if got is None and not (an.base.inputs or an.base.aux):
        return "set by the consumers or the node (the op has no input and no ``dtype`` parameter to probe)."
    if got is None:
        return "not probed: the op's dtype rule needs the dtypes of all its inputs."
    what, names = got
    if what == "input":
        subject = "input " + _lit(an.base.inputs[0]) if an.base.inputs else "auxiliary " + _lit(an.base.aux[0])
    else:
        subject = "parameter " + _lit("dtype")
    return f"{subject}: {', '.join(names) or 'none of ' + ', '.join(PROBED_DTYPES)} (declared: the op's dtype rule)."


def _param_table(op: OpDef) -> list[str]:
    params = params_of(op)
    if not params:
        return []
    out = [
        ".. list-table:: Parameters",
        "   :header-rows: 1",
        "   :widths: 20 25 15 40",
        "",
        "   * - name",
        "     - type",
        "     - default",
        "     - notes",
    ]
    for p in params:
        kind = _KINDS.get(p.kind, p.kind) + (" or None" if p.optional else "")
        notes = []
        if p.choices:
            notes.append("one of " + ", ".join(_lit(repr(c)) for c in p.choices))
        if p.doc:
            notes.append(_escape(p.doc))
        if p.name == op.variadic:
            notes.append("the number of inputs")
        out += [
            f"   * - {_lit(p.name)}",
            f"     - {kind}",
            f"     - {'**required**' if p.required else _lit(p.default)}",
            f"     - {'; '.join(notes) if notes else ''}".rstrip(),
        ]
    return out


def _literal_block(note: SourceNote) -> list[str]:
    body = [("   " + line).rstrip() for line in note.lines]
    # a plain literal block: the page sets ``.. highlight:: none`` (a code-block directive per block costs a
    # third of the reference's build time)
    return [f"From {_lit(note.where)}::", ""] + body + [""]


def entry_rst(name: str) -> str:
    """The reference entry of one canonical op name (its aliases included), as reStructuredText."""
    op = registered_ops()[name]
    an = analysis_of(name)
    aliases = aliases_of(op)
    lines = [f".. operator:: {signature(name, op, an)}"]
    if aliases:
        lines.append(f"   :aliases: {' '.join(aliases)}")
    lines.append("")
    body: list[str] = []
    if op.doc:
        body += [_escape(op.doc), ""]
    fields = []
    if aliases:
        fields.append(("Aliases", ", ".join(f":op:`{a}`" for a in aliases) + " (the same operator)"))
    ev = an.base
    if ev is not None:
        fields.append(("Inputs", _conditional(ev.inputs, an, lambda e: e.inputs) + _sample_note(op, an)))
        if ev.aux:
            fields.append(("Auxiliary states", _names(ev.aux) + (" (updated in training)" if op.mutates_aux else "")))
        fields.append(("Outputs", _outputs_field(ev, an) + _sample_note(op, an, outputs=True)))
    else:
        fields.append(
            (
                "Inputs",
                _names(_static_inputs(op))
                if op.fixed_input_names()
                else "set by the node (not evaluated here: " + _not_evaluated(an) + ")",
            )
        )
    fields.append(("Dtypes", _dtype_field(op, an)))
    fields.append(("Gradient", _gradient_field(op, an)))
    verdict, why = second_order(op, an)
    fields.append(("Second order", f"**{verdict}**: {why}"))
    if _loss_head(op, ev):
        fields.append(
            (
                "Loss head",
                "its backward ignores the head gradient; "
                + (
                    "the numeric checkers differentiate its implied loss."
                    if op.implied_loss
                    else "the numeric checkers refuse to differentiate through it."
                ),
            )
        )
    if op.decisions is not None:
        fields.append(
            (
                "Decisions",
                "declared ("
                + _lit("OpDef.decisions")
                + "); "
                + (
                    "pinnable: " + _lit("OpDef.pinned") + " evaluates the recorded piece."
                    if op.pinned
                    else "not pinnable (no " + _lit("OpDef.pinned") + ")."
                ),
            )
        )
    else:
        fields.append(("Decisions", "none declared."))
    flags = []
    if op.is_random:
        flags.append("a sampling op (the numeric checkers refuse symbols holding one)")
    if op.needs_is_train:
        flags.append("behaves differently in training (" + _lit("is_train") + ")")
    if flags:
        fields.append(("Notes", "; ".join(flags) + "."))
    body += [f":{k}: {v}" for k, v in fields] + [""]
    table = _param_table(op)
    if table:
        body += table + [""]
    for dnote in decision_note(op):
        body += ["Decision rule. " + _literal_block(dnote)[0]] + _literal_block(dnote)[1:]
    notes = derivation(op)
    if notes:
        for k, dnote in enumerate(notes):
            block = _literal_block(dnote)
            body += [("Derivation. " if k == 0 else "") + block[0]] + block[1:]
    lines += [("   " + b).rstrip() for b in body]
    return "\n".join(lines) + "\n"


def _loss_head(op: OpDef, ev: Evaluation | None) -> bool:
    if not callable(op.is_loss):
        return bool(op.is_loss)
    return ev is not None and op.loss_head(op.parse_params(dict(ev.params), op.name))


def family_ops(module: str) -> list[str]:
    """The canonical names a family module registers, in registration order."""
    return [name for name, op in canonical_ops().items() if family_of(op) == module]


def family_title(module: str) -> str:
    return family_name(module).replace("_", " ")


def family_rst(module: str) -> str:
    """The reference page of one family."""
    mod = importlib.import_module(module)
    path = _source_path(mod).relative_to(REPO).as_posix()
    title = family_title(module)
    names = family_ops(module)
    count = sum(1 + len(aliases_of(registered_ops()[n])) for n in names)
    doc = (inspect.getdoc(mod) or "").split("\n\n")[0].replace("\n", " ")
    lines = [
        ".. This page is generated from symgrad's op registry by docs/_ext/symgrad_opref.py: do not edit.",
        "",
        ".. highlight:: none",
        "",
        title,
        "=" * len(title),
        "",
        f"{len(names)} operators under {count} names, registered by {_lit(path)}.",
        "",
    ]
    if doc:
        lines += ["From its docstring: " + _escape(doc), ""]
    for name in names:
        lines.append(entry_rst(name))
    return "\n".join(lines)


def families() -> list[str]:
    """The family modules that register at least one operator."""
    used = {family_of(op) for op in canonical_ops().values()}
    return [m for m in family_modules() if m in used]


def names_rst(folder: str = "operators/_generated") -> str:
    """The alphabetical list of every registered name, for the index page (``.. include::``); ``folder``: where
    the family pages are, from the source folder."""
    ops = registered_ops()
    lines = [
        ".. list-table::",
        "   :header-rows: 1",
        "   :widths: 40 20 40",
        "",
        "   * - name",
        "     - family",
        "     - alias of",
    ]
    for name in sorted(ops, key=lambda n: (n.lstrip("_").lower(), n)):
        op = ops[name]
        fam = family_name(family_of(op))
        lines += [
            f"   * - :op:`{name}`",
            f"     - :doc:`{fam} </{folder}/{fam}>`",
            f"     - {':op:`' + op.name + '`' if op.name != name else ''}".rstrip(),
        ]
    return "\n".join(lines) + "\n"


def generated_files(folder: str = "operators/_generated") -> dict[str, str]:
    """``{file name: content}`` of ``docs/<folder>``: one page per family and the name table."""
    files = {f"{family_name(m)}.rst": family_rst(m) for m in families()}
    files["names.inc"] = names_rst(folder)
    return files


def write_generated(srcdir: Path, folder: str = "operators/_generated") -> list[str]:
    """Write ``generated_files()`` into ``srcdir/folder``; a file whose content is unchanged keeps its time
    stamp (Sphinx then does not read it again), files no longer generated are removed. Returns the names
    written."""
    files = generated_files(folder)
    folder_path = Path(srcdir) / folder
    folder_path.mkdir(parents=True, exist_ok=True)
    written = []
    for fname, text in files.items():
        path = folder_path / fname
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            # whole or not at all: a build running beside this one never reads half a page
            part = path.with_name(f".{fname}.{os.getpid()}.part")
            part.write_text(text, encoding="utf-8")
            os.replace(part, path)
            written.append(fname)
    for stale in folder_path.iterdir():
        if stale.name not in files and stale.is_file():
            stale.unlink()
    return written


# -- Sphinx ---------------------------------------------------------------------------------------------


def setup(app):
    """Register the ``operator`` object type (``.. operator::`` directive, ``:op:`` role) and write the
    generated pages at ``builder-inited``."""
    from docutils.parsers.rst import directives
    from sphinx import addnodes
    from sphinx.directives import ObjectDescription

    class OperatorDirective(ObjectDescription):
        """``.. operator:: Name(inputs..., params...)`` with ``:aliases:``; every name gets the id
        ``op-<name>`` (case kept) and an entry in the std domain for ``:op:``."""

        option_spec = {**ObjectDescription.option_spec, "aliases": directives.unchanged}

        def handle_signature(self, sig, signode):
            name, _, rest = sig.partition("(")
            signode += addnodes.desc_name(name, name)
            params = addnodes.desc_parameterlist()
            for part in _split_top(rest[:-1] if rest.endswith(")") else rest):
                params += addnodes.desc_parameter(part, part)
            signode += params
            signode["_toc_name"] = name
            return name

        def add_target_and_index(self, name, sig, signode):
            std = self.env.domains.standard_domain
            for n in [name, *self.options.get("aliases", "").split()]:
                node_id = anchor(n)
                if node_id not in self.state.document.ids:
                    signode["ids"].append(node_id)
                    self.state.document.note_explicit_target(signode)
                std.note_object("operator", n, node_id, location=signode)
                self.indexnode["entries"].append(("single", f"{n} (operator)", node_id, "", None))

        def _object_hierarchy_parts(self, sig_node):
            return (sig_node.get("_toc_name", ""),)

        def _toc_entry_name(self, sig_node):
            return sig_node.get("_toc_name", "")

    app.add_object_type("operator", "op", objname="operator")
    app.add_directive_to_domain("std", "operator", OperatorDirective, override=True)
    # where the pages go, relative to the source folder ("": write none, as a test site that holds a few
    # entries of its own)
    app.add_config_value("symgrad_opref_folder", "operators/_generated", "env", types=(str,))
    app.connect("builder-inited", _write_pages)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}


def _split_top(text: str) -> list[str]:
    """``a, b=(1, 2), c`` split at its top-level commas."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def _write_pages(app) -> None:
    if app.config.symgrad_opref_folder:
        write_generated(Path(app.srcdir), app.config.symgrad_opref_folder.strip("/"))
