"""The module page's "Used by" tab in a real headless Chromium against a real `gitreg serve`.

A fake GitLab (API and OAuth, in a thread) lists the org of tests/support/usage.py; a fake CI issuer's
jobs install the module through the registry API; alice signs in through the host's consent page and
opens the tab: the repositories and installs she can read, counts for the rest, axe clean in light and
dark, and no sideways scrolling at 390 px. Screenshots under the test's tmp directory.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.support.browser import axe_violations, color_scheme, page_overflow, sized_chromium
from tests.support.forges import FakeForge
from tests.support.githttp import GitHttpServer
from tests.support.oauth import FakeOAuthHost
from tests.support.oidc import AUDIENCE, FakeIssuer
from tests.support.process import GitregProcess
from tests.support.usage import HOST, MODULE, add_to, consumer_org

pytestmark = pytest.mark.slow

STATIC = "static-token-for-the-browser-test-61c2"
PAGE = "/modules/acme/vpc/aws"


def write_config(tmp_path: Path, host: FakeOAuthHost, issuer: FakeIssuer) -> Path:
    config = tmp_path / "gitreg.toml"
    config.write_text(
        # No public_url: the browser signs in at the address it reaches; consumers write HOST in `source`.
        f'[storage]\npath = "{tmp_path / "state"}"\n'
        '[git]\nprotocols = ["http"]\n'
        f'[usage]\nscan = true\nhosts = ["{HOST}"]\n'
        f'[[orgs]]\nprovider = "gitlab"\napi_url = "{host.api_url}"\ngroup = "acme"\nnamespace = "acme"\n'
        'download = "archive"\n'
        f'[auth]\ntokens = ["{STATIC}"]\nsigning_key = "{"k" * 40}"\n'
        + host.forge_toml()
        + f'[[auth.oidc]]\nissuer = "{issuer.issuer}"\naudience = "{AUDIENCE}"\n'
    )
    return config


def get_json(url: str, token: str) -> dict:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read())


def scanned(server: GitregProcess) -> None:
    deadline = time.monotonic() + 60
    while get_json(f"{server.url}{PAGE.replace('/modules', '/v1/modules')}/consumers", STATIC)["repositories"] < 3:
        assert time.monotonic() < deadline, "the usage scan did not find the consumers"
        time.sleep(0.2)


def test_the_used_by_tab_in_chromium_light_and_dark_on_a_phone_and_a_desktop(tmp_path):
    consumer_org(tmp_path / "repos")
    shots = tmp_path / "screenshots"
    shots.mkdir()
    with GitHttpServer(tmp_path / "repos") as git:
        forge = FakeForge("gitlab", git, "acme")
        host = FakeOAuthHost(forge, approver="alice")
        add_to(forge)
        forge.grant("alice", MODULE, "app-frontend", "platform-live")
        with forge.in_thread(), FakeIssuer().in_thread() as issuer:
            serve_and_browse(write_config(tmp_path, host, issuer), issuer, shots)


def serve_and_browse(config: Path, issuer: FakeIssuer, shots: Path) -> None:
    with GitregProcess("--config", str(config)) as server:
        server.wait_indexed()
        scanned(server)
        for project in ("acme/app-frontend", "acme/secret-app"):  # CI jobs install 1.4.2
            token = issuer.sign(issuer.claims(project_path=project))
            assert get_json(f"{server.url}/v1/modules/acme/vpc/aws/1.4.2/download", token)["location"]
        browse(server, shots)


def browse(server: GitregProcess, shots: Path) -> None:
    driver = sized_chromium(390)
    wait = WebDriverWait(driver, 15)
    try:
        driver.get(server.url + "/")
        driver.find_element(By.LINK_TEXT, "Sign in with GitLab").click()
        wait.until(lambda d: "Authorize gitreg to read as alice" in d.page_source)
        driver.find_element(By.ID, "approve").click()
        wait.until(lambda d: "Signed in as alice" in d.find_element(By.TAG_NAME, "header").text)
        for scheme in ("light", "dark"):
            color_scheme(driver, scheme)
            driver.get(f"{server.url}{PAGE}#used-by")
            panel = driver.find_element(By.ID, "used-by")
            assert panel.is_displayed() and not driver.find_element(By.ID, "readme").is_displayed()
            tab = driver.find_element(By.CSS_SELECTOR, '.tabs a[data-tab="used-by"]')
            assert tab.get_attribute("aria-current") == "true" and tab.text == "Used by (3)"
            names = [a.text for a in panel.find_elements(By.CSS_SELECTOR, ".consumer-name")]
            assert names == ["acme/app-frontend", "acme/platform-live", "acme/platform-live"]
            assert "not on the latest major (2.x)" in panel.text
            assert "And 1 repository you cannot read calls this module." in panel.text
            installs = [li.text for li in panel.find_elements(By.CSS_SELECTOR, ".installs li")]
            assert len(installs) == 1 and installs[0].startswith("acme/app-frontend installed 1.4.2 ")
            assert "And 1 install by a project you cannot read." in panel.text
            driver.save_screenshot(str(shots / f"used-by-phone-{scheme}.png"))
            assert page_overflow(driver) <= 0, scheme
            assert axe_violations(driver) == [], f"phone, {scheme}"
            driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
            driver.get(f"{server.url}{PAGE}#used-by")
            driver.save_screenshot(str(shots / f"used-by-desktop-{scheme}.png"))
            assert page_overflow(driver) <= 0 and axe_violations(driver) == [], f"desktop, {scheme}"
            driver.execute_cdp_cmd(
                "Emulation.setDeviceMetricsOverride",
                {"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": True},
            )
        # The tab is reached from the section bar too (and the README hides).
        driver.get(f"{server.url}{PAGE}")
        driver.find_element(By.CSS_SELECTOR, '.tabs a[data-tab="used-by"]').click()
        wait.until(lambda d: d.find_element(By.ID, "used-by").is_displayed())
    finally:
        driver.quit()
