"""Packaging (issue 9): the repository folder ``test_utils/`` is installed as ``symgrad.test_utils`` and nothing
named ``test_utils`` lands in site-packages; the pytest plugin stays out of other projects' way; the sdist
carries what the test suite needs; the extras and the licence match the metadata.

The throw-away-project tests run pytest / ``python -m symgrad`` in a subprocess of this interpreter, so they
see symgrad as installed in this environment (editable or not) with its pytest11 entry point.
"""

from __future__ import annotations

import ast
import configparser
import json
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import symgrad.test_utils.pytest_plugin as plugin

ROOT = Path(__file__).resolve().parents[1]
# what the sdist must not carry (.gitignore's list) and what is not part of the project
JUNK_DIRS = {
    "__pycache__",
    ".pytest_cache",
    ".hypothesis",
    ".ruff_cache",
    ".mypy_cache",
    ".grimp_cache",
    ".import_linter_cache",
    "build",
    "dist",
    ".git",
    ".whl",
    ".gl",
    # the documentation site's build output and the operator reference's generated pages (.gitignore)
    "_build",
    "_generated",
}


def _setup_cfg():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return cfg


def _lines(value):
    return [line.strip() for line in value.strip().splitlines() if line.strip()]


def _clean_env():
    """This environment without what the outer pytest run set for itself."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SYMGRAD_"))}
    env.pop("PYTHONPATH", None)
    return env


# -- the package layout --------------------------------------------------------------------------------------


def test_setup_cfg_installs_test_utils_under_symgrad_only():
    opts = _setup_cfg()["options"]
    packages = _lines(opts["packages"])
    on_disk = sorted(
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "symgrad").rglob("__init__.py")
        if "__pycache__" not in p.parts
    )
    on_disk += [
        "symgrad.test_utils" + "".join("." + part for part in p.parent.relative_to(ROOT / "test_utils").parts)
        for p in (ROOT / "test_utils").rglob("__init__.py")
        if "__pycache__" not in p.parts
    ]
    assert sorted(packages) == sorted(on_disk)  # every subpackage is listed (there is no find: to list them)
    assert not any(p == "test_utils" or p.startswith("test_utils.") for p in packages)
    package_dir = dict(line.replace(" ", "").split("=") for line in _lines(opts["package_dir"]))
    assert package_dir == {"symgrad.test_utils": "test_utils"}
    assert _lines(_setup_cfg()["options.entry_points"]["pytest11"]) == ["symgrad = symgrad.test_utils.pytest_plugin"]


def test_installed_distribution_has_no_top_level_test_utils(tmp_path):
    # from an empty folder: inside the checkout, importlib.metadata would find ./symgrad.egg-info first
    code = textwrap.dedent(
        """
        import importlib.metadata as md, importlib.util, json
        dist = md.distribution("symgrad")
        eps = [ep.value for ep in md.entry_points(group="pytest11") if ep.name == "symgrad"]
        print(json.dumps({"top": sorted({p.parts[0] for p in dist.files or []}), "eps": eps,
                          "found": importlib.util.find_spec("test_utils") is not None,
                          "plugin": importlib.util.find_spec("symgrad.test_utils.pytest_plugin").origin}))
        """
    )
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=_clean_env()
    )
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert not [t for t in got["top"] if t.split(".")[0] == "test_utils"], got["top"]
    assert got["eps"] == ["symgrad.test_utils.pytest_plugin"] and not got["found"]
    # the repository folder itself under an editable install, symgrad/test_utils/ in site-packages otherwise
    assert Path(got["plugin"]).parent.name == "test_utils"
    assert plugin.__name__ == "symgrad.test_utils.pytest_plugin"


def test_the_plugin_and_symgrad_import_nothing_heavy(tmp_path):
    code = textwrap.dedent(
        """
        import sys
        import symgrad, symgrad.test_utils.pytest_plugin
        heavy = [m for m in ("numpy", "networkx", "cupy", "symgrad.ops", "symgrad.symbol", "test_utils",
                             "symgrad.test_utils.report", "symgrad.test_utils.mxnet_checks") if m in sys.modules]
        assert not heavy, heavy
        from symgrad.test_utils import GradientCheckError, compare, diagnose  # the names load on first use
        import symgrad.test_utils.compare, symgrad.test_utils.diagnose
        assert callable(symgrad.test_utils.compare) and callable(symgrad.test_utils.diagnose)
        assert symgrad.test_utils.compare is compare and symgrad.test_utils.diagnose is diagnose
        assert symgrad.sym.Variable("x").name == "x" and symgrad.test_utils.GradientCheckError is GradientCheckError
        print("ok")
        """
    )
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=_clean_env()
    )
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr


def test_no_code_imports_a_top_level_test_utils():
    # the runtime guard is tests/conftest.py (no `test_utils` in sys.modules during the suite); this one also
    # covers benchmarks/ and examples/, and imports inside functions that the suite may not reach
    stray = []
    for folder in ("symgrad", "test_utils", "tests", "benchmarks", "examples"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                    if isinstance(node, ast.ImportFrom) and not node.level
                    else []
                )
                stray += [f"{path.relative_to(ROOT)}:{node.lineno}" for n in names if n.split(".")[0] == "test_utils"]
    assert not stray, stray


def test_plugin_seed_env_name_matches_the_checkers():
    from symgrad.test_utils import seed

    assert plugin.SEED_ENV == seed.SEED_ENV


# -- a throw-away project with its own test_utils ------------------------------------------------------------

OTHER_PROJECT = {
    # the most common layout: tests/ without __init__.py, helpers in tests/test_utils.py imported by name
    "pytest.ini": "[pytest]\ntestpaths = tests\n",
    "test_utils.py": "raise ImportError('the project root test_utils.py was imported')\n",
    "tests/test_utils.py": """
        def make_point(x, y):
            return {"x": x, "y": y}

        def test_helpers_are_tested_too():
            assert make_point(1, 2) == {"x": 1, "y": 2}
    """,
    "tests/test_app.py": """
        import numpy as np
        from test_utils import make_point

        from symgrad.test_utils import GradientCheckError, assert_almost_equal

        def test_uses_its_own_test_utils():
            assert make_point(3, 4)["y"] == 4

        def test_uses_symgrads_checkers_and_rng_fixture(rng):
            x = rng.random(3)
            assert_almost_equal(x, x.copy())
            assert issubclass(GradientCheckError, AssertionError)
    """,
}


def _write_project(path: Path, files: dict):
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(textwrap.dedent(text).lstrip())


def test_other_projects_tests_test_utils_collects_and_passes(tmp_path):
    _write_project(tmp_path, OTHER_PROJECT)
    # `python -m pytest` puts the project root on sys.path too: its root test_utils.py raises if anyone imports it
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=_clean_env(),
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "3 passed" in out, out
    assert "import file mismatch" not in out and "ImportError" not in out, out
    # the plugin was loaded (the rng fixture worked) through the entry point, and said nothing
    assert not [line for line in out.splitlines() if line.startswith("symgrad")], out


def test_python_m_symgrad_from_a_folder_with_test_utils(tmp_path):
    _write_project(tmp_path, {"test_utils.py": OTHER_PROJECT["test_utils.py"]})
    env = _clean_env()
    res = subprocess.run(
        [sys.executable, "-m", "symgrad", "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env
    )
    assert res.returncode == 0 and "usage: symgrad" in res.stdout, res.stderr
    # a real check: the command imports the checkers
    res = subprocess.run(
        [sys.executable, "-m", "symgrad", "check", "--example", "mlp", "--dtype", "float64"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Error" not in res.stdout + res.stderr, res.stdout + res.stderr


# -- metadata: extras, licence ---------------------------------------------------------------------------------


def test_gpu_extras_are_cupy_wheels_and_the_skip_message_says_so():
    extras = _setup_cfg()["options.extras_require"]
    assert _lines(extras["gpu"]) == ["cupy-cuda12x>=12"]
    assert _lines(extras["gpu-cuda11"]) == ["cupy-cuda11x>=12"]
    assert not any(req.split(">")[0].strip() == "cupy" for name in extras for req in _lines(extras[name]))
    for words in ("symgrad[gpu]", "cupy-cuda12x", "symgrad[gpu-cuda11]", "cupy-cuda11x", "CUDA toolkit"):
        assert words in plugin.GPU_REASON, words


def test_license_file_is_the_apache_2_license_of_the_metadata():
    meta = _setup_cfg()["metadata"]
    assert meta["license"] == "Apache-2.0" and meta["license_files"].strip() == "LICENSE"
    assert "License :: OSI Approved :: Apache Software License" in meta["classifiers"]
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX: How to apply the Apache License" in text


# -- sdist and wheel -------------------------------------------------------------------------------------------


def _project_files():
    """Every file of the working tree that belongs to the project (what .gitignore does not ignore)."""
    files = set()
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        if (
            path.is_file()
            and not JUNK_DIRS.intersection(rel.parts)
            and path.suffix not in (".pyc", ".pyo")
            and not any(part.endswith(".egg-info") or part.startswith((".venv", "venv")) for part in rel.parts)
        ):
            if rel.as_posix() != ".gitignore":
                files.add(rel.as_posix())
    return files


def _copy_tree(dest: Path) -> Path:
    """A copy of the working tree without build outputs, so building writes nothing into the checkout."""
    ignore = shutil.ignore_patterns(*JUNK_DIRS, "*.egg-info", "*.pyc", ".venv*", "venv*")
    return Path(shutil.copytree(ROOT, dest / "tree", ignore=ignore))


def _build(tree: Path, hook: str, out: Path) -> Path:
    # setuptools' PEP 517 backend, called directly: works offline, with the setuptools of this environment
    code = f"from setuptools import build_meta; print(build_meta.{hook}({str(out)!r}))"
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=tree, capture_output=True, text=True, timeout=300, env=_clean_env()
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return out / res.stdout.strip().splitlines()[-1]


def test_sdist_carries_everything_the_test_suite_needs(tmp_path):
    sdist = _build(_copy_tree(tmp_path), "build_sdist", tmp_path / "dist")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    missing = sorted(_project_files() - names)
    assert not missing, missing
    for needed in (
        "tests/conftest.py",
        "tests/op_db.py",
        "tests/op_info.py",
        "tests/fixtures/mxnet_ops.npz",
        "tests/fixtures/mxnet_models/reference.json",
        "README.md",
        "LICENSE",
        "pyproject.toml",
        "setup.cfg",
        "MANIFEST.in",
        ".ci/run",
        "test_utils/pytest_plugin.py",
        "examples/wrong_bias_gradient.py",
    ):
        assert needed in names, needed
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc") or ".hypothesis" in n]


def test_wheel_installs_test_utils_as_symgrad_test_utils(tmp_path):
    wheel = _build(_copy_tree(tmp_path), "build_wheel", tmp_path / "dist")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        eps = zf.read(entry_points).decode()
    top = {n.split("/", 1)[0] for n in names}
    assert top == {"symgrad", next(n for n in top if n.endswith(".dist-info"))}, sorted(top)
    assert {
        "symgrad/test_utils/__init__.py",
        "symgrad/test_utils/pytest_plugin.py",
        "symgrad/ops/__init__.py",
        "symgrad/executor/__init__.py",
    } <= names
    # every module and data file of the two folders (symgrad/models/*.json, ...)
    package_files = {f for f in _project_files() if f.startswith(("symgrad/", "test_utils/"))}
    assert {f if f.startswith("symgrad/") else "symgrad/" + f for f in package_files} <= names
    assert "symgrad = symgrad.test_utils.pytest_plugin" in eps
