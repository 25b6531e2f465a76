"""The report you can look at: a ``ModelCheckResult`` as one self-contained HTML page.

``render(result)`` builds the page in named phases: the header (model, dtype, mode, seed, verdict, time and the
command that reproduces the check), the error of every argument against its tolerance (a bar chart on a log
scale), each failing argument's worst elements (analytic against numeric, with the diagonal), the faulty nodes,
what was pinned and what the kink test judged, the model's graph with the faulty nodes highlighted, and the
table of every argument. Everything is inline (CSS and SVG, no script, no font, no URL): the file opens offline.
Every string that comes from the model (argument and node names can hold ``<`` or ``&``) is escaped.
"""

from __future__ import annotations

import datetime
import html
import math
import shlex
from typing import Any, TypeAlias

from .report import few
from .ties import moved_note

#: ``test_utils.model_check.ModelCheckResult``: not imported, not even for the type checker (model_check imports
#: this module for ``to_html``, and an import back would close a circle: tests/test_layers.py)
ModelCheckResult: TypeAlias = Any

__all__ = ["render"]

#: graphs with more op nodes are drawn only around the faulty nodes and the failing arguments' consumers
GRAPH_MAX_OPS = 80
#: at most this many hops (in either direction) around those nodes, fewer where more would exceed ``GRAPH_MAX_OPS``
GRAPH_HOPS = 12
#: layers per column of the graph drawing (a long chain is wrapped into side-by-side columns)
LAYERS_PER_COLUMN = 16

PASS, FAIL, NONE, SKIP = "#1a7f37", "#cf222e", "#6e7781", "#a4adb6"
#: the colour of each verdict: pass green, FAIL red, no verdict grey, not checked light grey
COLOURS = {"pass": PASS, "FAIL": FAIL, "unsettled": NONE, "imprecise": NONE, "skip": SKIP, "not checked": SKIP}

CSS = """
:root { --pass: #1a7f37; --fail: #cf222e; --none: #6e7781; --skip: #a4adb6; --ink: #1f2328; --muted: #59636e;
  --line: #d1d9e0; --panel: #f6f8fa; }
* { box-sizing: border-box; }
body { margin: 0; background: #fff; color: var(--ink);
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1160px; margin: 0 auto; padding: 24px 28px 56px; }
h1 { font-size: 24px; margin: 0 0 12px; word-break: break-all; }
h2 { font-size: 19px; margin: 34px 0 10px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
h3 { font-size: 16px; margin: 0 0 6px; word-break: break-all; }
p { margin: 6px 0; }
.muted { color: var(--muted); }
.banner { padding: 10px 16px; border-radius: 6px; color: #fff; font-weight: 600; font-size: 16px; }
.banner.pass { background: var(--pass); } .banner.fail { background: var(--fail); }
.banner.none { background: var(--none); }
dl.meta { display: grid; grid-template-columns: max-content minmax(0, 1fr) max-content minmax(0, 1fr);
  gap: 2px 18px; margin: 14px 0; }
.label { color: var(--muted); margin: 10px 0 0; }
details summary { color: var(--muted); cursor: pointer; }
dl.meta dt { color: var(--muted); } dl.meta dd { margin: 0; word-break: break-all; }
pre, code { font: 13px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace; }
pre { background: var(--panel); border: 1px solid var(--line); border-radius: 6px; padding: 10px 12px;
  overflow-x: auto; margin: 6px 0 10px; white-space: pre-wrap; word-break: break-all; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { padding: 4px 8px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
th { background: var(--panel); font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.name { word-break: break-all; font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.pill { display: inline-block; padding: 0 8px; border-radius: 10px; color: #fff; font-size: 12px;
  font-weight: 600; white-space: nowrap; }
.card { border: 1px solid var(--line); border-left: 5px solid var(--fail); border-radius: 6px;
  padding: 12px 16px; margin: 14px 0; display: flex; gap: 24px; flex-wrap: wrap; }
.card .text { flex: 1 1 380px; min-width: 0; }
.fault { border-left-color: var(--fail); background: #fff8f7; display: block; }
.scroll { overflow-x: auto; }
svg { font-family: inherit; }
svg text { fill: var(--ink); }
ul { margin: 4px 0; padding-left: 22px; }
.legend span { margin-right: 16px; white-space: nowrap; }
.swatch { display: inline-block; width: 11px; height: 11px; border-radius: 2px; margin-right: 5px;
  vertical-align: -1px; }
"""


def render(result: ModelCheckResult) -> str:
    """The page of ``result`` (what ``ModelCheckResult.to_html`` writes)."""
    failed = [r for r in result.rows if r["verdict"] == "FAIL"]
    body = [
        _header(result),
        _faults(result),
        _bars_section(result.rows),
        _failing_section(failed),
        _graph_section(result, failed),
        _pinning_section(result),
        _table_section(result.rows),
    ]
    title = _e(f"symgrad check: {result.label}")
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">\n<title>{title}</title>\n'
        f"<style>{CSS}</style>\n</head>\n<body>\n<main>\n"
        + "\n".join(b for b in body if b)
        + "\n</main>\n</body>\n</html>\n"
    )


# == small helpers ==============================================================================================


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _num(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    v = float(v)
    if not math.isfinite(v):
        return str(v)
    return f"{v:.{digits}g}"


def _pill(verdict: str) -> str:
    return f'<span class="pill" style="background:{COLOURS.get(verdict, NONE)}">{_e(verdict)}</span>'


def _shape(shape: Any) -> str:
    return "x".join(map(str, shape)) or "scalar"


def _index(index: Any) -> str:
    if isinstance(index, (list, tuple)):
        return "(" + ", ".join(str(int(i)) for i in index) + ("," if len(index) == 1 else "") + ")"
    return str(index)


def _few(names: list, k: int = 12) -> str:
    return _e(few(names, k))


# == the header: what was checked, the verdict, how to reproduce it =============================================


def _header(result: ModelCheckResult) -> str:
    c = result.counts()
    tone = "fail" if c["FAIL"] else "pass" if result.ok else "none"
    h = result.header
    meta = [
        ("model", result.label),
        ("dtype", f"{result.dtype} (numeric reference: float64)"),
        ("mode", result.mode + (f", {h['samples']} samples per argument" if h.get("samples") else "")),
        ("seed", result.seed),
        ("device", h.get("ctx")),
        ("spread over", h.get("executor")),
        ("time", f"{result.seconds:.1f} s (report written {_now()})"),
    ]
    notes = []
    if h.get("given"):
        notes.append(f"values given for {len(h['given'])} input(s); the others are seeded random values")
    if h.get("ignored_params"):
        notes.append(f"not inputs of the model, ignored: {_few(h['ignored_params'], 6)}")
    if h.get("dropout_as_identity"):
        notes.append(f"Dropout checked as identity (p=0): {_few(h['dropout_as_identity'], 6)}")
    if h.get("moved_off_ties"):
        moved = h["moved_off_ties"]
        notes.append(_e(moved_note(moved["nodes"], few(moved["failed_at_given_point"], 6))))
    rows = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in meta if v is not None)
    note_html = "".join(f'<p class="muted">{n}</p>' for n in notes)
    return (
        f"<header>\n<h1>symgrad check: {_e(result.label)}</h1>\n"
        f'<div class="banner {tone}">{_e(result.summary())}</div>\n'
        f'<dl class="meta">{rows}</dl>\n{note_html}\n{_reproduce(result)}\n</header>'
    )


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _reproduce(result: ModelCheckResult) -> str:
    command = result.header.get("command")
    call, where = _python_call(result)
    if command:
        return (
            f'<p class="label">Reproduce with</p><pre>{_e(command)}</pre>\n<details><summary>the same check '
            f"from Python{where}</summary><pre>{_e(call)}</pre></details>"
        )
    return f'<p class="label">Reproduce with{where}</p><pre>{_e(call)}</pre>'


def _python_call(result: ModelCheckResult) -> tuple[str, str]:
    """``(check_model call, what its names stand for)``: the data inputs' shapes (the parameters' follow), the
    dtype, mode and seed, and the requests that are not ``write``."""
    label = result.label
    is_file = label.endswith(".json")
    model = repr(label) if is_file else "sym"
    where = f" (<code>sym</code>: the symbol checked, named {_e(repr(label))})" if not is_file else ""
    shapes = {r["name"]: tuple(r["shape"]) for r in result.rows if r.get("role") != "param"}
    parts = [model]
    if result.header.get("given"):
        parts.append("params")
        where += f" (<code>params</code>: the values given for {len(result.header['given'])} input(s))"
    parts.append(f"shapes={shapes!r}")
    parts += [f"dtype={result.dtype!r}", f"mode={result.mode!r}", f"seed={result.seed}"]
    if result.header.get("samples"):
        parts.append(f"samples={result.header['samples']}")
    reqs = {r["name"]: r["grad_req"] for r in result.rows if r["grad_req"] != "write" and r.get("role") != "index"}
    if reqs:
        parts.append(f"grad_req={reqs!r}")
    call = "check_model(" + ", ".join(parts) + ")"
    if is_file:
        args = ["symgrad", "check", label] + [f"--shape={k}={','.join(map(str, v))}" for k, v in shapes.items()]
        args += [f"--dtype={result.dtype}", f"--mode={result.mode}", f"--seed={result.seed}"]
        if not result.header.get("command"):
            call += "\n# or, from the file's folder:\n" + shlex.join(args)
    return call, where


# == faults: the nodes named as wrong ===========================================================================


def _faults(result: ModelCheckResult) -> str:
    if result.faults:
        items = []
        for f in result.faults:
            kind = f"Custom op_type {f.op_type!r}" if f.op_type else f.op
            what = f.diagnosis or "its backward disagrees with its own forward"
            items.append(
                f'<div class="card fault"><h3>node {f.position}: {_e(f.name)} <span class="muted">({_e(kind)})'
                f"</span></h3><p>gradient of <b>{_few(list(f.inputs))}</b> wrong, {_num(f.worst_ratio)} x its "
                f"tolerance: {_e(what)}</p></div>"
            )
        return "<h2>Faulty node" + ("s" * (len(result.faults) > 1)) + "</h2>\n" + "\n".join(items)
    if result.failed and not result.partial:
        return (
            "<h2>Faulty node</h2><p>No single node's backward disagrees with its own forward at its recorded "
            "inputs: the error comes from how the nodes are connected or from an input the local checks cannot "
            "move.</p>"
        )
    return ""


# == per argument: the error against its tolerance (log scale) ==================================================


def _bars_section(rows: list) -> str:
    if not rows:
        return ""
    return (
        '<h2>Error against tolerance</h2>\n<p class="muted">Each argument\'s largest error divided by the error '
        "its tolerance allows (log scale): below the line at 1 it passes.</p>\n"
        f'<div class="scroll">{_bars(rows)}</div>\n{_legend()}'
    )


def _legend() -> str:
    items = [(PASS, "pass"), (FAIL, "FAIL"), (NONE, "no verdict (unsettled, imprecise)"), (SKIP, "skip, not checked")]
    spans = "".join(f'<span><i class="swatch" style="background:{c}"></i>{t}</span>' for c, t in items)
    return f'<p class="legend muted">{spans}</p>'


def _log_range(rows: list) -> tuple[float, float]:
    """Whole decades around the finite positive ratios, 1 (the tolerance) always inside."""
    vals = [float(r["worst_ratio"]) for r in rows if r["worst_ratio"] is not None]
    finite = [v for v in vals if math.isfinite(v) and v > 0]
    lo = min(finite, default=0.1)
    hi = max(finite, default=10.0)
    lo_exp = max(-12, min(-1, math.floor(math.log10(lo))))
    hi_exp = max(1, math.ceil(math.log10(hi)))
    return float(lo_exp), float(hi_exp)


def _bars(rows: list) -> str:
    label_w, plot_w, row_h, top = 230, 560, 20, 30
    x0 = label_w + 10
    lo, hi = _log_range(rows)
    x = lambda v: x0 + plot_w * (min(max(math.log10(v), lo), hi) - lo) / (hi - lo)
    height = top + row_h * len(rows) + 26
    width = x0 + plot_w + 110
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="error against tolerance per argument">'
    ]
    for d in range(int(lo), int(hi) + 1):
        xd = x(10.0**d)
        out.append(f'<line x1="{xd:.1f}" y1="{top - 6}" x2="{xd:.1f}" y2="{height - 8}" stroke="#eaeef2"/>')
        out.append(f'<text x="{xd:.1f}" y="{top - 12}" font-size="11" text-anchor="middle">{_decade(d)}</text>')
    for i, r in enumerate(rows):
        out.append(_bar(r, top + i * row_h, row_h, x0, x, label_w))
    x1 = x(1.0)
    out.append(
        f'<line x1="{x1:.1f}" y1="{top - 6}" x2="{x1:.1f}" y2="{height - 4}" stroke="#1f2328" stroke-width="1.5" '
        f'stroke-dasharray="5 3"/>'
    )
    out.append(f'<text x="{x1 + 4:.1f}" y="{height - 6}" font-size="11" style="fill:#59636e">tolerance</text>')
    out.append("</svg>")
    return "\n".join(out)


def _decade(d: int) -> str:
    return {-2: "0.01", -1: "0.1", 0: "1", 1: "10", 2: "100"}.get(d, f"1e{d}")


def _bar(r: dict, y: float, row_h: float, x0: float, x: Any, label_w: float) -> str:
    name = str(r["name"])
    short = name if len(name) <= 34 else name[:15] + "…" + name[-16:]
    colour = COLOURS.get(r["verdict"], NONE)
    ratio = r["worst_ratio"]
    tip = f"{name}: {r['verdict']}, err/tol {_num(ratio)}"
    out = [f"<g><title>{_e(tip)}</title>"]
    out.append(f'<text x="{label_w}" y="{y + row_h * 0.7:.1f}" font-size="12" text-anchor="end">{_e(short)}</text>')
    if ratio is None:
        out.append(
            f'<text x="{x0 + 4}" y="{y + row_h * 0.7:.1f}" font-size="11" fill="{colour}" '
            f'style="fill:{colour}">{_e(r["verdict"])}</text>'
        )
    else:
        v = float(ratio)
        end = x(v) if math.isfinite(v) and v > 0 else (x0 if v == 0 else x(1e300))
        out.append(
            f'<rect x="{x0}" y="{y + 3}" width="{max(end - x0, 1.5):.1f}" height="{row_h - 6}" rx="2" fill="{colour}"/>'
        )
        out.append(f'<text x="{end + 5:.1f}" y="{y + row_h * 0.7:.1f}" font-size="11">{_e(_num(v, 2))}</text>')
    out.append("</g>")
    return "".join(out)


# == failing arguments: analytic against numeric ================================================================


def _failing_section(failed: list) -> str:
    if not failed:
        return ""
    order = sorted(failed, key=lambda r: -(r["worst_ratio"] if r["worst_ratio"] is not None else 0.0))
    return "<h2>Failing arguments</h2>\n" + "\n".join(_failing_card(r) for r in order)


def _failing_card(r: dict) -> str:
    lines = [
        f'<h3>{_e(r["name"])} <span class="muted">shape {_e(_shape(r["shape"]))} · {_e(r["role"])} · '
        f"grad_req {_e(r['grad_req'])}</span></h3>"
    ]
    lines.append(
        f"<p>error {_num(r['max_error'])}, {_num(r['worst_ratio'])} x its tolerance; {_e(r['method'] or '')}"
        + (f"; {int(r['mismatches'])} element(s) off" if r.get("mismatches") else "")
        + "</p>"
    )
    if r["diagnosis"]:
        lines.append(f"<p><b>Diagnosis:</b> {_e(r['diagnosis'])}</p>")
    if r["notes"]:
        lines.append("<ul>" + "".join(f"<li>{_e(n)}</li>" for n in r["notes"]) + "</ul>")
    worst = list(r["worst"] or [])
    if worst:
        lines.append(_worst_table(worst))
        plot = _scatter(worst, str(r["name"]))
    else:
        plot = ""
        lines.append('<p class="muted">No element-by-element comparison for this argument (see the notes).</p>')
    return f'<div class="card"><div class="text">{"".join(lines)}</div>{plot}</div>'


def _worst_table(worst: list) -> str:
    head = "<tr><th>element</th><th>analytic</th><th>numeric</th><th>analytic / numeric</th></tr>"
    body = []
    for index, a, n in worst:
        ratio = f"{a / n:.4g}" if n else "-"
        body.append(
            f'<tr><td class="name">{_e(_index(index))}</td><td class="num">{_num(a, 6)}</td>'
            f'<td class="num">{_num(n, 6)}</td><td class="num">{_e(ratio)}</td></tr>'
        )
    return f"<table>{head}{''.join(body)}</table>"


def _scatter(worst: list, name: str) -> str:
    size, pad, top = 300, 46, 26
    pts = [(float(n), float(a), _index(i)) for i, a, n in worst if math.isfinite(float(a)) and math.isfinite(float(n))]
    if not pts:
        return ""
    vals = [v for p in pts for v in p[:2]]
    lo, hi = min(vals), max(vals)
    span = hi - lo or max(abs(hi), 1.0) * 0.2
    lo, hi = lo - 0.08 * span, hi + 0.08 * span
    inner = size - pad - 12
    sx = lambda v: pad + inner * (v - lo) / (hi - lo)
    sy = lambda v: top + inner * (hi - v) / (hi - lo)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{size}" height="{size + top - 12}" role="img" '
        f'aria-label="{_e("analytic against numeric for " + name)}">',
        f'<text x="{pad}" y="14" font-size="11" style="fill:#59636e">dashed: y = x (analytic = numeric)</text>',
        f'<rect x="{pad}" y="{top}" width="{inner}" height="{inner}" fill="#fbfcfd" stroke="#d1d9e0"/>',
    ]
    for t in _ticks(lo, hi):
        out.append(f'<text x="{sx(t):.1f}" y="{top + inner + 14}" font-size="10" text-anchor="middle">{t:.3g}</text>')
        out.append(f'<text x="{pad - 4}" y="{sy(t) + 3:.1f}" font-size="10" text-anchor="end">{t:.3g}</text>')
    out.append(
        f'<line x1="{sx(lo):.1f}" y1="{sy(lo):.1f}" x2="{sx(hi):.1f}" y2="{sy(hi):.1f}" stroke="#8c959f" '
        'stroke-dasharray="4 3"/>'
    )
    for n, a, idx in pts:
        tip = f"{name}{idx}: analytic {a:.6g}, numeric {n:.6g}"
        out.append(
            f'<circle cx="{sx(n):.1f}" cy="{sy(a):.1f}" r="4.5" fill="{FAIL}" fill-opacity="0.85" stroke="#fff">'
            f"<title>{_e(tip)}</title></circle>"
        )
    out.append(
        f'<text x="{pad + inner / 2:.1f}" y="{size + top - 16}" font-size="11" text-anchor="middle">numeric '
        "(float64 difference)</text>"
    )
    out.append(
        f'<text transform="translate(11 {top + inner / 2:.1f}) rotate(-90)" font-size="11" '
        'text-anchor="middle">analytic (backward)</text>'
    )
    out.append("</svg>")
    return "\n".join(out)


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(n + 2) if first + i * step <= hi + 1e-12 * abs(hi)]


# == pinning, kinks =============================================================================================


def _pinning_section(result: ModelCheckResult) -> str:
    p = result.pinning
    items = []
    if p is not None:
        if p.pinned:
            items.append(
                f"The numeric side ran on the forward's pieces: {len(p.pinned)} decision node(s) pinned "
                f"({_few(list(p.pinned))})."
            )
        else:
            items.append("No decision node to pin (ReLU masks, max-pool windows, clip bounds and the like).")
        if p.opaque:
            items.append(f"Opaque Custom node(s), judged by the kink test: {_few(list(p.opaque))}.")
        if p.unpinnable:
            items.append(f"Decision node(s) not pinned, judged by the kink test: {_few(list(p.unpinnable))}.")
        if not p.opaque and not p.unpinnable:
            items.append("Nothing was left for the kink test: every difference ran on one smooth piece.")
    else:
        items.append("Pinning not recorded (the check stopped before its analytic pass, or ran in full mode).")
    for r in result.rows:
        for note in r["notes"]:
            if "kink" in note or "non-differentiable" in note:
                items.append(f"{_e(r['name'])}: {_e(note)}")
    return "<h2>Pinning and kinks</h2>\n<ul>" + "".join(f"<li>{i}</li>" for i in items) + "</ul>"


# == the table of every argument ================================================================================


def _table_section(rows: list) -> str:
    head = ("argument", "shape", "req", "checked", "max |error|", "err/tol", "verdict", "diagnosis and notes")
    body = []
    for r in rows:
        method = r["method"] or ""
        if r["verdict"] in ("skip", "not checked"):
            checked = "-"
        elif method.startswith("direction"):
            checked = f"dir/{r['size']}"
        else:
            checked = f"{r['checked']}/{r['size']}"
        notes = "; ".join(([r["diagnosis"]] if r["diagnosis"] else []) + list(r["notes"]))
        cells = [
            f'<td class="name">{_e(r["name"])}</td>',
            f"<td>{_e(_shape(r['shape']))}</td>",
            f"<td>{_e(r['grad_req'])}</td>",
            f'<td class="num">{_e(checked)}</td>',
            f'<td class="num">{_e(_num(r["max_error"]))}</td>',
            f'<td class="num">{_e(_num(r["worst_ratio"], 2))}</td>',
            f"<td>{_pill(r['verdict'])}</td>",
            f"<td>{_e(notes)}</td>",
        ]
        body.append("<tr>" + "".join(cells) + "</tr>")
    header = "<tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"
    return f'<h2>Every argument</h2>\n<div class="scroll"><table>{header}\n' + "\n".join(body) + "</table></div>"


# == the graph ==================================================================================================


def _graph_section(result: ModelCheckResult, failed: list) -> str:
    graph = result.graph
    if not graph:
        return ""
    ops = [i for i, n in enumerate(graph["nodes"]) if n["op"] is not None]
    faulty = {f.name for f in result.faults}
    failing = {r["name"] for r in failed}
    keep, note = _select(graph, ops, faulty, failing)
    out = ["<h2>Graph</h2>"]
    if note:
        out.append(f"<p>{note}</p>")
    if keep:
        rows = {r["name"]: r for r in result.rows}
        out.append(f'<div class="scroll">{_draw(graph, keep, faulty, rows)}</div>')
        legend = [("#ffebe9", FAIL, "faulty node")] if faulty else []
        legend.append(("#f6f8fa", "#8c959f", "op node"))
        spans = "".join(
            f'<span><i class="swatch" style="background:{f};border:1.5px solid {s}"></i>{t}</span>'
            for f, s, t in legend
        )
        out.append(
            f'<p class="legend muted">{spans}<span>dots on a node: its argument inputs, coloured by verdict '
            "(hover for the name)</span></p>"
        )
    return "\n".join(out)


def _op_edges(graph: dict) -> list[tuple[int, int]]:
    nodes = graph["nodes"]
    edges = []
    for j, n in enumerate(nodes):
        for i in dict.fromkeys(n["inputs"]):
            if nodes[i]["op"] is not None:
                edges.append((i, j))
    return edges


def _select(graph: dict, ops: list, faulty: set, failing: set) -> tuple[list, str]:
    """``(op nodes to draw, a sentence saying what was left out)``: every op of a small graph; of a large one the
    widest neighbourhood (up to ``GRAPH_HOPS``) of the faulty nodes and the failing arguments' consumers that
    holds at most ``GRAPH_MAX_OPS`` nodes (of the faulty nodes alone where those consumers are too many)."""
    import networkx as nx

    if len(ops) <= GRAPH_MAX_OPS:
        return ops, ""
    nodes = graph["nodes"]
    g = nx.Graph()
    g.add_nodes_from(ops)
    g.add_edges_from(_op_edges(graph))
    at_fault = [i for i in ops if nodes[i]["name"] in faulty]
    consumers = [
        i for i in ops if any(nodes[k]["op"] is None and nodes[k]["name"] in failing for k in nodes[i]["inputs"])
    ]
    whole = f"The graph has {len(ops)} op nodes, too many to draw whole"
    for focus, what in (
        (
            at_fault + consumers,
            "the faulty node(s) and the failing arguments' consumers"
            if at_fault
            else "the failing arguments' consumers",
        ),
        (at_fault, "the faulty node(s)"),
    ):
        best = None
        for hops in range(GRAPH_HOPS + 1):
            keep: set = set()
            for i in focus:
                keep |= set(nx.single_source_shortest_path_length(g, i, cutoff=hops))
            if len(keep) > GRAPH_MAX_OPS:
                break
            best = hops, keep
        if focus and best is not None:
            hops, keep = best
            return sorted(keep), f"{whole}: shown are the {len(keep)} within {hops} hop(s) of {what}."
    if consumers:
        keep = set(consumers[:GRAPH_MAX_OPS])
        return sorted(keep), f"{whole}: shown are {len(keep)} of the failing arguments' {len(consumers)} consumers."
    return [], f"{whole}; it is drawn only around faulty nodes and failing arguments, and this check has none."


def _layers(graph: dict, keep: list) -> list[list[int]]:
    """Topological generations of the kept op nodes, each ordered by its predecessors' mean position."""
    import networkx as nx

    kept = set(keep)
    g = nx.DiGraph()
    g.add_nodes_from(keep)
    g.add_edges_from((i, j) for i, j in _op_edges(graph) if i in kept and j in kept)
    place: dict[int, float] = {}
    layers = []
    for generation in nx.topological_generations(g):
        preds = {i: [place[p] for p in g.predecessors(i)] for i in generation}
        layer = sorted(generation, key=lambda i: (sum(preds[i]) / len(preds[i]) if preds[i] else -1.0, i))
        for k, i in enumerate(layer):
            place[i] = k
        layers.append(layer)
    return layers


NODE_W, NODE_H, LAYER_GAP, NODE_GAP, COLUMN_GAP, MARGIN = 200, 40, 24, 16, 56, 24


def _positions(layers: list) -> tuple[dict, dict, int, int, list]:
    """``({node: (x, y) of its box's top-left}, {node: column}, width, height, column right edges)``: the layers
    top to bottom, wrapped into balanced columns of at most ``LAYERS_PER_COLUMN``."""
    n_cols = max(1, math.ceil(len(layers) / LAYERS_PER_COLUMN))
    per_col = math.ceil(len(layers) / n_cols) if layers else 1
    pos, column, x, rights = {}, {}, MARGIN, []
    for c in range(n_cols):
        col = layers[c * per_col : (c + 1) * per_col]
        width = max((len(layer) for layer in col), default=1) * (NODE_W + NODE_GAP) - NODE_GAP
        for k, layer in enumerate(col):
            offset = (width - (len(layer) * (NODE_W + NODE_GAP) - NODE_GAP)) / 2
            for m, i in enumerate(layer):
                pos[i] = (x + offset + m * (NODE_W + NODE_GAP), MARGIN + k * (NODE_H + LAYER_GAP))
                column[i] = c
        rights.append(x + width)
        x += width + COLUMN_GAP
    height = MARGIN * 2 + per_col * (NODE_H + LAYER_GAP) - LAYER_GAP
    return pos, column, int(x - COLUMN_GAP + MARGIN), int(height), rights


def _draw(graph: dict, keep: list, faulty: set, rows: dict) -> str:
    layers = _layers(graph, keep)
    pos, column, width, height, rights = _positions(layers)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        'aria-label="the model graph">',
        '<defs><marker id="sg-arrow" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" markerHeight="7" '
        'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#8c959f"/></marker></defs>',
    ]
    kept = set(keep)
    for i, j in _op_edges(graph):
        if i in kept and j in kept:
            out.append(_edge(pos[i], pos[j], column[i], column[j], rights))
    for i in keep:
        out.append(_node(graph, i, pos[i], graph["nodes"][i]["name"] in faulty, rows))
    out.append("</svg>")
    return "\n".join(out)


def _edge(src: tuple, dst: tuple, c_src: int, c_dst: int, rights: list) -> str:
    (sx, sy), (tx, ty) = src, dst
    style = 'fill="none" stroke="#8c959f" stroke-width="1.2" marker-end="url(#sg-arrow)"'
    if c_src == c_dst:
        x1, y1, x2, y2 = sx + NODE_W / 2, sy + NODE_H, tx + NODE_W / 2, ty
        if y2 - y1 <= LAYER_GAP + 1:  # adjacent layers
            mid = (y1 + y2) / 2
            return f'<path d="M{x1:.1f},{y1:.1f} C{x1:.1f},{mid:.1f} {x2:.1f},{mid:.1f} {x2:.1f},{y2:.1f}" {style}/>'
        # a skip over layers: bow out to the right of the boxes in between
        bow = max(x1, x2) + NODE_W * 0.62
        d = f"M{sx + NODE_W:.1f},{sy + NODE_H / 2:.1f} C{bow:.1f},{sy + NODE_H / 2:.1f} {bow:.1f},"
        d += f"{ty + NODE_H / 2:.1f} {tx + NODE_W:.1f},{ty + NODE_H / 2:.1f}"
        return f'<path d="{d}" {style}/>'
    # to a later column: out of the right side, along the gutter before the target's column, into its left side
    gutter = rights[c_dst - 1] + COLUMN_GAP / 2
    y1, y2 = sy + NODE_H / 2, ty + NODE_H / 2
    points = [(sx + NODE_W, y1), (gutter, y1), (gutter, y2), (tx, y2)]
    return f'<polyline points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in points)}" {style}/>'


def _node(graph: dict, i: int, xy: tuple, is_faulty: bool, rows: dict) -> str:
    node = graph["nodes"][i]
    x, y = xy
    name, op = str(node["name"]), str(node["op"])
    kind = f"Custom: {node['op_type']}" if node.get("op_type") else op
    fill, stroke, sw = ("#ffebe9", FAIL, 2.5) if is_faulty else ("#f6f8fa", "#8c959f", 1)
    args = [graph["nodes"][k]["name"] for k in dict.fromkeys(node["inputs"]) if graph["nodes"][k]["op"] is None]
    args = [a for a in args if a in rows]
    tip = f"{name} ({kind})" + (" - faulty node" if is_faulty else "")
    tip += "".join(f"\n{a}: {rows[a]['verdict']}" for a in args)
    out = [f"<g><title>{_e(tip)}</title>"]
    out.append(
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{NODE_W}" height="{NODE_H}" rx="6" fill="{fill}" stroke="{stroke}" '
        f'stroke-width="{sw}"/>'
    )
    weight = ' font-weight="700"' if is_faulty else ""
    out.append(f'<text x="{x + 8:.1f}" y="{y + 15:.1f}" font-size="11.5"{weight}>{_e(_clip(name, 29))}</text>')
    out.append(
        f'<text x="{x + 8:.1f}" y="{y + 31:.1f}" font-size="10.5" style="fill:#59636e">{_e(_clip(kind, 32))}</text>'
    )
    for k, a in enumerate(args[:7]):  # input ports on the top edge, right of where the edges arrive
        cx = x + NODE_W - 12 - 11 * k
        colour = COLOURS.get(rows[a]["verdict"], NONE)
        out.append(
            f'<circle cx="{cx:.1f}" cy="{y:.1f}" r="4.5" fill="{colour}" stroke="#fff" stroke-width="1.5">'
            f"<title>{_e(a)}: {_e(rows[a]['verdict'])}</title></circle>"
        )
    out.append("</g>")
    return "".join(out)


def _clip(text: str, n: int) -> str:
    """``text`` in at most ``n`` characters, cut in the middle (a name's end tells layers apart)."""
    if len(text) <= n:
        return text
    head = (n - 1) // 2
    return text[:head] + "…" + text[len(text) - (n - 1 - head) :]
