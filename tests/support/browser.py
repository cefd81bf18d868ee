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
