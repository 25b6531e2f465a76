"""Every code block of README.md runs as written.

``python`` blocks run each in a fresh interpreter (so each block's own imports must suffice); ``bash`` blocks
run their commands except package installs (``pip install ...`` parts of a ``&&`` chain), which CI's own
set-up command already did, the test-suite command itself (``pytest``), which is what is running, and the
documentation build (``python -m sphinx``), which ``tests/test_docs.py`` runs with the same arguments.
Blocks fenced without a language are output shown to the reader, not code.
"""

from __future__ import annotations

import difflib
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
            if part and "pip install" not in part and "pytest" not in part and "-m sphinx" not in part:
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


# == numbers and samples the README states (issue 21: they drifted) ==============================================
#
# The README's figures are checked against what the code does now:
# * "about N tests": N is the default suite's count (``pytest --collect-only``, the README's own command 2, which
#   deselects ``slow``) rounded to the hundred, within COUNT_TOLERANCE of it (the suite grows by a few tests a day).
# * a count of skipped tests or a run time of the suite cannot be checked here (skips depend on MXNet's cache and
#   venv and on a GPU; times on the machine): the paragraph on the suite must not state them.
# * a sample output block (fenced without a language, its first line ``$ symgrad ...``) is what that command prints
#   now: its lines appear in the command's output, in order and adjacent, a line ``...`` standing for lines left
#   out; compared are the rows (argument, shape, req, checked, verdict, diagnosis) and every other line, with
#   white-space runs as one space; not compared are the error columns (max |error|, err/tol: rounding differs
#   between BLAS builds), times (``in 10.2 s``) and the number of worker processes (the machine's cores).

COUNT_TOLERANCE = 0.03
SUITE_COUNT = re.compile(r"about (\d{1,3}(?: \d{3})*) tests")
UNCHECKABLE = [
    (re.compile(r"\d[\d ]* of them skipped"), "a count of skipped tests"),
    (re.compile(r"took \d[\d.]* ?(?:s|min)\b[^.]*python -m pytest"), "a run time of the suite"),
]
ROW_REQS = ("write", "add", "null")
sys.path.insert(0, str(ROOT / "tests"))
import gluon_exports  # noqa: E402


def _readme():
    return (ROOT / "README.md").read_text(encoding="utf-8")


def _suite_paragraph(text):
    """The README's paragraph on the test suite (the one giving its size)."""
    paragraphs = [p for p in re.split(r"\n\s*\n", text) if SUITE_COUNT.search(p)]
    assert len(paragraphs) == 1, f"README: expected one paragraph stating 'about N tests', found {len(paragraphs)}"
    return paragraphs[0]


def _collected():
    """How many tests the default suite collects (``python -m pytest --collect-only -q``, as the README's command
    2 runs it: ``addopts`` deselects ``slow``)."""
    env = {k: v for k, v in _env().items() if k != "PYTEST_ADDOPTS" and not k.startswith("PYTEST_XDIST")}
    argv = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    res = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    m = re.search(r"^(\d+)(?:/\d+)? tests? collected", res.stdout, re.M)
    assert res.returncode == 0 and m, f"pytest --collect-only failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return int(m.group(1))


def test_the_readme_states_the_suites_size_as_collected():
    stated = int(SUITE_COUNT.search(_suite_paragraph(_readme())).group(1).replace(" ", ""))
    collected = _collected()
    assert stated % 100 == 0, f"README: 'about {stated} tests' is not rounded to the hundred"
    assert abs(collected - stated) <= COUNT_TOLERANCE * collected, (
        f"README says 'about {stated:,} tests' but the default suite collects {collected:,}: "
        f"write 'about {round(collected, -2):,} tests'".replace(",", " ")
    )


def test_the_readme_states_no_suite_figure_that_cannot_be_checked():
    paragraph = _suite_paragraph(_readme())
    for pattern, what in UNCHECKABLE:
        m = pattern.search(paragraph)
        assert m is None, f"README states {what} ({m.group(0)!r}), which drifts unchecked: leave it out"


def _samples():
    """``pytest.param(block)`` for each sample output block of the README; a sample whose model files are not in
    the checkout (a real Gluon export from the cache) is a whole-model check: ``slow``, as in test_model_check."""
    text = _readme()
    out = []
    for m in FENCE.finditer(text):
        if m.group(1) or not m.group(2).startswith("$ symgrad "):
            continue
        line = text[: m.start()].count("\n") + 1
        marks = [] if all((ROOT / f).exists() for f in _model_files(m.group(2))) else [pytest.mark.slow]
        out.append(pytest.param(m.group(2), id=f"sample-line{line}", marks=marks))
    return out


def _model_files(block):
    return [a for a in shlex.split(block.splitlines()[0][2:]) if a.endswith((".json", ".params"))]


def _stable(line):
    """The part of an output line a sample must match (see the comment above)."""
    tokens = line.split()
    if len(tokens) >= 7 and tokens[2] in ROW_REQS:
        tokens[4:6] = ["<error>", "<err/tol>"]
    line = " ".join(tokens)
    line = re.sub(r"\bin \d+(?:\.\d+)? s\b", "in <time> s", line)
    return re.sub(r"\bover \d+ worker process(?:es)?\b", "over <n> worker processes", line)


def sample_mismatch(sample, output):
    """None if ``sample`` (the block's lines after its ``$`` line) matches ``output``, else what differs."""
    got = [_stable(line) for line in output.splitlines()]
    chunks = [[]]
    for line in sample.splitlines():
        if line.strip() == "...":
            chunks.append([])
        else:
            chunks[-1].append(_stable(line))
    start = 0
    for chunk in chunks:
        while chunk and not chunk[0]:
            chunk.pop(0)
        while chunk and not chunk[-1]:
            chunk.pop()
        at = next((i for i in range(start, len(got) - len(chunk) + 1) if got[i : i + len(chunk)] == chunk), None)
        if at is None:
            near = max(range(len(got)), key=lambda i: sum(a == b for a, b in zip(got[i:], chunk)), default=0)
            diff = difflib.unified_diff(chunk, got[near : near + len(chunk)], "README", "now", lineterm="")
            return "\n".join(diff)
        start = at + len(chunk)
    return None


def _run_sample(block):
    argv = shlex.split(block.splitlines()[0][2:])
    cwd = ROOT
    files = _model_files(block)
    if files and not all((ROOT / f).exists() for f in files):
        nets = {re.sub(r"-(symbol\.json|\d{4}\.params)$", "", os.path.basename(f)) for f in files}
        assert len(nets) == 1, f"README sample names the files of several models: {files}"
        cwd = Path(gluon_exports.export_path(nets.pop())[0]).parent  # skips without the cache or MXNet's venv
    res = subprocess.run(
        [sys.executable, "-m", "symgrad", *argv[1:]], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=600
    )
    return res.stdout + res.stderr


@pytest.mark.parametrize("block", _samples())
def test_a_readme_sample_output_is_what_the_command_prints(block):
    output = _run_sample(block)
    sample = block.split("\n", 1)[1]
    diff = sample_mismatch(sample, output)
    assert diff is None, (
        f"README sample of `{block.splitlines()[0][2:]}` drifted:\n{diff}\n--- output now ---\n{output}"
    )


def test_a_drifted_sample_is_caught_and_errors_and_times_are_not_compared():
    output = _run_sample("$ symgrad check --example lenet")
    lines = output.splitlines()
    table = lines[lines.index(next(line for line in lines if line.startswith("argument"))) :]
    assert sample_mismatch("\n".join(table), output) is None
    # other error values, another time, rows left out with "...": still the same sample
    rows = [re.sub(r"\d\.\d\de-\d\d", "9.99e-01", line) for line in table]
    rows = [re.sub(r" in [\d.]+ s$", " in 12345.6 s", line) for line in rows]
    assert sample_mismatch("\n".join([rows[0], "...", *rows[3:]]), output) is None
    # a verdict, a shape or the summary that changed is drift
    for old, new in (("pass", "FAIL"), ("6x1x5x5", "6x1x3x3"), ("9 passed", "8 passed")):
        drifted = "\n".join(table).replace(old, new, 1)
        assert sample_mismatch(drifted, output) is not None, (old, new)
    # and so are rows out of order
    assert sample_mismatch("\n".join([table[0], "...", table[4], table[3]]), output) is not None


def test_the_readme_has_a_sample_output_to_check():
    assert _samples(), "README: no sample `$ symgrad ...` output block left to check"


def test_ci_runs_exactly_the_readmes_test_command():
    # command 2 of the set-up (the one that runs pytest) is the last line of .ci/run, word for word
    setup = re.search(r"^## Set-up\n.*?```bash\n(.*?)```", _readme(), re.S | re.M).group(1)
    (command,) = [ln for ln in setup.splitlines() if "pytest" in ln and not ln.startswith("#")]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").rstrip().splitlines()
    assert ci[-1] == command, f".ci/run ends with {ci[-1]!r}, the README's test command is {command!r}"
