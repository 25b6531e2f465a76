"""Write the docs' example of the HTML report (``docs/_build/report-example/report-example.html``, as the docs
build does: ``docs/_ext/symgrad_report_example.py``) and its screenshot ``docs/_static/report.png``.

    python docs/make_report_screenshot.py

Needs playwright and Debian's Chromium (``apt-get install chromium``) for the screenshot.
"""

from __future__ import annotations

import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "_ext"))

from symgrad_report_example import EXAMPLE, write_example  # noqa: E402  (docs/_ext is no package)

STATIC = os.path.join(HERE, "_static")
#: the part of the page the screenshot shows (CSS pixels): the header, the faulty node, the bars and a failing
#: argument's scatter
WIDTH, HEIGHT = 1200, 1500


def screenshot(page_path: str, png_path: str) -> None:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    if chromium is None:
        sys.exit("Chromium not installed (apt-get install chromium)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True)
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
            page.goto("file://" + os.path.abspath(page_path))
            page.screenshot(path=png_path, clip={"x": 0, "y": 0, "width": WIDTH, "height": HEIGHT})
        finally:
            browser.close()


def main() -> None:
    print(write_example())
    html_path = os.path.join(HERE, EXAMPLE)
    png_path = os.path.join(STATIC, "report.png")
    screenshot(html_path, png_path)
    for path in (html_path, png_path):
        print(f"wrote {os.path.relpath(path)} ({os.path.getsize(path) // 1024} KB)")


if __name__ == "__main__":
    main()
