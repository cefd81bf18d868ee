"""READMEs in a real headless Chromium: terraform-docs output rendered, anchors that jump, hostile HTML
inert, a `file://` repository's relative images shown (served by gitreg's files endpoint), and every
construct GitHub renders beyond CommonMark shown as GitHub shows it (tests/support/readmes.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from tests.support.browser import BROKEN_WORDS_JS, axe_violations, color_scheme, page_overflow, sized_chromium
from tests.support.pages import SVG, TERRAFORM_DOCS_README, png
from tests.support.process import GitregProcess
from tests.support.readmes import ALERT_TEXT, GFM_README, WIDE_HEADERS
from tests.support.repos import GitRepo

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
    gfm = GitRepo(root, "terraform-aws-gfm")
    gfm.commit({"README.md": GFM_README, "main.tf": 'variable "name" {}\n'})
    gfm.tag("v1.0.0")
    return {"docs": docs, "evil": evil, "gfm": gfm}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitregProcess]:
    tmp_path = tmp_path_factory.mktemp("readmes")
    repos = make_repos(tmp_path / "repos")
    text = f'[storage]\npath = "{tmp_path / "state"}"\n'
    for name, system in (("docs", "aws"), ("evil", "null"), ("gfm", "aws")):
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


GFM = "/modules/acme/gfm/aws"
STYLE_JS = "return getComputedStyle(document.querySelector(arguments[0]))[arguments[1]]"


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_github_construct_shows_as_github_shows_it(server, browser, scheme):
    b = browser
    color_scheme(b, scheme)
    b.get(server.url + GFM)
    b.get_log("browser")  # only this page's messages below
    b.get(server.url + GFM)

    def style(css: str, name: str) -> str:
        return str(b.execute_script(STYLE_JS, css, name))

    def px(css: str, name: str) -> float:
        return float(style(css, name).removesuffix("px"))

    readme = b.find_element(By.ID, "readme")
    text = readme.text
    for literal in ("[!NOTE]", "[!WARNING]", "[ ]", "[x]", "<kbd>", ":---"):
        assert literal not in text, literal
    # Alerts: GitHub's `markdown-alert` box, a bar on the left and its title in the kind's colour.
    colours = set()
    for kind, words in ALERT_TEXT.items():
        box = f"#readme .markdown-alert-{kind.lower()}"
        assert b.find_element(By.CSS_SELECTOR, f"{box} .markdown-alert-title").text == kind.capitalize()
        assert words in b.find_element(By.CSS_SELECTOR, box).text
        assert px(box, "borderLeftWidth") >= 3
        assert style(f"{box} .markdown-alert-title", "color") == style(box, "borderLeftColor")
        colours.add(style(box, "borderLeftColor"))
    assert len(colours) == len(ALERT_TEXT)  # one colour per kind
    # A quotation has a bar, in the muted colour.
    assert px("#readme blockquote", "borderLeftWidth") >= 3
    # Task lists: disabled checkboxes (ticked where `[x]`), no bullets.
    boxes = readme.find_elements(By.CSS_SELECTOR, "input[type=checkbox]")
    assert [(x.is_enabled(), x.is_selected()) for x in boxes] == [(False, True), (False, False), (False, False)]
    assert style("#readme .task-list-item", "listStyleType") == "none"
    # Fenced HCL highlighted: keywords, strings and comments each in their colour, none the text's.
    plain = style("#readme .highlight pre", "color")
    colours = {style(f"#readme .highlight .{c}", "color") for c in ("kr", "s2", "c1")}
    assert len(colours) == 3 and plain not in colours, (plain, colours)
    assert style("#readme .highlight .c1", "fontStyle") == "italic"
    # `:---:` centres and `---:` right-aligns, over the tables' left default (terraform-docs' Required too).
    aligned = b.execute_script(
        "return [...document.querySelectorAll('#readme th, #readme td')]"
        ".map(c => [c.textContent.trim(), getComputedStyle(c).textAlign])"
    )
    found = dict(aligned)
    assert (found["Left"], found["Centre"], found["Right"], found["c"], found["r"]) == (
        "left",
        "center",
        "right",
        "center",
        "right",
    )
    assert found["Required"] == found["yes"] == found["no"] == "center"
    # <kbd>: a key cap (a box with a thicker bottom edge).
    assert style("#readme kbd", "display") == "inline-block"
    assert px("#readme kbd", "borderBottomWidth") > px("#readme kbd", "borderTopWidth") > 0
    assert axe_violations(b) == [], scheme
    refused = [m["message"] for m in b.get_log("browser") if "Content Security Policy" in m["message"]]
    assert refused == []


@pytest.mark.parametrize("width", [390, 1280])
def test_wide_tables_scroll_in_their_box_and_break_no_word(server, width):
    driver = sized_chromium(width)
    try:
        for module in (GFM, "/modules/acme/docs/aws"):
            driver.get(server.url + module)
            assert page_overflow(driver) <= 0, (width, module)
            for table in driver.find_elements(By.CSS_SELECTOR, "#readme table"):
                assert driver.execute_script(BROKEN_WORDS_JS, table) == [], (width, module)
                box = table.rect
                assert box["x"] >= 0 and box["x"] + box["width"] <= width, (width, module)
        # terraform-docs' inputs table is wider than a phone: it scrolls inside its box, from the keyboard too.
        driver.get(server.url + GFM)
        wide = driver.execute_script(
            "return [...document.querySelectorAll('#readme table')].find(t => t.textContent.includes('Required'))"
        )
        headers = [th.text for th in wide.find_elements(By.TAG_NAME, "th")]
        assert headers == list(WIDE_HEADERS)
        scrolls = driver.execute_script("return arguments[0].scrollWidth > arguments[0].clientWidth", wide)
        if width == 390:
            assert scrolls
        if scrolls:
            assert wide.get_attribute("tabindex") == "0"
            driver.execute_script("arguments[0].focus()", wide)
            wide.send_keys(Keys.ARROW_RIGHT)
            WebDriverWait(driver, 5).until(lambda d: d.execute_script("return arguments[0].scrollLeft", wide) > 0)
        assert axe_violations(driver) == [], width
    finally:
        driver.quit()
