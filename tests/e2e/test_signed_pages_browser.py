"""Signed releases on the module page (#35) in a real headless Chromium against a real `gitreg serve`:
"Signed by" with the key's fingerprint, why a version is not served, the picker's mark; axe clean."""

from __future__ import annotations

from pathlib import Path

import pytest
from selenium.webdriver.common.by import By

from tests.support.browser import axe_violations
from tests.support.process import GitregProcess
from tests.support.repos import GitRepo
from tests.support.signing import allowed_signers, ssh_key, ssh_signed_tag

pytestmark = pytest.mark.slow


def test_the_module_page_shows_the_signer_and_why_an_unsigned_version_is_not_served(browser, tmp_path: Path):
    key = ssh_key(tmp_path / "keys", "release")
    allowed = allowed_signers(tmp_path / "keys" / "allowed_signers", {"release@example.com": key})
    repo = GitRepo(tmp_path / "repos", "terraform-aws-vpc")
    repo.commit({"README.md": "# VPC\n\nA VPC.\n", "main.tf": 'variable "cidr" {\n  type = string\n}\n'})
    ssh_signed_tag(repo, "v1.0.0", key)
    repo.commit({"README.md": "# VPC\n\nA VPC, later.\n"})
    repo.tag("v1.1.0", annotated=True)
    config = tmp_path / "gitreg.toml"
    config.write_text(
        f'[signing]\nallowed_signers = "{allowed}"\nrequire = true\n[storage]\npath = "{tmp_path / "state"}"\n'
        f'[[modules]]\nnamespace = "acme"\nname = "vpc"\nsystem = "aws"\nrepository = "{repo.url}"\n'
        'download = "archive"\n'
    )
    with GitregProcess("--config", str(config)) as server:
        server.wait_indexed()
        browser.get(server.url + "/modules/acme/vpc/aws/1.0.0")
        signed = browser.find_element(By.ID, "signature").text
        assert "Signed by release@example.com" in signed and "SHA256:" in signed and "on the tag" in signed
        assert axe_violations(browser) == []
        browser.get(server.url + "/modules/acme/vpc/aws/1.1.0")
        refused = browser.find_element(By.ID, "signature-refused").text
        assert "Not served to Terraform: version 1.1.0 is not served" in refused
        assert "neither its tag nor its commit is signed" in refused
        assert not browser.find_elements(By.ID, "signature")
        picker = browser.find_element(By.CSS_SELECTOR, "ul.versions").get_attribute("textContent")
        assert "1.1.0" in picker and "not served" in picker
        assert axe_violations(browser) == []
