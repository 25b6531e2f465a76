"""Which frames pytest shows when a check fails (the bottom of ``test_utils``: every checker module uses it).

Each checker module sets ``__tracebackhide__ = hide_from_pytest``: for a failed check pytest then shows the
report and the user's own frames, not ~90 lines of symgrad's source and locals.
"""

from __future__ import annotations

__all__ = ["hide_from_pytest"]


def hide_from_pytest(excinfo) -> bool:
    """pytest's ``__tracebackhide__`` of symgrad's checker modules: true for a failed check, an exception whose
    class sets ``hides_checker_frames`` (``report.GradientCheckError`` and its subclasses); any other exception
    (a bug in symgrad, a bad argument) keeps every frame."""
    return bool(getattr(excinfo.type, "hides_checker_frames", False))
