"""READMEs and the descriptions of inputs and outputs as page HTML, off the event loop.

markdown.render_markdown is the one renderer (CommonMark and GitHub's tables, task lists and
alerts, code highlighted by Pygments, raw HTML through the nh3 allow-list); `Readmes` runs it
for the pages in parse worker processes, within a budget, and remembers its results per commit.
The pages' Content-Security-Policy forbids inline script besides.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import asdict
from typing import Any

from aiohttp import web
from markupsafe import Markup

from gitreg.index.parse_workers import BudgetExceeded, ParseWorkers, WorkerFailed, WorkersClosed
from gitreg.web.pages.markdown import Links, render_markdown

log = logging.getLogger(__name__)
# What a worker answers: one README's HTML, or a folder's descriptions (JSON from a worker: checked).
Rendered = str | list[Any]

# Wall-clock budget of one README's rendering for a page (a 1 MB README of ordinary
# Markdown takes about a second; 256 KB of `![` took 10.9 s).
README_SECONDS = 3.0
# Rendered READMEs remembered (LRU): at most this many, of at most this many characters in all.
CACHE_ENTRIES = 1024
CACHE_CHARS = 64 << 20
TOO_COMPLEX = '<p class="muted">README too large or too complex to show.</p>'
UNAVAILABLE = '<p class="muted">The README cannot be shown right now; try again in a moment.</p>'


def render_request(request: dict[str, Any]) -> str | list[str]:
    """render_markdown() as a parse worker runs it (parse_workers.ParseWorkers' handler): one
    README (`text`), or every description of a module folder at once (`texts`)."""
    links = Links(**request["links"])
    if "texts" in request:
        return [_inline(render_markdown(text, links)) if text else "" for text in request["texts"]]
    return render_markdown(request["text"], links)


def _inline(html: str) -> str:
    """A description of one paragraph without its `<p>`: it reads as the text of a table cell."""
    body = html.strip()
    if body.startswith("<p>") and body.endswith("</p>") and body.count("<p") == 1 and body.count("</p>") == 1:
        return body[3:-4]
    return html


class Readmes:
    """READMEs and descriptions as page HTML: rendered in parse worker processes within a
    wall-clock budget, remembered per (commit, folder, links), one render at a time per key.

    markdown-it-py is quadratic on some input (256 KB of `![` took 10.9 s): on the event
    loop that froze every request. In a worker the loop keeps answering, and a README that
    takes longer than `seconds` shows TOO_COMPLEX instead (remembered like any result, so it
    costs its budget once). Even a short README goes to a worker: 512 characters of `![` cost
    25 ms in place on a busy host, and a round trip costs about a millisecond.
    """

    def __init__(self, seconds: float = README_SECONDS) -> None:
        self.seconds = seconds
        self.workers = ParseWorkers(f"{__name__}:{render_request.__name__}")
        self.renders = 0  # renders sent to a worker (tests, the bench)
        self._done: OrderedDict[tuple[object, ...], Rendered] = OrderedDict()
        self._chars = 0
        self._pending: dict[tuple[object, ...], asyncio.Future[Rendered]] = {}

    async def html(self, text: str, links: Links, commit: str) -> Markup:
        """The README as sanitized HTML (render_markdown), or a note saying why it is not shown."""
        if not text:
            return Markup("")
        answer = await self._once(("readme", commit, links), {"text": text, "links": asdict(links)})
        return Markup(answer if isinstance(answer, str) else TOO_COMPLEX)

    async def descriptions(self, texts: list[str], links: Links, commit: str) -> list[Markup] | None:
        """Each description as sanitized HTML ("" for none), in one worker call; None when they
        cannot be rendered (too large, no worker): the page then shows them as text."""
        if not any(texts):
            return None
        key = ("descriptions", commit, links, tuple(texts))
        answer = await self._once(key, {"texts": texts, "links": asdict(links)})
        if not isinstance(answer, list) or len(answer) != len(texts) or not all(isinstance(a, str) for a in answer):
            return None
        return [Markup(a) for a in answer]

    async def _once(self, key: tuple[object, ...], request: dict[str, Any]) -> Rendered:
        found = self._done.get(key)
        if found is not None:
            self._done.move_to_end(key)
            return found
        pending = self._pending.get(key)
        if pending is None:
            # Shielded: a visitor who leaves does not waste the render the next one needs.
            pending = self._pending[key] = asyncio.ensure_future(self._render(key, request))
            pending.add_done_callback(lambda _: self._pending.pop(key, None))
        return await asyncio.shield(pending)

    async def _render(self, key: tuple[object, ...], request: dict[str, Any]) -> Rendered:
        self.renders += 1
        answer: Rendered
        try:
            async with self.workers.budget(self.seconds) as call:
                answer = await call(request)
        except BudgetExceeded:
            answer = TOO_COMPLEX
        except WorkersClosed:  # gitreg is stopping: nothing remembered, nothing worth a warning
            return UNAVAILABLE
        except WorkerFailed as e:
            log.warning("a parse worker stopped while rendering Markdown of %s: %s", request["links"]["source"], e)
            answer = TOO_COMPLEX
        except OSError as e:
            log.warning("no parse worker for a README: %s", e)
            return UNAVAILABLE  # not remembered: the next view tries again
        if not isinstance(answer, str | list):  # the worker's "out of memory" answer
            answer = TOO_COMPLEX
        self._remember(key, answer)
        return answer

    def _remember(self, key: tuple[object, ...], answer: Rendered) -> None:
        self._done[key] = answer
        self._chars += _size(answer)
        while self._done and (len(self._done) > CACHE_ENTRIES or self._chars > CACHE_CHARS):
            _, dropped = self._done.popitem(last=False)
            self._chars -= _size(dropped)

    async def close(self) -> None:
        """Stop the workers (a render still running shows UNAVAILABLE)."""
        await self.workers.close()


# READMEs rendered off the event loop, remembered per commit (the module and provider pages').
READMES = web.AppKey("ui_readmes", Readmes)


def _size(answer: Rendered) -> int:
    return len(answer) if isinstance(answer, str) else sum(len(a) for a in answer if isinstance(a, str))
