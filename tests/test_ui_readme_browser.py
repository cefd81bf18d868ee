"""READMEs in a real headless Chromium: terraform-docs output rendered, anchors that jump, hostile HTML
inert, and a `file://` repository's relative images shown (served by gitreg's files endpoint)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.gitreg_process import GitregProcess
from tests.support.browser import axe_violations
from tests.support.repos import GitRepo
from tests.test_markdown import TERRAFORM_DOCS_README
from tests.test_module_files import SVG, png

pytestmark = pytest.mark.slow  # a real gitreg process and a real headless Chromium

# Everything a README may try to run; each sets window.pwned if it ever does.
HOSTILE_README = """# Evil

<script>window.pwned = "script";</script>
<img src=x onerror="window.pwned='img'">
<svg onload="window.pwned='svg'"><script>window.pwned='svg-script'</script></svg>
<iframe srcdoc="<script>parent.pwned='iframe'</script>"></iframe>
<details open ontoggle="window.pwned='toggle'"><summary>s</summary>d</details>
<p style="position:fixed;inset:0" onmouseover="window.pwned='hover'">styled</p>
<form action="/logout" method="post"><button>Log out</button></form>
<a href="javascript:window.pwned='html-link'">raw html link</a>
<a href="JaVa&#x09;ScRiPt:window.pwned='tab'">tab link</a>
<img src="logo.svg"> <a id="readme" name="main">clobber</a>

[click me](javascript:window.pwned='link') [also me](JaVaScRiPt:window.pwned='link2')
"""


def make_repos(root: Path) -> dict[str, GitRepo]:
    docs = GitRepo(root, "terraform-aws-docs")  # a `file://` repository: no web page
    (docs.work / "docs").mkdir(parents=True)
    (docs.work / "docs" / "diagram.png").write_bytes(png(48, 24))
    (docs.work / "logo.svg").write_bytes(SVG)
    docs.commit({"README.md": TERRAFORM_DOCS_README + "\n![logo](logo.svg)\n", "main.tf": 'variable "cidr" {}\n'})
    docs.tag("v1.0.0")
    evil = GitRepo(root, "terraform-null-evil")
    (evil.work / "logo.svg").write_bytes(SVG)
    evil.commit({"README.md": HOSTILE_README, "main.tf": "# evil\n"})
    evil.tag("v1.0.0")
    return {"docs": docs, "evil": evil}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitregProcess]:
    tmp_path = tmp_path_factory.mktemp("readmes")
    repos = make_repos(tmp_path / "repos")
    text = f'[storage]\npath = "{tmp_path / "state"}"\n'
    for name, system in (("docs", "aws"), ("evil", "null")):
        text += (
            f'[[modules]]\nnamespace = "acme"\nname = "{name}"\nsystem = "{system}"\nrepository = "{repos[name].url}"\n'
        )
    config = tmp_path / "gitreg.toml"
    config.write_text(text)
    with GitregProcess("--config", str(config)) as proc:
        proc.wait_indexed()
        yield proc


def test_a_terraform_docs_readme_renders_without_markup_and_its_anchors_jump(server, browser):
    b = browser
    b.get(server.url + "/modules/acme/docs/aws")
    readme = b.find_element(By.ID, "readme")
    text = readme.text
    for markup in ("<a name", "<br>", "<p align", "<img", "BEGIN_TF_DOCS", "</details>", "<kbd>"):
        assert markup not in text, markup
    assert "The CIDR.\nA /16." in text  # <br> is a line break
    b.set_window_size(1280, 500)  # short, so a jump scrolls
    link = readme.find_element(By.LINK_TEXT, "cidr")
    assert link.get_attribute("href").endswith("#user-content-input_cidr")
    link.click()
    WebDriverWait(b, 5).until(lambda d: d.execute_script("return location.hash") == "#user-content-input_cidr")
    top = b.execute_script(
        "const t = document.getElementsByName('user-content-input_cidr')[0];"
        "return t ? Math.round(t.getBoundingClientRect().top) : null"
    )
    assert top is not None and 0 <= top < 100, top  # the target is at the top of the window: it jumped
    for anchor in readme.find_elements(By.CSS_SELECTOR, "a[href^='#']"):
        target = anchor.get_attribute("href").split("#", 1)[1]
        found = b.execute_script(
            "return !!(document.getElementById(arguments[0]) || document.getElementsByName(arguments[0]).length)",
            target,
        )
        assert found, target
    assert axe_violations(b) == []  # the rendered README keeps the page accessible


def test_a_file_repositorys_relative_images_are_shown(server, browser):
    b = browser
    b.get(server.url + "/modules/acme/docs/aws")
    for alt in ("Architecture diagram", "logo"):
        image = b.find_element(By.CSS_SELECTOR, f"#readme img[alt='{alt}']")
        WebDriverWait(b, 10).until(lambda d, i=image: d.execute_script("return arguments[0].complete", i))
        assert b.execute_script("return arguments[0].naturalWidth", image) > 0, alt
    assert b.find_element(By.CSS_SELECTOR, "#readme p[align='center'] img").get_attribute("width") == "480"


def test_a_hostile_html_readme_stays_inert(server, browser):
    b = browser
    b.get(server.url + "/modules/acme/evil/null")
    readme = b.find_element(By.ID, "readme")
    for element in readme.find_elements(By.CSS_SELECTOR, "*"):
        b.execute_script("arguments[0].dispatchEvent(new MouseEvent('mouseover', {bubbles: true}))", element)
    for link in readme.find_elements(By.TAG_NAME, "a"):
        if link.get_attribute("href"):
            link.click()
            b.get(server.url + "/modules/acme/evil/null") if "/modules/acme/evil/null" not in b.current_url else None
    assert b.execute_script("return window.pwned === undefined")
    found = b.execute_script(
        """
        const root = document.getElementById('readme');
        const bad = [];
        for (const el of root.querySelectorAll('*')) {
          if (['SCRIPT', 'IFRAME', 'FORM', 'BUTTON', 'SVG', 'STYLE', 'OBJECT'].includes(el.tagName.toUpperCase()))
            bad.push(el.tagName);
          for (const a of el.attributes) {
            const v = a.value.replace(/\\s/g, '').toLowerCase();
            if (a.name.startsWith('on') || a.name === 'style' || a.name === 'srcdoc' || v.startsWith('javascript:'))
              bad.push(el.tagName + ' ' + a.name);
          }
        }
        return bad;
        """
    )
    assert found == []
    # The README's `id="readme"` could not take the page's own: it is user-content-readme.
    assert b.find_element(By.ID, "readme") == readme and b.find_elements(By.ID, "user-content-readme")
    assert 'window.pwned = "script"' not in readme.text and "svg-script" not in readme.text  # dropped, not shown
