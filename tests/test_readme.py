"""Every code block of README.md runs as written.

``python`` blocks run each in a fresh interpreter (so each block's own imports must suffice); ``bash`` blocks
run their commands except package installs (``pip install ...`` parts of a ``&&`` chain), which CI's own
set-up command already did, and the test-suite command itself (``pytest``), which is what is running.
Blocks fenced without a language are output shown to the reader, not code.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def _blocks(lang):
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    out = []
    for k, m in enumerate(FENCE.finditer(text)):
        if m.group(1) == lang:
            line = text[: m.start()].count("\n") + 1
            out.append(pytest.param(m.group(2), id=f"{lang}-block{k}-line{line}"))
    return out


def _commands(block):
    """The commands of a bash block, comments and install steps left out."""
    for line in block.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        for part in line.split("&&"):
            part = part.strip()
            if part and "pip install" not in part and "pytest" not in part:
                yield part


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.setdefault("MPLBACKEND", "Agg")
    return env


@pytest.mark.parametrize("code", _blocks("python"))
def test_python_block_runs(code, tmp_path):
    script = tmp_path / "block.py"
    script.write_text(code, encoding="utf-8")
    res = subprocess.run(
        [sys.executable, str(script)], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, f"README block failed:\n{code}\n--- stderr ---\n{res.stderr[-4000:]}"


@pytest.mark.parametrize("block", _blocks("bash"))
def test_bash_block_runs(block, tmp_path):
    for command in _commands(block):
        argv = shlex.split(command)
        if argv[0] == "python":
            argv[0] = sys.executable
        elif argv[0] == "symgrad":
            argv = [sys.executable, "-m", "symgrad", *argv[1:]]
        argv = [a.replace("OUT_DIR", str(tmp_path)) for a in argv]
        res = subprocess.run(argv, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, f"README command failed: {command}\n--- stderr ---\n{res.stderr[-4000:]}"


def test_the_readme_has_code_to_run():
    assert len(_blocks("python")) >= 5 and len(_blocks("bash")) >= 1
