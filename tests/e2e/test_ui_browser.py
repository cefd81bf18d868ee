"""The module browser in a real headless Chromium against a real `gitreg serve` and real repositories.

Screenshots of every page are saved under the test's tmp directory (`.../screenshots/*.png`).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.support.browser import axe_violations, chromium_driver
from tests.support.process import GitregProcess
from tests.support.repos import GitRepo

# Left out of the fast subset (`-m "not slow"`): a real headless Chromium.
pytestmark = pytest.mark.slow

VPC_README = """# VPC

Creates a VPC with public and private subnets across availability zones.

## Usage

See [the usage guide](docs/usage.md) and the [upstream docs](https://developer.hashicorp.com/terraform).

| Subnet | Size |
| ------ | ---- |
| public | /24  |
"""
HOSTILE_README = """# Evil

Looks harmless.

<script>window.pwned = "script";</script>

<img src=x onerror="window.pwned='img'">

[click me](javascript:window.pwned='link')

[also me](JaVaScRiPt:window.pwned='link2')

<a href="javascript:window.pwned='html-link'">raw html link</a>
"""
TOKEN_ACME = "ui-token-acme-only-0123456789"
TOKEN_ALL = "ui-token-everything-987654321"


def submit_and_wait(b, button_css: str, url_part: str) -> None:
    """Click a form's button and wait for the page it leads to."""
    b.find_element(By.CSS_SELECTOR, button_css).click()
    WebDriverWait(b, 10).until(
        lambda d: url_part in d.current_url and d.execute_script("return document.readyState") == "complete"
    )


def make_repos(root: Path) -> dict[str, GitRepo]:
    vpc = GitRepo(root, "terraform-aws-vpc")
    vpc.commit({"README.md": "# VPC\n\nThe first VPC.\n", "main.tf": 'variable "cidr" {\n  type = string\n}\n'})
    vpc.tag("v1.0.0")
    vpc.commit(
        {
            "README.md": VPC_README,
            "main.tf": (
                'variable "cidr" {\n  type        = string\n  description = "The VPC CIDR block."\n'
                '  default     = "10.0.0.0/16"\n}\n'
                'variable "name" {\n  type = string\n  description = "Name tag."\n}\n'
                'output "vpc_id" {\n  description = "The VPC ID."\n  value = aws_vpc.this.id\n}\n'
                'resource "aws_vpc" "this" {\n  cidr_block = var.cidr\n}\n'
            ),
            "modules/subnets/main.tf": 'variable "vpc_id" {\n  type = string\n}\n',
            "examples/complete/main.tf": 'module "vpc" {\n  source = "../.."\n  name = "demo"\n}\n',
        }
    )
    vpc.tag("v2.1.0")
    vpc.tag("v2.2.0-rc.1")
    dns = GitRepo(root, "terraform-aws-dns")
    dns.commit({"README.md": "# DNS\n\nZones and records.\n", "main.tf": "# dns\n"})
    dns.tag("v0.3.1")
    evil = GitRepo(root, "terraform-null-evil")
    evil.commit({"README.md": HOSTILE_README, "main.tf": "# evil\n"})
    evil.tag("v1.0.0")
    other = GitRepo(root, "terraform-azurerm-net")
    other.commit({"README.md": "# Net\n\nAzure networking.\n", "main.tf": "# net\n"})
    other.tag("v3.0.0")
    return {"vpc": vpc, "dns": dns, "evil": evil, "other": other}


def config_toml(tmp_path: Path, repos: dict[str, GitRepo], auth: bool = False) -> Path:
    rules = [
        ("acme", "vpc", "aws", repos["vpc"]),
        ("acme", "dns", "aws", repos["dns"]),
        ("acme", "evil", "null", repos["evil"]),
        ("other", "net", "azurerm", repos["other"]),
    ]
    text = f'[storage]\npath = "{tmp_path / "state"}"\n[ui]\ntitle = "Acme modules"\n'
    if auth:
        text += (
            f'[auth]\nsigning_key = "{"k" * 40}"\n'
            f'tokens = [{{ token = "{TOKEN_ACME}", namespaces = ["acme"] }}, "{TOKEN_ALL}"]\n'
        )
    for ns, name, system, repo in rules:
        text += (
            f'[[modules]]\nnamespace = "{ns}"\nname = "{name}"\nsystem = "{system}"\nrepository = "{repo.url}"\n'
            f'clone_url = "https://github.com/{ns}/terraform-{system}-{name}.git"\n'
        )
    path = tmp_path / "gitreg.toml"
    path.write_text(text)
    return path


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    path = tmp_path / "screenshots"
    path.mkdir()
    return path


@pytest.fixture
def server(tmp_path: Path):
    repos = make_repos(tmp_path / "repos")
    with GitregProcess("--config", str(config_toml(tmp_path, repos))) as proc:
        proc.wait_indexed()
        yield proc


def test_index_search_filter_module_and_versions(server, browser, shots):
    b = browser
    b.get(server.url + "/")
    b.save_screenshot(str(shots / "index.png"))
    assert b.title.startswith("Modules") and "Acme modules" in b.title
    listed = [a.text for a in b.find_elements(By.CSS_SELECTOR, ".module h2 a")]
    assert sorted(listed) == ["acme/dns/aws", "acme/evil/null", "acme/vpc/aws", "other/net/azurerm"]

    b.find_element(By.ID, "q").send_keys("zones")
    submit_and_wait(b, "form.search button", "q=zones")
    # The description says it first; a word of the VPC README ("availability zones") next.
    assert [a.text for a in b.find_elements(By.CSS_SELECTOR, ".module h2 a")] == ["acme/dns/aws", "acme/vpc/aws"]
    b.save_screenshot(str(shots / "search.png"))

    b.get(server.url + "/?system=azurerm")
    assert [a.text for a in b.find_elements(By.CSS_SELECTOR, ".module h2 a")] == ["other/net/azurerm"]

    b.get(server.url + "/")
    b.find_element(By.LINK_TEXT, "acme/vpc/aws").click()
    assert b.current_url.endswith("/modules/acme/vpc/aws")
    b.save_screenshot(str(shots / "module.png"))
    assert b.find_element(By.ID, "shown-version").text == "2.1.0"  # the latest release, not the rc
    snippet = b.find_element(By.ID, "snippet").text
    host = server.url.split("://", 1)[1]
    assert snippet == f'module "vpc" {{\n  source  = "{host}/acme/vpc/aws"\n  version = "~> 2.1"\n}}'
    readme = b.find_element(By.ID, "readme")
    assert readme.find_element(By.TAG_NAME, "h2").text == "Usage"
    assert readme.find_element(By.TAG_NAME, "table").text.startswith("Subnet Size")
    guide = readme.find_element(By.LINK_TEXT, "the usage guide").get_attribute("href")
    assert guide == "https://github.com/acme/terraform-aws-vpc/blob/v2.1.0/docs/usage.md"
    b.find_element(By.LINK_TEXT, "Inputs (2)").click()
    inputs = [r.text for r in b.find_elements(By.CSS_SELECTOR, "#inputs .var")]
    assert inputs == ["name\nName tag.\nType string", 'cidr\nThe VPC CIDR block.\nType string\nDefault "10.0.0.0/16"']
    b.find_element(By.LINK_TEXT, "Resources (1)").click()
    assert "aws_vpc.this" in b.find_element(By.ID, "resources").text
    assert b.find_element(By.ID, "modules/subnets") and b.find_element(By.ID, "examples/complete")
    b.find_element(By.CSS_SELECTOR, ".picker summary").click()  # the version picker, by the title
    versions = [li.text for li in b.find_elements(By.CSS_SELECTOR, ".versions li")]
    day = r"\d{4}-\d\d-\d\d"  # a version's date (its tag's), where gitreg has read it: the latest's at least
    expected = (f"2.2.0-rc.1 prerelease( {day})?", f"2.1.0 latest shown {day}", f"1.0.0( {day})?")
    assert len(versions) == 3 and all(re.fullmatch(e, v) for e, v in zip(expected, versions, strict=True)), versions

    b.find_element(By.LINK_TEXT, "1.0.0").click()
    assert b.find_element(By.ID, "shown-version").text == "1.0.0"
    # An older version's details are read in the background on the first visit (no git while
    # rendering): the page says so and reloads itself until they are there.
    readme = WebDriverWait(b, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#readme .markdown"))
    assert "The first VPC." in readme[0].text
    assert 'version = "~> 1.0"' in b.find_element(By.ID, "snippet").text
    b.save_screenshot(str(shots / "module-1.0.0.png"))

    b.get(server.url + "/modules/acme/vpc/aws/9.9.9")
    assert "has no version 9.9.9" in b.find_element(By.ID, "error-message").text
    b.get(server.url + "/modules/acme/nothing/aws")
    assert "No module acme/nothing/aws" in b.find_element(By.ID, "error-message").text


def test_pages_work_at_phone_width(server, shots):
    driver = chromium_driver()
    try:
        # A phone's viewport (a desktop window cannot be made this narrow).
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride", {"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": True}
        )
        driver.get(server.url + "/modules/acme/vpc/aws")
        driver.save_screenshot(str(shots / "module-phone.png"))
        # Nothing wider than the screen: the page does not scroll sideways.
        assert driver.execute_script("return document.documentElement.scrollWidth") <= 390
        driver.get(server.url + "/")
        driver.save_screenshot(str(shots / "index-phone.png"))
        assert driver.execute_script("return document.documentElement.scrollWidth") <= 390
    finally:
        driver.quit()


def test_a_hostile_readme_stays_inert(server, browser, shots):
    b = browser
    b.get(server.url + "/modules/acme/evil/null")
    b.save_screenshot(str(shots / "hostile.png"))
    assert b.execute_script("return window.pwned === undefined")
    for link in b.find_elements(By.TAG_NAME, "a"):
        href = (link.get_attribute("href") or "").lower()
        assert not href.startswith("javascript:"), href
    for link in b.find_elements(By.CSS_SELECTOR, "#readme a"):
        link.click() if link.get_attribute("href") else None
    assert b.execute_script("return window.pwned === undefined")
    text = b.find_element(By.ID, "readme").text
    assert "Looks harmless." in text and 'window.pwned = "script"' not in text  # sanitized: not run, not shown
    assert b.find_elements(By.CSS_SELECTOR, "#readme script, #readme img[onerror]") == []


def test_no_serious_accessibility_violations(server, browser):
    for path in ("/", "/modules/acme/vpc/aws"):
        browser.get(server.url + path)
        assert axe_violations(browser) == [], path


def test_logging_in_with_a_token_shows_only_its_namespaces(tmp_path, browser, shots):
    b = browser
    repos = make_repos(tmp_path / "repos")
    with GitregProcess("--config", str(config_toml(tmp_path, repos, auth=True))) as server:
        server.wait_indexed()
        b.get(server.url + "/modules/acme/vpc/aws")
        assert "/login" in b.current_url  # no session: the login form
        b.save_screenshot(str(shots / "login.png"))
        # Sized like a form (the browser window is 1280 px wide): a token's width, room above its button.
        form = b.find_element(By.CSS_SELECTOR, "form.login")
        field, button = b.find_element(By.ID, "token"), form.find_element(By.TAG_NAME, "button")
        assert form.size["width"] <= 450 and field.size["width"] <= form.size["width"]
        assert button.location["y"] >= field.location["y"] + field.size["height"] + 8
        b.find_element(By.ID, "token").send_keys("not-a-token-at-all-xx")
        b.find_element(By.CSS_SELECTOR, "form.login button").click()
        error = WebDriverWait(b, 10).until(lambda d: d.find_elements(By.ID, "login-error"))
        assert error[0].text == "That token is not valid here."
        b.find_element(By.ID, "token").send_keys(TOKEN_ACME)
        submit_and_wait(b, "form.login button", "/modules/acme/vpc/aws")  # back where the visitor wanted to go
        cookie = b.get_cookie("gitreg_session")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and "expiry" in cookie
        assert TOKEN_ACME not in cookie["value"]
        b.get(server.url + "/")
        listed = [a.text for a in b.find_elements(By.CSS_SELECTOR, ".module h2 a")]
        assert sorted(listed) == ["acme/dns/aws", "acme/evil/null", "acme/vpc/aws"]
        b.save_screenshot(str(shots / "index-logged-in.png"))
        b.get(server.url + "/modules/other/net/azurerm")
        assert "No module other/net/azurerm" in b.find_element(By.ID, "error-message").text
        b.get(server.url + "/")
        submit_and_wait(b, "form.logout button", "/login")
        b.get(server.url + "/")
        assert "/login" in b.current_url
