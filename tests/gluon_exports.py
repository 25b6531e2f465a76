"""Real MXNet 1.9.1 exports of Gluon model-zoo networks, from a cache outside git (numpy + stdlib only).

``tests/fixtures/make_gluon_exports.py`` writes the cache (``NAME-symbol.json``, ``NAME-0000.params`` and
``manifest.json``) with MXNet's own Python; a test asks for a net with ``export_path(NAME)``, which runs that
script when the cache lacks the net and MXNet's venv exists, and skips the test otherwise.

* ``EXPORTS_DIR``: ``$SYMGRAD_GLUON_EXPORTS``, else ``~/.cache/symgrad/gluon-exports``;
* ``MXNET_PYTHON``: ``$SYMGRAD_MXNET_PYTHON``, else ``mxvenv/bin/python`` beside the checkout.
"""

import hashlib
import json
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKOUT = os.path.dirname(HERE)
MAKE_SCRIPT = os.path.join(HERE, "fixtures", "make_gluon_exports.py")
EXPORTS_DIR = os.environ.get("SYMGRAD_GLUON_EXPORTS") or os.path.join(
    os.path.expanduser("~"), ".cache", "symgrad", "gluon-exports"
)
MXNET_PYTHON = os.environ.get("SYMGRAD_MXNET_PYTHON") or os.path.normpath(
    os.path.join(CHECKOUT, "..", "mxvenv", "bin", "python")
)

_checked = {}  # (path, size, mtime) -> sha256, so each file is hashed once per process


def _sha256(path):
    st = os.stat(path)
    key = (path, st.st_size, st.st_mtime_ns)
    if key not in _checked:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _checked[key] = h.hexdigest()
    return _checked[key]


def manifest():
    """The cache's manifest: net -> entry (``{}`` if there is none yet)."""
    try:
        with open(os.path.join(EXPORTS_DIR, "manifest.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _cached(name):
    """``(symbol_json_path, params_path, entry)`` if the cache holds ``name`` intact, else None."""
    entry = manifest().get(name)
    if not entry:
        return None
    sym = os.path.join(EXPORTS_DIR, entry["symbol"])
    params = os.path.join(EXPORTS_DIR, entry["params"])
    if not (os.path.isfile(sym) and os.path.isfile(params)):
        return None
    if _sha256(sym) != entry["symbol_sha256"] or _sha256(params) != entry["params_sha256"]:
        return None
    return sym, params, entry


def export_path(name):
    """``(symbol_json_path, params_path, manifest_entry)`` of Gluon net ``name``: from the cache, else made
    by running ``make_gluon_exports.py`` with ``MXNET_PYTHON``; skips the calling test if neither can be."""
    found = _cached(name)
    if found:
        return found
    if not (os.path.isfile(MXNET_PYTHON) and os.access(MXNET_PYTHON, os.X_OK)):
        import pytest

        pytest.skip(
            f"Gluon export {name} needs MXNet 1.9.1's venv ({MXNET_PYTHON}) or the cache {EXPORTS_DIR}: "
            "run tests/fixtures/make_gluon_exports.py"
        )
    subprocess.run([MXNET_PYTHON, MAKE_SCRIPT, "--out", EXPORTS_DIR, "--nets", name], check=True)
    found = _cached(name)
    if not found:
        raise RuntimeError(f"{MAKE_SCRIPT} ran but the cache {EXPORTS_DIR} still lacks an intact {name}")
    return found


def small_shape(name):
    """The smallest input shape (batch 1) that the exported net accepts, from the manifest."""
    return tuple(export_path(name)[2]["small_shape"])
