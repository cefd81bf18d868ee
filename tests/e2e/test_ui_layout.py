"""The module page's layout in a real headless Chromium: sections, wide modules on a phone, copy buttons.

A realistic module (tests/support/realistic.py) with 200 more inputs, some with long unbroken
names and values, served by a real `gitreg serve` whose `[server] public_url` is set.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from tests.support.browser import axe_violations, color_scheme, page_overflow, sized_chromium
from tests.support.githttp import GitHttpServer
from tests.support.process import GitregProcess
from tests.support.realistic import labels_module, write_vpc_module
from tests.support.repos import GitRepo

pytestmark = pytest.mark.slow

HOST = "registry.example.com"
LONG_NAMESPACE = "platform-engineering-shared-infrastructure-networking-team-01"
SECTIONS = ("readme", "inputs", "outputs", "dependencies", "resources", "submodules", "examples")
MODULE = "/modules/acme/vpc/aws"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitregProcess]:
    root = tmp_path_factory.mktemp("layout")
    vpc = GitRepo(root / "repos", "terraform-aws-vpc")
    write_vpc_module(vpc, HOST, extra_inputs=200)
    vpc.tag("v5.3.0")
    vpc.commit({"CHANGELOG.md": "## 5.4.0\n"})
    vpc.tag("v5.4.0")
    labels = labels_module(root / "repos")
    rules = [("acme", "vpc", "aws", vpc), ("acme", "labels", "null", labels), (LONG_NAMESPACE, "dns", "aws", labels)]
    text = f'[server]\npublic_url = "https://{HOST}"\n[storage]\npath = "{root / "state"}"\n'
    for ns, name, system, repo in rules:
        text += f'[[modules]]\nnamespace = "{ns}"\nname = "{name}"\nsystem = "{system}"\nrepository = "{repo.url}"\n'
    config = root / "gitreg.toml"
    config.write_text(text)
    with GitregProcess("--config", str(config)) as proc:
        proc.wait_indexed()
        yield proc


def phone_or_desktop(width: int):  # type: ignore[no-untyped-def]
    return sized_chromium(width)


def overflow(driver) -> int:  # type: ignore[no-untyped-def]
    return page_overflow(driver)


def shown(driver, element_id: str) -> bool:  # type: ignore[no-untyped-def]
    return bool(driver.find_element(By.ID, element_id).is_displayed())


@pytest.mark.parametrize("width", [390, 1280])
def test_a_200_input_module_never_scrolls_sideways(server, width):
    driver = phone_or_desktop(width)
    try:
        for section in SECTIONS:
            driver.get(f"{server.url}{MODULE}#{section}")
            assert overflow(driver) <= 0, (width, section)
            assert shown(driver, section)
        driver.get(f"{server.url}{MODULE}#inputs")
        cards = driver.find_elements(By.CSS_SELECTOR, "#inputs .var")
        assert len(cards) == 230
        # Every folded type and default opened, every submodule and example opened: still no overflow.
        driver.execute_script("document.querySelectorAll('details').forEach(d => d.open = true)")
        for section in ("inputs", "submodules", "examples"):
            driver.get(f"{server.url}{MODULE}#{section}")
            driver.execute_script("document.querySelectorAll('details').forEach(d => d.open = true)")
            assert overflow(driver) <= 0, (width, section, "opened")
        # A name that fits the width is on one line, not broken every few characters.
        driver.get(f"{server.url}{MODULE}#inputs")
        lines = driver.execute_script(
            "const c = [...document.querySelectorAll('code')].find(c => c.textContent === arguments[0]);"
            "return c.getClientRects().length",
            "default_security_group_ingress",
        )
        assert lines == 1, width
    finally:
        driver.quit()


def test_the_index_filters_fit_a_phone(server):
    driver = phone_or_desktop(390)
    try:
        driver.get(server.url + "/")
        select = driver.find_element(By.ID, "namespace")  # its longest option is 60 characters
        assert select.rect["x"] + select.rect["width"] <= 390
        assert overflow(driver) <= 0
    finally:
        driver.quit()


def test_every_section_opens_from_its_fragment_and_from_the_keyboard(server, browser):
    b = browser
    b.get(server.url + MODULE)
    assert shown(b, "readme") and not shown(b, "inputs")  # the README first
    for section in SECTIONS:
        b.get(f"{server.url}{MODULE}#{section}")
        assert [s for s in SECTIONS if shown(b, s)] == [section]
        assert b.find_element(By.CSS_SELECTOR, f'.tabs a[data-tab="{section}"]').get_attribute("aria-current")
    b.get(server.url + MODULE)
    for section in (*SECTIONS[1:], SECTIONS[0]):
        for _ in range(60):  # Tab until the section's link has the focus, then Enter
            b.switch_to.active_element.send_keys(Keys.TAB)
            if (b.switch_to.active_element.get_attribute("href") or "").endswith(f"#{section}"):
                break
        else:
            raise AssertionError(f"no link to #{section} reached with Tab")
        b.switch_to.active_element.send_keys(Keys.ENTER)
        assert b.current_url.endswith(f"#{section}")
        assert [s for s in SECTIONS if shown(b, s)] == [section]
    # The version picker opens from the keyboard too, by the title.
    b.get(server.url + MODULE)
    picker = b.find_element(By.CSS_SELECTOR, ".picker summary")
    assert picker.location["y"] < 300
    picker.send_keys(Keys.ENTER)
    versions = [li.text for li in b.find_elements(By.CSS_SELECTOR, ".versions li")]
    assert versions[0].rsplit(" ", 1)[0] == "5.4.0 latest shown" and versions[1].startswith("5.3.0"), versions


def test_a_submodule_anchor_opens_its_section(server, browser):
    browser.get(f"{server.url}{MODULE}#modules/flow-log")
    assert shown(browser, "submodules") and not shown(browser, "readme")
    assert browser.find_element(By.ID, "modules/flow-log").get_attribute("open") is not None


def test_no_serious_accessibility_violations_on_any_page_kind(server, browser):
    for path in (
        "/",
        "/?sort=name&q=vpc",
        MODULE,
        f"{MODULE}#inputs",
        f"{MODULE}#dependencies",
        f"{MODULE}#submodules",
        f"{MODULE}/5.3.0",
        "/modules/acme/vpc",
        "/login",
        "/modules/acme/nothing/aws",
    ):
        browser.get(server.url + path)
        # An older version's details are read on its first visit (the page reloads itself till then).
        WebDriverWait(browser, 20).until(lambda d: not d.find_elements(By.ID, "details-pending"))
        browser.execute_script("document.querySelectorAll('details').forEach(d => d.open = true)")
        assert axe_violations(browser) == [], path


def test_pages_still_being_read_reload_themselves_and_pass_axe(tmp_path, browser):
    """The "being indexed" page, then the reading state, each axe-clean (no meta refresh), each reloaded by
    page.js once there is more to show."""
    b = browser
    repo = GitRepo(tmp_path / "repos", "public-vnet")
    repo.commit(
        {"README.md": "# Virtual network\n\nWith IPv6.\n", "main.tf": 'variable "cidr" {\n  type = string\n}\n'}
    )
    repo.tag("v1.0.0")
    config = tmp_path / "gitreg.toml"
    with GitHttpServer(tmp_path / "repos", public={"public-vnet.git"}) as host:
        config.write_text(
            f'[storage]\npath = "{tmp_path / "state"}"\n[git]\nprotocols = ["http"]\n'
            '[[modules]]\nnamespace = "acme"\nname = "vnet"\nsystem = "aws"\n'
            f'repository = "{host.url("public-vnet.git")}"\n'
        )
        host.mode, host.delay = "slow", 6  # the index's first listing takes a while
        host.hold_fetches(filtered=False)  # then the tag's date is read, its files are not
        with GitregProcess("--config", str(config)) as proc:
            b.get(proc.url + "/modules/acme/vnet/aws")
            status = b.find_element(By.CSS_SELECTOR, "[role=status]")
            assert "being indexed" in status.text and status.is_displayed()
            assert status.find_element(By.LINK_TEXT, "Reload now").get_attribute("href") == b.current_url
            assert axe_violations(b) == [], "being indexed"
            host.mode = "ok"
            WebDriverWait(b, 30).until(lambda d: d.find_elements(By.ID, "details-pending"))  # reloaded by itself
            assert "Being read from the repository." in b.find_element(By.ID, "readme").text
            assert b.find_element(By.LINK_TEXT, "Reload now").is_displayed()
            for fragment in ("", "#inputs"):
                b.get(f"{proc.url}/modules/acme/vnet/aws{fragment}")
                assert axe_violations(b) == [], f"reading {fragment}"
            host.release_fetches()
            WebDriverWait(b, 30).until(lambda d: not d.find_elements(By.ID, "details-pending"))
            assert "cidr" in b.find_element(By.ID, "inputs").text  # the same section, now read
            assert "With IPv6." in b.find_element(By.ID, "readme").get_attribute("textContent")
    refused = [m["message"] for m in b.get_log("browser") if "Content Security Policy" in m["message"]]
    assert refused == []


def test_the_copy_button_copies_the_full_address_and_the_csp_allows_its_script(server, browser):
    b = browser
    b.execute_cdp_cmd(
        "Browser.grantPermissions",
        {"origin": server.url, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]},
    )
    b.get(f"{server.url}{MODULE}#submodules")
    b.get_log("browser")  # only this page's messages below
    b.get(f"{server.url}{MODULE}#submodules")
    b.find_element(By.ID, "modules/flow-log").click()
    button = b.find_element(By.CSS_SELECTOR, "#modules\\/flow-log button[data-copy]")
    assert button.is_displayed()  # the script ran: without it the button stays hidden
    button.click()
    copied = b.execute_async_script(
        "const done = arguments[arguments.length - 1]; navigator.clipboard.readText().then(done, e => done(String(e)))"
    )
    assert copied == (
        f'module "flow_log" {{\n  source  = "{HOST}/acme/vpc/aws//modules/flow-log"\n  version = "~> 5.4"\n}}\n'
    )
    assert button.text == "Copied"
    refused = [m["message"] for m in b.get_log("browser") if "Content Security Policy" in m["message"]]
    assert refused == []


def test_the_favicon_is_an_image_and_a_namespace_name_is_a_page(server, browser):
    b = browser
    b.get(server.url + "/")
    for src in ("/favicon.ico", "/static/favicon.svg"):
        width = b.execute_async_script(
            "const done = arguments[arguments.length - 1]; const img = new Image();"
            "img.onload = () => done(img.naturalWidth); img.onerror = () => done(-1); img.src = arguments[0];",
            src,
        )
        assert width > 0, src
    b.get(server.url + "/modules/acme/vpc")
    assert b.execute_script("return document.contentType") == "text/html"
    assert [a.text for a in b.find_elements(By.CSS_SELECTOR, ".module h2 a")] == ["acme/vpc/aws"]


def visible(driver, css: str) -> list[str]:  # type: ignore[no-untyped-def]
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, css) if e.is_displayed()]


def test_inputs_and_outputs_filter_by_name_and_description(server, browser):
    b = browser
    b.get(f"{server.url}{MODULE}#inputs")
    field = b.find_element(By.ID, "filter-inputs")
    assert field.is_displayed() and len(visible(b, "#inputs .var")) == 230
    field.send_keys("nat gateway")  # every word, in a name or a description
    cards = visible(b, "#inputs .var")
    assert 3 <= len(cards) < 10 and all("nat" in c.lower() and "gateway" in c.lower() for c in cards), cards
    assert b.find_element(By.ID, "filter-inputs-count").text == f"{len(cards)} of 230 shown"
    field.clear()
    field.send_keys("CloudWatch")  # only in descriptions: flow_log_retention_in_days's
    cards = visible(b, "#inputs .var")
    assert [c.split("\n", 1)[0] for c in cards] == ["flow_log_retention_in_days"]
    assert [h.split(" (")[0] for h in visible(b, "#inputs h3.group")] == ["Optional inputs"]  # no required left
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys(Keys.BACKSPACE)
    assert len(visible(b, "#inputs .var")) == 230 and b.find_element(By.ID, "filter-inputs-count").text == ""
    b.get(f"{server.url}{MODULE}#outputs")
    b.find_element(By.ID, "filter-outputs").send_keys("vpc_id")
    assert [c.split("\n", 1)[0] for c in visible(b, "#outputs .var")] == ["vpc_id"]
    assert axe_violations(b) == []


def test_without_javascript_no_filter_shows_and_every_input_stays(server, browser):
    b = browser
    b.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": True})
    b.get(f"{server.url}{MODULE}#inputs")
    assert not b.find_element(By.ID, "filter-inputs").is_displayed()
    assert len(visible(b, "#inputs .var")) == 230
    b.get(f"{server.url}{MODULE}#outputs")
    assert not b.find_element(By.ID, "filter-outputs").is_displayed() and len(visible(b, "#outputs .var")) == 7
    b.get(f"{server.url}{MODULE}")
    b.find_element(By.CSS_SELECTOR, ".picker summary").click()  # a <details>: it opens without script
    assert len(visible(b, ".versions li")) == 2


def test_search_marks_what_matched(server, browser):
    for query, words in (("VPC", {"vpc"}), ("tags labels", {"tags", "labels"})):
        browser.get(server.url + "/?q=" + query.replace(" ", "+"))
        marks = [m.text.lower() for m in browser.find_elements(By.CSS_SELECTOR, ".modules mark")]
        assert marks and set(marks) <= words, (query, marks)
    assert axe_violations(browser) == []


def test_the_version_picker_opens_over_the_page_with_dates_and_badges(server, browser):
    b = browser
    b.get(server.url + MODULE + "/5.3.0")
    WebDriverWait(b, 20).until(lambda d: not d.find_elements(By.ID, "details-pending"))
    tabs = b.find_element(By.CSS_SELECTOR, ".tabs").location["y"]
    b.find_element(By.CSS_SELECTOR, ".picker summary").click()
    listed = b.find_element(By.CSS_SELECTOR, ".versions")
    assert b.find_element(By.CSS_SELECTOR, ".tabs").location["y"] == tabs  # over the page, not in its flow
    assert b.execute_script("return getComputedStyle(arguments[0]).position", listed) == "absolute"
    rows = [li.text for li in listed.find_elements(By.TAG_NAME, "li")]
    assert [r.rsplit(" ", 1)[0] for r in rows] == ["5.4.0 latest", "5.3.0 shown"], rows
    dates = [t.get_attribute("datetime") for t in listed.find_elements(By.TAG_NAME, "time")]
    assert len(dates) == 2 and all(re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:]+Z", d) for d in dates), dates
    b.find_element(By.CSS_SELECTOR, ".picker summary").send_keys(Keys.ESCAPE)
    assert not listed.is_displayed()
    assert axe_violations(b) == []


def test_unfolded_types_are_laid_out_and_resources_are_one_compact_list(server, browser):
    b = browser
    b.get(f"{server.url}{MODULE}#input-dhcp_options")
    folded = b.find_element(By.CSS_SELECTOR, "#input-dhcp_options details.value")
    folded.find_element(By.TAG_NAME, "summary").click()
    lines = folded.find_element(By.TAG_NAME, "pre").text.split("\n")
    assert lines[0] == "object({" and lines[-1] == "})" and "  domain_name = optional(string)" in lines, lines
    b.get(f"{server.url}{MODULE}#resources")
    items = b.find_elements(By.CSS_SELECTOR, "#resources .resources li")
    assert len({i.location["x"] for i in items}) == 1  # one column
    assert max(i.size["height"] for i in items) < 40
    assert items[0].text == "aws_vpc.this"


def test_the_tab_bar_shows_a_phone_that_it_scrolls(server):
    driver = sized_chromium(390)
    try:
        driver.get(server.url + MODULE)
        bar = driver.find_element(By.CSS_SELECTOR, ".tabs ul")
        assert driver.execute_script("return arguments[0].scrollWidth > arguments[0].clientWidth", bar)
        cue = driver.execute_script("return getComputedStyle(arguments[0]).backgroundImage", bar)
        assert cue.count("linear-gradient") == 4  # the edge shadows, shown where there is more to scroll
    finally:
        driver.quit()


def test_the_dark_scheme_passes_axe_too(server, browser):
    color_scheme(browser, "dark")
    for path in ("/?q=vpc", MODULE, f"{MODULE}#inputs", f"{MODULE}#resources"):
        browser.get(server.url + path)
        browser.execute_script("document.querySelectorAll('details').forEach(d => d.open = true)")
        assert axe_violations(browser) == [], path
