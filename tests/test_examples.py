"""The shipped examples run and say what they promise."""

import runpy
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_wrong_bias_gradient_example_is_caught_by_every_checker(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["wrong_bias_gradient.py"])
    runpy.run_path(str(EXAMPLES / "wrong_bias_gradient.py"), run_name="__main__")
    out = capsys.readouterr().out
    # one report per checker, each naming the bias argument and the wrong broadcast reduction
    assert out.count("err.pattern='broadcast'") == 3
    assert out.count("wrong broadcast reduction") >= 3
    assert "err.arg_name='bias'" in out
