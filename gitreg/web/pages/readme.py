"""READMEs as HTML: markdown-it-py with raw HTML off, safe links only, relative links into the repository.

Links are limited to http, https, mailto and relative ones; a relative link or image is
resolved to the repository's web page at the version shown (GitLab's `/-/blob/`, GitHub's
`/blob/`). With raw HTML off nothing a README says becomes markup of its own, and the pages'
Content-Security-Policy forbids inline script besides.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import quote, urljoin, urlsplit

from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict

_SAFE_SCHEMES = ("http", "https", "mailto")


def _safe_link(url: str) -> bool:
    """Only http, https, mailto and relative links (no javascript:, data:, file:, vbscript:...)."""
    text = "".join(c for c in url.strip() if c.isprintable() and not c.isspace()).lower()
    scheme, sep, _ = text.partition(":")
    if not sep or "/" in scheme or "?" in scheme or "#" in scheme:
        return True  # relative: `docs/x.md`, `#usage`, `/abs/path`, `?q`
    return scheme in _SAFE_SCHEMES


def repository_file_url(source: str, ref: str, path: str, raw: bool) -> str:
    """The web URL of a file in the repository at `ref` (GitLab's `/-/blob/` or GitHub's `/blob/`)."""
    kind = "raw" if raw else "blob"
    host = (urlsplit(source).hostname or "").lower()
    middle = f"/-/{kind}/" if "gitlab" in host else f"/{kind}/"
    return f"{source.rstrip('/')}{middle}{quote(ref, safe='')}/{path.lstrip('/')}"


def render_readme(text: str, source: str, ref: str, base: str) -> str:
    """The README as HTML: no raw HTML, safe links only, relative links into the repository."""
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable("table")
    # markdown-it's documented way to restrict links is to replace this method on the instance.
    md.validateLink = _safe_link  # type: ignore[method-assign]

    def resolve(url: str, raw: bool) -> str | None:
        if not url or url.startswith("#") or urlsplit(url).scheme:
            return url
        if not source:
            return None  # nowhere to point a relative link at: drop it
        target = urljoin(f"{base.strip('/')}/" if base.strip("/") else "", url)
        return repository_file_url(source, ref, target, raw)

    def link_open(self: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType) -> str:
        token = tokens[idx]
        href = resolve(str(token.attrGet("href") or ""), raw=False)
        if href is None:
            token.attrs.pop("href", None)
        else:
            token.attrSet("href", href)
            if urlsplit(href).scheme in ("http", "https"):
                token.attrSet("rel", "nofollow noopener noreferrer")
        return self.renderToken(tokens, idx, options, env)

    def image(self: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType) -> str:
        token = tokens[idx]
        src = resolve(str(token.attrGet("src") or ""), raw=True)
        if src is None:
            return ""  # an image we cannot locate: its alt text is in the page anyway
        token.attrSet("src", src)
        token.attrSet("loading", "lazy")
        token.attrSet("referrerpolicy", "no-referrer")
        return self.image(tokens, idx, options, env)

    md.add_render_rule("link_open", link_open)
    md.add_render_rule("image", image)
    html: str = md.render(text)  # markdown-it types render() as Any (its renderer is pluggable)
    return html
