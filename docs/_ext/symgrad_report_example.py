"""The docs' example of the HTML report, written by the docs build (``report.rst`` links it).

The model is small and its bug planted: two convolution blocks, the second with a Python ``Custom`` softplus whose
backward flips the gradient's sign where ``x < -1`` (a branch written for one region). Everything is seeded, so
the verdicts, errors and faulty node are the same on every run (the timings and the date are not).

The page is written at ``builder-inited`` into ``docs/_build/report-example/`` (git-ignored, like the build's
output), so the example always shows the report as the code renders it; ``docs/make_report_screenshot.py`` writes
the same page there and takes the committed screenshot ``docs/_static/report.png`` of it.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

import symgrad as sg
from symgrad.test_utils import check_model

#: the example page, from the docs folder (``report.rst``'s ``:download:`` names the same path)
EXAMPLE = Path("_build") / "report-example" / "report-example.html"
DOCS = Path(__file__).resolve().parents[1]


class Softplus(sg.operator.CustomOp):
    """``y = log(1 + e^x)``, ``dy/dx = sigmoid(x)``; the planted bug: the sign is flipped where ``x < -1``."""

    def forward(self, is_train, req, in_data, out_data, aux):
        x = np.asarray(in_data[0])
        self.assign(out_data[0], req[0], np.logaddexp(0.0, x).astype(x.dtype))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        x, g = np.asarray(in_data[0]), np.asarray(out_grad[0])
        dx = np.where(x < -1.0, -1.0, 1.0) * g / (1.0 + np.exp(-x))  # the bug: np.where(...) should be 1
        self.assign(in_grad[0], req[0], dx.astype(x.dtype))


@sg.operator.register("docs_softplus")
class SoftplusProp(sg.operator.CustomOpProp):
    def __init__(self):
        super().__init__(need_top_grad=True)

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0]], []

    def create_operator(self, ctx, shapes, dtypes):
        return Softplus()


def model():
    """conv-BN-relu, conv-BN-softplus(buggy)-relu, max pool, fc, softmax."""
    S = sg.sym
    y = S.Variable("data")
    y = S.Activation(S.BatchNorm(S.Convolution(y, kernel=(3, 3), num_filter=4, name="conv1"), name="bn1"), "relu")
    y = S.BatchNorm(S.Convolution(y, kernel=(3, 3), num_filter=6, name="conv2"), fix_gamma=False, name="bn2")
    y = S.Activation(S.Custom(y, op_type="docs_softplus", name="softplus2"), act_type="relu", name="relu2")
    y = S.Pooling(y, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool")
    return S.SoftmaxOutput(S.FullyConnected(y, num_hidden=5, name="fc"), name="softmax")


def write_example(docs: Path = DOCS):
    """Check ``model()`` and write its report to ``docs / EXAMPLE`` (whole or not at all: a build running beside
    this one never reads half a page); returns the check's result."""
    result = check_model(model(), shapes={"data": (4, 3, 10, 10)}, seed=0, workers=1, raise_on_failure=False)
    path = Path(docs) / EXAMPLE
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.{os.getpid()}.part")
    result.to_html(part)
    os.replace(part, path)
    return result


def _write(app) -> None:
    write_example(Path(app.srcdir))


def setup(app):
    """Write the example page at ``builder-inited``, before ``report.rst`` is read."""
    app.connect("builder-inited", _write)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
