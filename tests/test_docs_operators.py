"""The operator reference (docs/_ext/symgrad_opref.py, docs/operators/): generated from the op registry.

- every name symgrad registers has one entry (an alias on its operator's entry) and its own anchor
  ``op-<name>`` in the built pages, checked against the registry and against the test suite's own lists
  (the operator table ``tests/op_db_*.py``, MXNet 1.9.1's registry less ``tests/mxnet_missing_ops.py``);
- fields of well-known operators agree with facts written here from MXNet's documentation;
- the second-order verdict agrees with ``symgrad.grad`` of the gradient for every operator, and with numeric
  second-order checks (``gradgradcheck``) on operators of different kinds;
- the declared dtypes cover the dtypes the operator table proves; each derivation quotes its source.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mxnet_missing_ops import GROUPS, OPS
from op_db import OPS as TABLE

import symgrad as sg
from symgrad.opdef import list_ops
from symgrad.test_utils import gradgradcheck

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "_ext"))
import symgrad_opref as opref  # noqa: E402  (docs/_ext is no package)

S = sg.sym
MXNET = json.loads((Path(__file__).parent / "fixtures" / "mxnet_operators.json").read_text())["operators"]
SYMGRAD_NAMES = {name for name, op in list_ops().items() if op.forward.__module__.startswith("symgrad.")}


# -- reading the generated reStructuredText (independent of the generator's helpers) ----------------------

ENTRY = re.compile(r"^\.\. operator:: (?P<name>[^(]+)\((?P<sig>.*)\)$")
FIELD = re.compile(r"^   :(?P<key>[A-Z][\w ]*): (?P<value>.*)$")


class Entry:
    """One ``.. operator::`` block of a generated page: name, aliases, fields, parameter rows, text."""

    def __init__(self, name: str, lines: list[str]):
        self.name = name
        self.text = "\n".join(lines)
        self.aliases: list[str] = []
        self.fields: dict[str, str] = {}
        self.params: dict[str, tuple[str, str, str]] = {}  # name -> (type, default, notes)
        row: list[str] = []
        for line in lines:
            if line.startswith("   :aliases: "):
                self.aliases = line.split(": ", 1)[1].split()
            elif m := FIELD.match(line):
                self.fields[m["key"]] = m["value"]
            elif line.startswith("      * - ") or line.startswith("        - "):
                row.append(line.split("- ", 1)[1] if "- " in line else "")
                if len(row) == 4:
                    name_cell = row[0].strip("`")
                    if name_cell != "name":
                        self.params[name_cell] = (row[1], row[2], row[3])
                    row = []
            elif line.rstrip() == "        -":  # an empty notes cell
                row.append("")
                if len(row) == 4:
                    self.params[row[0].strip("`")] = (row[1], row[2], "")
                    row = []


def parse_entries(pages: dict[str, str]) -> dict[str, Entry]:
    """Every entry of the generated family pages, by its canonical name."""
    entries = {}
    for fname, text in pages.items():
        if not fname.endswith(".rst"):
            continue
        current, lines = None, []
        for line in text.splitlines() + [".. operator:: END()"]:
            m = ENTRY.match(line)
            if m:
                if current is not None:
                    assert current not in entries, f"{current} has two entries"
                    entries[current] = Entry(current, lines)
                current, lines = m["name"], []
            elif current is not None:
                lines.append(line)
    return entries


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return opref.generated_files()


@pytest.fixture(scope="module")
def entries(pages) -> dict[str, Entry]:
    return parse_entries(pages)


def _documented(entries) -> dict[str, str]:
    """Each documented name -> the entry it is on."""
    out: dict[str, str] = {}
    for name, entry in entries.items():
        for n in [name, *entry.aliases]:
            assert n not in out, f"{n} is documented twice (on {out[n]} and {name})"
            out[n] = name
    return out


# -- every name -------------------------------------------------------------------------------------------


def test_every_registered_name_has_exactly_one_entry(entries):
    documented = _documented(entries)
    assert set(documented) == SYMGRAD_NAMES
    assert len(documented) == len(SYMGRAD_NAMES)
    # an alias sits on the entry of the operator it names
    ops = list_ops()
    assert all(ops[n] is ops[canonical] for n, canonical in documented.items())


def test_the_names_table_links_every_name(pages):
    listed = re.findall(r"^   \* - :op:`([^`]+)`$", pages["names.inc"], re.M)
    assert sorted(listed) == sorted(SYMGRAD_NAMES)


def test_every_op_of_the_operator_table_is_documented(entries):
    documented = _documented(entries)
    used = {nd["op"] for row in TABLE for nd in json.loads(row.symbol().tojson())["nodes"]} - {"null"}
    assert used - set(documented) == set()


def _explained(name: str) -> bool:
    return name in OPS or any(re.search(pattern, name) for pattern in GROUPS)


def test_every_mxnet_name_not_explained_as_missing_is_documented(entries):
    documented = _documented(entries)
    expected = {name for name in MXNET if not _explained(name)}
    assert expected - set(documented) == set()


def test_families_are_the_registering_modules(entries, pages):
    assert {f[:-4] for f in pages if f.endswith(".rst")} >= {"nn", "elemwise", "conv", "pool", "legacy"}
    on = {
        name: fname for fname, text in pages.items() for name in re.findall(r"^\.\. operator:: ([^(]+)\(", text, re.M)
    }
    assert on["FullyConnected"] == "matrix.rst"
    assert on["Convolution"] == "conv.rst"
    # ops/legacy.py re-registers Convolution's and Pooling's rules under MXNet's old names
    assert on["Convolution_v1"] == on["Pooling_v1"] == "legacy.rst"
    assert on["Custom"] == "operator.rst"


# -- the built pages: one anchor per name -----------------------------------------------------------------


def test_the_built_reference_has_an_anchor_per_name_and_every_op_link_resolves(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text(
        "import sys\n"
        f"sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'docs' / '_ext')!r}]\n"
        "extensions = ['symgrad_opref']\n"
        "nitpicky = True\n",  # an :op: link without a target is a warning, and -W makes it an error
        encoding="utf-8",
    )
    (src / "index.rst").write_text(
        "Operators\n=========\n\n.. toctree::\n   :glob:\n\n   operators/_generated/*\n\n"
        ".. include:: operators/_generated/names.inc\n",
        encoding="utf-8",
    )
    out = tmp_path / "html"
    res = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-n", "-b", "html", str(src), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-4000:]
    ids: set[str] = set()
    for page in (out / "operators" / "_generated").glob("*.html"):
        ids |= set(re.findall(r'id="(op-[^"]+)"', page.read_text(encoding="utf-8")))
    assert ids == {f"op-{n}" for n in SYMGRAD_NAMES}
    assert {"op-Cast", "op-cast", "op-_Plus", "op-_plus", "op-Flatten", "op-flatten"} <= ids  # case kept
    index = (out / "index.html").read_text(encoding="utf-8")
    assert 'href="operators/_generated/elemwise.html#op-_Plus"' in index
    assert 'href="operators/_generated/loss.html#op-Softmax"' in index  # an alias: on SoftmaxOutput's entry


def test_generated_files_are_rewritten_only_when_they_change(tmp_path, pages, monkeypatch):
    monkeypatch.setattr(opref, "generated_files", lambda folder="operators/_generated": pages)
    assert sorted(opref.write_generated(tmp_path, "gen")) == sorted(pages)
    stale = tmp_path / "gen" / "gone.rst"
    stale.write_text("old family\n", encoding="utf-8")
    mtime = (tmp_path / "gen" / "nn.rst").stat().st_mtime_ns
    assert opref.write_generated(tmp_path, "gen") == []
    assert (tmp_path / "gen" / "nn.rst").stat().st_mtime_ns == mtime
    assert not stale.exists()


def test_the_introspection_imports_without_sphinx():
    code = (
        "import sys; sys.modules['sphinx'] = None\n"
        f"sys.path.insert(0, {str(ROOT / 'docs' / '_ext')!r})\n"
        "import symgrad_opref\n"
        "assert '.. operator:: relu(' in symgrad_opref.entry_rst('relu')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]


# -- facts from MXNet's documentation ---------------------------------------------------------------------


def test_fully_connected(entries):
    e = entries["FullyConnected"]
    # MXNet: num_hidden (int, required), no_bias (boolean, optional, default=0), flatten (boolean, default=1)
    assert e.params["num_hidden"][:2] == ("int", "**required**")
    assert e.params["no_bias"][:2] == ("bool", "``False``")
    assert e.params["flatten"][:2] == ("bool", "``True``")
    assert list(e.params) == ["num_hidden", "no_bias", "flatten"]
    # inputs data, weight, bias; bias is left out with no_bias=True
    assert e.fields["Inputs"] == "``data``, ``weight``, ``bias`` (not with ``no_bias=True``)"
    assert e.fields["Gradient"].startswith("reaches ``data``, ``weight``, ``bias``")
    assert e.fields["Second order"].startswith("**yes**")


def test_activation_choices(entries):
    e = entries["Activation"]
    # MXNet: act_type {'relu', 'sigmoid', 'softrelu', 'softsign', 'tanh'}, required
    kind, default, notes = e.params["act_type"]
    assert (kind, default) == ("str", "**required**")
    assert set(re.findall(r"``'(\w+)'``", notes)) == {"relu", "sigmoid", "softrelu", "softsign", "tanh"}


def test_relu_kink_is_a_declared_pinnable_decision(entries):
    # relu(x) = max(x, 0): one kink, at 0
    e = entries["relu"]
    assert e.fields["Decisions"].startswith("declared") and "pinnable" in e.fields["Decisions"]
    rule = e.text.split("Decision rule.", 1)[1].split("Derivation.", 1)[0]
    assert "choice=x > 0" in rule
    assert "relu' = 1 where x > 0 else 0" in e.text.split("Derivation.", 1)[1]
    assert entries["tanh"].fields["Decisions"] == "none declared."  # smooth


def test_softmax_output_label_is_not_differentiated(entries):
    e = entries["SoftmaxOutput"]
    assert e.aliases == ["Softmax"]
    assert e.fields["Inputs"] == "``data``, ``label``"
    # the label is an input of the loss, not a value it is differentiated by
    assert e.fields["Gradient"].startswith("reaches ``data``; none for ``label``")
    assert "its backward ignores the head gradient" in e.fields["Loss head"]
    # MXNet: grad_scale (float, default=1), ignore_label (float, default=-1), normalization {'batch', 'null',
    # 'valid'}, default='null'
    assert e.params["grad_scale"][:2] == ("float", "``1.0``")
    assert e.params["ignore_label"][:2] == ("float", "``-1.0``")
    assert e.params["normalization"][1] == "``'null'``"
    assert set(re.findall(r"``'(\w+)'``", e.params["normalization"][2])) == {"batch", "null", "valid"}
    assert e.fields["Second order"].startswith("**no**") and "_backward_SoftmaxOutput" in e.fields["Second order"]


def test_convolution_and_pooling(entries):
    conv = entries["Convolution"]
    # MXNet: kernel (Shape(tuple), required), num_filter (int, required), no_bias (boolean, default=0)
    assert conv.params["kernel"][1] == "**required**" and conv.params["kernel"][0].startswith("shape")
    assert conv.params["num_filter"][:2] == ("int", "**required**")
    assert conv.params["no_bias"][1] == "``False``"
    assert conv.fields["Inputs"].startswith("``data``, ``weight``, ``bias`` (not with ``no_bias=True``)")
    pool = entries["Pooling"]
    # MXNet: pool_type {'avg', 'lp', 'max', 'sum'}, default='max'
    assert pool.params["pool_type"][1] == "``'max'``"
    assert set(re.findall(r"``'(\w+)'``", pool.params["pool_type"][2])) == {"avg", "lp", "max", "sum"}


def test_dropout_mask_is_a_hidden_output(entries):
    e = entries["Dropout"]
    # MXNet: p (float, default=0.5), mode {'always', 'training'}, default='training'; outputs output and a
    # hidden mask
    assert e.params["p"][:2] == ("float", "``0.5``")
    assert e.params["mode"][1] == "``'training'``"
    assert e.fields["Outputs"].startswith("``output``; hidden")
    assert "``mask``" in e.fields["Outputs"].split("hidden", 1)[1]


def test_batch_norm(entries):
    e = entries["BatchNorm"]
    # MXNet: eps (double, default=0.001), momentum (float, default=0.9), fix_gamma (default=1),
    # use_global_stats (default=0); auxiliary states moving_mean and moving_var; outputs (output, mean, var)
    # of which only output is visible unless output_mean_var
    assert e.params["eps"][1] == "``0.001``" and e.params["momentum"][1] == "``0.9``"
    assert e.params["fix_gamma"][1] == "``True``" and e.params["use_global_stats"][1] == "``False``"
    assert e.fields["Auxiliary states"].startswith("``moving_mean``, ``moving_var``")
    assert e.fields["Outputs"].startswith("``output``; hidden")
    assert "``mean`` (visible with ``output_mean_var=True``)" in e.fields["Outputs"]
    assert "auxiliary states are never differentiated" in e.fields["Gradient"]


def test_take_indices_are_not_differentiated(entries):
    e = entries["take"]
    # MXNet: inputs a, indices; mode {'clip', 'raise', 'wrap'}, default='clip'; axis (int, default=0)
    assert e.fields["Inputs"] == "``a``, ``indices``"
    assert e.fields["Gradient"].startswith("reaches ``a``; none for ``indices``")
    assert e.params["axis"][1] == "``0``" and e.params["mode"][1] == "``'clip'``"


def test_derivations_quote_their_source(entries):
    assert "tanh' = 1 - tanh^2" in entries["tanh"].text.split("Derivation.", 1)[1]
    assert "Fused VJP of BatchNorm" in entries["BatchNorm"].text  # the fused backward's kernel
    assert "dx = r (dxhat - mean(dxhat) - xhat mean(dxhat xhat))" in entries["LayerNorm"].text  # a helper's
    quoted = 0
    for entry in entries.values():
        for where, block in re.findall(r"From ``([^`]+)``::\n\n((?:      .*\n|\n)+)", entry.text + "\n"):
            path = ROOT / where.split(",")[0]
            source = path.read_text(encoding="utf-8")
            for line in block.splitlines():
                text = line.strip()
                if text and not text.startswith("..."):
                    assert text in source, f"{entry.name}: {text!r} is not in {path}"
                    quoted += 1
    assert quoted > 800


def test_an_op_a_helper_registers_quotes_the_comment_at_the_helper_call(entries):
    # _sum_to_like's rule is adjoint_pair's ``_adjoint_of`` lambda, shared by every adjoint pair; its own
    # derivation sits above its ``adjoint_pair(("_sum_to_like", "_broadcast_to_like"), ...)`` call in
    # symgrad/ops/elemwise.py: sum_to S is linear, so d/da <g, S a> = broadcast(g, a.shape)
    derivation = entries["_sum_to_like"].text.split("Derivation.", 1)[1]
    where, block = re.match(r" From ``([^`]+)``::\n\n((?:      .*\n)+)", derivation).groups()
    assert "d/da <g, S a> = broadcast(g, a.shape)" in block
    path, line = re.fullmatch(r"(.+), line (\d+) \(adjoint_pair call\)", where).groups()
    assert path == "symgrad/ops/elemwise.py"
    source = (ROOT / path).read_text(encoding="utf-8").splitlines()
    assert source[int(line) - 1] == "adjoint_pair("  # the cited line is the call
    assert "d/da <g, S a> = broadcast(g, a.shape)" in source[int(line) - 2]  # the comment right above it
    assert "the pair's own derivation is at its call" in derivation  # the helper's general rule follows


def test_declared_dtypes_cover_the_dtypes_the_operator_table_proves(entries):
    documented = _documented(entries)
    checked = 0
    for row in TABLE:
        ops = [nd["op"] for nd in json.loads(row.symbol().tojson())["nodes"] if nd["op"] != "null"]
        if len(ops) != 1:
            continue
        field = entries[documented[ops[0]]].fields["Dtypes"]
        if ": " not in field or "not " in field.split(":", 1)[0]:
            continue
        declared = set(field.split(": ", 1)[1].split(" (", 1)[0].split(", "))
        assert {np.dtype(t).name for t in row.dtypes} <= declared, f"{row.name}: {field}"
        checked += 1
    assert checked > 500


# -- second order -----------------------------------------------------------------------------------------


def test_every_second_order_verdict_agrees_with_symgrad_grad_of_the_gradient():
    checked = 0
    for name, op in opref.canonical_ops().items():
        an = opref.analysis_of(name)
        for ev in [an.base, *an.variants] if an.base else []:
            if not ev.grad_inputs:
                continue
            error = opref.second_order_by_grad(ev, name, op)
            assert (error is None) == (not ev.opaque), f"{name} {ev.setting}: {ev.opaque} vs {error}"
            if error is not None:
                assert any(o in error for o in ev.opaque)
            checked += 1
    assert checked > 500


def _away(rng, shape):
    """Values at least 0.2 from relu's kink."""
    return rng.uniform(0.2, 1.0, shape) * rng.choice([-1.0, 1.0], shape)


# (name of the entry, setting that must be stated in its verdict or None, func, inputs)
NUMERIC = {
    "relu": (lambda x: S.relu(x), lambda r: [_away(r, (2, 3))]),
    "tanh": (lambda x: S.tanh(x), lambda r: [r.uniform(-1, 1, (2, 3))]),
    "erf": (lambda x: S.erf(x), lambda r: [r.uniform(-1, 1, (2, 3))]),
    "FullyConnected": (
        lambda x, w, b: S.FullyConnected(x, w, b, num_hidden=2),
        lambda r: [r.uniform(-1, 1, (2, 3)), r.uniform(-1, 1, (2, 3)), r.uniform(-1, 1, (2,))],
    ),
    "Convolution": (
        lambda x, w: S.Convolution(x, w, kernel=(2, 2), num_filter=1, no_bias=True),
        lambda r: [r.uniform(-1, 1, (1, 1, 3, 3)), r.uniform(-1, 1, (1, 1, 2, 2))],
    ),
    "Pooling": (
        lambda x: S.Pooling(x, kernel=(2, 2), pool_type="max"),
        lambda r: [r.permutation(16).reshape(1, 1, 4, 4) / 4.0],  # no ties
    ),
    "Pooling lp": (
        lambda x: S.Pooling(x, kernel=(2, 2), pool_type="lp", p_value=2),
        lambda r: [r.uniform(0.5, 1, (1, 1, 4, 4))],
    ),
    "softmax": (lambda x: S.softmax(x), lambda r: [r.uniform(-1, 1, (2, 3))]),
    "LayerNorm": (
        lambda x, g, b: S.LayerNorm(x, g, b),
        lambda r: [r.uniform(-1, 1, (2, 3)), r.uniform(0.5, 1.5, (3,)), r.uniform(-1, 1, (3,))],
    ),
    "BatchNorm": (
        lambda x, g, b: S.BatchNorm(x, g, b, fix_gamma=False, use_global_stats=True),
        lambda r: [r.uniform(-1, 1, (2, 3)), r.uniform(0.5, 1.5, (3,)), r.uniform(-1, 1, (3,))],
    ),
    "SoftmaxOutput": (
        lambda x, label: S.SoftmaxOutput(x, label),
        lambda r: [r.uniform(-1, 1, (2, 3)), np.array([0, 2])],
    ),
    "take": (lambda a, i: S.take(a, i), lambda r: [r.uniform(-1, 1, (3, 2)), np.array([0, 2, 2])]),
    "broadcast_maximum": (
        lambda a, b: S.broadcast_maximum(a, b),
        lambda r: [r.uniform(-1, 1, (2, 3)), r.uniform(2, 3, (1, 3))],  # far from ties
    ),
    "LeakyReLU": (lambda x: S.LeakyReLU(x, act_type="elu"), lambda r: [_away(r, (2, 3))]),
}


@pytest.mark.parametrize("case", NUMERIC, ids=str)
def test_second_order_verdict_matches_a_numeric_second_order_check(case, entries):
    name, _, setting = case.partition(" ")
    verdict = entries[name].fields["Second order"]
    if setting:  # a parameter setting the verdict names ("not with ``pool_type='lp'``")
        works = f"not with ``pool_type='{setting}'``" not in verdict
        assert verdict.startswith("**partly**")
    else:
        works = verdict.startswith(("**yes**", "**partly**"))
    func, make = NUMERIC[case]
    inputs = tuple(make(np.random.default_rng(0)))
    if works:
        assert gradgradcheck(func, inputs, progress=False)
    else:
        opaque = re.search(r"goes through ``(\w+)``", verdict)[1]
        with pytest.raises(sg.SymgradError, match=opaque):
            gradgradcheck(func, inputs, progress=False)
