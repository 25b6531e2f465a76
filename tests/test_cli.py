"""The ``symgrad`` command: check / info / plot on MXNet-written model files and the shipped examples, the
JSON report, exit codes (a planted wrong gradient exits 1) and one-line errors (exit 2)."""

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import symgrad as sg
from symgrad import cli, model_zoo
from symgrad.test_utils import differencer, model_check

S = sg.sym
HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "fixtures", "mxnet_models")
CONVNET = os.path.join(MODELS, "convnet-symbol.json")  # written by MXNet 1.9.1: conv, BatchNorm, pool, fc, softmax
MLP, MLP_PARAMS = os.path.join(MODELS, "mlp-symbol.json"), os.path.join(MODELS, "mlp-0000.params")


def run(capsys, *argv):
    """``(exit code, stdout, stderr)`` of ``symgrad ARGV`` run in this process."""
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def check_json(capsys, *argv):
    code, out, err = run(capsys, "check", *argv, "--json")
    return code, json.loads(out), err


# -- planted bug: a custom op whose backward is twice the true gradient ------------------------------------


class _DoubledTanh(sg.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], np.tanh(in_data[0]))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        y = np.tanh(in_data[0])
        self.assign(in_grad[0], req[0], 2.0 * out_grad[0] * (1 - y * y))  # the planted bug: a factor 2


@sg.operator.register("cli_doubled_tanh")
class _DoubledTanhProp(sg.operator.CustomOpProp):
    def __init__(self):
        super().__init__(need_top_grad=True)

    def list_arguments(self):
        return ["data"]

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0]], []

    def create_operator(self, ctx, shapes, dtypes):
        return _DoubledTanh()


@pytest.fixture
def planted(tmp_path):
    """data -> FullyConnected -> Custom(tanh with a doubled backward) -> SoftmaxOutput, as a JSON file."""
    x = S.FullyConnected(S.Variable("data", shape=(3, 5)), num_hidden=4, name="fc")
    net = S.SoftmaxOutput(S.Custom(x, op_type="cli_doubled_tanh", name="act"), name="softmax")
    path = tmp_path / "planted-symbol.json"
    net.save(str(path))
    return path


# == check ===================================================================================================


def test_default_example_passes_with_a_table_per_argument(capsys):
    code, out, err = run(capsys, "check", "--example", model_zoo.DEFAULT_EXAMPLE)
    assert code == 0, out + err
    sym = model_zoo.load_example(model_zoo.DEFAULT_EXAMPLE)
    lines = out.splitlines()
    for name in sym.list_arguments():
        row = next(line for line in lines if line.startswith(name + " "))
        verdict = "skip" if name == "softmax_label" else "pass"
        assert f" {verdict} " in row + " ", row
    assert "mode fast" in out  # the default: directions on the pinned pieces
    assert "every gradient passes: 9 passed, 0 failed, 1 skipped" in out
    assert err == ""


def test_no_arguments_checks_the_default_example(capsys):
    code, out, _ = run(capsys)
    assert code == 0
    assert f"example {model_zoo.DEFAULT_EXAMPLE!r}" in out and "every gradient passes" in out


@pytest.mark.parametrize("name", list(model_zoo.EXAMPLES))
def test_every_shipped_example_passes_fast_mode(capsys, name):
    code, doc, _ = check_json(capsys, "--example", name, "--mode", "fast")
    assert code == 0 and doc["ok"]
    sym = model_zoo.load_example(name)
    assert [r["name"] for r in doc["arguments"]] == sym.list_arguments()
    for r in doc["arguments"]:
        if r["role"] == "index":
            assert r["verdict"] == "skip"
        else:
            assert r["verdict"] == "pass" and r["method"].startswith("directional") and r["worst_ratio"] < 1


def test_shipped_examples_are_the_builders_output_and_installed_as_package_data():
    for name, (_, _, build) in model_zoo.EXAMPLES.items():
        path = model_zoo.example_path(name)
        assert os.path.isfile(path) and os.path.dirname(path).endswith(os.path.join("symgrad", "models"))
        sym = model_zoo.load_example(name)
        assert sym.infer_shape()[1] is not None  # __shape__ attributes make every shape known
        if build is not None:
            assert json.loads(sym.tojson()) == json.loads(build().tojson())
        else:  # the zoo network: written by MXNet
            with open(path) as f:
                assert json.load(f)["attrs"]["mxnet_version"] == ["int", 10901]


def test_mxnet_file_with_params_sample_mode_json(capsys):
    code, doc, _ = check_json(capsys, MLP, "--params", MLP_PARAMS, "--shape", "data=4,5")
    assert code == 0 and doc["ok"] and doc["failed"] == 0
    assert doc["given"] == ["fc1_bias", "fc1_weight", "fc2_bias", "fc2_weight"]
    rows = {r["name"]: r for r in doc["arguments"]}
    assert list(rows) == ["data", "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias", "softmax_label"]
    assert rows["softmax_label"]["verdict"] == "skip" and rows["softmax_label"]["role"] == "index"
    assert rows["fc1_weight"]["shape"] == [8, 5] and rows["fc1_weight"]["role"] == "param"
    for n in ("data", "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias"):
        assert rows[n]["checked"] == rows[n]["size"]  # small arguments are checked whole
        assert rows[n]["verdict"] == "pass" and 0 <= rows[n]["max_error"] and rows[n]["worst_ratio"] < 1


@pytest.mark.parametrize("mode", cli.MODES)
def test_mxnet_convnet_every_mode(capsys, mode):
    code, doc, _ = check_json(capsys, CONVNET, "--shape", "data=2,3,6,6", "--mode", mode, "--dtype", "float64")
    assert code == 0 and doc["ok"] and doc["mode"] == mode and doc["dtype"] == "float64"
    rows = {r["name"]: r for r in doc["arguments"]}
    assert rows["bn1_gamma"]["verdict"] == "pass" and rows["data"]["size"] == 216
    if mode == "full":
        assert all(r["checked"] == r["size"] for r in doc["arguments"] if r["verdict"] != "skip")


def test_sample_mode_samples_large_arguments_and_checks_small_ones_whole(capsys):
    code, doc, _ = check_json(capsys, "--example", "lenet", "--mode", "sample", "--samples", "7")
    assert code == 0 and doc["samples"] == 7
    rows = {r["name"]: r for r in doc["arguments"]}
    assert rows["conv2_weight"]["checked"] == 7 and rows["conv2_weight"]["size"] == 2400
    assert rows["conv1_bias"]["checked"] == 6 == rows["conv1_bias"]["size"]


def test_seed_makes_the_report_reproducible(capsys):
    a = check_json(capsys, "--example", "mlp", "--seed", "3")[1]
    b = check_json(capsys, "--example", "mlp", "--seed", "3")[1]
    c = check_json(capsys, "--example", "mlp", "--seed", "4")[1]
    errors = lambda d: [r["max_error"] for r in d["arguments"]]
    assert errors(a) == errors(b) != errors(c)


@pytest.mark.parametrize("dtype", cli.DTYPES)
def test_dtypes(capsys, dtype):
    code, doc, _ = check_json(capsys, "--example", "resblock", "--dtype", dtype)
    assert code == 0 and doc["dtype"] == dtype


def test_grad_req_per_argument(capsys):
    code, doc, _ = check_json(capsys, "--example", "mlp", "--grad-req", "add", "--grad-req", "out_bias=null")
    assert code == 0
    rows = {r["name"]: r for r in doc["arguments"]}
    assert rows["fc1_weight"]["grad_req"] == "add" and rows["fc1_weight"]["verdict"] == "pass"
    assert rows["out_bias"]["grad_req"] == "null" and rows["out_bias"]["method"].startswith("buffer unchanged")


@pytest.mark.parametrize("mode", cli.MODES)
def test_planted_wrong_gradient_exits_1_and_is_diagnosed(capsys, planted, mode):
    code, doc, _ = check_json(capsys, planted, "--mode", mode)
    assert code == 1 and not doc["ok"] and doc["failed"] == 3
    for r in doc["arguments"]:
        if r["name"] == "softmax_label":
            assert r["verdict"] == "skip"
            continue
        assert r["verdict"] == "FAIL" and r["worst_ratio"] > 1
        assert "2 x numeric" in r["diagnosis"], r["diagnosis"]
    code, out, _ = run(capsys, "check", planted, "--mode", mode)
    assert code == 1 and "3 gradients FAIL: 0 passed, 3 failed" in out and "FAIL     analytic = 2 x numeric" in out


def test_a_correct_custom_model_next_to_the_planted_one_passes(capsys, tmp_path):
    x = S.FullyConnected(S.Variable("data", shape=(3, 5)), num_hidden=4, name="fc")
    net = S.SoftmaxOutput(S.tanh(x, name="act"), name="softmax")
    net.save(str(tmp_path / "ok.json"))
    assert run(capsys, "check", tmp_path / "ok.json")[0] == 0


def test_index_inputs_get_valid_values_and_are_skipped(capsys, tmp_path):
    emb = S.Embedding(S.Variable("tokens", shape=(4, 3)), input_dim=5, output_dim=6, name="emb")
    net = S.SoftmaxOutput(S.FullyConnected(emb, num_hidden=7, name="fc"), name="softmax")
    net.save(str(tmp_path / "emb.json"))
    sym = sg.sym.load(str(tmp_path / "emb.json"))
    arg_shapes, _, aux_shapes = model_check.infer_shapes(sym, {})
    values, _, roles = model_check.random_values(sym, arg_shapes, aux_shapes, {}, {}, seed=0)
    assert roles["tokens"] == ("index", 5) and roles["softmax_label"] == ("index", 7)
    assert roles["emb_weight"][0] == "param" and roles["fc_bias"][0] == "param"
    for name, bound in (("tokens", 5), ("softmax_label", 7)):
        v = values[name]
        assert np.array_equal(v, np.round(v)) and v.min() >= 0 and v.max() < bound
    code, doc, _ = check_json(capsys, tmp_path / "emb.json")
    assert code == 0
    assert {r["name"]: r["verdict"] for r in doc["arguments"]} == {
        "tokens": "skip",
        "emb_weight": "pass",
        "fc_weight": "pass",
        "fc_bias": "pass",
        "softmax_label": "skip",
    }


def test_dropout_is_checked_as_identity(capsys, tmp_path):
    x = S.Dropout(S.FullyConnected(S.Variable("data", shape=(3, 5)), num_hidden=4, name="fc"), p=0.5, name="drop")
    S.SoftmaxOutput(x, name="softmax").save(str(tmp_path / "drop.json"))
    code, out, _ = run(capsys, "check", tmp_path / "drop.json")
    assert code == 0 and "Dropout checked as identity (p=0)" in out and "drop" in out


def test_progress_on_long_work(capsys, monkeypatch):
    # stderr is not a terminal here: --progress writes lines (done / total, rate, time left), not a redrawn bar
    monkeypatch.setattr(differencer, "PROGRESS_EVERY", 0.0)
    code, _, err = run(capsys, "check", "--example", "mlp", "--progress")
    assert code == 0 and "symgrad check: " in err and " checked, " in err and " left" in err and "\r" not in err
    code, _, err = run(capsys, "check", "--example", "mlp", "--no-progress")
    assert code == 0 and err == ""


# == info / plot ================================================================================================


def test_info_on_an_mxnet_file(capsys):
    code, out, err = run(capsys, "info", CONVNET, "--shape", "data=2,3,6,6")
    assert code == 0 and err == ""
    rows = [line.split() for line in out.splitlines() if re.match(r"\w+\(\w+\)", line)]
    # MXNet 1.9.1's print_summary of this file gives these rows (and "Total params: 231")
    assert rows == [
        ["data(null)", "3x6x6", "0"],
        ["conv1(Convolution)", "4x6x6", "112", "data"],
        ["bn1(BatchNorm)", "4x6x6", "8", "conv1"],
        ["relu1(Activation)", "4x6x6", "0", "bn1"],
        ["pool1(Pooling)", "4x3x3", "0", "relu1"],
        ["flatten1(Flatten)", "36", "0", "pool1"],
        ["fc(FullyConnected)", "3", "111", "flatten1"],
        ["softmax(SoftmaxOutput)", "3", "0", "fc"],
    ]
    assert "Total params: 231" in out and "Auxiliary states: 8" in out


def test_info_without_shapes_says_how_to_get_them(capsys):
    code, out, _ = run(capsys, "info", CONVNET)
    assert code == 0 and "conv1(Convolution)" in out and "give the input shapes with --shape" in out


def test_info_on_an_example_uses_the_shape_attributes(capsys):
    code, out, _ = run(capsys, "info", "--example", "lenet", "--line-length", "100")
    assert code == 0 and "Total params: 4982" in out and "conv2(Convolution)" in out
    assert max(len(line) for line in out.splitlines()) == 100


def test_plot_dot_text_of_an_mxnet_file(capsys, tmp_path):
    out_file = tmp_path / "convnet.dot"
    code, out, _ = run(capsys, "plot", CONVNET, "--shape", "data=2,3,6,6", "-o", out_file)
    assert code == 0 and f"wrote {out_file}" in out
    text = out_file.read_text()
    assert text.startswith("digraph convnet {")
    assert '"Convolution\n3x3/1x1, 4"' in text or "Convolution\n3x3/1x1, 4" in text
    assert 'conv1 -> data [label="3x6x6"' in text and "fc -> flatten1 [label=36" in text
    assert "conv1_weight" not in text  # weights hidden
    assert 'fillcolor="#fb8072"' in text and 'fillcolor="#bebada"' in text  # conv/dense and BatchNorm colours


def test_plot_renders_where_dot_is_installed(capsys, tmp_path, monkeypatch):
    svg = tmp_path / "lenet.svg"
    if shutil.which("dot"):
        code, _, err = run(capsys, "plot", "--example", "lenet", "-o", svg)
        assert code == 0, err
        text = svg.read_text()
        assert "<svg" in text and "FullyConnected" in text and "16x4x4" in text
        monkeypatch.setenv("PATH", str(tmp_path))  # now without the dot program
    code, out, err = run(capsys, "plot", "--example", "lenet", "-o", tmp_path / "again.svg")
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert "'dot' program" in err and "apt-get install graphviz" in err and "pip install graphviz" in err
    assert run(capsys, "plot", "--example", "lenet", "-o", tmp_path / "still.dot")[0] == 0  # .dot needs no dot


# == the command line itself ===================================================================================


def test_version_and_help(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.strip() == f"symgrad {sg.__version__}"
    code, out, _ = run(capsys, "check", "--help")
    assert code == 0
    for option in (
        "--example",
        "--shape",
        "--params",
        "--dtype",
        "--grad-req",
        "--mode",
        "--samples",
        "--seed",
        "--ctx",
        "--json",
        "--progress",
        "--debug",
    ):
        assert any(line.strip().startswith(option) for line in out.splitlines()), option
    for command in ("info", "plot"):
        assert run(capsys, command, "--help")[0] == 0
    code, out, _ = run(capsys, "--help")
    assert code == 0 and all(c in out for c in ("check", "info", "plot"))


def test_console_entry_point_runs_as_a_module():
    done = subprocess.run([sys.executable, "-m", "symgrad", "--version"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == f"symgrad {sg.__version__}"


def _bad_files(tmp_path):
    (tmp_path / "garbage.json").write_text("{not json")
    (tmp_path / "notasymbol.json").write_text('{"hello": 1}')
    (tmp_path / "wrong.params").write_bytes(b"\x00" * 7)
    return tmp_path


@pytest.mark.parametrize(
    "argv, message",
    [
        (["check", "{tmp}/missing.json"], "missing.json: no such file"),
        (["check", "{tmp}/garbage.json"], "not valid JSON"),
        (["check", "{tmp}/notasymbol.json"], "notasymbol.json"),
        (["check", "{tmp}"], "is a directory"),
        (["check", CONVNET], "the shapes do not infer: the shape of data"),
        (["check", CONVNET, "--shape", "dta=2,3,6,6"], "'dta' is not an input of the model"),
        (["check", CONVNET, "--shape", "data=2,3,1,1"], "the shapes do not infer: Pooling 'pool1'"),
        (["check", CONVNET, "--shape", "data=2,x"], "--shape 'data=2,x': expected NAME=D1,D2,..."),
        (
            ["check", CONVNET, "--shape", "data=2,3,6,6", "--shape", "data=1,3,6,6"],
            "--shape 'data=1,3,6,6': the shape of 'data' is given twice (data=2,3,6,6)",
        ),
        (["check", "--example", "mlp", "--seed", "-5"], "argument --seed: must be a non-negative integer, got '-5'"),
        (["check", "--example", "mlp", "--seed", "x"], "argument --seed: must be a non-negative integer, got 'x'"),
        (["check", MLP, "--shape", "data=4,5", "--params", "{tmp}/missing.params"], "no such file"),
        (["check", MLP, "--shape", "data=4,5", "--params", "{tmp}/wrong.params"], "wrong.params"),
        (
            ["check", MLP, "--shape", "data=4,6", "--params", MLP_PARAMS],
            "input 'weight' has shape (8, 5), expected (8, 6)",
        ),
        (["check", "--example", "nope"], "invalid choice: 'nope'"),
        (["check", "--example", "mlp", "--grad-req", "nope=null"], "'nope' is not an argument of the model"),
        (["check", "--example", "mlp", "--grad-req", "sometimes"], "must be one of write, add, null"),
        (["check", "--example", "mlp", "--ctx", "tpu"], "expected cpu or gpu:N"),
        (["check", "--example", "mlp", "--samples", "0"], "--samples 0"),
        (["check", MLP, "--example", "mlp"], "not both"),
        (["info"], "give a MODEL.json file or --example NAME"),
        (["info", "{tmp}/garbage.json"], "not valid JSON"),
        (["info", CONVNET, "--shape", "data=2,3,1,1"], "the shapes do not infer"),
        (["plot", "--example", "mlp", "-o", "{tmp}/x.gif"], "must end in one of .svg, .png, .pdf, .dot"),
        (["plot", "--example", "mlp"], "the following arguments are required: -o/--output"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_errors_are_one_line_exit_2(capsys, tmp_path, argv, message):
    tmp = _bad_files(tmp_path)
    code, out, err = run(capsys, *[a.replace("{tmp}", str(tmp)) for a in argv])
    assert code == 2, (out, err)
    assert len(err.splitlines()) == 1 and err.startswith("symgrad: error: "), err
    assert message in err and "Traceback" not in err


def test_debug_shows_the_traceback_and_keeps_exit_code_2(capsys, tmp_path):
    code, _, err = run(capsys, "--debug", "check", tmp_path / "missing.json")
    assert code == 2 and "Traceback" in err and "cli.CLIError" in err and "no such file" in err.splitlines()[-1]
    (tmp_path / "garbage.json").write_text("{not json")
    code, _, err = run(capsys, "check", tmp_path / "garbage.json", "--debug")
    assert code == 2 and "SerializationError" in err and "not valid JSON" in err.splitlines()[-1]


def test_debug_keeps_exit_code_1_for_a_failing_gradient(capsys, planted):
    code, out, _ = run(capsys, "--debug", "check", planted)
    assert code == 1 and "3 gradients FAIL" in out
