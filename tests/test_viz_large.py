"""Large graphs drawn readably (issue 21): ``plot_network``'s ``wrap``/``cluster``/``collapse`` and ``symgrad plot``.

DenseNet-121 (427 ops, a chain 427 ops long) drawn in MXNet's single column is a PNG of 164 x 32 766 pixels
(graphviz shrinks it by half to fit its bitmap limit): unreadable. The structure tests read the DOT text and need
no ``dot`` program; the rendering test skips without it.
"""

import os
import re
import shutil
from collections import Counter

import pytest

import symgrad as sg
from symgrad import cli, viz

pytest.importorskip("graphviz")

S = sg.sym
HERE = os.path.dirname(os.path.abspath(__file__))
DENSENET = os.path.join(HERE, "fixtures", "zoo", "densenet121-symbol.json")  # written by MXNet 1.9.1
MOBILENET_V2 = os.path.join(HERE, "fixtures", "zoo", "mobilenetv2_0.25-symbol.json")  # written by MXNet 1.9.1
CONVNET = os.path.join(HERE, "fixtures", "mxnet_models", "convnet-symbol.json")
SHAPE = {"data": (1, 3, 224, 224)}
STAGES = {"densenet0_stage1": 42, "densenet0_stage2": 84, "densenet0_stage3": 168, "densenet0_stage4": 112}
_NAME = r'(?:\w+|"[^"]*")'


def _name(text):
    return text.strip('"')


def parse(src):
    """The DOT text of ``plot_network`` as ``{"nodes": {name: attributes}, "clusters": {label: [names]},
    "ranks": [[names]], "edges": [(tail, head, attributes)]}``."""
    nodes = {_name(n): a for n, a in re.findall(rf"^\t+({_NAME}) \[(.*?)\]$", src, re.M | re.S)}
    clusters = {}
    for body in re.findall(r"^\tsubgraph cluster_\d+ \{\n(.*?)^\t\}$", src, re.M | re.S):
        label = re.search(r'label=("[^"]*"|\S+)', body.splitlines()[0]).group(1).strip('"')
        clusters[label] = [_name(n) for n in re.findall(rf"^\t\t({_NAME}) \[", body, re.M)]
    ranks = [
        [_name(n) for n in body.split()]
        for body in re.findall(r"^\t\{\n\t\trank=same\n(.*?)^\t\}$", src, re.M | re.S)
        if "->" not in body
    ]
    edges = [
        (_name(a), _name(b), attrs) for a, b, attrs in re.findall(rf"^\t+({_NAME}) -> ({_NAME}) \[(.*?)\]$", src, re.M)
    ]
    return {"nodes": nodes, "clusters": clusters, "ranks": ranks, "edges": edges}


@pytest.fixture(scope="module")
def densenet():
    return sg.sym.load(DENSENET)


def _edge_label(attrs):
    return re.search(r'label=("[^"]*"|\S*)', attrs).group(1).strip('"')


def _ops(g):
    return [n for n, a in g["nodes"].items() if "shape=box" in a]


def _visible(g):
    return [(a, b, attrs) for a, b, attrs in g["edges"] if "style=invis" not in attrs]


def test_densenet_is_wrapped_into_columns_with_a_frame_per_stage(densenet):
    plain = parse(viz.plot_network(densenet, shape=SHAPE, wrap=0, cluster=False).source)
    g = parse(viz.plot_network(densenet, shape=SHAPE).source)  # automatic: 427 ops > LARGE_GRAPH
    assert len(_ops(plain)) == 427 > viz.LARGE_GRAPH and not plain["clusters"] and not plain["ranks"]
    # nothing lost: the same boxes and the same edges (with their shape labels), whatever their direction
    assert set(_ops(g)) == set(_ops(plain))
    assert Counter((frozenset((a, b)), _edge_label(t)) for a, b, t in _visible(g)) == Counter(
        (frozenset((a, b)), _edge_label(t)) for a, b, t in plain["edges"]
    )
    # the chain (427 ops long) wrapped into columns: each op in one row group; a row holds one op per column
    rows = g["ranks"]
    assert sorted(n for r in rows for n in r) == sorted(_ops(g) + ["data"])  # the data beside the first op
    columns = sum(1 for n in g["nodes"] if n.startswith("__column"))
    assert 20 <= len(rows) <= 40 and 427 / len(rows) <= columns < 427 / len(rows) + 1 and columns >= 10
    assert max(len([n for n in r if n != "data"]) for r in rows) == columns  # one op per column: a chain
    # alternate columns read downwards (edges turned round), edges into the next column leave the ranking alone
    assert sum("dir=forward" in t for _, _, t in _visible(g)) > 100
    assert sum("constraint=false" in t for _, _, t in _visible(g)) >= columns - 1
    # a frame per stage and column, labelled with the stage's prefix, holding only its ops
    per_stage = Counter()
    for label, members in g["clusters"].items():
        stage = re.fullmatch(r"(densenet0_stage\d)(?: \(\d+/\d+\))?", label).group(1)
        assert all(n.startswith(stage + "_") for n in members)
        per_stage[stage] += len(members)
    assert per_stage == STAGES  # the stem, the transitions and the head stay unframed
    assert "densenet0_conv0_fwd" not in {n for m in g["clusters"].values() for n in m}


def test_small_graphs_keep_mxnet_look_and_the_threshold_is_the_op_count():
    net = sg.sym.load(CONVNET)
    src = viz.plot_network(net, shape={"data": (2, 3, 6, 6)}).source
    assert "subgraph" not in src and "newrank" not in src and "rank=same" not in src and "dir=forward" not in src

    def chain(n):
        x = S.Variable("data", shape=(2, 3))
        for i in range(n):
            x = S.tanh(x, name=f"net0_{'ab'[2 * i // n]}_tanh{i}_fwd")
        return x

    at = parse(viz.plot_network(chain(viz.LARGE_GRAPH)).source)
    above = parse(viz.plot_network(chain(viz.LARGE_GRAPH + 1)).source)
    assert not at["ranks"] and not at["clusters"]  # up to LARGE_GRAPH ops: MXNet's single column
    assert above["ranks"] and {re.sub(r" \(.*", "", b) for b in above["clusters"]} == {"net0_a", "net0_b"}
    # asked for explicitly, at any size
    small = parse(viz.plot_network(chain(6), wrap=2, cluster=True).source)
    assert len(small["ranks"]) == 2  # levels 0-1, 2-3, 4-5: three columns, net0_a's ops in two of them
    assert set(small["clusters"]) == {"net0_a (1/2)", "net0_a (2/2)", "net0_b (1/2)", "net0_b (2/2)"}
    # names without a block structure: no frames, even when asked
    assert not parse(viz.plot_network(net, cluster=True).source)["clusters"]


def test_collapse_draws_each_stage_as_one_box(densenet):
    g = parse(viz.plot_network(densenet, shape=SHAPE, collapse=True).source)
    blocks = {n: a for n, a in g["nodes"].items() if "shape=box3d" in a}
    assert set(blocks) == set(STAGES)
    for stage, count in STAGES.items():
        assert f"{count} ops: {count // 7 * 2} BatchNorm" in blocks[stage]
    # the 21 ops outside the stages, the 4 stages and the data: one page, no wrapping needed
    assert len(g["nodes"]) == 21 + 4 + 1 and not g["ranks"] and not g["clusters"]
    edges = {(a, b): _edge_label(t) for a, b, t in g["edges"]}
    assert edges[("densenet0_stage1", "densenet0_pool0_fwd")] == "64x56x56"
    assert edges[("densenet0_batchnorm1_fwd", "densenet0_stage1")] == "256x56x56"
    assert edges[("densenet0_stage2", "densenet0_pool1_fwd")] == "128x28x28"
    # with the weights drawn, a stage's own parameters go inside its box; the stem's stay visible
    shown = viz.plot_network(densenet, shape=SHAPE, collapse=True, hide_weights=False).source
    assert "densenet0_stage1_conv0_weight" not in shown and "densenet0_conv0_weight" in shown


def test_blocks_follow_gluon_name_prefixes():
    mobilenet = sg.sym.load(MOBILENET_V2)
    ops = [n.name for n in mobilenet.topo_nodes() if n.op is not None]
    blocks = viz._blocks(ops)
    # the ReLU6 sub-blocks (..._linearbottleneck0_relu60_relu6) belong to their bottleneck
    assert blocks["mobilenetv20_features_linearbottleneck0_relu60_relu6"] == "mobilenetv20_features_linearbottleneck0"
    assert Counter(blocks.values())["mobilenetv20_features_linearbottleneck0"] == 8
    assert "mobilenetv20_features_conv0_fwd" not in blocks  # the outer block holds the others: not framed
    assert viz._blocks(["conv1", "bn1", "relu1", "fc"]) == {}


def test_a_block_that_is_not_contiguous_still_collapses():
    x = S.Variable("data", shape=(2, 3))
    for name in ("p_a", "q_a", "p_b", "q_b", "p_c", "q_c"):  # p and q interleaved: the collapsed graph has a cycle
        x = S.tanh(x, name=name)
    g = parse(viz.plot_network(x, collapse=True, wrap=1).source)
    assert {"p", "q"} <= set(g["nodes"]) and {("q", "p"), ("p", "q")} <= {(a, b) for a, b, _ in _visible(g)}


def test_weights_drawn_beside_their_op_and_no_frames_around_wrapped_columns(densenet):
    # graphviz's dot fails ("trouble in init_rank") on frames around wrapped columns with the weights drawn
    g = parse(viz.plot_network(densenet, shape=SHAPE, hide_weights=False).source)
    assert g["ranks"] and not g["clusters"]
    weight = "densenet0_stage1_conv0_weight"
    assert any(weight in r and "densenet0_stage1_conv0_fwd" in r for r in g["ranks"])  # in its reader's row
    framed = parse(viz.plot_network(densenet, shape=SHAPE, hide_weights=False, cluster=True).source)
    assert framed["clusters"] and not framed["ranks"]  # frames asked for: one column
    with pytest.raises(ValueError, match="cluster=True with hide_weights=False takes no wrap"):
        viz.plot_network(densenet, hide_weights=False, cluster=True, wrap=30)


def test_layout_arguments_are_checked(densenet):
    for bad in (-1, True, 2.5):
        with pytest.raises(ValueError, match="wrap must be an int >= 0"):
            viz.plot_network(densenet, wrap=bad)
    with pytest.raises(TypeError, match="cluster must be True, False or None"):
        viz.plot_network(densenet, cluster="yes")
    with pytest.raises(TypeError):
        viz.plot_network(densenet, "t", "svg", None, None, {}, True, True)  # the new ones are keyword-only


def test_png_size_reads_the_header(tmp_path):
    png = tmp_path / "x.png"
    png.write_bytes(
        b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + (164).to_bytes(4, "big") + (32766).to_bytes(4, "big")
    )
    assert viz.png_size(png) == (164, 32766)
    (tmp_path / "x.svg").write_text("<svg/>")
    with pytest.raises(ValueError, match="not a PNG file"):
        viz.png_size(tmp_path / "x.svg")


def _fake_render(size):
    def render(dot, path):
        head = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + b"".join(d.to_bytes(4, "big") for d in size)
        with open(path, "wb") as f:
            f.write(head if str(path).endswith(".png") else dot.source.encode())

    return render


def test_cli_plot_options_and_the_hint_for_a_huge_png(capsys, tmp_path, monkeypatch):
    out = tmp_path / "d.dot"
    assert cli.main(["plot", DENSENET, "--collapse", "-o", str(out)]) == 0
    assert out.read_text().count("shape=box3d") == 4
    assert cli.main(["plot", DENSENET, "--wrap", "0", "--no-cluster", "-o", str(out)]) == 0
    assert "subgraph" not in out.read_text() and "rank=same" not in out.read_text()
    assert cli.main(["plot", DENSENET, "--wrap", "30", "--cluster", "-o", str(out)]) == 0
    g = parse(out.read_text())
    assert len(g["ranks"]) == 30 and g["clusters"]
    capsys.readouterr()
    assert cli.main(["plot", DENSENET, "--wrap", "-1", "-o", str(out)]) == 2
    assert "--wrap -1" in capsys.readouterr().err
    # a PNG taller than PNG_HINT_PX: a note on stderr with the ways out; a readable one: none
    monkeypatch.setattr(viz, "render", _fake_render((164, 32766)))
    assert cli.main(["plot", DENSENET, "--wrap", "0", "-o", str(tmp_path / "d.png")]) == 0
    err = capsys.readouterr().err
    assert "164 x 32766 pixels" in err and "--collapse" in err and "--wrap N" in err and ".svg" in err
    monkeypatch.setattr(viz, "render", _fake_render((4189, 5481)))
    assert cli.main(["plot", DENSENET, "-o", str(tmp_path / "d.png")]) == 0
    assert capsys.readouterr().err == ""
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["plot", "--help"])
    assert f"more than {viz.LARGE_GRAPH} ops" in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz's 'dot' program is not installed")
def test_densenet_png_is_readable(densenet, tmp_path):
    plain, wrapped = tmp_path / "plain.png", tmp_path / "wrapped.png"
    viz.render(viz.plot_network(densenet, shape=SHAPE, wrap=0, cluster=False), plain)
    viz.render(viz.plot_network(densenet, shape=SHAPE), wrapped)
    width, height = viz.png_size(plain)
    assert height > 30_000 and width < 300  # MXNet's column, shrunk by graphviz to its bitmap limit
    width, height = viz.png_size(wrapped)
    assert max(width, height) < cli.PNG_HINT_PX and 0.5 < width / height < 2  # wrapped: about a page's shape
    collapsed = tmp_path / "collapsed.png"
    viz.render(viz.plot_network(densenet, shape=SHAPE, collapse=True), collapsed)
    assert max(viz.png_size(collapsed)) < cli.PNG_HINT_PX
