"""``sg.viz.print_summary`` and ``sg.viz.plot_network`` (MXNet 1.9's signatures and look)."""

import os
import re
import shutil
import sys
import warnings

import numpy as np
import pytest

import symgrad as sg

S = sg.sym
CONVNET = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "mxnet_models", "convnet-symbol.json")


@pytest.fixture
def convnet():
    return sg.sym.load(CONVNET)  # written by MXNet 1.9.1


def test_print_summary_counts_like_mxnet(capsys, convnet):
    assert sg.viz.print_summary(convnet, shape={"data": (2, 3, 6, 6)}) is None
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "_" * 120 and lines[2] == "=" * 120
    assert lines[1].split() == ["Layer", "(type)", "Output", "Shape", "Param", "#", "Previous", "Layer"]
    # columns end at 44%, 64%, 74% of the line: the output shape starts at column 52, the count at 76
    conv = next(line for line in lines if line.startswith("conv1(Convolution)"))
    assert conv.index("4x6x6") == 52 and conv.index("112") == 76 and conv.index("data") == 88
    # parameter counts: the sizes of each op's weight/bias/gamma/beta arguments (MXNet's totals: 231)
    arg_shapes = dict(zip(convnet.list_arguments(), convnet.infer_shape(data=(2, 3, 6, 6))[0]))
    params = sum(int(__import__("numpy").prod(s)) for n, s in arg_shapes.items() if n not in ("data", "softmax_label"))
    assert params == 231 and f"Total params: {params}" in out
    assert "softmax_label" not in out  # labels are not layers (as MXNet)


def test_print_summary_positions_and_line_length(capsys, convnet):
    sg.viz.print_summary(convnet, shape={"data": (2, 3, 6, 6)}, line_length=60, positions=[20, 35, 45, 60])
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith(("Total", "Auxiliary"))]
    assert max(len(line) for line in lines) == 60
    conv = next(line for line in lines if line.startswith("conv1(Convolution)"))
    assert conv[20:].startswith("4x6x6") and conv[35:].startswith("112") and conv[45:].startswith("data")


def test_print_summary_without_shapes_and_with_shape_attributes(capsys):
    x = S.FullyConnected(S.Variable("data"), num_hidden=4, name="fc")
    sg.viz.print_summary(x)
    out = capsys.readouterr().out
    assert "fc(FullyConnected)" in out and "?" in out and "give shape=" in out
    sg.viz.print_summary(S.FullyConnected(S.Variable("data", shape=(2, 3)), num_hidden=4, name="fc"))
    assert "Total params: 16\n" in capsys.readouterr().out  # the __shape__ attribute is used


def test_print_summary_errors(convnet):
    with pytest.raises(TypeError, match="must be a Symbol"):
        sg.viz.print_summary("net")
    with pytest.raises(ValueError, match="input shape is incomplete"):
        sg.viz.print_summary(convnet, shape={"softmax_label": (2,)})


def test_plot_network_mxnet_look(convnet):
    dot = sg.viz.plot_network(convnet, shape={"data": (2, 3, 6, 6)}, title="convnet", save_format="svg")
    assert type(dot).__name__ == "Digraph" and dot.name == "convnet" and dot.format == "svg"
    src = dot.source
    assert set(re.findall(r"^\t(\w+) \[", src, re.M)) == {
        "data",
        "conv1",
        "bn1",
        "relu1",
        "pool1",
        "flatten1",
        "fc",
        "softmax_label",
        "softmax",
    }
    colors = dict(re.findall(r"^\t(\w+) \[.*?fillcolor=\"(#\w+)\"", src, re.S | re.M))
    assert colors["data"] == "#8dd3c7" and colors["conv1"] == colors["fc"] == "#fb8072"
    assert colors["relu1"] == "#ffffb3" and colors["bn1"] == "#bebada" and colors["pool1"] == "#80b1d3"
    assert colors["flatten1"] == "#fdb462" and colors["softmax"] == "#b3de69"
    assert "Convolution\n3x3/1x1, 4" in src and "Pooling\nmax, 2x2/2x2" in src and "Activation\nrelu" in src
    edges = dict(((a, b), lab) for a, b, lab in re.findall(r"^\t(\w+) -> (\w+) \[label=\"?([\w]*)\"?", src, re.M))
    assert edges[("conv1", "data")] == "3x6x6" and edges[("pool1", "relu1")] == "4x6x6"
    assert edges[("flatten1", "pool1")] == "4x3x3" and edges[("fc", "flatten1")] == "36"
    assert "dir=back" in src and "arrowtail=open" in src


def test_plot_network_weights_attrs_and_custom_ops(convnet):
    src = sg.viz.plot_network(convnet).source
    assert "conv1_weight" not in src and "bn1_moving_var" not in src and 'label=""' in src  # no shapes known
    shown = sg.viz.plot_network(convnet, hide_weights=False, node_attrs={"shape": "oval"}).source
    assert "conv1_weight" in shown and "fc -> fc_bias" in shown and "bn1 -> bn1_moving_var" in shown
    assert "shape=oval" in shown and "shape=box" not in shown
    x = S.split(S.Variable("x", shape=(2, 4)), num_outputs=2, axis=1, name="sp")
    y = S.elemwise_add(x[0], S.tanh(x[1], name="t"), name="add")
    src = sg.viz.plot_network(y).source
    # each edge carries the shape of the output it comes from (both 2x2 here; the batch axis is left out)
    assert re.search(r"add -> sp \[label=2 ", src) and re.search(r"t -> sp \[label=2 ", src)


def test_render_dot_always_and_other_formats_with_dot(tmp_path, monkeypatch, convnet):
    dot = sg.viz.plot_network(convnet, shape={"data": (2, 3, 6, 6)})
    sg.viz.render(dot, tmp_path / "g.dot")
    assert (tmp_path / "g.dot").read_text() == dot.source
    if shutil.which("dot"):
        sg.viz.render(dot, tmp_path / "g.svg")
        assert "<svg" in (tmp_path / "g.svg").read_text()
        sg.viz.render(dot, tmp_path / "g.png")
        assert (tmp_path / "g.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RuntimeError, match=r"'dot' program.*apt-get install graphviz"):
        sg.viz.render(dot, tmp_path / "g.pdf")
    with pytest.raises(ValueError, match="extension"):
        sg.viz.render(dot, tmp_path / "g.gif")


def test_plot_network_without_the_graphviz_package(monkeypatch, convnet):
    monkeypatch.setitem(sys.modules, "graphviz", None)
    with pytest.raises(ImportError, match="pip install graphviz"):
        sg.viz.plot_network(convnet)


def test_print_summary_with_attribute_keywords(capsys):
    # MXNet: test_viz.py::test_print_summary (lr_mult/wd_mult on op creators and a Variable; with and without shapes)
    data = S.Variable("data")
    bias = S.Variable("fc1_bias", lr_mult=1.0)
    emb1 = S.Embedding(data=data, name="emb1", input_dim=100, output_dim=28)
    conv1 = S.Convolution(data=emb1, name="conv1", num_filter=32, kernel=(3, 3), stride=(2, 2))
    bn1 = S.BatchNorm(data=conv1, name="bn1")
    act1 = S.Activation(data=bn1, name="relu1", act_type="relu")
    mp1 = S.Pooling(data=act1, name="mp1", kernel=(2, 2), stride=(2, 2), pool_type="max")
    fc1 = S.FullyConnected(data=mp1, bias=bias, name="fc1", num_hidden=10, lr_mult=0)
    fc2 = S.FullyConnected(data=fc1, name="fc2", num_hidden=10, wd_mult=0.5)
    sc1 = S.SliceChannel(data=fc2, num_outputs=10, name="slice_1", squeeze_axis=0)
    sg.viz.print_summary(sc1)
    assert "fc2(FullyConnected)" in capsys.readouterr().out
    sg.viz.print_summary(sc1, {"data": (1, 3, 28)})
    out = capsys.readouterr().out
    arg_shapes = dict(zip(sc1.list_arguments(), sc1.infer_shape(data=(1, 3, 28))[0]))
    params = sum(int(np.prod(s)) for n, s in arg_shapes.items() if n != "data")
    assert params == 2800 + (32 * 3 * 9 + 32) + 64 + (10 * 32 * 6 * 6 + 10) + 110 and f"Total params: {params}\n" in out
    assert fc1.get_internals()["fc1_weight"].attr("lr_mult") == "0" and bias.attr("lr_mult") == "1.0"


def test_print_summary_takes_float_positions(capsys, convnet):
    # a known bug: absolute columns given as floats raised TypeError (slice indices must be integers)
    sg.viz.print_summary(convnet, shape={"data": (2, 3, 6, 6)}, line_length=60, positions=[20.0, 35.0, 45.0, 60.0])
    conv = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("conv1(Convolution)"))
    assert conv[20:].startswith("4x6x6") and conv[35:].startswith("112") and conv[45:].startswith("data")


def _twice_named_fc():
    net = S.Variable("data")
    net = S.FullyConnected(data=net, name="fc", num_hidden=128)
    net = S.Activation(data=net, name="relu1", act_type="relu")
    net = S.FullyConnected(data=net, name="fc", num_hidden=10)
    return S.SoftmaxOutput(data=net, name="out")


def test_plot_network_dtype_and_two_variables_of_one_name():
    # MXNet: test_viz.py::test_plot_network -- one RuntimeWarning naming the repeated names, shapes and dtypes
    pytest.importorskip("graphviz")
    net = _twice_named_fc()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        dot = sg.viz.plot_network(
            net, shape={"data": (100, 200)}, dtype={"data": np.float32}, node_attrs={"fixedsize": "false"}
        )
    assert len(w) == 1 and w[0].category is RuntimeWarning
    assert "There are multiple variables with the same name in your graph" in str(w[0].message)
    assert "fc" in str(w[0].message) and "fc_weight" in str(w[0].message)
    edges = re.findall(r"^\t(\w+) -> (\w+) \[label=\"([^\"]*)\"", dot.source, re.M)
    # each edge: the shape (batch axis left out) and dtype of the output it carries
    assert edges == [
        ("fc", "data", "200(float32)"),
        ("relu1", "fc", "128(float32)"),
        ("fc", "relu1", "128(float32)"),
        ("out", "fc", "10(float32)"),
        ("out", "out_label", "(float32)"),
    ]
    # MXNet's argument order: plot_network(symbol, title, save_format, shape, dtype, node_attrs, hide_weights)
    assert sg.viz.plot_network(S.exp(S.Variable("x")), "t", "svg").name == "t"
    with pytest.raises(ValueError, match="input dtype is incomplete"):
        sg.viz.plot_network(S.Group([S.Variable("a") + 1, S.exp(S.Variable("c"))]), dtype={"a": np.float32})


def test_print_summary_of_two_variables_of_one_name(capsys):
    sg.viz.print_summary(_twice_named_fc(), shape={"data": (100, 200)})
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("fc(")]
    # each fc row: its own output shape and parameter count (200*128 + 128, 128*10 + 10)
    assert rows == [["fc(FullyConnected)", "128", "25728", "data"], ["fc(FullyConnected)", "10", "1290", "relu1"]]


def test_print_summary_counts_the_weights_a_loop_body_reads(capsys):
    """A FullyConnected inside a foreach body: its weight and bias are inputs of the _foreach node, and they are
    that loop's parameters (counted once on its row: the body shares them across steps), not layers.

    MXNet 1.9.1's ``mx.viz.print_summary`` on this graph prints 0 for _foreach0 and 2 for head (it looks up the
    shape of '_foreach0_output', which a multi-output node does not have), total 2: no count a user can use. On
    the same layers unrolled (FullyConnected(5) on data of (3, 4), tanh, FullyConnected(2)) it prints fc 25,
    head 12, total 37: the counts expected here (5 * 4 + 5 and 2 * 5 + 2)."""
    data, init = S.var("data"), S.var("init")

    def body(x, states):
        out = S.Activation(S.FullyConnected(x, num_hidden=5, name="fc") + states[0], act_type="tanh", name="act")
        return out, [out]

    _, states = S.contrib.foreach(body, data, [init])
    net = S.FullyConnected(states[0], num_hidden=2, name="head")
    sg.viz.print_summary(net, shape={"data": (7, 3, 4), "init": (3, 5)})
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if "(" in line and not line.startswith("Layer")]
    loop = next(r for r in rows if r[0].endswith("(_foreach)"))  # _foreach<n>: numbered by the NameManager
    assert loop[1:3] == ["3x5", str(5 * 4 + 5)]
    assert next(r for r in rows if r[0] == "head(FullyConnected)")[1:3] == ["2", str(2 * 5 + 2)]
    assert [r[0] for r in rows] == ["data(null)", "init(null)", loop[0], "head(FullyConnected)"]  # no weight rows
    assert "Total params: 37\n" in out
