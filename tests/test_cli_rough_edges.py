"""Rough edges of the ``symgrad`` command a newcomer hit (issue 21): ``info`` on a Gluon export without shapes
(no "Total params: 0"; ``--params`` gives the parameters' shapes), ``--debug`` keeping exit code 2 for errors,
and an MXNet 2 (mx.np / mx.npx) JSON said to be unsupported rather than "unknown operator"."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import symgrad as sg
from symgrad import cli

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gluon_exports  # noqa: E402

MODELS = os.path.join(HERE, "fixtures", "mxnet_models")
# written by MXNet 1.9.1's Gluon export: conv (weight __shape__ (4, 0, 3, 3)), BatchNorm, pool, dense; no data shape
GLUON, GLUON_PARAMS = os.path.join(MODELS, "gluon-symbol.json"), os.path.join(MODELS, "gluon-0000.params")


def run(capsys, *argv):
    """``(exit code, stdout, stderr)`` of ``symgrad ARGV`` run in this process."""
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def param_counts(out):
    """``{layer: parameter count}`` of the rows of an info table."""
    rows = [line.split() for line in out.splitlines() if "(" in line and not line.startswith("Layer")]
    return {row[0]: row[2] for row in rows if len(row) >= 3}


# == info on a Gluon export ====================================================================================


def test_info_without_shapes_says_which_options_give_them_instead_of_a_zero_total(capsys):
    code, out, err = run(capsys, "info", GLUON)
    assert code == 0 and err == ""
    assert "gnet_conv0_fwd(Convolution)" in out  # the table still lists the layers
    assert "Total params: 0" not in out and "Total params: unknown" in out
    hint = out.splitlines()[-1]
    assert hint.startswith("shapes unknown: give the input shapes with --shape data=D1,D2,...")
    assert f"add --params {GLUON_PARAMS} to take the parameters' shapes" in hint  # the checkpoint beside it


def test_info_takes_the_parameters_shapes_from_params(capsys):
    code, out, err = run(capsys, "info", GLUON, "--params", GLUON_PARAMS, "--shape", "data=2,3,6,6")
    assert code == 0, err
    counts = param_counts(out)
    assert counts["gnet_conv0_fwd(Convolution)"] == "112" and counts["gnet_dense0_fwd(FullyConnected)"] == "111"
    arg_params, _ = sg.serialization.load_params(GLUON_PARAMS)
    assert f"Total params: {sum(a.size for a in arg_params.values())}" in out and "Auxiliary states: 8" in out


def test_info_params_shapes_must_agree_with_the_data_shape(capsys):
    code, out, err = run(capsys, "info", GLUON, "--params", GLUON_PARAMS, "--shape", "data=1,3,8,8")
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert "'gnet_dense0_fwd'" in err and "input 'weight' has shape (3, 36), expected (3, 64)" in err


def test_info_params_without_the_data_shape_says_the_data_still_needs_one(capsys):
    code, out, err = run(capsys, "info", GLUON, "--params", GLUON_PARAMS)
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert "the shape of data is unknown" in err and "--shape" in err
    assert "--params gives only the parameters' shapes" in err


def test_info_params_notes_entries_that_are_not_inputs(capsys, tmp_path):
    arg_params, aux_params = sg.serialization.load_params(GLUON_PARAMS)
    extra = {f"arg:{k}": v for k, v in arg_params.items()}
    extra.update({f"aux:{k}": v for k, v in aux_params.items()}, **{"arg:stray_weight": np.zeros((2, 2), "f4")})
    path = tmp_path / "extra.npz"
    np.savez(path, **extra)
    code, out, err = run(capsys, "info", GLUON, "--params", path, "--shape", "data=1,3,6,6")
    assert code == 0, err
    assert "Total params: 231" in out and f"note: 1 entries of {path} are not inputs of the model: stray_weight" in out


@pytest.mark.parametrize("bad, message", [("missing.params", "no such file"), ("wrong.params", "wrong.params")])
def test_info_params_errors_exit_2(capsys, tmp_path, bad, message):
    (tmp_path / "wrong.params").write_bytes(b"\x00" * 7)
    code, _, err = run(capsys, "info", GLUON, "--params", tmp_path / bad, "--shape", "data=1,3,6,6")
    assert code == 2 and len(err.splitlines()) == 1 and message in err


def test_info_on_a_real_gluon_export(capsys):
    sym_path, params_path, entry = gluon_exports.export_path("resnet18_v1")
    code, out, _ = run(capsys, "info", sym_path)
    assert code == 0 and "Total params: 0" not in out and "Total params: unknown" in out
    assert f"--params {params_path}" in out.splitlines()[-1]
    shape = ",".join(map(str, entry["small_shape"]))
    code, out, err = run(capsys, "info", sym_path, "--params", params_path, "--shape", f"data={shape}")
    assert code == 0, err
    assert "Total params: 11689512" in out  # MXNet's count of resnet18_v1 (aux states apart)


# == --debug keeps the exit codes ==============================================================================


def test_debug_error_exits_2_with_the_traceback(capsys, tmp_path):
    code, out, err = run(capsys, "--debug", "check", tmp_path / "missing.json")
    assert code == 2 and out == ""
    assert err.startswith("Traceback") and "CLIError" in err
    assert err.splitlines()[-1] == f"symgrad: error: {tmp_path / 'missing.json'}: no such file"
    code, _, err = run(capsys, "info", GLUON, "--shape", "data=x", "--debug")  # a usage error
    assert code == 2 and "Traceback" in err and "expected NAME=D1,D2,..." in err.splitlines()[-1]


def test_debug_on_the_command_line_exits_2(tmp_path):
    (tmp_path / "garbage.json").write_text("{not json")
    done = subprocess.run(
        [sys.executable, "-m", "symgrad", "--debug", "info", str(tmp_path / "garbage.json")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" in done.stderr and "SerializationError" in done.stderr and "not valid JSON" in done.stderr


def test_debug_unexpected_error_exits_2_without_the_debug_hint(capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(sg.viz, "print_summary", broken)
    code, _, err = run(capsys, "--debug", "info", "--example", "lenet")
    assert code == 2 and "Traceback" in err
    assert err.splitlines()[-1] == "symgrad: error: RuntimeError: a bug"


# == MXNet 2 (mx.np / mx.npx) files ==============================================================================


def _mxnet2_json(op="_npx_activation"):
    """A minimal MXNet-2-style symbol file: data -> OP -> _np_add(., data)."""
    return {
        "nodes": [
            {"op": "null", "name": "data", "inputs": []},
            {"op": op, "name": "act", "attrs": {"act_type": "relu"}, "inputs": [[0, 0, 0]]},
            {"op": "_np_add", "name": "add", "inputs": [[1, 0, 0], [0, 0, 0]]},
        ],
        "arg_nodes": [0],
        "node_row_ptr": [0, 1, 2, 3],
        "heads": [[2, 0, 0]],
        "attrs": {"mxnet_version": ["int", 20000]},
    }


def test_mxnet2_json_says_the_numpy_front_end_is_not_supported():
    with pytest.raises(sg.SerializationError) as info:
        sg.sym.load_json(json.dumps(_mxnet2_json()))
    text = str(info.value)
    assert "node 1 (_npx_activation 'act'): unknown operator '_npx_activation'" in text
    assert "MXNet 2's NumPy front end (mx.np / mx.npx), which symgrad does not support" in text
    assert "symgrad reads MXNet 1.x symbol files" in text and "legacy mx.sym API" in text


@pytest.mark.parametrize("op", ["_np_frobnicate", "_npi_frobnicate"])
def test_every_numpy_front_end_prefix_gets_the_message(op):
    with pytest.raises(sg.SerializationError, match="MXNet 2's NumPy front end"):
        sg.sym.load_json(json.dumps(_mxnet2_json(op)))


def test_other_unknown_operators_keep_the_short_message():
    with pytest.raises(sg.SerializationError) as info:
        sg.sym.load_json(json.dumps(_mxnet2_json("Frobnicate")))
    assert str(info.value).endswith("unknown operator 'Frobnicate'")


def test_numpy_front_end_names_symgrad_registers_still_load():
    doc = _mxnet2_json("_np_cumsum")  # an alias symgrad registers; the file still fails, at _np_add
    doc["nodes"][1]["attrs"] = {}
    with pytest.raises(sg.SerializationError, match="node 2 \\(_np_add 'add'\\): unknown operator '_np_add': it is"):
        sg.sym.load_json(json.dumps(doc))
    doc["nodes"] = doc["nodes"][:2]
    doc.update(node_row_ptr=[0, 1, 2], heads=[[1, 0, 0]])
    sym = sg.sym.load_json(json.dumps(doc))
    assert sym.list_arguments() == ["data"]


def test_cli_on_an_mxnet2_file_exits_2_with_the_message(capsys, tmp_path):
    path = tmp_path / "mx2-symbol.json"
    path.write_text(json.dumps(_mxnet2_json()))
    code, out, err = run(capsys, "info", path)
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert "'_npx_activation'" in err and "NumPy front end" in err and "MXNet 1.x" in err
