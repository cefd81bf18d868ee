"""Deprecated and revoked versions (#35) on the module page, in a real headless Chromium: the banners,
the version picker's badges, the revoked version's reason; axe finds no serious violation."""

from __future__ import annotations

import time

import pytest
from selenium.webdriver.common.by import By

from tests.support.browser import axe_violations
from tests.support.lifecycle import DEPRECATION, REVOKED_REASON, module_repo
from tests.support.process import GitregProcess

pytestmark = pytest.mark.slow  # a real gitreg process and Chromium


@pytest.mark.parametrize("download", ["git", "archive"])
def test_the_page_shows_deprecated_and_revoked_versions_accessibly(tmp_path, browser, download):
    repo = module_repo(tmp_path / "repos")
    config = tmp_path / "gitreg.toml"
    config.write_text(
        f'[storage]\npath = "{tmp_path / "store"}"\n'
        '[[modules]]\nnamespace = "demo"\nname = "hello"\nsystem = "null"\n'
        f'repository = "{repo.url}"\ndownload = "{download}"\n'
    )
    with GitregProcess("--config", str(config)) as server:
        server.wait_indexed()
        b = browser
        # A page runs no git: the first view of a module not served yet starts reading its .gitreg.toml
        # in the background, and a view after that shows it.
        for _ in range(100):
            b.get(server.url + "/modules/demo/hello/null/1.4.1")
            if b.find_elements(By.ID, "deprecated-banner"):
                break
            time.sleep(0.1)
        banner = b.find_element(By.ID, "deprecated-banner")
        assert "1.4.1 is deprecated" in banner.text and DEPRECATION["reason"] in banner.text
        assert banner.find_element(By.TAG_NAME, "a").get_attribute("href") == DEPRECATION["link"]
        b.find_element(By.CSS_SELECTOR, "details.picker summary").click()
        badges = {
            li.find_element(By.TAG_NAME, "a").text: li.text for li in b.find_elements(By.CSS_SELECTOR, "ul.versions li")
        }
        assert "deprecated" in badges["1.4.1"] and "revoked" in badges["1.4.2"]
        assert "deprecated" not in badges["2.0.0"] and "revoked" not in badges["2.0.0"]
        assert axe_violations(b) == []
        b.get(server.url + "/modules/demo/hello/null/1.4.2")
        revoked = b.find_element(By.ID, "revoked-banner")
        assert "1.4.2 is revoked" in revoked.text and REVOKED_REASON in revoked.text
        assert revoked.get_attribute("role") == "alert"
        assert axe_violations(b) == []
        b.get(server.url + "/modules/demo/hello/null")
        assert not b.find_elements(By.CSS_SELECTOR, ".banner")  # 2.0.0 is neither
        assert axe_violations(b) == []
