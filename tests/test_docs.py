"""The documentation site (docs/): it builds with warnings as errors, and every code block of every page runs.

A page's ``python`` and ``bash`` blocks run in document order as one script, in a fresh interpreter and an empty
folder: python blocks share one namespace, each bash command runs where it stands (``pip install`` steps are left
out: the suite's own set-up did them). A bash command that is meant to fail says so with a trailing comment
``# exits N``. Blocks of any other language (``text``, ``console``, ``json``) are output shown to the reader.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
DIRECTIVE = re.compile(r"^(?P<indent>\s*)\.\. code-block::\s*(?P<lang>\w+)\s*$")
EXITS = re.compile(r"#\s*exits\s+(\d+)\s*$")


def code_blocks(text: str) -> list[tuple[str, int, str]]:
    """``(language, line, code)`` of every ``.. code-block::`` of an reStructuredText page, in order."""
    lines = text.splitlines()
    out, k = [], 0
    while k < len(lines):
        m = DIRECTIVE.match(lines[k])
        k += 1
        if not m:
            continue
        indent = len(m.group("indent"))
        # the directive's options (":caption: ...") and the blank line before the body
        while k < len(lines) and (not lines[k].strip() or lines[k].strip().startswith(":")):
            k += 1
        start, body = k + 1, []
        while k < len(lines) and (not lines[k].strip() or len(lines[k]) - len(lines[k].lstrip()) > indent):
            body.append(lines[k])
            k += 1
        out.append((m.group("lang"), start, textwrap.dedent("\n".join(body)).strip("\n") + "\n"))
    return out


def _bash_as_python(block: str, line: int) -> str:
    """A bash block as python statements: each command run by the shell, its exit status checked."""
    out = []
    for raw in block.splitlines():
        cmd = raw.strip()
        if not cmd or cmd.startswith("#"):
            continue
        m = EXITS.search(cmd)
        expected = int(m.group(1)) if m else 0
        for part in cmd.split("&&"):
            part = part.split(" #")[0].strip()
            if part and "pip install" not in part:
                out.append(f"_sh({part!r}, {expected}, {line})")
    return "\n".join(out) + "\n"


PRELUDE = """
import subprocess as _subprocess, sys as _sys

def _sh(cmd, expected, line):
    res = _subprocess.run(cmd, shell=True, capture_output=True, text=True)
    _sys.stdout.write(res.stdout)
    if res.returncode != expected:
        raise SystemExit(
            f"bash block at line {line}: {cmd!r} exited {res.returncode}, expected {expected}\\n{res.stderr}"
        )
"""


def page_script(page: Path) -> str | None:
    """The page's runnable blocks as one python script (None: the page has none)."""
    parts = []
    for lang, line, code in code_blocks(page.read_text(encoding="utf-8")):
        if lang == "python":
            parts.append(f"# --- {page.name}:{line}\n{code}")
        elif lang == "bash":
            parts.append(f"# --- {page.name}:{line}\n{_bash_as_python(code, line)}")
    return PRELUDE + "\n".join(parts) if parts else None


def _pages():
    # the operator reference's generated pages (docs/operators/_generated) hold no code to run
    pages = sorted(p for p in DOCS.rglob("*.rst") if not {"_build", "_generated"} & set(p.parts))
    return [pytest.param(p, id=str(p.relative_to(DOCS))) for p in pages if page_script(p) is not None]


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.setdefault("MPLBACKEND", "Agg")
    return env


@pytest.mark.parametrize("page", _pages())
def test_page_code_runs(page, tmp_path):
    script = tmp_path / "page.py"
    script.write_text(page_script(page), encoding="utf-8")
    res = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, f"{page.relative_to(ROOT)}:\n{res.stdout[-3000:]}\n{res.stderr[-6000:]}"


def test_code_blocks_parser_reads_options_and_nesting():
    text = textwrap.dedent(
        """\
        Title
        =====

        .. code-block:: python
           :caption: one

           x = 1
           if x:
               y = 2

        text

        - item

          .. code-block:: bash

             symgrad --help  # exits 0
        """
    )
    blocks = code_blocks(text)
    assert [(lang, code) for lang, _, code in blocks] == [
        ("python", "x = 1\nif x:\n    y = 2\n"),
        ("bash", "symgrad --help  # exits 0\n"),
    ]
    assert "_sh('symgrad --help', 0," in _bash_as_python(blocks[1][2], 1)


SPHINX_ARGS = ["-W", "--keep-going", "-q", "-b", "html"]


def test_readme_builds_the_site_as_this_test_does():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"python -m sphinx {' '.join(SPHINX_ARGS)} docs docs/_build/html" in readme


def test_site_builds_with_warnings_as_errors(tmp_path):
    out = tmp_path / "html"
    res = subprocess.run(
        [sys.executable, "-m", "sphinx", *SPHINX_ARGS, str(DOCS), str(out)],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, f"sphinx-build failed:\n{res.stdout[-4000:]}\n{res.stderr[-8000:]}"
    assert (out / "index.html").is_file()


def test_failure_reports_guide_shows_every_diagnosis_pattern():
    from symgrad.test_utils.diagnose import PATTERNS

    page = (DOCS / "guides" / "failure-reports.rst").read_text(encoding="utf-8")
    missing = [p for p in PATTERNS if f"``{p}``" not in page]
    assert not missing, f"diagnosis patterns without an example in the guide: {missing}"
