"""The HTML report (``ModelCheckResult.to_html``, ``symgrad check --html``): one self-contained page, every model
string escaped, the failing arguments and the faulty node shown; rendered in headless Chromium (Debian's
``chromium`` through playwright) with no console error, the failing argument visible and a screenshot taken.

Without Chromium or playwright the browser test is skipped with the reason; ``SYMGRAD_REQUIRE_BROWSER=1`` (CI)
turns that skip into a failure."""

import copy
import html
import json
import os
import re
import shutil
import struct
import sys

import pytest

import symgrad as sg
from symgrad import cli
from symgrad.test_utils import check_model
from symgrad.test_utils import html_report as hr
from symgrad.test_utils.model_check import ModelCheckResult, NodeFault

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import planted_network  # noqa: E402  (registers the planted Custom ops)

S = sg.sym
#: an argument name that HTML would read as markup if it were not escaped
ODD = 'in<put>&"x"'


def _planted_symbol(data="data", shape=None):
    """conv -> BatchNorm -> Custom softplus with a backward 1% too large -> relu -> max pool -> fc -> softmax."""
    x = S.Variable(data, shape=shape) if shape else S.Variable(data)
    y = S.Convolution(x, kernel=(3, 3), num_filter=4, name="conv")
    y = S.Custom(S.BatchNorm(y, fix_gamma=False, name="bn"), op_type="planted_scaled", name=planted_network.NODE)
    y = S.Pooling(S.Activation(y, act_type="relu", name="relu"), kernel=(2, 2), stride=(2, 2), pool_type="max")
    return S.SoftmaxOutput(S.FullyConnected(y, num_hidden=3, name="fc"), name="softmax")


@pytest.fixture(scope="module")
def failing():
    """A failing check whose data argument's name holds ``<``, ``&`` and ``"``."""
    return check_model(_planted_symbol(ODD), shapes={ODD: (2, 3, 8, 8)}, seed=0, raise_on_failure=False)


@pytest.fixture(scope="module")
def passing():
    y = S.tanh(S.FullyConnected(S.Variable("x"), num_hidden=4, name="fc"), name="act")
    return check_model(y, shapes={"x": (3, 5)}, seed=0)


def _node_group(page, name):
    """The SVG group of the graph node ``name`` (its tooltip opens it)."""
    match = re.search(r"<g><title>" + re.escape(html.escape(name)) + r" \(.*?</g>", page, re.S)
    assert match, f"no node {name!r} in the graph"
    return match.group(0)


# == structure, without a browser ================================================================================


def test_the_page_is_self_contained(failing):
    page = failing.to_html()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I)  # nothing fetched
    assert not re.search(r"url\((?!#)|@import|<link|<script|<iframe|<img", page, re.I)  # url(#id): the arrows
    assert "<style>" in page and "<svg" in page  # inline CSS and SVG only


def test_every_model_string_is_escaped(failing):
    page = failing.to_html()
    assert ODD not in page and "<put>" not in page
    assert html.escape(ODD) in page  # shown, escaped (the bar label, the table, the failing card)
    assert page.count("<svg") == page.count("</svg>")


def test_the_failing_arguments_their_worst_elements_and_the_faulty_node_are_shown(failing):
    page = failing.to_html()
    assert "FAIL" in page and 'class="banner fail"' in page
    for row in failing.failed:
        name = html.escape(row["name"])
        assert f'<h3>{name} <span class="muted">' in page  # its card
        if row["worst"]:  # a scatter: one point per worst element, and the y = x diagonal
            plot = re.search(
                r'<svg[^>]*aria-label="analytic against numeric for ' + re.escape(name) + r'".*?</svg>', page, re.S
            )
            assert plot and plot.group(0).count("<circle") == len(row["worst"]) and "y = x" in plot.group(0)
    assert any(row["worst"] for row in failing.failed)
    assert [f.name for f in failing.faults] == [planted_network.NODE]
    fault = _node_group(page, planted_network.NODE)
    assert "faulty node" in fault and f'stroke="{hr.FAIL}" stroke-width="2.5"' in fault  # highlighted on the graph
    assert f'stroke="{hr.FAIL}" stroke-width="2.5"' not in _node_group(page, "conv")
    assert "judged by the kink test: planted_fwd" in page and "2 decision node(s) pinned" in page
    assert "check_model(sym, shapes=" in page and "seed=0" in page  # how to reproduce it


def test_a_passing_model_renders_green_with_no_failure_sections(passing):
    page = passing.to_html()
    assert passing.ok and 'class="banner pass"' in page and "every gradient passes" in page
    assert "Failing arguments" not in page and "Faulty node" not in page and "faulty node</" not in page
    assert "No decision node to pin" in page and "Nothing was left for the kink test" in page
    assert page.count(f'fill="{hr.PASS}"') >= 3  # the bars of x, fc_weight, fc_bias


def test_partial_and_bare_results_render(failing):
    partial = copy.deepcopy(failing)
    partial.partial, partial.interrupted, partial.faults = True, "SIGTERM", []
    for row in partial.rows[3:]:
        row.update(verdict="not checked", worst_ratio=None, max_error=None, worst=[], diagnosis=None)
    page = partial.to_html()
    assert "PARTIAL (SIGTERM)" in page and "not checked" in page
    assert "No single node" not in page  # an interrupted check names no fault and does not say there is none
    bare = ModelCheckResult("m", "float64", "sample", 3, copy.deepcopy(failing.rows[:2]))
    page = bare.to_html()  # no graph, no pinning, no header: still a page
    assert "Pinning not recorded" in page and "<h2>Graph</h2>" not in page and "seed=3" in page


def test_to_html_writes_the_page_and_to_dict_leaves_the_graph_out(failing, tmp_path):
    path = tmp_path / "report.html"
    page = failing.to_html(path)
    assert path.read_text(encoding="utf-8") == page
    assert failing.graph and "graph" not in failing.to_dict()
    json.dumps(failing.to_dict())


def test_a_large_graph_is_drawn_around_the_fault_and_says_so():
    y = S.Variable("x")
    for i in range(200):
        y = S.sin(y, name=f"sin{i}")
    res = check_model(y, shapes={"x": (3,)}, seed=0)
    assert res.ok and len(res.graph["nodes"]) == 201
    res.rows[0].update(verdict="FAIL", worst_ratio=5.0)  # as if x failed because sin120's backward were wrong
    res.faults = [NodeFault(120, "sin120", "sin", None, ["data"], 5.0)]
    page = res.to_html()
    drawn = re.findall(r"<g><title>(sin\d+) \(", page)
    assert 0 < len(drawn) <= hr.GRAPH_MAX_OPS and "sin120" in drawn and "sin0" in drawn  # the fault and x's consumer
    assert "The graph has 200 op nodes, too many to draw whole: shown are the" in page
    res.rows[0].update(verdict="pass", worst_ratio=0.1)
    res.faults = []
    assert "this check has none" in res.to_html()  # a passing large graph is not drawn


# == the CLI ======================================================================================================


@pytest.fixture
def planted_file(tmp_path):
    path = tmp_path / "planted-symbol.json"
    _planted_symbol("data", shape=(2, 3, 8, 8)).save(str(path))
    return path


def test_cli_html_writes_the_report_of_a_failing_model_and_exits_1(capsys, planted_file, tmp_path):
    out = tmp_path / "report.html"
    code = cli.main(["check", str(planted_file), "--html", str(out), "--workers", "1", "--json"])
    stdout, err = capsys.readouterr()
    assert code == 1 and f"wrote {out}" in err
    doc = json.loads(stdout)  # --json's stdout is still JSON alone
    page = out.read_text(encoding="utf-8")
    assert 'class="banner fail"' in page and ">conv_weight<" in page
    assert f"symgrad check {planted_file} --dtype=float32 --mode=fast --seed=0" in page  # the command
    assert doc["command"] in html.unescape(page)


def test_cli_html_of_a_passing_model_exits_0(capsys, tmp_path):
    model = tmp_path / "mlp-symbol.json"
    S.tanh(S.FullyConnected(S.Variable("x", shape=(3, 5)), num_hidden=4, name="fc")).save(str(model))
    out = tmp_path / "ok.html"
    assert cli.main(["check", str(model), "--html", str(out), "--workers", "1"]) == 0
    assert f"wrote {out}" in capsys.readouterr().out and 'class="banner pass"' in out.read_text(encoding="utf-8")


@pytest.mark.parametrize("where", ["missing/report.html", "."])
def test_cli_html_that_cannot_be_written_is_a_usage_error_before_the_check(capsys, tmp_path, where):
    target = tmp_path / where
    assert cli.main(["check", "--example", "lenet", "--html", str(target)]) == 2
    out, err = capsys.readouterr()
    assert "--html" in err and out == ""  # refused before checking anything


# == in a real browser ============================================================================================


def _need(reason):
    if os.environ.get("SYMGRAD_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason}; SYMGRAD_REQUIRE_BROWSER=1 requires the browser test")
    pytest.skip(reason)


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_the_report_renders_in_headless_chromium(failing, tmp_path):
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _need("playwright not installed (pip install playwright)")
    chromium = shutil.which("chromium")
    if chromium is None:
        _need("Chromium not installed (apt-get install chromium)")
    path = tmp_path / "report.html"
    failing.to_html(path)
    problems, fetched = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.on(
                "console", lambda m: problems.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None
            )
            page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
            page.on("request", lambda r: fetched.append(r.url) if not r.url.startswith("file://") else None)
            page.goto(path.as_uri())
            page.wait_for_load_state("load")
            for row in failing.failed:
                assert page.locator(".card h3", has_text=row["name"]).first.is_visible()
            assert page.get_by_text(ODD, exact=True).first.is_visible()  # the odd name shows as typed
            assert page.locator("svg[aria-label='the model graph']").is_visible()
            shot = page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        finally:
            browser.close()
    assert problems == [] and fetched == []
    width, height = _png_size(shot)
    assert width == 1200 and height > 1500 and len(shot) > 50_000  # the whole page, not a blank one


def test_a_missing_browser_skips_unless_ci_requires_it(monkeypatch):
    monkeypatch.delenv("SYMGRAD_REQUIRE_BROWSER", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"Chromium not installed \(apt-get install chromium\)"):
        _need("Chromium not installed (apt-get install chromium)")
    monkeypatch.setenv("SYMGRAD_REQUIRE_BROWSER", "1")
    with pytest.raises(pytest.fail.Exception, match="SYMGRAD_REQUIRE_BROWSER=1"):
        _need("Chromium not installed (apt-get install chromium)")
