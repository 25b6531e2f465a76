"""transpose's shape rule filling unknown dimensions backwards, and ``reverse``/``flip`` saved so MXNet binds them.

- ``test_transpose_infer_shape_back`` / ``_mixed`` (MXNet's tests/python/unittest/test_operator.py): a transpose
  whose input shape is unknown, or partly known, takes the missing dimensions from its known output. The
  expected shapes are MXNet 1.9.1's answers to the same ``infer_shape_partial`` calls (run here).
- MXNet 1.9.1 refuses to bind ``reverse`` with a negative axis; ``Symbol.tojson`` writes the axis non-negative
  where the input's rank is known. ``tests/fixtures/make_reverse_axis_fixtures.py`` bound symgrad's JSON with
  real MXNet and recorded its output (``tests/fixtures/reverse_axis/``).
"""

import json
import pickle
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import symgrad as sg
from symgrad import util

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
import make_reverse_axis_fixtures as reverse_cases  # noqa: E402

# -- transpose: shapes filled backwards ----------------------------------------------------------------------


def _sum_with_transpose(axes=()):
    a, x = sg.sym.Variable("a"), sg.sym.Variable("x")
    return a + sg.sym.transpose(x, axes=axes)


def test_transpose_infer_shape_back_legacy():
    # MXNet's test_transpose_infer_shape_back: ones(2, 3) + transpose(ones(-1, -1)) binds with shape (2, 3);
    # the transpose's input is wholly unknown and the sum's other operand gives its output
    sym = _sum_with_transpose()
    assert sym.infer_shape_partial(a=(2, 3), x=(0, 0)) == ([(2, 3), (3, 2)], [(2, 3)], [])
    assert sym.infer_shape(a=(2, 3)) == ([(2, 3), (3, 2)], [(2, 3)], [])


def test_transpose_infer_shape_mixed_legacy():
    # MXNet's test_transpose_infer_shape_mixed: ones(2, -1) + transpose(ones(3, -1)): each operand knows the
    # dimension the other lacks
    sym = _sum_with_transpose()
    assert sym.infer_shape(a=(2, 0), x=(3, 0)) == ([(2, 3), (3, 2)], [(2, 3)], [])
    assert _sum_with_transpose(axes=(1, 0)).infer_shape(a=(2, 0), x=(3, 0)) == ([(2, 3), (3, 2)], [(2, 3)], [])


def test_transpose_infer_shape_mixed_axes():
    # y[i] = x[axes[i]] with axes (1, 2, 0): y = (x1, x2, x0); a = (?, 5, 2) and x = (2, 3, ?) give
    # y = (3, 5, 2) and x = (2, 3, 5) (MXNet 1.9.1 answers the same)
    sym = _sum_with_transpose(axes=(1, 2, 0))
    assert sym.infer_shape(a=(0, 5, 2), x=(2, 3, 0)) == ([(3, 5, 2), (2, 3, 5)], [(3, 5, 2)], [])
    with util.np_shape():
        assert sym.infer_shape(a=(-1, 5, 2), x=(2, 3, -1)) == ([(3, 5, 2), (2, 3, 5)], [(3, 5, 2)], [])


def test_transpose_infer_shape_np_shape():
    # the same two tests in NumPy shape mode, where -1 is the unknown dimension
    with util.np_shape():
        sym = _sum_with_transpose()
        assert sym.infer_shape_partial(a=(2, 3), x=(-1, -1)) == ([(2, 3), (3, 2)], [(2, 3)], [])
        assert sym.infer_shape(a=(2, -1), x=(3, -1)) == ([(2, 3), (3, 2)], [(2, 3)], [])


def test_transpose_infer_shape_back_binds_and_computes():
    # as MXNet's tests do, bind with only the known shape and run: a + x^T computed in numpy
    sym = _sum_with_transpose()
    ex = sym.simple_bind(None, a=(2, 3))
    assert ex.arg_dict["x"].shape == (3, 2)
    a = np.arange(6.0).reshape(2, 3)
    x = np.arange(6.0).reshape(3, 2) * 10
    out = ex.forward(a=a, x=x)[0]
    np.testing.assert_array_equal(np.asarray(out), a + x.T)


@pytest.mark.parametrize(("known", "partial"), [((2, 3), (-1, -1)), ((2, -1), (3, -1))])
def test_transpose_infer_shape_mxnet_form(known, partial):
    # MXNet's two tests as written: ones of a partly unknown shape, bound with no arguments (the creation ops'
    # unknown dimensions are filled by inference); ones(2, 3) + ones(3, 2)^T is all twos
    sym = sg.sym.ones(shape=known) + sg.sym.transpose(sg.sym.ones(shape=partial))
    out = sym.bind(None, args={}).forward()[0]
    np.testing.assert_array_equal(np.asarray(out), np.full((2, 3), 2.0))


def test_transpose_known_shapes_conflict():
    # a known input dimension that disagrees with the output is still an error
    sym = _sum_with_transpose()
    with pytest.raises(sg.base.ShapeError):
        sym.infer_shape(a=(2, 3), x=(2, 0))


# -- reverse / flip: a negative axis saved so MXNet binds it --------------------------------------------------


def _reverse_axes(text):
    return {n["name"]: n["attrs"]["axis"] for n in json.loads(text)["nodes"] if n["op"] == "reverse"}


@pytest.mark.parametrize("name", sorted(reverse_cases.CASES))
def test_reverse_negative_axis_saved_as_mxnet_binds(name):
    build, _ = reverse_cases.CASES[name]
    sym = build(sg.sym)
    recorded = (FIXTURES / "reverse_axis" / f"{name}.json").read_text()
    data = np.load(FIXTURES / "reverse_axis" / f"{name}.npz")
    args = {k[4:]: data[k] for k in data.files if k.startswith("arg:")}
    want = data["out:0"]  # MXNet 1.9.1 binding the JSON symgrad wrote
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every rank is known: no warning
        text = sym.tojson()
    axes = _reverse_axes(text)
    assert axes == _reverse_axes(recorded)
    assert all(not a.strip("()").startswith("-") and ", -" not in a for a in axes.values())
    # symgrad still takes the negative axis itself, and the saved form computes the same
    for s in (sym, sg.sym.load_json(text)):
        out = s.bind(None, {k: v.copy() for k, v in args.items()}).forward()[0]
        np.testing.assert_allclose(np.asarray(out), want, rtol=0, atol=1e-12)


def test_reverse_negative_axis_numpy_reference():
    # the recorded output is numpy's flip along the last axis (an independent check of the fixture)
    data = np.load(FIXTURES / "reverse_axis" / "rev_last.npz")
    np.testing.assert_array_equal(data["out:0"], data["arg:x"][..., ::-1])


def test_reverse_negative_axis_unknown_rank_warns_and_keeps():
    x = sg.sym.Variable("x")
    sym = sg.sym.reverse(sg.sym.flip(x, axis=-1, name="f"), axis=(0, -2), name="r")
    with pytest.warns(UserWarning, match=r"\['f', 'r'\].*non-negative axis") as rec:
        text = sym.tojson()
    assert len(rec) == 1  # one warning naming every such node
    assert _reverse_axes(text) == {"f": "-1", "r": "(0, -2)"}
    x_val = np.arange(24.0).reshape(2, 3, 4)
    out = sg.sym.load_json(text).bind(None, {"x": x_val}).forward()[0]
    np.testing.assert_array_equal(np.asarray(out), x_val[::-1, ::-1, ::-1])


def test_reverse_non_negative_axis_unchanged_and_silent():
    sym = sg.sym.reverse(sg.sym.Variable("x"), axis=(0, 1), name="r")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _reverse_axes(sym.tojson()) == {"r": "(0, 1)"}


def test_reverse_negative_axis_save_file(tmp_path):
    sym = sg.sym.reverse(sg.sym.Variable("x", shape=(2, 3)), axis=-1, name="r")
    sym.save(tmp_path / "r.json")
    assert _reverse_axes((tmp_path / "r.json").read_text()) == {"r": "1"}
    # the symbol itself keeps the axis it was given
    assert sym.attr("axis") == "-1"


def test_reverse_negative_axis_inside_subgraph():
    # a foreach body whose input variable has no shape: the rank is unknown inside the subgraph document
    def body(d, s):
        return sg.sym.reverse(d, axis=-1, name="rb"), s

    out, _ = sg.sym.contrib.foreach(body, sg.sym.Variable("data"), [sg.sym.Variable("s")])
    with pytest.warns(UserWarning, match="rb"):
        out.tojson()


def test_pickling_and_the_checkers_do_not_warn_about_mxnet_axes():
    """The warning is for a file meant for MXNet (tojson/save); symgrad's own round trips stay quiet, and the
    round-tripped symbol computes what the original does."""
    x = sg.sym.Variable("x")
    y = sg.sym.reverse(x, axis=-1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = pickle.loads(pickle.dumps(y))
    a = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(back.eval(x=a)[0], a[:, ::-1])
