"""READMEs as HTML: markdown-it-py with raw HTML off, safe links only, relative links into the repository.

`render_readme` is the one renderer; `Readmes` runs it for the pages off the event loop (in
parse worker processes, within a budget) and remembers its results.

Links are limited to http, https, mailto and relative ones; a relative link or image is
resolved to the repository's web page at the version shown (GitLab's `/-/blob/`, GitHub's
`/blob/`). With raw HTML off nothing a README says becomes markup of its own, and the pages'
Content-Security-Policy forbids inline script besides.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Sequence
from urllib.parse import quote, urljoin, urlsplit

from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict

from gitreg.index.parse_workers import BudgetExceeded, ParseWorkers, WorkerFailed

log = logging.getLogger(__name__)

_SAFE_SCHEMES = ("http", "https", "mailto")
# Wall-clock budget of one README's rendering for a page (a 1 MB README of ordinary
# Markdown takes about a second; 256 KB of `![` took 10.9 s).
README_SECONDS = 3.0
# Rendered READMEs remembered (LRU): at most this many, of at most this many characters in all.
CACHE_ENTRIES = 1024
CACHE_CHARS = 64 << 20
TOO_COMPLEX = '<p class="muted">README too large or too complex to show.</p>'
UNAVAILABLE = '<p class="muted">The README cannot be shown right now; try again in a moment.</p>'


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


def render_request(request: dict[str, str]) -> str:
    """render_readme() as a parse worker runs it (parse_workers.ParseWorkers' handler)."""
    return render_readme(request["text"], request["source"], request["ref"], request["base"])


class Readmes:
    """READMEs as page HTML: rendered in parse worker processes within a wall-clock budget,
    remembered per (commit, folder), one render at a time per README.

    markdown-it-py is quadratic on some input (256 KB of `![` took 10.9 s): on the event
    loop that froze every request. In a worker the loop keeps answering, and a README that
    takes longer than `seconds` shows TOO_COMPLEX instead (remembered like any result, so it
    costs its budget once). Even a short README goes to a worker: 512 characters of `![` cost
    25 ms in place on a busy host, and a round trip costs about a millisecond.
    """

    def __init__(self, seconds: float = README_SECONDS) -> None:
        self.seconds = seconds
        self.workers = ParseWorkers(f"{__name__}:{render_request.__name__}")
        self.renders = 0  # READMEs sent to a worker (tests, the bench)
        self._done: OrderedDict[tuple[str, ...], str] = OrderedDict()
        self._bytes = 0
        self._pending: dict[tuple[str, ...], asyncio.Future[str]] = {}

    async def html(self, text: str, source: str, ref: str, base: str, commit: str) -> str:
        """The README as HTML (render_readme), or a note saying why it is not shown."""
        if not text:
            return ""
        key = (commit, base, source, ref)
        found = self._done.get(key)
        if found is not None:
            self._done.move_to_end(key)
            return found
        pending = self._pending.get(key)
        if pending is None:
            # Shielded: a visitor who leaves does not waste the render the next one needs.
            pending = self._pending[key] = asyncio.ensure_future(self._render(key, text, source, ref, base))
            pending.add_done_callback(lambda _: self._pending.pop(key, None))
        return await asyncio.shield(pending)

    async def _render(self, key: tuple[str, ...], text: str, source: str, ref: str, base: str) -> str:
        request = {"text": text, "source": source, "ref": ref, "base": base}
        self.renders += 1
        try:
            async with self.workers.budget(self.seconds) as call:
                answer = await call(request)
        except BudgetExceeded:
            answer = TOO_COMPLEX
        except WorkerFailed as e:
            log.warning("a parse worker stopped while rendering a README of %s at %s: %s", source, ref, e)
            answer = TOO_COMPLEX
        except OSError as e:
            log.warning("no parse worker for a README: %s", e)
            return UNAVAILABLE  # not remembered: the next view tries again
        if not isinstance(answer, str):  # the worker's "out of memory" answer
            answer = TOO_COMPLEX
        self._remember(key, answer)
        return answer

    def _remember(self, key: tuple[str, ...], html: str) -> None:
        self._done[key] = html
        self._bytes += len(html)
        while self._done and (len(self._done) > CACHE_ENTRIES or self._bytes > CACHE_CHARS):
            _, dropped = self._done.popitem(last=False)
            self._bytes -= len(dropped)

    async def close(self) -> None:
        """Stop the workers (a render still running shows UNAVAILABLE)."""
        await self.workers.close()
