"""A real headless Chromium (Debian's chromium + chromium-driver) driven by Selenium, and axe-core."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
# .ci/run installs axe-core from the npm registry here; AXE_CORE_JS may point elsewhere.
AXE_PATHS = (ROOT / ".ci" / "node_modules" / "axe-core" / "axe.min.js",)


def _missing(what: str) -> None:
    """In CI a missing browser or axe-core is a failure; on a developer's machine a skip that says why."""
    if os.environ.get("CI"):
        pytest.fail(f"{what} is missing: .ci/run installs it")
    pytest.skip(f"{what} is not installed ({_INSTALL[what]}; `bash scripts/test` says what it could not install)")


_INSTALL = {
    "chromium / chromedriver": "apt-get install chromium chromium-driver",
    # Where AXE_PATHS looks: under .ci, not the current directory.
    "axe-core (npm)": "npm install --prefix .ci axe-core@4",
}


def chromium_driver(width: int = 1280, height: int = 900):  # type: ignore[no-untyped-def]
    """A headless Chromium; the caller quits it."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if binary is None or driver_path is None:
        _missing("chromium / chromedriver")
    options = webdriver.ChromeOptions()
    options.binary_location = binary  # type: ignore[assignment]
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # console messages, CSP refusals among them
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
        "--disable-extensions",
        "--no-first-run",
    ):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(driver_path), options=options)


def axe_source() -> str:
    """axe-core's script, to inject into a page."""
    candidates = [Path(os.environ["AXE_CORE_JS"])] if os.environ.get("AXE_CORE_JS") else list(AXE_PATHS)
    for path in candidates:
        if path.is_file():
            return path.read_text(encoding="utf-8")
    _missing("axe-core (npm)")
    raise AssertionError("unreachable")


def axe_violations(driver, impacts: tuple[str, ...] = ("serious", "critical")) -> list[dict]:  # type: ignore[no-untyped-def]
    """The axe-core violations of the page now loaded, of the given impacts."""
    driver.execute_script(axe_source())
    result = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, {resultTypes: ['violations']}).then(r => done(r.violations))"
        ".catch(e => done([{id: 'axe-error', impact: 'critical', help: String(e)}]));"
    )
    return [
        {
            "id": v["id"],
            "impact": v["impact"],
            "help": v["help"],
            "nodes": [n.get("html", "")[:120] for n in v.get("nodes", [])][:3],
        }
        for v in result
        if v.get("impact") in impacts
    ]


def sized_chromium(width: int, scheme: str = "light"):  # type: ignore[no-untyped-def]
    """A Chromium `width` px wide (below 500 px: a phone's viewport, which a window cannot be), in
    the `light` or `dark` colour scheme (as the visitor's system would ask for)."""
    driver = chromium_driver(max(width, 500), 900)
    if width < 500:
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": 844, "deviceScaleFactor": 2, "mobile": True},
        )
    color_scheme(driver, scheme)
    return driver


def color_scheme(driver, scheme: str) -> None:  # type: ignore[no-untyped-def]
    """`prefers-color-scheme` as `scheme` (light or dark) for the pages `driver` loads next."""
    driver.execute_cdp_cmd(
        "Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": scheme}]}
    )


def page_overflow(driver) -> int:  # type: ignore[no-untyped-def]
    """How many px the page is wider than the viewport (0: it does not scroll sideways)."""
    return int(driver.execute_script("return document.documentElement.scrollWidth - window.innerWidth"))


# The words (runs of non-space) inside `arguments[0]` that the browser broke across two lines.
BROKEN_WORDS_JS = """
const broken = [];
const walker = document.createTreeWalker(arguments[0], NodeFilter.SHOW_TEXT);
for (let node = walker.nextNode(); node; node = walker.nextNode()) {
  for (const m of node.textContent.matchAll(/\\S+/g)) {
    const range = document.createRange();
    range.setStart(node, m.index);
    range.setEnd(node, m.index + m[0].length);
    const tops = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
    if (tops.size > 1) broken.push(m[0]);
  }
}
return broken;
"""
