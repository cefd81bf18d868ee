"""The pages that list modules: `/` (search, filters, sort, page numbers) and `/modules/{namespace}/{name}`.

Both read the browse facade only (no git); `/modules` and `/modules/{namespace}` lead to `/`
with the namespace filter, so every path under the pages a browser may try is a page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from gitreg.core.names import NAME_RE, SYSTEM_RE
from gitreg.identity.door import Visibility
from gitreg.index.browse import SORTS
from gitreg.index.model import IndexEntry
from gitreg.web.auth import visibility
from gitreg.web.keys import BROWSE, CONFIG
from gitreg.web.pages.render import not_found, render

PAGE_SIZE = 20
# The page numbers shown either side of the current page (the first and last are always shown).
PAGE_WINDOW = 2
BEST = "best"  # search's own order: best match first
SORT_LABELS = {BEST: "Best match", "newest": "Newest", "name": "Name", "downloads": "Downloads"}


@dataclass(frozen=True)
class Query:
    """What the index page was asked for, each value checked (anything else falls back to its default)."""

    q: str
    namespace: str
    system: str
    sort: str
    offset: int

    @classmethod
    def of(cls, request: web.Request) -> Query:
        """The query of `request`: unknown sorts, bad names and non-numeric offsets are ignored."""
        query = request.query
        q = query.get("q", "").strip()[:200]
        namespace, system = query.get("namespace", ""), query.get("system", "")
        sort = query.get("sort", "")
        if sort not in (*SORTS, BEST) or (sort == BEST and not q):
            sort = BEST if q else "newest"
        offset = query.get("offset", "0")
        return cls(
            q,
            namespace if NAME_RE.fullmatch(namespace) else "",
            system if SYSTEM_RE.fullmatch(system) else "",
            sort,
            int(offset) if offset.isascii() and offset.isdigit() and len(offset) < 9 else 0,
        )

    def url(self, offset: int) -> str:
        """This query's page at `offset`, without the parameters that are at their defaults."""
        default_sort = BEST if self.q else "newest"
        params = {
            "q": self.q,
            "namespace": self.namespace,
            "system": self.system,
            "sort": "" if self.sort == default_sort else self.sort,
            "offset": str(offset) if offset else "",
        }
        shown = {k: v for k, v in params.items() if v}
        return "/?" + urlencode(shown) if shown else "/"


def page_links(query: Query, total: int) -> list[dict[str, Any]]:
    """The page numbers to show: the first, the last and PAGE_WINDOW around the current; None marks a gap."""
    pages = (total + PAGE_SIZE - 1) // PAGE_SIZE
    current = query.offset // PAGE_SIZE + 1
    shown = sorted({1, pages, *range(current - PAGE_WINDOW, current + PAGE_WINDOW + 1)} & set(range(1, pages + 1)))
    links: list[dict[str, Any]] = []
    for number in shown:
        if links and number > links[-1]["number"] + 1:
            links.append({"number": number - 1, "url": None, "current": False})  # a gap: "…"
        links.append({"number": number, "url": query.url((number - 1) * PAGE_SIZE), "current": number == current})
    return links


def _entries(request: web.Request, query: Query, seen: Visibility) -> list[IndexEntry]:
    """The modules this visitor may see (`seen`) that match `query`, in its order."""
    browse = request.app[BROWSE]

    def keep(e: IndexEntry) -> bool:
        return (
            (not query.namespace or e.address.namespace == query.namespace)
            and (not query.system or e.address.system == query.system)
            and seen.allows(e.address.namespace, e.repository)
        )

    memo = ("ui", query.namespace, query.system, seen)
    if query.q:
        found = browse.search(query.q, keep, memo)
        return found if query.sort == BEST else browse.ordered(found, query.sort, ("search", query.q, *memo))
    return browse.ordered(browse.listed(keep, memo, seen.namespaces), query.sort, memo)


async def index_page(request: web.Request) -> web.Response:
    """The modules this visitor may see, newest first (or by name, or downloads); search and filters."""
    query = Query.of(request)
    browse = request.app[BROWSE]
    seen = await visibility(request)
    entries = _entries(request, query, seen)

    def visible(e: IndexEntry) -> bool:
        return seen.allows(e.address.namespace, e.repository)

    namespaces, systems = browse.facets(
        ("ui-all", seen), lambda: browse.listed(visible, ("ui-all", seen), seen.namespaces)
    )
    offset = query.offset
    shown = entries[offset : offset + PAGE_SIZE]
    return render(
        request,
        "index.html",
        modules=[{"entry": e, "downloads": browse.downloads(e.address)} for e in shown],
        total=len(entries),
        query=query,
        q=query.q,
        namespaces=namespaces,
        systems=systems,
        sorts=[(s, SORT_LABELS[s]) for s in ((BEST,) if query.q else ()) + SORTS],
        previous=query.url(max(0, offset - PAGE_SIZE)) if offset > 0 else None,
        next=query.url(offset + PAGE_SIZE) if offset + PAGE_SIZE < len(entries) else None,
        pages=page_links(query, len(entries)) if len(entries) > PAGE_SIZE else [],
        first=offset + 1,
        last=offset + len(shown),
        complete=browse.complete,
        # An empty list says why, when rules with wildcards serve modules it cannot list yet.
        wildcards=[] if entries else [r.pattern for r in request.app[CONFIG].modules if not r.explicit],
    )


async def name_page(request: web.Request) -> web.Response:
    """`/modules/{namespace}/{name}`: the systems that namespace/name is listed for, or the 404 page."""
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    seen = await visibility(request)
    if not NAME_RE.fullmatch(namespace) or not NAME_RE.fullmatch(name) or not seen.allows_namespace(namespace):
        return not_found(request, f"No module {namespace[:80]}/{name[:80]} is listed by this registry.")
    browse = request.app[BROWSE]
    entries = browse.listed(
        lambda e: e.address.name == name and seen.allows(namespace, e.repository),
        ("ui-name", namespace, name, seen),
        [namespace],
    )
    if not entries:
        return not_found(request, f"No module {namespace}/{name} is listed by this registry (for any system).")
    return render(
        request,
        "name.html",
        namespace=namespace,
        name=name,
        modules=[{"entry": e, "downloads": browse.downloads(e.address)} for e in entries],
    )


async def namespace_page(request: web.Request) -> web.Response:
    """`/modules` and `/modules/{namespace}`: the index (filtered by that namespace)."""
    namespace = request.match_info.get("namespace", "")
    if namespace and not NAME_RE.fullmatch(namespace):
        return not_found(request, "There is no such namespace: the name is not a registry namespace.")
    raise web.HTTPFound("/?" + urlencode({"namespace": namespace}) if namespace else "/")


async def no_page(request: web.Request) -> web.Response:
    """Any other path under `/modules/`: the 404 page (never the API's JSON)."""
    return not_found(request, "There is no page at this address.")
