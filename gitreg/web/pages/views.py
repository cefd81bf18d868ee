"""The module browser's pages over the index (no git, no API call while rendering), and their routes.

Pages (fixed paths): `/` (the modules this visitor may see, newest-published first, search
and filters), `/modules/{namespace}/{name}/{system}[/{version}]` (README, inputs, outputs,
providers, dependencies, resources, submodules and examples, versions, a copy-ready
`module` block), `/modules/{namespace}/{name}/{system}/{version}/files/{path}` (an image of the
module's folder: a README's diagram), and with registry tokens configured `/login` and
`/logout` (session.py).

Everything comes from the index and the details it keeps on disk. Every page carries a
Content-Security-Policy without inline script, so a README can never run anything; the one
script (a copy button) is a static file and the pages work without it.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from gitreg.core.errors import GitregError, ModuleNotFound
from gitreg.core.names import NAME_RE, SYSTEM_RE, ModuleAddress, check_version, parse_address
from gitreg.index.details import ModuleDetails
from gitreg.index.files import checked_path
from gitreg.index.model import DetailsPending, IndexedVersion, IndexEntry, NotListedYet
from gitreg.web.auth import SCOPE_KEY
from gitreg.web.keys import BROWSE, CONFIG
from gitreg.web.pages.markdown import Links
from gitreg.web.pages.readme import Readmes
from gitreg.web.pages.render import HERE, not_found, page_error, render, snippet
from gitreg.web.pages.session import SESSIONS, Sessions, guarded, login, login_form, logout

PAGE_SIZE = 20
# The files endpoint's answers: a commit's files never change; an SVG can run no script, load
# nothing and is never read as another type (its own CSP wins over the pages', see middleware).
FILE_HEADERS = {
    "Cache-Control": "private, max-age=31536000, immutable",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; sandbox",
    "X-Content-Type-Options": "nosniff",
}
# READMEs rendered off the event loop, remembered per commit (readme.py).
READMES = web.AppKey("ui_readmes", Readmes)


def _published_order(entries: list[IndexEntry]) -> list[IndexEntry]:
    return sorted(entries, key=lambda e: (e.published_at, str(e.address)), reverse=True)


async def index_page(request: web.Request) -> web.Response:
    """The modules this visitor may see, newest first; search and filters."""
    q = request.query.get("q", "").strip()[:200]
    namespace = request.query.get("namespace", "")
    system = request.query.get("system", "")
    namespace = namespace if NAME_RE.fullmatch(namespace) else ""
    system = system if SYSTEM_RE.fullmatch(system) else ""
    offset_text = request.query.get("offset", "0")
    offset = int(offset_text) if offset_text.isascii() and offset_text.isdigit() and len(offset_text) < 9 else 0
    browse = request.app[BROWSE]
    scope = request.get(SCOPE_KEY)

    def keep(e: IndexEntry) -> bool:
        return (
            (scope is None or e.address.namespace in scope)
            and (not namespace or e.address.namespace == namespace)
            and (not system or e.address.system == system)
        )

    memo = ("ui", namespace, system, scope)
    entries = browse.search(q, keep, memo) if q else _published_order(browse.listed(keep, memo, scope))
    namespaces, systems = browse.facets(
        ("ui-all", scope),
        lambda: browse.listed(lambda e: scope is None or e.address.namespace in scope, ("ui-all", scope), scope),
    )
    shown = entries[offset : offset + PAGE_SIZE]
    params = {k: v for k, v in (("q", q), ("namespace", namespace), ("system", system)) if v}

    def page_url(at: int) -> str:
        return "/?" + urlencode({**params, "offset": at}) if at else ("/?" + urlencode(params) if params else "/")

    return render(
        request,
        "index.html",
        modules=[{"entry": e, "downloads": browse.downloads(e.address)} for e in shown],
        total=len(entries),
        q=q,
        namespace=namespace,
        system=system,
        namespaces=namespaces,
        systems=systems,
        previous=page_url(max(0, offset - PAGE_SIZE)) if offset > 0 else None,
        next=page_url(offset + PAGE_SIZE) if offset + PAGE_SIZE < len(entries) else None,
        first=offset + 1,
        last=offset + len(shown),
        complete=browse.complete,
    )


def being_indexed(request: web.Request, address: ModuleAddress, why: NotListedYet) -> web.Response:
    """The 503 page of a module that is served but not listed yet: it says so, and reloads itself."""
    response = render(
        request,
        "error.html",
        status=503,
        heading="Being indexed",
        message=f"Module {address} is being indexed: its versions are being read from its repository. "
        "This page reloads in a moment.",
        refresh=why.retry_after,
    )
    response.headers["Retry-After"] = str(why.retry_after)
    return response


def _shown_version(request: web.Request) -> tuple[IndexEntry, IndexedVersion] | web.Response:
    """The module and version a module page shows, or the 404 page saying which part is missing."""
    m = request.match_info
    try:
        address = parse_address(m["namespace"], m["name"], m["system"])
        if "version" in m:
            check_version(m["version"])
    except GitregError:
        return not_found(request, "There is no such module: the address is not a registry module address.")
    browse = request.app[BROWSE]
    entry = browse.find(address)
    scope = request.get(SCOPE_KEY)
    if scope is not None and address.namespace not in scope:
        return not_found(request, f"No module {address} is listed by this registry.")
    if entry is None:
        why = browse.unlisted(address)
        if isinstance(why, NotListedYet):
            return being_indexed(request, address, why)
        return not_found(request, f"No module {address} is listed by this registry.")
    version = entry.latest if "version" not in m else entry.find(m["version"])
    if version is None:
        return not_found(request, f"Module {address} has no version {m['version']}.")
    return entry, version


async def _stored_details(
    request: web.Request, entry: IndexEntry, version: IndexedVersion
) -> tuple[ModuleDetails | None, bool] | web.Response:
    """(details, pending) from memory or disk, never git while rendering; or the error page.

    A version not read yet is read in the background and the page says so (and reloads
    itself in a moment).
    """
    try:
        return await request.app[BROWSE].served_details(entry, version), False
    except DetailsPending:
        return None, True
    except ModuleNotFound:
        return not_found(request, f"No module {entry.address} is listed by this registry.")
    except GitregError as e:
        return render(request, "error.html", status=e.status, heading="Details unavailable", message=e.message)


def files_url(entry: IndexEntry, version: IndexedVersion) -> str:
    """The files endpoint of a module version (module_file): where its README's images come from."""
    return f"/modules/{entry.address}/{version.canonical}/files/"


async def _rendered(
    request: web.Request, part: dict[str, Any], entry: IndexEntry, version: IndexedVersion
) -> dict[str, Any]:
    """A module folder's details with its README (`readme_html`) and the descriptions of its inputs and
    outputs (`description_html`) as sanitized HTML; relative URLs from the folder's own place."""
    readmes = request.app[READMES]
    base = f"{entry.path}/{part.get('path', '')}".strip("/")
    links = Links(entry.source, version.tag, base, entry.path.strip("/"), files_url(entry, version))
    inputs, outputs = part.get("inputs", []), part.get("outputs", [])
    texts = [str(d.get("description", "")) for d in (*inputs, *outputs)]
    readme, described = await asyncio.gather(
        readmes.html(part.get("readme", ""), links, version.sha), readmes.descriptions(texts, links, version.sha)
    )
    if described is not None:
        html = iter(described)
        inputs = [{**d, "description_html": next(html)} for d in inputs]
        outputs = [{**d, "description_html": next(html)} for d in outputs]
    return {**part, "inputs": inputs, "outputs": outputs, "readme_html": readme}


async def module_page(request: web.Request) -> web.Response:
    """One module at its latest version, or at `{version}`."""
    shown = _shown_version(request)
    if isinstance(shown, web.Response):
        return shown
    entry, version = shown
    found = await _stored_details(request, entry, version)
    if isinstance(found, web.Response):
        return found
    details, pending = found
    address = entry.address
    parts = [details.root, *details.submodules, *details.examples] if details else []
    rendered = await asyncio.gather(*(_rendered(request, part, entry, version) for part in parts))
    root = rendered[0] if rendered else {}
    submodules = rendered[1 : 1 + len(details.submodules)] if details else []
    examples = rendered[1 + len(submodules) :] if details else []
    return render(
        request,
        "module.html",
        entry=entry,
        version=version,
        latest=entry.latest,
        versions=entry.versions,
        snippet=snippet(request, entry, version),
        readme=root.get("readme_html", ""),
        root=root,
        submodules=submodules,
        examples=examples,
        downloads=request.app[BROWSE].downloads(address),
        systems=request.app[BROWSE].systems(address),
        published_at=(details.published_at if details else "")
        or (entry.published_at if version == entry.latest else ""),
        # The version shown, never another's: the entry's (an org's description first) for the latest only.
        description=entry.description if version == entry.latest else (details.description if details else ""),
        details_missing=details is None,
        details_pending=pending,
    )


async def module_file(request: web.Request) -> web.Response:
    """An image of the module's folder at that version (a README's diagram), immutable per commit."""
    shown = _shown_version(request)
    if isinstance(shown, web.Response):
        return shown
    entry, version = shown
    headers = {**FILE_HEADERS, "ETag": f'"{version.sha}"'}
    try:
        checked_path(request.match_info["path"])
        if request.headers.get("If-None-Match") == headers["ETag"]:
            return web.Response(status=304, headers=headers)
        data, content_type = await request.app[BROWSE].image(entry, version, request.match_info["path"])
    except GitregError as e:
        return page_error(request, e.status, e.message)
    return web.Response(body=data, content_type=content_type, headers=headers)


def add_ui(app: web.Application) -> None:
    """Register the pages (when `[ui] enabled`), the static files and the session signer."""
    config = app[CONFIG]
    if not config.ui.enabled:
        return
    app[SESSIONS] = Sessions(config.auth.signing_key or secrets.token_hex(32))
    app[READMES] = Readmes()
    app.cleanup_ctx.append(_readme_workers)
    app.router.add_get("/", guarded(index_page), name="ui-index")
    app.router.add_get("/modules/{namespace}/{name}/{system}", guarded(module_page), name="ui-module")
    app.router.add_get("/modules/{namespace}/{name}/{system}/{version}", guarded(module_page), name="ui-version")
    app.router.add_get(
        "/modules/{namespace}/{name}/{system}/{version}/files/{path:.+}", guarded(module_file), name="ui-file"
    )
    app.router.add_get("/login", login_form, name="ui-login-form")
    app.router.add_post("/login", login, name="ui-login")
    app.router.add_post("/logout", logout, name="ui-logout")
    app.router.add_static("/static/", HERE / "static", name="ui-static", append_version=True)


async def _readme_workers(app: web.Application) -> AsyncIterator[None]:
    """The README workers live as long as the app (started on first use, killed at cleanup)."""
    yield
    await app[READMES].close()


def is_page(request: web.Request) -> bool:
    """True for the browser pages and their static files (HTML errors, security headers)."""
    route = request.match_info.route
    name = route.name if route is not None else None
    return bool(name and name.startswith("ui-"))
