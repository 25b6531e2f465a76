"""``sg.viz.print_summary`` and ``sg.viz.plot_network`` (MXNet 1.9's signatures and look)."""

import os
import re
import shutil
import sys

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
