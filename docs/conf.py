"""Sphinx configuration of symgrad's documentation site.

Build it with warnings as errors (the README's command; ``tests/test_docs.py`` runs the same build)::

    python -m sphinx -W --keep-going -b html docs docs/_build/html
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
# the checkout itself (an editable install finds it too) and the site's own extensions
sys.path[:0] = [str(ROOT), str(DOCS / "_ext")]

import symgrad  # noqa: E402  (needs the path above)

project = "symgrad"
author = "the symgrad authors"
copyright = "2026, the symgrad authors"
release = symgrad.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    # the operator reference, generated from the op registry (docs/_ext/symgrad_opref.py)
    "symgrad_opref",
    # the example HTML report report.rst links, written into docs/_build (docs/_ext/symgrad_report_example.py)
    "symgrad_report_example",
]

# the docstrings are Google style ("Args:", "Returns:", "Attributes:")
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
# the checkers' docstrings say how each reference is computed, what it costs and what it allows (as Chainer
# documents check_backward): "Method:", "Cost:" and "Tolerance:" sections, rendered as headed paragraphs
napoleon_custom_sections = ["Method", "Cost", "Tolerance"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}
autosummary_generate = False

exclude_patterns = ["_build"]
templates_path: list[str] = []
html_static_path = ["_static"]
html_theme = "alabaster"
html_title = f"symgrad {release}"
html_theme_options = {
    "description": "Prove your operators' gradients right",
    "page_width": "1160px",
    "sidebar_width": "240px",
}
# every page must be reachable and every reference resolvable: the build runs with -W
nitpicky = False
