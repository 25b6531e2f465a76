"""Write the docs' example of the HTML report: ``docs/_static/report-example.html`` and its screenshot
``docs/_static/report.png``.

The model is small and its bug planted: two convolution blocks, the second with a Python ``Custom`` softplus whose
backward flips the gradient's sign where ``x < -1`` (a branch written for one region). Everything is seeded, so
the verdicts, errors and faulty node are the same on every run (the timings and the date are not).

    python docs/make_report_screenshot.py

Needs playwright and Debian's Chromium (``apt-get install chromium``) for the screenshot.
"""

from __future__ import annotations

import os
import shutil
import sys

import numpy as np

import symgrad as sg
from symgrad.test_utils import check_model

HERE = os.path.dirname(os.path.abspath(__file__))
STATIC = os.path.join(HERE, "_static")
#: the part of the page the screenshot shows (CSS pixels): the header, the faulty node, the bars and a failing
#: argument's scatter
WIDTH, HEIGHT = 1200, 1500


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


def screenshot(page_path: str, png_path: str) -> None:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    if chromium is None:
        sys.exit("Chromium not installed (apt-get install chromium)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True)
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
            page.goto("file://" + os.path.abspath(page_path))
            page.screenshot(path=png_path, clip={"x": 0, "y": 0, "width": WIDTH, "height": HEIGHT})
        finally:
            browser.close()


def main() -> None:
    result = check_model(model(), shapes={"data": (4, 3, 10, 10)}, seed=0, workers=1, raise_on_failure=False)
    print(result)
    html_path = os.path.join(STATIC, "report-example.html")
    png_path = os.path.join(STATIC, "report.png")
    result.to_html(html_path)
    screenshot(html_path, png_path)
    for path in (html_path, png_path):
        print(f"wrote {os.path.relpath(path)} ({os.path.getsize(path) // 1024} KB)")


if __name__ == "__main__":
    main()
