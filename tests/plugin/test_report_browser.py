"""The quickstart's HTML report (pytest-html) in a real browser: Chromium driven by
playwright's sync API, at 1400 x 900. The banner is on screen without scrolling and says what the
quickstart's outcome is; every link of the verdict matrix lands on an element of the page (a
check's table, or the detail view of the failing item it names, on screen after the click);
the page logs no console error.

The browser is the system's Chromium (Debian's ``chromium``; ``scripts/test.sh`` installs it
when missing), or the one ``INFERCHECK_CHROMIUM`` names. Without it, or without playwright,
the test skips, and fails under ``CI=true``.

Not pytest-playwright: its plugin wraps every test's call in one process-wide scope of soft
assertions, which an in-process pytester run (most tests of tests/plugin) opens a second
time, failing every inner item with ``nested soft assertion scopes are not supported``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from .quickstart_run import QuickstartRun

WIDTH, HEIGHT = 1400, 900


def browser_problem() -> str | None:
    """Why the test cannot run here (no playwright, no Chromium); None when it can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[dev]')"
    if chromium() is None:
        return "no Chromium (apt-get install chromium, or set INFERCHECK_CHROMIUM)"
    return None


def chromium() -> str | None:
    """The Chromium executable: ``INFERCHECK_CHROMIUM``, else ``chromium`` on the path."""
    return os.environ.get("INFERCHECK_CHROMIUM") or next(
        (p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None
    )


# Checked at collection, before the session's quickstart run is paid for.
PROBLEM = browser_problem()
if PROBLEM is not None:
    if os.environ.get("CI") == "true":
        pytest.fail(PROBLEM, pytrace=False)
    pytest.skip(PROBLEM, allow_module_level=True)


@pytest.fixture
def page() -> Iterator[Any]:
    """A page of the system's Chromium (headless) at :data:`WIDTH` x :data:`HEIGHT`."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=chromium())
        try:
            yield browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        finally:
            browser.close()


ON_SCREEN = """id => {
  const r = document.getElementById(id).getBoundingClientRect();
  return [r.top, r.bottom, r.height];
}"""


def test_the_quickstart_report_in_a_browser(page: Any, quickstart_run: QuickstartRun) -> None:
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto((quickstart_run.work / "report.html").as_uri())
    page.wait_for_load_state("load")

    assert page.title() == "quickstart: the tiny adder in bf16, 8-bit and 4-bit (mlx-lm)"
    banner = page.locator("#infercheck-banner")
    assert banner.is_visible()
    box = banner.bounding_box()
    assert box is not None and page.evaluate("window.scrollY") == 0
    assert box["y"] >= 0 and box["y"] + box["height"] <= HEIGHT, box
    assert box["y"] < 150, box  # right under the title, above pytest-html's environment
    text = " ".join(banner.inner_text().split())
    assert text.startswith("FAIL: 3 of 6 checks failed, 19 of 364 items failed"), text
    assert "worst finding: q4@local turned 3 right answers wrong in compare(bf16-vs-q4)" in text
    environment = page.locator("#environment").inner_text()
    assert "mlx-lm: " in environment and "Engines" in environment

    links = page.eval_on_selector_all(
        "#infercheck-verdicts a",
        "els => els.map(e => [e.getAttribute('href'), e.textContent,"
        " e.closest('tr').querySelector('th a').textContent])",
    )
    items = [(href, name, check) for href, name, check in links if "ic-item-" in href]
    # 19 failed items listed (q8 1, q4 9, the sweep's q4 9), and 3 failed cells' verdicts
    assert len(items) == 19 + 3, items
    for href, name, check in links:
        target = href.removeprefix("#")
        assert page.locator(f"[id='{target}']").count() == 1, href
        page.locator(f"#infercheck-verdicts a[href='{href}']").first.click()
        top, bottom, height = page.evaluate(ON_SCREEN, target)
        # scrolled to: its top at the top of the window (within a pixel's rounding)
        assert height > 0 and -1 <= top < HEIGHT and bottom > 0, (href, top, bottom)
        if target.startswith("ic-item-"):
            summary = page.locator(f"[id='{target}'] > summary").inner_text()
            head = f"{check} · addition · "
            assert summary.startswith(head), (summary, check)
            if name not in ("PASS", "FAIL", "UNGATED"):  # a cell verdict: links to an item
                assert summary == head + name
    assert not errors, errors
