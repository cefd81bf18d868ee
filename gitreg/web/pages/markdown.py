"""Repository Markdown as the Git hosts render it: CommonMark, GFM tables, strikethrough, task
lists and alerts (`> [!NOTE]`: markdown-it-py's own), fenced code highlighted by Pygments, raw
HTML through an allow-list sanitizer (nh3, the binding of Rust's ammonia, as GitLab and GitHub
sanitize theirs).

`render_markdown` is the one renderer, for READMEs and for the descriptions of inputs and
outputs. Pure and CPU-bound on hostile input: the pages run it in parse worker processes
(readme.Readmes), never on the event loop.

What survives the sanitizer (ALLOWED_TAGS / ALLOWED_ATTRIBUTES): the HTML that READMEs use
(terraform-docs' `<a name>` anchors and `<br>`, `<p align="center"><img ...></p>` banners,
`<details>`, `<picture>`/`<source srcset>`, tables, `<kbd>`, `<sub>`/`<sup>`); comments are
dropped; no `style`, no event handler, no form, frame, script or SVG. Every URL is http(s),
mailto or relative. As on GitHub, every `id` and `name` gets USER_CONTENT in front, so a README
cannot clobber the page's own ids, and an in-page link `#x` is rewritten to `#user-content-x`
here (GitHub does that in JavaScript). Headings get ids (GitHub's slugs), so a README's table
of contents and terraform-docs' anchors jump where they should.

Relative URLs (`Links`): an image inside the module's folder is served by gitreg itself (the
files endpoint: views.module_file, index/files.py), so a private or `file://` repository's
diagram shows; any other relative image, and every relative link, goes to the Git host's page
of the file at the version shown; with no such page a link keeps its text and an image its
alt text.

Markup the renderer makes, never a README's HTML: as GitHub adds its alerts, task-list
checkboxes and highlighting after sanitizing, a README cannot pass for them. Each render draws
a random `nonce`; the renderer's own `class` values carry it (the sanitizer keeps a class only
with it, and drops the nonce), and a task's checkbox is a `nonce` placeholder in the text,
replaced by a disabled `<input type="checkbox">` after sanitizing (no `input` passes nh3).
"""

from __future__ import annotations

import functools
import posixpath
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import nh3
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markdown_it.renderer import RendererHTML
from markdown_it.rules_core import StateCore
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import get_lexer_by_name
from pygments.lexers.special import TextLexer
from pygments.util import ClassNotFound

from gitreg.index.files import image_type

USER_CONTENT = "user-content-"
SAFE_SCHEMES = frozenset({"http", "https", "mailto"})
_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
ALLOWED_TAGS = frozenset(
    {
        *("a", "b", "blockquote", "br", "caption", "code", "dd", "del", "details", "div", "dl", "dt", "em"),
        *_HEADINGS,
        *("hr", "i", "img", "ins", "kbd", "li", "ol", "p", "picture", "pre", "q", "s", "samp", "source", "span"),
        *("strong", "sub", "summary", "sup", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "tt"),
        *("ul", "var"),
    }
)
ALLOWED_ATTRIBUTES = {
    "a": {"href", "name", "id", "title"},
    "img": {"src", "alt", "width", "height", "align", "title"},
    "source": {"srcset", "media", "type", "width", "height"},
    "p": {"align"},
    "div": {"align"},
    **{h: {"id", "align"} for h in _HEADINGS},
    "td": {"align", "colspan", "rowspan"},
    "th": {"align", "colspan", "rowspan"},
    "ol": {"start"},
    "details": {"open"},
}
# Dropped with their content (not only their tags): what is code or a document of its own.
_DROPPED_WITH_CONTENT = frozenset(
    {"script", "style", "iframe", "noscript", "noembed", "noframes", "template", "textarea", "title", "svg", "math"}
)


@dataclass(frozen=True)
class Links:
    """Where the relative URLs of one README (or description) point.

    `source` is the repository's web page ("" when it has none), `ref` the tag shown, `base`
    the README's folder in the repository, `root` the module's folder, `files` the URL of the
    files endpoint for this version (ends with `/`; "" for none): it serves images below `root`.
    """

    source: str = ""
    ref: str = ""
    base: str = ""
    root: str = ""
    files: str = ""


def repository_file_url(source: str, ref: str, path: str, raw: bool) -> str:
    """The web URL of a file in the repository at `ref` (GitLab's `/-/blob/` or GitHub's `/blob/`)."""
    kind = "raw" if raw else "blob"
    host = (urlsplit(source).hostname or "").lower()
    middle = f"/-/{kind}/" if "gitlab" in host else f"/{kind}/"
    return f"{source.rstrip('/')}{middle}{quote(ref, safe='')}/{path.lstrip('/')}"


def prefixed(name: str) -> str:
    """An id, a `name` or a fragment in the page's user-content namespace (once, as GitHub)."""
    return name if name.startswith(USER_CONTENT) else f"{USER_CONTENT}{name}"


def _scheme(url: str) -> str | None:
    """The URL's scheme in lower case (browsers ignore TABs and newlines in it), None for a relative URL."""
    text = "".join(c for c in url.strip() if c.isprintable() and not c.isspace()).lower()
    scheme, sep, _ = text.partition(":")
    if not sep or "/" in scheme or "?" in scheme or "#" in scheme:
        return None
    return scheme


def _safe_link(url: str) -> bool:
    """Only http, https, mailto and relative links (no javascript:, data:, file:, vbscript:...)."""
    scheme = _scheme(url)
    return scheme is None or scheme in SAFE_SCHEMES


def _in_repository(links: Links, url: str) -> tuple[str, str] | None:
    """(the path in the repository a relative URL names, its `?query#fragment`), None when it leaves it."""
    parts = urlsplit(url)
    path = unquote(parts.path)
    joined = path.lstrip("/") if path.startswith("/") else posixpath.join(links.base.strip("/"), path)
    target = posixpath.normpath(joined) if joined else ""
    if target in ("", ".") or target.startswith("../") or target == "..":
        return None
    tail = (f"?{parts.query}" if parts.query else "") + (f"#{parts.fragment}" if parts.fragment else "")
    return target, tail


def resolve_link(links: Links, url: str) -> str | None:
    """Where a link of the README goes: in-page anchors into the user-content namespace, relative
    links to the Git host's page of the file; None when it cannot go anywhere (its text stays)."""
    if url.startswith("#"):
        return f"#{prefixed(url[1:])}" if len(url) > 1 else url
    if not url or _scheme(url) is not None or url.startswith("//"):
        return url or None
    found = _in_repository(links, url)
    if found is None or not links.source:
        return None
    target, tail = found
    return repository_file_url(links.source, links.ref, quote(target, safe="/"), raw=False) + tail


def resolve_image(links: Links, url: str) -> str | None:
    """Where an image of the README is loaded from: gitreg's files endpoint for an image in the
    module's folder, else the Git host's raw file; None when nowhere (its alt text stays)."""
    if not url or _scheme(url) is not None or url.startswith("//"):
        return url or None
    found = _in_repository(links, url)
    if found is None:
        return None
    target, _ = found
    root = links.root.strip("/")
    inside = target[len(root) + 1 :] if root and target.startswith(f"{root}/") else ("" if root else target)
    if links.files and inside and image_type(inside) is not None:
        return links.files + quote(inside, safe="/")
    if links.source:
        return repository_file_url(links.source, links.ref, quote(target, safe="/"), raw=True)
    return None


def _srcset(links: Links, value: str) -> str | None:
    """A `srcset` with each candidate resolved as an image; unsafe or unlocatable ones dropped."""
    kept = []
    for candidate in value.split(","):
        url, _, descriptor = candidate.strip().partition(" ")
        scheme = _scheme(url)
        resolved = resolve_image(links, url) if scheme is None or scheme in ("http", "https") else None
        if resolved:
            kept.append(f"{resolved} {descriptor.strip()}".strip())
    return ", ".join(kept) or None


# Code highlighted per README, at most (the rest stays plain, as GitHub leaves large files): each
# token becomes a classed <span> the sanitizer checks, so 500 KB of HCL took 3.9 s against 0.23 s
# plain, over the pages' budget; 64 KB costs about a tenth of that.
HIGHLIGHT_CHARS = 64 << 10
# The tags whose `class` the renderer sets (alerts, task lists, highlighted code): kept only with the nonce.
_CLASSED = ("div", "p", "ul", "ol", "li", "span", "pre")


def _own_class(nonce: str, value: str) -> str | None:
    """A `class` the renderer wrote (it carries `nonce`) without the nonce; None for a README's own."""
    words = value.split()
    if not nonce or nonce not in words:
        return None
    return " ".join(w for w in words if w != nonce) or None


def sanitize(html: str, links: Links, nonce: str = "") -> str:
    """`html` through the allow-list (see the module docstring), its URLs resolved by `links`;
    a `class` survives only on the renderer's markup, marked by `nonce`."""

    def attribute(tag: str, name: str, value: str) -> str | None:
        if name == "class":
            return _own_class(nonce, value)
        if name in ("id", "name"):
            return prefixed(value) if value else None
        if tag == "a" and name == "href":
            return resolve_link(links, value)
        if tag == "img" and name == "src":
            return resolve_image(links, value)
        if name == "srcset":  # not a URL attribute to ammonia: checked here
            return _srcset(links, value)
        return value

    return nh3.clean(
        html,
        tags=set(ALLOWED_TAGS),
        clean_content_tags=set(_DROPPED_WITH_CONTENT),
        attributes={
            tag: set(ALLOWED_ATTRIBUTES.get(tag, ())) | ({"class"} if tag in _CLASSED else set())
            for tag in ALLOWED_TAGS
        },
        attribute_filter=attribute,
        strip_comments=True,
        link_rel="nofollow noopener noreferrer",
        url_schemes=set(SAFE_SCHEMES),
        set_tag_attribute_values={"img": {"loading": "lazy"}},
    )


def slug(text: str) -> str:
    """GitHub's heading id: lower case, punctuation dropped, spaces as hyphens."""
    kept = "".join(c for c in text.strip().lower() if c.isalnum() or c in "-_ ")
    return kept.replace(" ", "-")


def _heading_ids(state: StateCore) -> None:
    """An id for every heading, from its text; repeats get `-1`, `-2`... (as GitHub's)."""
    seen: dict[str, int] = state.env.setdefault("slugs", {})
    tokens = state.tokens
    for at, token in enumerate(tokens[:-1]):
        if token.type != "heading_open":
            continue
        words = [c.content for c in tokens[at + 1].children or () if c.type in ("text", "text_special", "code_inline")]
        base = slug("".join(words)) or "section"
        count = seen.get(base, 0)
        seen[base] = count + 1
        token.attrSet("id", base if count == 0 else f"{base}-{count}")


def _cell_align(state: StateCore) -> None:
    """A table column's alignment as `align` (the sanitizer drops markdown-it's `style`)."""
    for token in state.tokens:
        if token.type in ("th_open", "td_open"):
            style = str(token.attrGet("style") or "")
            token.attrs.pop("style", None)
            if style.startswith("text-align:"):
                token.attrSet("align", style.partition(":")[2])


def _unlinked(state: StateCore) -> None:
    """A Markdown link that cannot go anywhere becomes its text (not an `<a>` without href)."""
    links: Links = state.env["links"]
    for block in state.tokens:
        opened: list[Token] = []
        for token in block.children or ():
            if token.type == "link_open":
                opened.append(token)
                token.hidden = resolve_link(links, str(token.attrGet("href") or "")) is None
            elif token.type == "link_close" and opened:
                token.hidden = opened.pop().hidden


def _image(self: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType) -> str:
    """An image that cannot be located shows its alt text (the sanitizer resolves the others' src)."""
    token = tokens[idx]
    if resolve_image(env["links"], str(token.attrGet("src") or "")) is None:
        return escapeHtml(self.renderInlineAsText(token.children or [], options, env))
    return self.image(tokens, idx, options, env)


def _own_classes(state: StateCore) -> None:
    """The nonce into every `class` the parser set (alerts, task lists): the sanitizer keeps those."""
    nonce = state.env["nonce"]
    for token in state.tokens:
        value = token.attrGet("class")
        if value:
            token.attrSet("class", f"{nonce} {value}")


def _checkbox(nonce: str, checked: bool) -> str:
    """The placeholder of a task's checkbox (render_markdown swaps it for the input after sanitizing)."""
    return f"{nonce}-{'x' if checked else 'o'}"


# GitHub's checkbox, with a name (a form field without one fails axe's `label` rule; its state says done or not).
_CHECKBOXES = {
    checked: f'<input type="checkbox" class="task-list-item-checkbox" aria-label="Task" disabled'
    f"{' checked' if checked else ''}>"
    for checked in (False, True)
}


def _list_item_open(self: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType) -> str:
    """A list item; a task's gets its checkbox's placeholder (markdown-it's own input would not pass nh3)."""
    token = tokens[idx]
    opened = self.renderToken(tokens, idx, options, env)
    if token.meta and "checked" in token.meta:
        return f"{opened}{_checkbox(env['nonce'], bool(token.meta['checked']))} "
    return opened


@functools.lru_cache(maxsize=256)
def _lexer(name: str) -> Lexer | None:
    """Pygments' lexer for a fence's language (`hcl`, `terraform`, `sh`...), None when it knows none."""
    try:
        lexer = get_lexer_by_name(name)
    except ClassNotFound:
        return None
    return None if isinstance(lexer, TextLexer) else lexer  # `text`: plain, as on GitHub


def _fence(self: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType) -> str:
    """Fenced code in a language Pygments knows, highlighted (GitHub's `div.highlight` around `<pre>`)."""
    token = tokens[idx]
    language = token.info.strip().split(maxsplit=1)[0] if token.info.strip() else ""
    lexer = _lexer(language.lower()) if language else None
    highlighted = env.get("highlighted", 0) + len(token.content)
    if lexer is None or highlighted > HIGHLIGHT_CHARS:
        return self.fence(tokens, idx, options, env)
    env["highlighted"] = highlighted
    nonce = env["nonce"]
    spans = highlight(token.content, lexer, HtmlFormatter(nowrap=True, classprefix=f"{nonce} "))
    kind = language.lower() if language.lower() in lexer.aliases else (lexer.aliases or ["code"])[0]
    return f'<div class="{nonce} highlight highlight-source-{escapeHtml(kind)}"><pre><code>{spans}</code></pre></div>\n'


@functools.cache
def _markdown() -> MarkdownIt:
    """CommonMark with GitHub's tables, strikethrough, task lists and alerts, raw HTML kept (for the sanitizer)."""
    options = {"html": True, "linkify": False, "typographer": False, "tasklists": True, "alerts": True}
    md = MarkdownIt("commonmark", options)
    md.enable(["table", "strikethrough"])
    # markdown-it's documented way to restrict links is to replace this method on the instance.
    md.validateLink = _safe_link  # type: ignore[method-assign]
    md.core.ruler.push("heading_ids", _heading_ids)
    md.core.ruler.push("unlinked", _unlinked)
    md.core.ruler.push("cell_align", _cell_align)
    md.core.ruler.push("own_classes", _own_classes)
    md.add_render_rule("image", _image)
    md.add_render_rule("list_item_open", _list_item_open)
    md.add_render_rule("fence", _fence)
    return md


def render_markdown(text: str, links: Links) -> str:
    """Markdown (a README, a description) as sanitized HTML; see the module docstring."""
    nonce = secrets.token_hex(16)
    env: dict[str, Any] = {"links": links, "nonce": nonce}
    html: str = _markdown().render(text, env)  # markdown-it types render() as Any (its renderer is pluggable)
    clean = sanitize(html, links, nonce)
    for checked, checkbox in _CHECKBOXES.items():
        clean = clean.replace(_checkbox(nonce, checked), checkbox)
    return clean
