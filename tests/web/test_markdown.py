"""READMEs and descriptions rendered as the Git hosts render them (gitreg/web/pages/markdown.py)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from gitreg.web.pages.markdown import HIGHLIGHT_CHARS, Links, render_markdown, slug
from tests.support.pages import TERRAFORM_DOCS_README
from tests.support.readmes import GFM_README, GITHUB

FILES = "/modules/acme/vpc/aws/1.2.0/files/"
HOSTILE = """<script>alert(1)</script>
<img src=x onerror="alert(2)">
<a href="javascript:alert(3)">raw</a> <a href="JaVa&#x09;ScRiPt:alert(4)">tab</a>
<p style="position:fixed" onclick="alert(5)">styled</p><h3 id="readme">clobber</h3>
<form action="https://evil.example"><input name="q"><button>go</button></form>
<iframe src="https://evil.example"></iframe><object data="x.swf"></object>
<svg><script>alert(6)</script></svg><style>body{display:none}</style>
<img src="data:image/svg+xml,<svg onload=alert(7)>">
<picture><source srcset="javascript:alert(8) 1x, logo.png 2x"><img src="logo.png"></picture>

[md](javascript:alert(9)) ![img](vbscript:x)
"""


class Collect(HTMLParser):
    """Every start tag with its attributes, and the visible text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parsed(html: str) -> Collect:
    found = Collect()
    found.feed(html)
    return found


def test_a_terraform_docs_readme_renders_without_visible_markup():
    html = render_markdown(TERRAFORM_DOCS_README, Links(files=FILES))
    page = parsed(html)
    text = "".join(page.text)
    assert "<" not in text and "BEGIN_TF_DOCS" not in text and "&lt;" not in html.replace("&gt;= ", "")
    tags = [tag for tag, _ in page.tags]
    assert {"table", "th", "td", "br", "kbd", "sub", "details", "summary", "s", "img"} <= set(tags)
    banner = next(a for t, a in page.tags if t == "p" and a.get("align"))
    assert banner == {"align": "center"}
    image = next(a for t, a in page.tags if t == "img")
    assert image["src"] == FILES + "docs/diagram.png" and image["width"] == "480"
    assert next(a for t, a in page.tags if t == "td" and a.get("align")) == {"align": "center"}


def test_every_anchor_link_targets_an_existing_prefixed_id_or_name():
    page = parsed(render_markdown(TERRAFORM_DOCS_README, Links(files=FILES)))
    targets = {a.get("id") or a.get("name") for _, a in page.tags} - {None}
    assert all(t.startswith("user-content-") for t in targets), targets
    fragments = [a["href"][1:] for t, a in page.tags if t == "a" and (a.get("href") or "").startswith("#")]
    assert {"user-content-inputs", "user-content-input_cidr", "user-content-output_vpc_id"} <= set(fragments)
    assert set(fragments) <= targets, set(fragments) - targets


def test_heading_ids_are_githubs_slugs_and_repeats_are_numbered():
    html = render_markdown("# Usage\n\n## The `cidr` input!\n\n## Usage\n", Links())
    assert re.findall(r'id="([^"]+)"', html) == [
        "user-content-usage",
        "user-content-the-cidr-input",
        "user-content-usage-1",
    ]
    assert slug("Inputs (3)") == "inputs-3"


def test_hostile_html_keeps_no_script_handler_style_form_or_unsafe_url():
    html = render_markdown(HOSTILE, Links(source="https://github.com/acme/vpc", ref="v1", files=FILES))
    page = parsed(html)
    tags = {tag for tag, _ in page.tags}
    assert not tags & {"script", "style", "form", "input", "button", "iframe", "object", "svg"}, tags
    for tag, attrs in page.tags:
        for name, value in attrs.items():
            assert not name.startswith("on") and name != "style", (tag, name)
            lowered = re.sub(r"\s", "", value or "").lower()
            assert "javascript:" not in lowered and "vbscript:" not in lowered and "data:" not in lowered, value
    text = "".join(page.text)
    assert "alert(1)" not in text and "alert(6)" not in text and "display" not in text  # dropped, not shown
    assert ("h3", {"id": "user-content-readme"}) in page.tags  # an id of the page's own cannot be clobbered
    source = next(a for t, a in page.tags if t == "source")
    assert source["srcset"] == FILES + "logo.png 2x"


def test_relative_links_go_to_the_hosts_page_and_without_one_keep_their_text():
    text = "[guide](docs/guide.md#setup) [up](../x.md) <a href='docs/a.md'>raw</a>"
    hosted = render_markdown(text, Links(source="https://gitlab.example.com/acme/vpc", ref="v1.0.0", base="infra"))
    assert 'href="https://gitlab.example.com/acme/vpc/-/blob/v1.0.0/infra/docs/guide.md#setup"' in hosted
    assert 'href="https://gitlab.example.com/acme/vpc/-/blob/v1.0.0/x.md"' in hosted
    bare = render_markdown("[guide](docs/guide.md) and [web](https://example.com)", Links())
    assert "<a" in bare and bare.count("<a") == 1 and "guide" in bare  # the relative link is its text


def test_relative_images_come_from_the_files_endpoint_relative_to_the_readmes_folder():
    links = Links(source="", ref="v1", base="infra/vpc/modules/flow", root="infra/vpc", files=FILES)
    html = render_markdown("![a](img/a.png) ![b](../../docs/b%20c.svg) ![c](../../../out.png) ![d](x.txt)", links)
    assert f'src="{FILES}modules/flow/img/a.png"' in html and f'src="{FILES}docs/b%20c.svg"' in html
    assert "out.png" not in html and "x.txt" not in html and ">c<" not in html  # alt text stays
    assert "c d" in re.sub(r"<[^>]+>", "", html).replace("  ", " ")
    # Outside the module's folder with a web page: the host's raw file.
    hosted = render_markdown("![c](../../../out.png)", Links("https://github.com/a/b", "v1", links.base, "infra/vpc"))
    assert 'src="https://github.com/a/b/raw/v1/infra/out.png"' in hosted


def flat(html: str) -> str:
    """HTML without the line breaks markdown-it puts between block tags (GitHub's reference has none)."""
    return re.sub(r"\s*\n\s*(?=<)|(?<=>)\n", "", html)


def test_every_github_construct_renders_as_github_renders_it():
    rendered = render_markdown(GFM_README, Links())
    # Task checkboxes get a name, which GitHub's lack (and axe-core requires of a form field).
    html = flat(rendered).replace(' aria-label="Task"', "")
    for alert in GITHUB["alerts"]:
        assert alert in html
    for construct in ("blockquote", "tasks", "aligned", "kbd", "code"):
        assert GITHUB[construct] in html, construct
    assert GITHUB["plain code"] in rendered  # its text's own line break kept


def test_fenced_terraform_is_highlighted_on_the_server():
    html = render_markdown('```terraform\nresource "aws_vpc" "this" {\n  cidr = "10.0.0.0/16" # c\n}\n```\n', Links())
    spans = [(attrs.get("class"), tag) for tag, attrs in parsed(html).tags if tag == "span"]
    assert ("kr", "span") in spans and ("s2", "span") in spans and ("c1", "span") in spans, spans
    assert '<span class="kr">resource</span>' in html and '<span class="c1"> # c</span>' in html
    # A language Pygments does not know, or none: plain, escaped, as before.
    assert (
        render_markdown("```nosuchlanguage\n<b>x</b>\n```\n", Links())
        == "<pre><code>&lt;b&gt;x&lt;/b&gt;\n</code></pre>\n"
    )


def test_a_readmes_own_html_cannot_pass_for_the_renderers_markup():
    """Classes, checkboxes and highlighting come from the renderer only (GitHub adds its own after sanitizing)."""
    html = render_markdown(
        '<div class="markdown-alert markdown-alert-warning"><p class="markdown-alert-title">Warning</p></div>\n'
        '<ul class="contains-task-list"><li class="task-list-item">'
        '<input type="checkbox" class="task-list-item-checkbox" disabled checked> x</li></ul>\n'
        '<span class="k highlight">y</span> <pre class="highlight">z</pre>\n\n'
        "00000000000000000000000000000000-x and 00000000000000000000000000000000-o\n",
        Links(),
    )
    found = parsed(html)
    assert [t for t, a in found.tags if "class" in a] == []
    assert "input" not in {t for t, _ in found.tags}
    assert "00000000000000000000000000000000-x" in html  # a guessed placeholder stays text
    # Each render draws its own nonce: none is left in the output.
    twice = {render_markdown("> [!TIP]\n> t\n\n- [ ] a\n", Links()) for _ in range(2)}
    assert len(twice) == 1


def test_highlighting_stops_at_its_budget_and_the_rest_stays_plain():
    """500 KB of highlighted HCL took 3.9 s (a <span> per token through the sanitizer), over the pages'
    budget; past HIGHLIGHT_CHARS a README's code stays plain, as GitHub leaves large files."""
    block = 'resource "aws_vpc" "this" {\n  cidr_block = var.cidr\n}\n'
    first = block * (HIGHLIGHT_CHARS // len(block) - 10)
    html = render_markdown(f"```hcl\n{first}```\n\n```hcl\n{block * 20}```\n\n```hcl\n{block}```\n", Links())
    assert html.count('<div class="highlight highlight-source-hcl">') == 2  # the first and the last fit
    assert f"<pre><code>{block * 20}</code></pre>" in html
