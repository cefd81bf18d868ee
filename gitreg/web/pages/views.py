"""The module browser's pages over the index (no git, no API call while rendering), and their routes.

Pages (fixed paths): `/` and `/modules/{namespace}/{name}` (listing.py),
`/modules/{namespace}/{name}/{system}[/{version}]` (sections: README, inputs, outputs,
dependencies, resources, submodules and examples; a version picker; copy-ready `module`
blocks), with registry tokens configured `/login` and `/logout` (session.py), and
`/favicon.ico`. Any other path under `/modules/` is the HTML 404 page.

Everything comes from the index and the details it keeps on disk. Every page carries a
Content-Security-Policy without inline script, so a README can never run anything; the one
script (a copy button) is a static file and the pages work without it.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from gitreg.core.errors import GitregError, ModuleNotFound
from gitreg.core.names import check_version, parse_address
from gitreg.identity.visibility import Visibility
from gitreg.index.details import ModuleDetails
from gitreg.index.model import DetailsPending, IndexedVersion, IndexEntry
from gitreg.web.auth import visibility
from gitreg.web.keys import BROWSE, CONFIG
from gitreg.web.pages.listing import index_page, name_page, namespace_page, no_page
from gitreg.web.pages.readme import Readmes
from gitreg.web.pages.render import HERE, not_found, render, served_address, snippet
from gitreg.web.pages.session import SESSIONS, Sessions, guarded, login, login_form, logout, sign_in

# READMEs rendered off the event loop, remembered per commit (readme.py).
READMES = web.AppKey("ui_readmes", Readmes)


async def _shown_version(request: web.Request) -> tuple[IndexEntry, IndexedVersion] | web.Response:
    """The module and version a module page shows, or the 404 page saying which part is missing."""
    m = request.match_info
    try:
        address = parse_address(m["namespace"], m["name"], m["system"])
        if "version" in m:
            check_version(m["version"])
    except GitregError:
        return not_found(request, "There is no such module: the address is not a registry module address.")
    entry = request.app[BROWSE].find(address)
    if entry is not None and not (await visibility(request)).allows(address.namespace, entry.repository):
        entry = None
    elif entry is None and request.app[BROWSE].untagged(address):
        return not_found(
            request, f"Module {address} has no SemVer tag yet: it is listed once its repository has a tag like v1.0.0."
        )
    if entry is None:
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


def _linked(request: web.Request, part: dict[str, Any], seen: Visibility) -> dict[str, Any]:
    """`part` with each dependency this registry serves (and the visitor may see) given its page."""
    browse = request.app[BROWSE]
    dependencies = []
    for d in part.get("dependencies", []):
        address = served_address(request, d.get("source", ""))
        found = browse.find(address) if address is not None else None
        page = ""
        if found is not None and seen.allows(found.address.namespace, found.repository):
            page = f"/modules/{found.address}"
        dependencies.append({**d, "page": page})
    return {**part, "dependencies": dependencies}


async def _with_readmes(
    request: web.Request, parts: list[dict[str, Any]], entry: IndexEntry, version: IndexedVersion
) -> list[dict[str, Any]]:
    """Submodules or examples, each with its README as HTML (relative links from its own folder),
    its copy-ready `module` block and its dependencies linked."""
    readmes, seen = request.app[READMES], await visibility(request)
    shown = await asyncio.gather(
        *(
            readmes.html(
                s.get("readme", ""),
                entry.source,
                version.tag,
                f"{entry.path}/{s.get('path', '')}".strip("/"),
                version.sha,
            )
            for s in parts
        )
    )
    return [
        {
            **_linked(request, s, seen),
            "readme_html": html,
            "snippet": snippet(request, entry, version, s.get("path", "")),
        }
        for s, html in zip(parts, shown, strict=True)
    ]


async def module_page(request: web.Request) -> web.Response:
    """One module at its latest version, or at `{version}`."""
    shown = await _shown_version(request)
    if isinstance(shown, web.Response):
        return shown
    entry, version = shown
    found = await _stored_details(request, entry, version)
    if isinstance(found, web.Response):
        return found
    details, pending = found
    root = details.root if details else {}
    address = entry.address
    readmes = request.app[READMES]
    readme = await readmes.html(root.get("readme", ""), entry.source, version.tag, entry.path, version.sha)
    return render(
        request,
        "module.html",
        entry=entry,
        version=version,
        latest=entry.latest,
        versions=entry.versions,
        snippet=snippet(request, entry, version),
        readme=readme,
        root=_linked(request, root, await visibility(request)),
        submodules=await _with_readmes(request, details.submodules if details else [], entry, version),
        examples=await _with_readmes(request, details.examples if details else [], entry, version),
        downloads=request.app[BROWSE].downloads(address),
        systems=request.app[BROWSE].systems(address),
        published_at=(details.published_at if details else "")
        or (entry.published_at if version == entry.latest else ""),
        description=(details.description if details and version != entry.latest else entry.description),
        details_missing=details is None,
        details_pending=pending,
    )


def add_ui(app: web.Application) -> None:
    """Register the pages (when `[ui] enabled`), the static files and the session signer."""
    config = app[CONFIG]
    if not config.ui.enabled:
        return
    app[SESSIONS] = Sessions(config.auth.signing_key or secrets.token_hex(32))
    app[READMES] = Readmes()
    app.cleanup_ctx.append(_readme_workers)
    app.router.add_get("/", guarded(index_page), name="ui-index")
    app.router.add_get("/modules", guarded(namespace_page), name="ui-modules")
    app.router.add_get("/modules/", guarded(namespace_page), name="ui-modules-slash")
    app.router.add_get("/modules/{namespace}", guarded(namespace_page), name="ui-namespace")
    app.router.add_get("/modules/{namespace}/{name}", guarded(name_page), name="ui-name")
    app.router.add_get("/modules/{namespace}/{name}/{system}", guarded(module_page), name="ui-module")
    app.router.add_get("/modules/{namespace}/{name}/{system}/{version}", guarded(module_page), name="ui-version")
    app.router.add_get("/login", login_form, name="ui-login-form")
    app.router.add_post("/login", login, name="ui-login")
    app.router.add_get("/login/with/{forge}", sign_in, name="ui-signin")
    app.router.add_post("/logout", logout, name="ui-logout")
    app.router.add_static("/static/", HERE / "static", name="ui-static", append_version=True)
    app.router.add_get("/favicon.ico", _favicon, name="ui-favicon")
    # Registered last: any other path under /modules/ is the 404 page, never the API's JSON.
    app.router.add_get("/modules/{rest:.+}", guarded(no_page), name="ui-no-page")


async def _favicon(request: web.Request) -> web.FileResponse:
    """`/favicon.ico`, which browsers ask for on their own (the pages link the SVG icon too)."""
    return web.FileResponse(HERE / "static" / "favicon.ico", headers={"Cache-Control": "public, max-age=86400"})


async def _readme_workers(app: web.Application) -> AsyncIterator[None]:
    """The README workers live as long as the app (started on first use, killed at cleanup)."""
    yield
    await app[READMES].close()


def is_page(request: web.Request) -> bool:
    """True for the browser pages and their static files (HTML errors, security headers)."""
    route = request.match_info.route
    name = route.name if route is not None else None
    return bool(name and name.startswith("ui-"))
